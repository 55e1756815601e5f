"""Kernel settings kube-proxy depends on: forwarding, bridge netfilter, route_localnet, the ephemeral ports."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag import evidence as ev
from kpdiag.fixcmd import persist_modules, persist_sysctls, set_sysctls
from kpdiag.checkapi import Skip, check
from kpdiag.bundle import sources
from kpdiag.state.typed_api import Pods
from kpdiag.state.typed_node import Addresses, LocalPorts, Modules, Sysctls
from kpdiag.state.typed_proxy import KubeProxyConfig, KubeProxyRules, ProxyMode


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
    if v is None and loaded is False and modules is not None:  # loaded is False only when modules were read
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


NODEPORT_DEFAULT = (30000, 32767)  # kube-apiserver's --service-node-port-range when it is not given


def _apiserver_args(pods: Pods | None) -> list[str]:
    """Every container's command and args of the pods read (kube-apiserver's among them), as strings."""
    out = []
    for pod in (pods.items if pods is not None else None) or []:
        for c in ((pod.get("spec") or {}).get("containers") or []) if isinstance(pod, dict) else []:
            for arg in (list(c.get("command") or []) + list(c.get("args") or [])) if isinstance(c, dict) else []:
                if isinstance(arg, str):
                    out.append(arg)
    return out


def nodeport_range(pods: Pods | None) -> tuple:
    """(the NodePort range, how it is known, evidence or None): kube-apiserver's --service-node-port-range in its pod (a
    kubeadm static pod), else Kubernetes' default, said."""
    for arg in _apiserver_args(pods):
        if arg.startswith("--service-node-port-range="):
            low, _, high = arg.split("=", 1)[1].partition("-")
            try:
                return (
                    (int(low), int(high or low)),
                    f"kube-apiserver's {arg}",
                    pods.evidence(arg) if pods is not None else None,
                )
            except ValueError:
                continue
    why = "kube-apiserver's flag was not seen" if pods is not None else "the API's pods were not read"
    return NODEPORT_DEFAULT, f"Kubernetes' default: {why}", None


def _uncovered(low: int, high: int, reserved: list[tuple[int, int]]) -> int:
    """How many ports of low..high no reserved range holds."""
    return sum(1 for port in range(low, high + 1) if not any(a <= port <= b for a, b in reserved))


@check(
    "KP511",
    "local-ports-overlap-nodeports",
    "The node's ephemeral ports overlap the NodePort range",
    "warning",
    symptom="Now and then a connection the node itself opens (kubelet, a hostNetwork pod, an agent) to another machine "
    "hangs, or a NodePort is reported busy, on nodes whose ephemeral port range was widened.",
    why="""
        The kernel gives the node's own outgoing connections a source port from net.ipv4.ip_local_port_range, skipping
        only net.ipv4.ip_local_reserved_ports. When that range overlaps the NodePort range (kube-apiserver
        --service-node-port-range, 30000-32767 by default) a connection can leave from a port that is a NodePort.
        In iptables and nftables mode conntrack keeps its replies apart from NodePort traffic (verified in the lab),
        but IPVS mode has a virtual server for every NodePort on every node address, and IPVS schedules a SYN+ACK that
        arrives for one, so the reply never reaches the connection; kube-proxy versions that hold NodePort sockets
        cannot open a port a connection holds ("can't open nodePort … address already in use") and skip it; and a
        program listening on a port the kernel picks can take a NodePort. The kernel's default range (32768-60999)
        does not overlap; a tuned one ("1024 65535") does.
    """,
    fix="Reserve the NodePort range (net.ipv4.ip_local_reserved_ports), or move ip_local_port_range off it.",
)
def local_ports_overlap_nodeports(new, ports: LocalPorts, pods: Optional[Pods] = None):
    try:
        local = ports.local_range()
        reserved = ports.reserved_ports()
    except ValueError:
        texts = "; ".join(v.text for v in (ports.range, ports.reserved) if v is not None)
        raise Skip(f"net.ipv4.ip_local_port_range / ip_local_reserved_ports do not read as ports: {texts}") from None
    if local is None:
        raise Skip("net.ipv4.ip_local_port_range is not in the collected sysctls")
    (nlo, nhi), how, flag = nodeport_range(pods)
    low, high = max(local[0], nlo), min(local[1], nhi)
    if low > high:
        return
    left = _uncovered(low, high, reserved)
    if not left:
        return
    merged = ",".join([f"{a}-{b}" if a != b else str(a) for a, b in reserved] + [f"{nlo}-{nhi}"])
    key = "net.ipv4.ip_local_reserved_ports"
    yield new(
        f"net.ipv4.ip_local_port_range {local[0]}-{local[1]} overlaps the NodePort range {nlo}-{nhi} ({how}) and "
        f"{key} leaves {left} of those ports free: the node's own connections can take a NodePort as source port",
        fix=(
            set_sysctls({key: merged}) + "   # the kernel stops picking NodePorts as source ports",
            persist_sysctls({key: merged}, "reserved-ports")
            + "   # keep it across reboots (kpdiag's own drop-in file)",
            f"or move the ephemeral range off the NodePort range: sysctl -w net.ipv4.ip_local_port_range='{nhi + 1} 60999'",
        ),
        evidence=[e for e in (ports_evidence(ports.range), ports_evidence(ports.reserved), flag) if e],
        subject="node",
        data={
            "local_port_range": list(local),
            "reserved": [list(r) for r in reserved],
            "nodeport_range": [nlo, nhi],
            "nodeport_range_from": how,
            "overlap": [low, high],
            "unreserved": left,
        },
    )


def ports_evidence(value):
    from kpdiag.model import Evidence

    return None if value is None else Evidence(value.source, value.text, value.line)
