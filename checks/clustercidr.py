"""kube-proxy's clusterCIDR against the pods' ranges — the podCIDRs the API gave the nodes, or, where the CNI's own IPAM
hands out pod addresses (Calico, Cilium's cluster pool), the CNI's ranges on this node: a range it does not cover is
"outside"."""

from __future__ import annotations

from kpdiag.checkapi import Skip, check
from typing import Optional

from kpdiag.model import Evidence
from kpdiag.state.typed_api import NodePodCIDRs
from kpdiag.state.typed_node import Addresses, Cni, Routes
from kpdiag.state.typed_proxy import KubeProxyConfig, KubeProxyRules, Nft


def _kube_proxy_ranges(config: KubeProxyConfig | None, rules, nft, nodes: NodePodCIDRs):
    """(clusterCIDR as written, its evidence, its networks): from kube-proxy's configuration, else its rules;
    Skip when neither says one, or the rules' range is a node's own podCIDR (detectLocalMode NodeCIDR)."""
    cidrs, evidence = (config.cluster_cidrs, config.evidence("clusterCIDR")) if config else ((), None)
    if not cidrs:  # no configuration file (flags: k3s, --cluster-cidr), or it sets none: kube-proxy's rules say it
        cidrs, evidence = rules_cluster_cidr(rules, nft) or (cidrs, evidence)
    if not cidrs:
        raise Skip("needs kube-proxy's clusterCIDR (its configuration or its rules): none to compare with (KP706)")
    import ipaddress

    try:
        ranges = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    except ValueError as exc:
        raise Skip(f"clusterCIDR {', '.join(cidrs)!r} is not a list of CIDRs: {exc}") from None
    if not (config and config.cluster_cidrs):  # read from the rules: NodeCIDR writes them the same way
        own = {c for n in nodes.nodes for c in n.cidrs}
        same = next((r for r in ranges if r in own), None)
        if same is not None:
            raise Skip(
                f"kube-proxy's rules masquerade around {same}, a node's own podCIDR: that is what detectLocalMode "
                "NodeCIDR writes, so they show no clusterCIDR (kube-proxy's configuration does not say the mode)"
            )
    return cidrs, evidence, ranges


def _judge_node_cidrs(new, nodes: NodePodCIDRs, ranges: list, cidrs, evidence):
    """The finding for the Nodes' podCIDRs outside clusterCIDR, or None."""
    families = {r.version for r in ranges}
    judged = [(n, c) for n in nodes.nodes for c in n.cidrs if c.version in families]
    if not judged:
        raise Skip(f"needs a node with a podCIDR of the families clusterCIDR names ({nodes.source} has none)")
    outside = [(n, c) for n, c in judged if not any(c.version == r.version and c.subnet_of(r) for r in ranges)]
    if not outside:
        return None
    names = ", ".join(f"{n.name} ({c})" for n, c in outside[:5]) + (
        f" and {len(outside) - 5} more" if len(outside) > 5 else ""
    )
    whose = "that node's" if len({n.name for n, _ in outside}) == 1 else "those nodes'"
    return new(
        f"kube-proxy's clusterCIDR {', '.join(cidrs)} does not contain the pod CIDR of {names}: "
        f"kube-proxy takes {whose} pods for "
        "outside clients (their Service traffic is masqueraded)",
        fix=(
            "kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDRs}{\"\\n\"}{end}'   # the ranges the nodes were given",
            "kubectl -n kube-system edit configmap kube-proxy   # clusterCIDR: the range that holds them all, then restart kube-proxy",
        ),
        evidence=[evidence] + [nodes.evidence(n) for n, _ in outside[:3]],
        subject="node",
        data={
            "cluster_cidr": list(cidrs),
            "outside": [{"node": n.name, "pod_cidr": str(c)} for n, c in outside],
        },
    )


@check(
    "KP613",
    "cluster-cidr-misses-pod-cidr",
    "kube-proxy's clusterCIDR does not cover a node's pod CIDR",
    "warning",
    advice_for="kube-proxy",
    symptom="Pods on some nodes reach Services with the node's address instead of their own (NetworkPolicies that allow "
    "them by pod deny it, backends log the node IP); or a pod's connection to an externalTrafficPolicy: Local "
    "LoadBalancer/NodePort address fails on nodes without an endpoint.",
    why="""
        With detectLocalMode ClusterCIDR (the default) kube-proxy tells pod traffic from outside traffic by its source:
        inside clusterCIDR is a pod, anything else is masqueraded ("! -s <clusterCIDR> -j KUBE-MARK-MASQ") and, for
        externalTrafficPolicy: Local, sent to this node's endpoints only. The pod CIDRs are handed out by
        kube-controller-manager (--cluster-cidr) into each Node's spec.podCIDRs; when kube-proxy's clusterCIDR does not
        contain a node's podCIDR (the pool was grown or moved, a second range added, the ConfigMap copied from
        another cluster), every pod of that node is "outside" to kube-proxy: its Service traffic is masqueraded and its
        short-circuit to Local Services is lost. Calico, Cilium (cluster-pool IPAM) and the cloud CNIs (AWS VPC CNI,
        Azure CNI) hand out pod addresses from their own pools, not the Nodes' podCIDRs: there the ranges compared
        are the CNI's, as this node's routes show them (Calico's blackhole route for each block it owns, Cilium's
        allocation range via cilium_host, each cloud pod's host route). Only the families clusterCIDR names are compared (a family it lacks is
        not detected at all: KP706).
    """,
    fix="Set kube-proxy's clusterCIDR to the range the nodes' podCIDRs come from (kube-controller-manager "
    "--cluster-cidr, comma-separated for dual-stack), or use detectLocalMode: NodeCIDR, and restart kube-proxy.",
)
def cluster_cidr_misses_pod_cidr(
    new,
    nodes: NodePodCIDRs,
    config: Optional[KubeProxyConfig] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    cni_model: Optional[Cni] = None,
    addresses: Optional[Addresses] = None,
    route_list: Optional[Routes] = None,
):
    if config is not None and config.detect_local_mode != "ClusterCIDR":
        return  # kube-proxy tells pods apart another way (NodeCIDR, bridge, interface prefix): clusterCIDR is not used
    cidrs, evidence, ranges = _kube_proxy_ranges(config, rules, nft, nodes)
    own = _cni_ranges(cni_model, addresses, route_list)
    if own is not None:  # the CNI's IPAM, not the Nodes' podCIDRs, gives the pods their addresses
        yield from _judge_cni_ranges(new, own, ranges, cidrs, evidence, cni_model, route_list)
        return
    finding = _judge_node_cidrs(new, nodes, ranges, cidrs, evidence)
    if finding is not None:
        yield finding


def _cni_ranges(cni_model: Cni | None, addresses: Addresses | None, route_list: Routes | None):
    """This node's pod ranges as the CNI's own IPAM shows them in the routes (Calico's blocks, Cilium's allocation
    range), or None where the Nodes' podCIDRs are the pods' ranges."""
    if cni_model is None or addresses is None or route_list is None:
        return None
    model = cni_model.model
    if model.name in ("weave", "ovn-kubernetes"):
        raise Skip(
            f"{model.label} may give pods addresses from its own range rather than the Nodes' podCIDRs, and kpdiag "
            "does not read that range: the clusterCIDR is not compared"
        )
    return model.own_pod_ranges(addresses.links, route_list.routes)


def _judge_cni_ranges(new, own, ranges, cidrs, evidence, cni_model, route_list):
    import ipaddress

    label = cni_model.model.label
    if not own:
        raise Skip(
            f"{label} gives pods addresses from its own IPAM, not the Nodes' podCIDRs, and this node's routes show "
            "none of its ranges (no blackhole route for a block, no allocation range via cilium_host)"
        )
    outside = []
    for cidr, text in own:
        net = ipaddress.ip_network(cidr, strict=False)
        if net.version in {r.version for r in ranges} and not any(
            net.version == r.version and net.subnet_of(r) for r in ranges
        ):
            outside.append((net, text))
    if not outside:
        return
    yield new(
        f"kube-proxy's clusterCIDR {', '.join(cidrs)} does not contain {label}'s pod range {outside[0][0]} on this "
        "node: kube-proxy takes this node's pods for outside clients (their Service traffic is masqueraded)",
        fix=(
            "kubectl get ippools -o wide   # Calico: the pools pods take their addresses from (Cilium: "
            "clusterPoolIPv4PodCIDRList in cilium-config)",
            "kubectl -n kube-system edit configmap kube-proxy   # clusterCIDR: the CNI's pod pools, then restart kube-proxy",
        ),
        evidence=[evidence]
        + [Evidence(route_list.source, f"{text}: {label}'s pod range here") for _, text in outside[:3]],
        subject="node",
        data={"cluster_cidr": list(cidrs), "outside": [{"pod_range": str(n), "cni": label} for n, _ in outside]},
    )


def rules_cluster_cidr(rules: KubeProxyRules | None, nft: Nft | None) -> tuple[tuple[str, ...], Evidence] | None:
    """The CIDR(s) kube-proxy's rules masquerade around, with the rule as evidence: its iptables rules
    ("! -s CIDR -j KUBE-MARK-MASQ"), else its nftables service chains; None when neither shows one. With
    detectLocalMode ClusterCIDR that is the clusterCIDR; NodeCIDR writes the node's own podCIDR the same way."""
    if rules is not None:
        from kpdiag.state.kube_rules import cluster_cidr

        seen = next((p for p in rules.programmed.values() if p.cluster_cidr), None)
        if seen is not None:
            cidrs = tuple(c.strip() for c in cluster_cidr(rules.programmed).split(","))
            rule = rules.ruleset.chain("nat", seen.chain).rules if seen.chain else []
            text = f"{seen.chain}: ! -s {seen.cluster_cidr} -j KUBE-MARK-MASQ"
            return cidrs, Evidence(rules.ruleset.source, text, rule[0].lineno if rule else None)
    return nft_cluster_cidr(nft)


def nft_cluster_cidr(nft: Nft | None) -> tuple[tuple[str, ...], Evidence] | None:
    """kube-proxy's clusterCIDR as its nftables service chains show it, with the rule as evidence; None when they do
    not (not nftables mode, detectLocalMode other than ClusterCIDR, no Service)."""
    rs = nft.ruleset() if nft is not None and nft.kube_proxy_family else None
    if rs is None:
        return None
    from kpdiag.dataplane.kube_nft import cluster_cidr

    cidrs, seen = cluster_cidr(rs)
    if not cidrs:
        return None
    chain, text = seen[0]
    return tuple(cidrs), Evidence(rs.source, f"chain {chain}: {text}")
