"""Kernel settings kube-proxy depends on: forwarding, bridge netfilter, route_localnet."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag import evidence as ev
from kpdiag.fixcmd import persist_modules, persist_sysctls, set_sysctls
from kpdiag.checkapi import Skip, check
from kpdiag.bundle import sources
from kpdiag.state.typed import Addresses, KubeProxyConfig, KubeProxyRules, Modules, ProxyMode, Sysctls


@check(
    "KP501",
    "ip-forward-off",
    "IPv4 forwarding is off",
    "error",
    symptom="Services never answer pods or outside clients; traffic from outside to NodePorts dies on the node; pods "
    "cannot reach pods on other nodes. Only what the node itself sends (hostNetwork pods, the kubelet) still works.",
    why="""
        A node routes packets from one interface to another only when net.ipv4.ip_forward = 1. kube-proxy DNATs a
        Service packet to a pod IP, and the node must then *forward* it: to another node, or into a local pod behind
        its veth — a pod is another interface too, even on this node. Only packets the node sends itself are not
        forwarded. With forwarding off the kernel drops the rest silently — no REJECT, no log, just timeouts.
        Something on the node (a host firewall, a container runtime restart, a hardening script, a cloud image
        default) turned it off.
    """,
    fix="sysctl -w net.ipv4.ip_forward=1, persisted in a drop-in file under /etc/sysctl.d (never by truncating a shared one).",
    references=(
        "https://kubernetes.io/docs/setup/production-environment/container-runtimes/#prerequisite-ipv4-forwarding-optional",
    ),
)
def ip_forward(new, sysctls: Sysctls):
    value = sysctls.get("net.ipv4.ip_forward")
    if value is None:
        raise Skip("net.ipv4.ip_forward is not in the collected sysctls")
    if value != "0":
        return
    yield new(
        "net.ipv4.ip_forward = 0: this node does not route packets between its interfaces, so Service traffic from "
        "pods and from outside is dropped, whether its endpoints are on this node or another",
        fix=(
            set_sysctls({"net.ipv4.ip_forward": 1}),
            persist_sysctls({"net.ipv4.ip_forward": 1}, "ip-forward")
            + "   # keep it across reboots (kpdiag's own drop-in file)",
            "grep -r ip_forward /etc/sysctl.conf /etc/sysctl.d/ /usr/lib/sysctl.d/   # find what turned it off",
        ),
        evidence=[sysctls.evidence("net.ipv4.ip_forward")],
        subject="node",
        data=sysctls.data({"net.ipv4.ip_forward": 1}),
    )


_BRIDGE_NAMES = ("cni0", "cbr0", "docker0", "kube-bridge", "weave", "br0")


def _bridges(addresses: Addresses | None) -> list[str]:
    names = []
    for link in addresses.links if addresses is not None else ():
        name = link.get("ifname", "")
        kind = ((link.get("linkinfo") or {}).get("info_kind")) or ""
        if kind == "bridge" or name in _BRIDGE_NAMES:
            names.append(name)
    return names


@check(
    "KP502",
    "bridge-nf-call-off",
    "Bridged pod traffic bypasses iptables",
    "error",
    explains=("KP113", "KP206"),
    severities=("warning", "error"),
    symptom="Pods on the same node cannot reach each other through a Service (timeouts or replies from the wrong address), while other nodes work.",
    why="""
        When pods hang off a Linux bridge (cni0, cbr0, docker0), a packet from one pod to another on the same node is
        *bridged*, not routed. Bridged packets only meet iptables — and kube-proxy's DNAT and its conntrack reverse
        translation — when the br_netfilter module is loaded and net.bridge.bridge-nf-call-iptables = 1. Without it
        the reply from the backend pod goes straight back over the bridge without being un-NATed, and the client
        drops it because it comes from the pod IP instead of the ClusterIP.
    """,
    fix="modprobe br_netfilter; sysctl -w net.bridge.bridge-nf-call-iptables=1 (persist both)",
    references=("https://kubernetes.io/docs/reference/networking/network-plugins/#network-plugin-requirements",),
)
def bridge_nf_call(new, sysctls: Sysctls, addresses: Optional[Addresses] = None, modules: Optional[Modules] = None):
    bridges = _bridges(addresses)
    loaded = None if modules is None else "br_netfilter" in modules.loaded
    v = sysctls.value("net.bridge.bridge-nf-call-iptables")
    if v is None and loaded is None:
        raise Skip(f"neither {sources.MODULES} nor the net.bridge sysctls were collected")
    if v is not None and v.value.strip() == "1":
        return  # the net.bridge sysctls exist only when br_netfilter is loaded (as a module or built in)
    if addresses is not None and not bridges:
        return  # no bridge: pod traffic is routed (e.g. ptp/ipvlan/eBPF CNIs), br_netfilter does not matter
    fixes = [
        persist_modules(["br_netfilter"], "br-netfilter") + "   # now and at every boot",
        set_sysctls({"net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1}),
        persist_sysctls(
            {"net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1}, "bridge-nf-call"
        ),
    ]
    evidence = []
    if v is None:
        what = "br_netfilter is not loaded (no net.bridge.* sysctls exist)"
    elif v.value.strip() == "0":
        what = "net.bridge.bridge-nf-call-iptables = 0"
        evidence.append(sysctls.evidence("net.bridge.bridge-nf-call-iptables"))
        fixes = fixes[2:]
    else:
        what = "br_netfilter is not in /proc/modules"
    if v is None and loaded is False:
        evidence.append(ev.Evidence(modules.source, "br_netfilter: not listed (not loaded)"))
    where = f" on bridge {', '.join(bridges)}" if bridges else ""
    yield new(
        f"{what}: pod-to-pod traffic{where} skips kube-proxy's rules, so same-node Service traffic breaks",
        fix=fixes,
        evidence=[e for e in evidence if e],
        severity="error" if bridges else "warning",
        subject="node",
        data={
            "bridges": bridges,
            "br_netfilter_loaded": loaded,
            **sysctls.data({"net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1}),
        },
    )


@check(
    "KP505",
    "route-localnet",
    "NodePorts on 127.0.0.1 cannot work",
    "warning",
    modes=("iptables",),
    advice_for="kube-proxy",
    symptom="curl http://127.0.0.1:<nodePort> on the node times out, while the node's own IP works.",
    why="""
        kube-proxy in iptables mode serves NodePorts on localhost too (iptables.localhostNodePorts, default true). A
        packet to 127.0.0.1 that is DNATed to a pod IP must then be routed off the loopback, which the kernel only
        allows with net.ipv4.conf.all.route_localnet = 1 — kube-proxy sets it at start. If something reset it, or
        kube-proxy could not set it, localhost NodePorts silently fail.
    """,
    fix="sysctl -w net.ipv4.conf.all.route_localnet=1 (or set iptables.localhostNodePorts: false and use the node IP)",
)
def route_localnet(
    new,
    sysctls: Sysctls,
    rules: KubeProxyRules,
    config: Optional[KubeProxyConfig] = None,
    proxy: Optional[ProxyMode] = None,
):
    if proxy is not None and proxy.dataplane.known and proxy.dataplane is not dataplanes.get("iptables"):
        return
    if config is not None and config.get("iptables.localhostNodePorts") is False:
        return
    rs = rules.ruleset
    nodeports = rs.chain("nat", "KUBE-NODEPORTS")
    if nodeports is None or not any(
        r.target and r.target.startswith(("KUBE-EXT-", "KUBE-SVC-")) for r in nodeports.rules
    ):
        return  # no NodePort services
    v = sysctls.value("net.ipv4.conf.all.route_localnet")
    if v is None or v.value.strip() != "0":
        return
    first = next(r for r in nodeports.rules if r.target and r.target.startswith(("KUBE-EXT-", "KUBE-SVC-")))
    yield new(
        "route_localnet is 0 while kube-proxy serves NodePorts on localhost: 127.0.0.1:<nodePort> will not connect",
        fix=(
            set_sysctls({"net.ipv4.conf.all.route_localnet": 1}),
            persist_sysctls({"net.ipv4.conf.all.route_localnet": 1}, "route-localnet"),
            "or, if localhost NodePorts are not wanted: set iptables.localhostNodePorts: false in the kube-proxy ConfigMap "
            "and restart kube-proxy (kubectl -n kube-system rollout restart daemonset kube-proxy)",
        ),
        evidence=[sysctls.evidence("net.ipv4.conf.all.route_localnet"), ev.rule(first)],
        subject="node",
        data=sysctls.data({"net.ipv4.conf.all.route_localnet": 1}),
    )
