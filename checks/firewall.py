"""A host firewall (iptables INPUT/FORWARD policies, nftables inet filter tables, firewalld, ufw) that drops NodePort and
health-check traffic kube-proxy accepts — in every proxy mode, found by tracing the packets through all of the node's
rules."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from kpdiag.checkapi import Skip, check
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.state.typed_api import Services
from kpdiag.state.typed_node import Addresses, Manifest, Routes
from kpdiag.state.typed_proxy import Ipvs, KubeProxyConfig, KubeProxyRules, Nft, ProxyMode, Tracer

if TYPE_CHECKING:
    from kpdiag.trace.model import Path, Step

EXTERNAL_SRC = "203.0.113.77"  # an outside client (TEST-NET-3)
MAX_TARGETS = 6
_DPORT = re.compile(r"--dport (\d+)")
_PROTO = re.compile(r"(?:^|\s)-p (\w+)")
_IPTABLES_NFT = {("ip", t) for t in ("filter", "nat", "mangle", "raw", "security")} | {
    ("ip6", t) for t in ("filter", "nat", "mangle", "raw", "security")
}


def _node_ip(ip_route, ip_addr) -> tuple[str, str] | None:
    """(the node's address on its uplink, the uplink) — where outside clients send NodePort traffic; ``ip_route`` and
    ``ip_addr`` are the ip -j route / ip -j addr objects."""
    from .hostnet import _default_dev, _global_v4

    dev = _default_dev(ip_route, 4)
    for link in ip_addr or []:
        if link.get("ifname") == dev:
            addrs = _global_v4(link)
            if addrs:
                return addrs[0].split("/")[0], dev
    return None


def _api_targets(services: Services | None, out: dict[tuple[str, int], tuple[str, str]]) -> None:
    """Add the NodePorts and health-check node ports the API's Services declare to ``out``."""
    svcs = services.every if services is not None else None
    for svc in svcs or []:
        src = services.source
        for p in svc.ports:
            if p.get("nodePort"):
                out.setdefault(
                    ((p.get("protocol") or "TCP").lower(), int(p["nodePort"])), (f"NodePort of {svc.key}", src)
                )
        if svc.spec.get("healthCheckNodePort"):
            out.setdefault(("tcp", int(svc.spec["healthCheckNodePort"])), (f"health check node port of {svc.key}", src))


def _iptables_targets(rules: KubeProxyRules | None, out: dict[tuple[str, int], tuple[str, str]]) -> None:
    """Add the node ports of kube-proxy's KUBE-NODEPORTS chains (nat: NodePorts; filter: health-check ports) to ``out``."""
    rs = rules.ruleset if rules is not None else None
    for table, what in (("nat", "NodePort"), ("filter", "health check node port")):
        chain = rs.chain(table, "KUBE-NODEPORTS") if rs is not None else None
        for text in chain.lines if chain is not None else []:
            m, p = _DPORT.search(text), _PROTO.search(text)
            if m and (table == "nat" or "health check" in text):
                out.setdefault(
                    ((p.group(1) if p else "tcp").lower(), int(m.group(1))),
                    (what, f"{rs.source}: {table} KUBE-NODEPORTS"),
                )


def _rules_targets(
    proxy: ProxyMode,
    nft: Nft | None,
    ipvs: Ipvs | None,
    rules: KubeProxyRules | None,
    routes: Routes,
    addresses: Addresses,
    out: dict[tuple[str, int], tuple[str, str]],
) -> None:
    """Add the node ports kube-proxy programmed, read from its mode's rules (nftables map, IPVS virtual servers on
    the node's address, or iptables KUBE-NODEPORTS) to ``out``."""
    dp = proxy.dataplane
    ruleset = nft.ruleset() if dp.services_in_nft and nft is not None else None  # parsed only when it is read
    if ruleset is not None:
        from .nftables import _nodeports

        for proto, port in _nodeports(ruleset):
            out.setdefault((proto, port), ("NodePort", f"{ruleset.source}: map service-nodeports"))
    elif dp.services_in_ipvs and ipvs is not None:
        node = _node_ip(routes.routes, addresses.links)
        for key in ipvs.services:
            if node and str(key[1]) == node[0]:
                out.setdefault(
                    (key[0], int(key[2])),
                    ("NodePort (IPVS virtual server on the node's address)", ipvs.source),
                )
    else:
        _iptables_targets(rules, out)


def _healthz_target(config: KubeProxyConfig | None, out: dict[tuple[str, int], tuple[str, str]]) -> None:
    """Add kube-proxy's /healthz port to ``out`` when it listens beyond loopback."""
    hc = config.get("healthzBindAddress") if config is not None else None
    if config is not None and not str(hc or "").strip():
        hc = "0.0.0.0:10256"  # unset or empty (kubeadm writes ""): kube-proxy's default, which load balancers check
    if hc is not None and str(hc).rsplit(":", 1)[-1].isdigit() and not str(hc).startswith("127."):
        out.setdefault(
            ("tcp", int(str(hc).rsplit(":", 1)[-1])),
            ("kube-proxy's /healthz (load balancers' health checks)", config.source),
        )


def _targets(
    services: Services | None,
    proxy: ProxyMode,
    nft: Nft | None,
    ipvs: Ipvs | None,
    rules: KubeProxyRules | None,
    config: KubeProxyConfig | None,
    routes: Routes,
    addresses: Addresses,
) -> list[tuple[str, int, str, str]]:
    """(proto, port, what, where it is known) of NodePorts and health-check node ports on this node: from the API when
    read, else from kube-proxy's rules."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    _api_targets(services, out)
    _rules_targets(proxy, nft, ipvs, rules, routes, addresses, out)
    _healthz_target(config, out)
    # health checks first: they decide whether a load balancer sends anything at all
    items = sorted(out.items(), key=lambda kv: ("health" not in kv[1][0], kv[0][1]))
    return [(proto, port, what, where) for (proto, port), (what, where) in items[:MAX_TARGETS]]


def _kube_step(step) -> bool:
    return step.chain.startswith(("KUBE-", "kube-")) or "kube-proxy" in step.table


def _drop(paths: Iterable[Path]) -> tuple[float, Step] | None:
    """(share, the step that dropped) when some of the trace's paths are dropped or rejected by a rule or chain policy
    that is not kube-proxy's."""
    share = 0.0
    step: Step | None = None
    for p in paths:
        # a path the tracer is unsure of (a match it cannot evaluate) does not count: no blame without proof
        if p.verdict in ("drop", "reject") and p.steps and not p.uncertain:
            last = p.steps[-1]
            if last.hook != "routing" and not _kube_step(last):
                share += p.probability
                step = step or last
    return (share, step) if step is not None else None


def _host_firewall(rs, routing, dp):
    """The node's nftables tables that are neither kube-proxy's nor iptables-nft's own (in iptables and IPVS mode the
    iptables tracer does not see them): an NftTracer over them, or None. ``rs``: the parsed ruleset (None: not
    collected); ``routing``: the node's routing decision (kpdiag.trace.routing.RoutingTable)."""
    if rs is None or not dp.traced_with_iptables:
        return None
    keep = [t for t in rs.tables if t not in _IPTABLES_NFT and t[1] != "kube-proxy"]
    if not keep:
        return None
    from kpdiag.parse.nft import NftRuleset
    from kpdiag.trace.nftables import NftTracer

    # only those tables: iptables-nft's own (when a dump has them) are traced from iptables-save already
    only = NftRuleset(
        rs.source,
        chains={k: c for k, c in rs.chains.items() if (k[0], k[1]) in keep},
        sets={k: v for k, v in rs.sets.items() if (k[0], k[1]) in keep},
        tables=keep,
    )
    return NftTracer(only, routing, mode="host firewall")


def _owner(step, chains: frozenset = frozenset()) -> str:
    """Who wrote the rule or policy that dropped: firewalld, ufw, or (unknown) the host firewall. A built-in chain's
    policy is ufw's or firewalld's when their chains hang off it (ufw sets INPUT/FORWARD to DROP itself)."""
    name = f"{step.table} {step.chain}".lower()
    if "firewalld" in name or step.chain.startswith(("filter_", "nat_")):
        return "firewalld"
    if "ufw" in name:
        return "ufw"
    if " " not in step.table and step.chain in ("INPUT", "FORWARD"):
        if any(c.startswith("ufw-") for c in chains):
            return "ufw"
        if any(c in ("INPUT_ZONES", "FORWARD_IN_ZONES") or c.startswith("IN_public") for c in chains):
            return "firewalld"
    return "the host firewall"


def _trace_host_fw(host_fw, result, node_ip: str, dev: str, proto: str, port: int, untraced: list[str]):
    """The drop the host firewall's nftables tables make of what kube-proxy's rules let through (DNATed to an endpoint
    in iptables mode, or as is), or None; a packet they cannot trace is added to ``untraced``."""
    from kpdiag.trace.model import Packet

    hit = None
    after = [p for p in result.paths if p.verdict == "accept"] if result is not None else [None]
    for p in after:
        dst, dport = node_ip, port
        if p is not None and p.dnat and "]" not in p.dnat:
            dst, _, dp = p.dnat.rpartition(":")
            dport = int(dp) if dp.isdigit() else port
        try:
            r2 = host_fw.trace(Packet(EXTERNAL_SRC, dst, proto, dport, origin="external", iif=dev))
        except Exception as exc:
            untraced.append(f"{port}/{proto} through the nftables tables: {exc.__class__.__name__}: {exc}")
            break
        hit = _drop(r2.paths)
        if hit:
            break
    return hit


def _trace_targets(targets, tracer, host_fw, node_ip: str, dev: str, mode: str) -> tuple[list, list[str]]:
    """Trace a packet from outside to each target: (blocked, untraced) — blocked as (proto, port, what, where,
    (share, step), through), untraced as the reasons a target could not be traced."""
    from kpdiag.trace.model import Packet

    blocked: list = []
    untraced: list[str] = []
    for proto, port, what, where in targets:
        if proto not in ("tcp", "udp", "sctp"):
            continue
        pkt = Packet(EXTERNAL_SRC, node_ip, proto, port, origin="external", iif=dev)
        try:
            result = tracer.trace(pkt) if tracer is not None else None
        except Exception as exc:  # a rule the tracer cannot evaluate: say so rather than guess
            untraced.append(f"{port}/{proto}: {exc.__class__.__name__}: {exc}")
            continue
        hit = _drop(result.paths) if result is not None else None
        through = f"{mode} rules"
        if hit is None and host_fw is not None:
            hit = _trace_host_fw(host_fw, result, node_ip, dev, proto, port, untraced)
            if hit:
                through = "the node's nftables tables"
        if hit:
            blocked.append((proto, port, what, where, hit, through))
    return blocked, untraced


def _step_fix(st) -> str:
    """The command that lets the NodePort traffic past the host firewall's rule or policy ``st``."""
    hook = st.hook.lower()
    if " " in st.table:  # an nftables table ("inet hostfw"): only a rule in that table's chain helps
        if hook == "input":
            return (
                f"nft insert rule {st.table} {st.chain} tcp dport {{ 30000-32767, 10256 }} accept; "
                f"nft insert rule {st.table} {st.chain} udp dport 30000-32767 accept"
            )
        return f"nft insert rule {st.table} {st.chain} ip daddr <clusterCIDR> accept   # forwarded NodePort traffic to pods"
    if hook == "input":
        return (
            f"iptables -I {st.chain} -p tcp -m multiport --dports 30000:32767,10256 -j ACCEPT && "
            f"iptables -I {st.chain} -p udp --dport 30000:32767 -j ACCEPT"
        )
    return f"iptables -I {st.chain} -d <clusterCIDR> -j ACCEPT   # forwarded NodePort traffic to pods"


def _fix(blocked, steps, chains: frozenset, node_ip: str) -> list[str]:
    """The fix steps: trace it, then the owner's commands (firewalld, ufw), then a rule per blocking step."""
    by_owner = sorted({_owner(b[4][1], chains) for b in blocked})
    port = blocked[0][1]
    fix = [f"kpdiag trace --bundle <bundle> --src {EXTERNAL_SRC} --dst {node_ip} --dport {port}   # where it ends"]
    if "firewalld" in by_owner:
        fix += [
            "firewall-cmd --permanent --add-port=30000-32767/tcp --add-port=30000-32767/udp --add-port=10256/tcp && firewall-cmd --reload",
            "firewall-cmd --permanent --zone=trusted --add-source=<clusterCIDR> && firewall-cmd --reload   # the forwarded half",
        ]
    if "ufw" in by_owner:
        fix += [
            "ufw allow 30000:32767/tcp && ufw allow 30000:32767/udp && ufw allow 10256/tcp",
            "ufw route allow to <clusterCIDR>",
        ]
    fix += [_step_fix(st) for st in steps if _owner(st, chains) == "the host firewall"]
    return fix


def _step_evidence(st, ruleset, manifest) -> Evidence:
    """The rule or policy that dropped, cited from its own source and line when it has one."""
    if st.source and st.source.rsplit(":", 1)[-1].isdigit():
        src, line = st.source.rsplit(":", 1)
        return Evidence(src, f"{st.hook}: {st.table} {st.chain}: {clip(st.text, 200)}", int(line))
    src = ruleset.source if " " in st.table and ruleset is not None else manifest.bundle
    return Evidence(src, f"{st.hook}: {st.table} {st.chain}: {clip(st.text, 200)}")


def _finding(new, blocked, chains: frozenset, node_ip: str, ruleset, manifest):
    """The one finding: which ports are dropped, by whose rules, the fix and the evidence."""
    through = blocked[0][5]
    ports = ", ".join(f"{b[1]}/{b[0]} ({b[2]})" for b in blocked)
    steps: list = []
    for b in blocked:
        st = b[4][1]
        if all((st.table, st.chain, st.text) != (o.table, o.chain, o.text) for o in steps):
            steps.append(st)
    return new(
        f"traffic from outside to {ports} on {node_ip} is dropped by {through}: "
        + "; ".join(f"{_owner(st, chains)} ({st.table} {st.chain}: {clip(st.text, 80)})" for st in steps[:3]),
        fix=tuple(dict.fromkeys(_fix(blocked, steps, chains, node_ip))),
        evidence=[_step_evidence(st, ruleset, manifest) for st in steps[:3]]
        + [
            Evidence(b[3].split(": ", 1)[0], f"{b[1]}/{b[0]}: {b[2]}, {b[4][0] * 100:.0f}% of its paths dropped")
            for b in blocked[:3]
        ],
        subject="node",
    )


@check(
    "KP509",
    "host-firewall-drops-nodeports",
    "The host firewall drops NodePort or health-check traffic",
    "error",
    needs=("whole-rules", "whole-services"),  # gates: it judges every rule and every Service
    symptom="NodePorts time out from outside the node although the Service works inside the cluster; cloud load balancers "
    "mark every node unhealthy (their health check to healthCheckNodePort or :10256 gets no answer).",
    why="""
        NodePort traffic passes the node's own firewall before or after kube-proxy's rules: in iptables and nftables
        mode it is DNATed in prerouting and then *forwarded* to the pod; in IPVS mode it is delivered to the node
        (INPUT) and IPVS sends it on; health-check node ports and kube-proxy's :10256 are answered by kube-proxy itself
        (INPUT). kube-proxy accepts what it needs in its own chains, but an accept in one table does not bind
        another: an nftables inet filter table (firewalld's, or a hand-written one) with a drop policy on the input or
        forward hook still drops the packet, and so do an iptables INPUT policy DROP or ufw's chains when nothing
        before them accepts the port range.
    """,
    fix="Allow the NodePort range (30000-32767 by default, tcp and udp), the health-check node ports and 10256/tcp in the "
    "host firewall on the input and forward paths (firewalld: add the ports to the zone and the pod CIDR as trusted; "
    "ufw: ufw allow 30000:32767/tcp and 'ufw route allow').",
)
def host_firewall(
    new,
    addresses: Addresses,
    routes: Routes,
    rules: Optional[KubeProxyRules] = None,
    ipvs: Optional[Ipvs] = None,
    config: Optional[KubeProxyConfig] = None,
    manifest: Optional[Manifest] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
    tracers: Optional[Tracer] = None,
):
    node = _node_ip(routes.routes, addresses.links)
    if node is None:
        raise Skip("the node's address on its uplink (the default route's interface) is not known")
    targets = _targets(services, proxy, nft, ipvs, rules, config, routes, addresses)
    if not targets:
        return  # no NodePort, health-check port or reachable /healthz on this node
    mode = proxy.mode or "iptables"
    tracer = tracers.of_mode()
    ruleset = nft.ruleset() if nft is not None else None
    host_fw = _host_firewall(ruleset, routes.routing, proxy.dataplane)
    if tracer is None and host_fw is None:
        raise Skip("none of this node's rules could be read (iptables-save / nft -j list ruleset)")
    node_ip, dev = node
    blocked, untraced = _trace_targets(targets, tracer, host_fw, node_ip, dev, mode)
    if not blocked:
        if untraced:
            raise Skip(f"could not trace {'; '.join(untraced[:2])}")
        return
    rs = rules.ruleset if rules is not None else None
    chains = frozenset(rs.chain_names("filter")) if rs is not None else frozenset()
    yield _finding(new, blocked, chains, node_ip, ruleset, manifest)
