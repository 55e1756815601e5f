"""What IPVS mode keeps on the node that no Service asks for: kube-ipvs0 addresses and virtual servers of deleted
Services (KP311), and a node's own address bound on kube-ipvs0 as a Service's externalIP or LoadBalancer IP (KP312)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from kpdiag import dataplane as dataplanes
from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import NodeObjects, Services
from kpdiag.state.typed_node import Addresses, Preflight
from kpdiag.state.typed_proxy import Ipvs, KubeProxyConfig, KubeProxyLog, KubeProxyRules, ProxyMode

if TYPE_CHECKING:
    from kpdiag.state.cluster import Svc

IPVS_DEV = "kube-ipvs0"
SHOWN = 5
# kube-proxy's log lines that say why a sync did not clean up: its own delete/unbind errors, and a sync that failed
# before its end (the cleanup of superfluous addresses and virtual servers runs last)
_CLEANUP = re.compile(
    r"(Failed to delete service|Failed to unbind|UnbindAddress|Failed to execute iptables-restore|Sync failed|"
    r"Failed to sync|Failed to (?:add|ensure|create) .*ipset|ipset.*(?:error|failed))",
    re.I,
)
_FLAG = {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}


def _norm(ip) -> str | None:
    try:
        return ipaddress.ip_address(str(ip).split("%", 1)[0]).compressed
    except ValueError:
        return None


def _bound(addresses: Addresses) -> dict[str, int] | None:
    """kube-ipvs0's addresses → prefix length, or None when the node has no kube-ipvs0."""
    for link in addresses.links:
        if link.get("ifname") == IPVS_DEV:
            out = {}
            for a in link.get("addr_info") or []:
                ip = _norm(a.get("local"))
                if ip:
                    out[ip] = a.get("prefixlen") or (32 if ":" not in ip else 128)
            return out
    return None


def _lb_ips(svc) -> list[str]:
    ingress = ((svc.raw.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [i["ip"] for i in ingress if isinstance(i, dict) and isinstance(i.get("ip"), str)]


def _wanted(services: Iterable[Svc]) -> tuple[set[str], set[tuple[str, str, int]], dict[str, set[int]]]:
    """What the API asks of IPVS mode: the addresses kube-proxy binds on kube-ipvs0, the (proto, address, port)
    virtual servers on them, and the NodePorts by protocol (virtual servers on the node's own addresses)."""
    addrs: set[str] = set()
    servers: set[tuple[str, str, int]] = set()
    nodeports: dict[str, set[int]] = {}
    for svc in services:
        norm = [_norm(ip) for ip in svc.cluster_ips + list(svc.spec.get("externalIPs") or []) + _lb_ips(svc)]
        ips = [ip for ip in norm if ip]
        addrs.update(ips)
        for p in svc.ports:
            proto = str(p.get("protocol") or "TCP").lower()
            try:
                port = int(p["port"])
            except (KeyError, TypeError, ValueError):
                continue
            servers.update((proto, ip, port) for ip in ips)
            if p.get("nodePort"):
                nodeports.setdefault(proto, set()).add(int(p["nodePort"]))
    return addrs, servers, nodeports


def _excluded(cfg: KubeProxyConfig | None) -> list:
    """ipvs.excludeCIDRs: the addresses kube-proxy's IPVS cleanup never touches."""
    nets = []
    raw = cfg.get("ipvs.excludeCIDRs") if cfg is not None else None
    for c in raw if isinstance(raw, list) else str(raw or "").split(","):
        if not str(c).strip():
            continue
        try:
            nets.append(ipaddress.ip_network(str(c).strip(), strict=False))
        except ValueError:
            continue
    return nets


def _why_kept(log: KubeProxyLog | None) -> tuple[str, list[Evidence]]:
    """Why kube-proxy left them, as its log says (the last lines about a failed cleanup or sync)."""
    if log is None:
        return "kube-proxy's log was not collected: read it for delete/unbind or sync errors", []
    hits = [(n, line) for n, line in log.entries() if _CLEANUP.search(line)]
    if not hits:
        return (
            "kube-proxy's log shows no failed cleanup or sync: a kube-proxy that runs and syncs deletes them at its "
            "next sync, so it is not running, not syncing (KP703), or something else re-adds them",
            [],
        )
    return (
        f"kube-proxy's log shows {len(hits)} failed cleanup/sync line(s): a sync that fails before its end never "
        "reaches the cleanup of superfluous addresses and virtual servers",
        [log.evidence(n, line) for n, line in hits[-2:]],
    )


def _vs_arg(proto: str, addr: str, port: int) -> str:
    host = f"[{addr}]" if ":" in addr else addr
    return f"{_FLAG.get(proto, '-t')} {host}:{port}"


@check(
    "KP311",
    "ipvs-stale-addresses",
    "kube-ipvs0 addresses or IPVS virtual servers of no Service",
    "warning",
    severities=("warning",),
    shows=("stale-rules",),
    modes=("ipvs",),
    advice_for="kube-proxy",
    needs=("whole-rules", "whole-services"),  # gates: it judges every address and every Service
    symptom="Traffic to an address that once was a Service's (an old externalIP or LoadBalancer IP now used by "
    "another host, a reused ClusterIP) is answered or rejected by the node itself instead of reaching its owner.",
    why="""
        In IPVS mode kube-proxy binds every Service address (ClusterIP, externalIP, LoadBalancer IP) on the dummy
        interface kube-ipvs0 and creates one IPVS virtual server per address and port. When a Service goes away, each
        sync deletes the virtual servers no Service asks for and unbinds the addresses no Service has. An address
        left on kube-ipvs0 is still local to the node: packets to it are delivered to the node itself (a virtual
        server left with it load-balances them to pods that may be gone; without one, KUBE-IPVS-FILTER rejects them),
        so when the address is later given to another host or Service, this node captures its traffic. kube-proxy
        leaves them when it is not running or not syncing, when a sync fails before its end (the cleanup runs last:
        an iptables-restore or ipset error stops it every time), when an unbind or delete fails, and for addresses in
        ipvs.excludeCIDRs, which it never touches (those are not reported).
    """,
    fix="Read kube-proxy's log for why it did not clean up; fix that cause, then delete the leftovers by hand "
    "(ip addr del ADDR/32 dev kube-ipvs0; ipvsadm -D -t ADDR:PORT).",
)
def stale_addresses(
    new,
    addresses: Addresses,
    ipvs: Ipvs,
    services: Services,
    cfg: Optional[KubeProxyConfig] = None,
    log: Optional[KubeProxyLog] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    # both always there (their build never returns None): uses, not needs, so a bundle without a mode still runs
    assert proxy is not None and preflight is not None
    why = dataplanes.get("ipvs").ports_skip(proxy.dataplane, preflight.mode, ipvs)
    if why:
        raise Skip(why)
    bound = _bound(addresses)
    if bound is None:
        raise Skip(f"the node has no {IPVS_DEV} (KP304 judges that)")
    addrs, servers, nodeports = _wanted(services.every)
    excluded = _excluded(cfg)

    def left_alone(ip) -> bool:
        return any(ipaddress.ip_address(ip) in n for n in excluded if n.version == ipaddress.ip_address(ip).version)

    stale_addrs = sorted(ip for ip in bound if ip not in addrs and not left_alone(ip))
    stale_vs = []
    deletes = []  # ipvsadm -D's arguments, one a stale virtual server
    for vs in ipvs.services.values():
        if vs.fwmark is not None or vs.addr is None or vs.port is None:
            continue  # kube-proxy makes no firewall-mark virtual servers (the only ones without address and port)
        ip = _norm(vs.addr)
        if ip is None or left_alone(ip) or (vs.proto, ip, vs.port) in servers:
            continue
        if ip not in bound and vs.port in nodeports.get(vs.proto, ()):
            continue  # a NodePort's virtual server on one of the node's own addresses
        stale_vs.append(vs)
        deletes.append(_vs_arg(vs.proto, ip, vs.port))
    if not stale_addrs and not stale_vs:
        return
    why_kept, log_ev = _why_kept(log)
    shown = stale_addrs[:SHOWN] + [vs.name for vs in stale_vs[: max(0, SHOWN - len(stale_addrs))]]
    more = len(stale_addrs) + len(stale_vs) - len(shown)
    fix = [
        note(
            "first fix why kube-proxy did not remove them (its log; KP703, KP704): a leftover deleted by hand alone "
            "tells nothing of the next one"
        ),
        command(
            "kubectl -n kube-system logs <kube-proxy pod on this node> | grep -iE "
            "'unbind|delete service|iptables-restore|ipset|sync'"
        ),
    ]
    fix += [command(f"ip addr del {ip}/{bound[ip]} dev {IPVS_DEV}") for ip in stale_addrs[:SHOWN]]
    fix += [command(f"ipvsadm -D {arg}") for arg in deletes[:SHOWN]]
    evidence = [
        Evidence(addresses.source, f"{IPVS_DEV}: inet {ip}/{bound[ip]}: no Service has this address")
        for ip in stale_addrs[:3]
    ]
    evidence += [Evidence(ipvs.source, f"{vs.name}: no Service port", vs.line) for vs in stale_vs[:3]]
    evidence += [Evidence(services.source, f"{len(services.every)} Services: none has {', '.join(shown[:3])}")]
    yield new(
        f"{len(stale_addrs)} address(es) on {IPVS_DEV} and {len(stale_vs)} IPVS virtual server(s) belong to no "
        f"Service: {', '.join(shown)}{f' and {more} more' if more > 0 else ''} — traffic to them is kept on this "
        f"node; {why_kept}",
        fix=tuple(fix),
        evidence=evidence + log_ev,
        subject="node",
        data={
            "addresses": stale_addrs,
            "virtual_servers": [vs.name for vs in stale_vs],
            "log_lines": len(log_ev),
        },
    )


def _node_addresses(
    addresses: Addresses | None, nodes: NodeObjects | None, host_prefixes: bool = True
) -> dict[str, tuple[str, str]]:
    """Addresses that belong to a node → (source, whose): this node's interfaces (not kube-ipvs0, not loopback) and
    every Node's InternalIP/ExternalIP in the API. ``host_prefixes`` False leaves out an interface's /32 (/128) that the
    API does not give a Node: a VIP a load balancer or keepalived holds there (kube-vip in ARP mode adds a
    LoadBalancer IP to the leader's interface), not the node's own address."""
    out: dict[str, tuple[str, str]] = {}
    addr_src = addresses.source if addresses is not None else ""
    for link in addresses.links if addresses is not None else ():
        name = link.get("ifname")
        if name in (IPVS_DEV, "lo"):
            continue
        for a in link.get("addr_info") or []:
            ip = _norm(a.get("local"))
            if not ip or ipaddress.ip_address(ip).is_loopback or ipaddress.ip_address(ip).is_link_local:
                continue
            if not host_prefixes and a.get("prefixlen") == ipaddress.ip_address(ip).max_prefixlen:
                continue
            out.setdefault(ip, (addr_src, f"this node's address on {name}"))
    nodes_src = nodes.source if nodes is not None else ""
    for obj in nodes.objects if nodes is not None else ():
        status = obj.get("status")
        for a in (status.get("addresses") if isinstance(status, dict) else None) or []:
            if isinstance(a, dict) and a.get("type") in ("InternalIP", "ExternalIP"):
                ip = _norm(a.get("address"))
                if ip:
                    out.setdefault(ip, (nodes_src, f"node {NodeObjects.name(obj)}'s {a['type']}"))
    return out


@check(
    "KP312",
    "ipvs-node-address-bound",
    "A node's own address bound on kube-ipvs0 as a Service address",
    "error",
    severities=("error",),
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="SSH, the kubelet (10250) or the API server on a node's address stop answering from the nodes (connection "
    "refused), or answer from the wrong node, right after a Service got that address as an externalIP or "
    "LoadBalancer IP.",
    why="""
        In IPVS mode kube-proxy binds every externalIP and LoadBalancer IP on kube-ipvs0 of every node and adds it to
        its KUBE-IPVS-IPS set. When that address is a node's own, every node now treats it as local: traffic from a
        node to it never leaves (each node answers it itself, with whatever listens there), and KUBE-IPVS-FILTER
        rejects new connections to every port of it that is not the Service's — on the node that owns the address
        too, so SSH, the kubelet and the API server behind it are refused. In iptables or nftables mode the same
        externalIP only redirects the Service's own ports; IPVS mode takes the whole address.
    """,
    fix="Remove the node's address from the Service (spec.externalIPs, or the load balancer's address pool), and "
    "expose the port with a NodePort or an address of its own.",
)
def node_address_bound(
    new,
    addresses: Addresses,
    services: Services,
    nodes: Optional[NodeObjects] = None,
    rules: Optional[KubeProxyRules] = None,
):
    bound = _bound(addresses)
    if bound is None:
        return  # no kube-ipvs0: nothing bound (KP304 says so when IPVS runs)
    owned = _node_addresses(addresses, nodes, host_prefixes=False)
    reject = _ipvs_filter_reject(rules)
    for svc in services.every:
        ext = [(_norm(ip), "externalIP") for ip in svc.spec.get("externalIPs") or []]
        ext += [(_norm(ip), "LoadBalancer IP") for ip in _lb_ips(svc)]
        for i, (ip, kind) in enumerate(ext):
            if not ip or ip not in bound or ip not in owned:
                continue
            src, whose = owned[ip]
            fix = [
                command(
                    f"kubectl -n {svc.namespace} patch service {svc.name} --type=json "
                    f"""-p '[{{"op":"remove","path":"/spec/externalIPs/{i}"}}]'"""
                )
                if kind == "externalIP"
                else note(
                    f"take {ip} out of the load balancer's address pool (MetalLB IPAddressPool, kube-vip range) "
                    "and give the Service another address"
                ),
                note("expose the port on the nodes with a NodePort (or hostPort) instead of the node's address"),
                command(f"ip route get {ip}   # afterwards, on every node: local only on the node that owns it"),
            ]
            evidence = [
                Evidence(addresses.source, f"{IPVS_DEV}: inet {ip}/{bound[ip]}"),
                Evidence(src, f"{ip}: {whose}"),
                services.evidence(svc, f"{kind} {ip}"),
            ] + ([reject] if reject is not None else [])
            yield new(
                f"{svc.key}'s {kind} {ip} is {whose}, and IPVS mode binds it on {IPVS_DEV} of every node: "
                f"the nodes keep traffic to {ip} for themselves"
                + (
                    " and KUBE-IPVS-FILTER refuses new connections to its other ports (SSH, kubelet, API server)"
                    if reject is not None
                    else ""
                ),
                fix=tuple(fix),
                evidence=evidence,
                subject=svc.key,
                data={"service": svc.key, "address": ip, "kind": kind, "owner": whose},
            )


def _ipvs_filter_reject(rules: KubeProxyRules | None) -> Evidence | None:
    """KUBE-IPVS-FILTER's reject of new connections to bound addresses (newer kube-proxy), as evidence."""
    rs = rules.ruleset if rules is not None else None
    if rs is None:
        return None
    chain = rs.chain("filter", "KUBE-IPVS-FILTER")
    for text in chain.lines if chain is not None else []:
        if "KUBE-IPVS-IPS" in text and "REJECT" in text:
            return Evidence(rs.source, text)
    return None
