"""The state layer: a bundle parsed into what checks and tracers read — the node (node.py: NodeState, the broker of
the inputs declared in inputs.py), the API view (cluster.py), derived models (programmed, kube_rules, implementer,
probe_results) and NetworkPolicy semantics (netpol.py, policy.py). kube-proxy's nftables table is read back by its
dataplane (kpdiag/dataplane/kube_nft.py)."""
