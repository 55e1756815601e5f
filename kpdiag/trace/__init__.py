"""Tracers: what this node does to one packet — the netfilter hooks in kernel order over iptables, nftables and IPVS,
and the routing decision, each branch a path with its probability."""
