"""kube-proxy's clusterCIDR against the pod CIDRs the API gave the nodes: a range it does not cover is "outside"."""

from __future__ import annotations

from kpdiag.checkapi import Skip, check
from kpdiag.state.typed import KubeProxyConfig, NodePodCIDRs


@check(
    "KP613",
    "cluster-cidr-misses-pod-cidr",
    "kube-proxy's clusterCIDR does not cover a node's pod CIDR",
    "warning",
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
        short-circuit to Local Services is lost. Only the families clusterCIDR names are compared (a family it lacks is
        not detected at all: KP706).
    """,
    fix="Set kube-proxy's clusterCIDR to the range the nodes' podCIDRs come from (kube-controller-manager "
    "--cluster-cidr, comma-separated for dual-stack), or use detectLocalMode: NodeCIDR, and restart kube-proxy.",
)
def cluster_cidr_misses_pod_cidr(new, config: KubeProxyConfig, nodes: NodePodCIDRs):
    if config.detect_local_mode != "ClusterCIDR":
        return  # kube-proxy tells pods apart another way (NodeCIDR, bridge, interface prefix): clusterCIDR is not used
    if not config.cluster_cidrs:
        raise Skip("kube-proxy has no clusterCIDR to compare the nodes' pod CIDRs with (KP706)")
    import ipaddress

    try:
        ranges = [ipaddress.ip_network(c, strict=False) for c in config.cluster_cidrs]
    except ValueError as exc:
        raise Skip(f"clusterCIDR {', '.join(config.cluster_cidrs)!r} is not a list of CIDRs: {exc}") from None
    families = {r.version for r in ranges}
    judged = [(n, c) for n in nodes.nodes for c in n.cidrs if c.version in families]
    if not judged:
        raise Skip(f"needs a node with a podCIDR of the families clusterCIDR names ({nodes.source} has none)")
    outside = [(n, c) for n, c in judged if not any(c.version == r.version and c.subnet_of(r) for r in ranges)]
    if not outside:
        return
    names = ", ".join(f"{n.name} ({c})" for n, c in outside[:5]) + (
        f" and {len(outside) - 5} more" if len(outside) > 5 else ""
    )
    whose = "that node's" if len({n.name for n, _ in outside}) == 1 else "those nodes'"
    yield new(
        f"kube-proxy's clusterCIDR {', '.join(config.cluster_cidrs)} does not contain the pod CIDR of {names}: "
        f"kube-proxy takes {whose} pods for "
        "outside clients (their Service traffic is masqueraded)",
        fix=(
            "kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDRs}{\"\\n\"}{end}'   # the ranges the nodes were given",
            "kubectl -n kube-system edit configmap kube-proxy   # clusterCIDR: the range that holds them all, then restart kube-proxy",
        ),
        evidence=[config.evidence("clusterCIDR")] + [nodes.evidence(n) for n, _ in outside[:3]],
        subject="node",
        data={
            "cluster_cidr": list(config.cluster_cidrs),
            "outside": [{"node": n.name, "pod_cidr": str(c)} for n, c in outside],
        },
    )
