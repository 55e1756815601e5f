"""UDP conntrack entries that outlive what they were made for: a flow keeps its entry (and the entry's DNAT, or its
lack of one) as long as the client keeps sending, whatever the rules say now. KP504: entries to a Service's ClusterIP,
NodePort, externalIP or load-balancer IP still DNATed to an endpoint that is gone; KP529: entries made while the
Service had no endpoints (not translated at all) that keep its first endpoints from ever seeing the flow."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from kpdiag.checkapi import check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import Focus, Services
from kpdiag.state.typed_node import Addresses, ConntrackEntries
from kpdiag.state.typed_proxy import KubeProxySettings

from .service import in_focus, port_data

_ENTRY = re.compile(
    r"^udp\s+\d+\s+\d+\s+src=(\S+) dst=(\S+) sport=(\d+) dport=(\d+)\s+(\[UNREPLIED\]\s+)?"
    r"src=(\S+) dst=(\S+) sport=(\d+) dport=(\d+)"
)


@dataclass(frozen=True)
class UdpEntry:
    """One UDP line of ``conntrack -L``: the original tuple (as the client sent it) and the reply tuple (as the answer
    must come back: its source is where the flow was really sent — the DNAT target, or the destination itself)."""

    line: int
    text: str
    src: str
    dst: str
    sport: int
    dport: int
    reply_src: str
    reply_sport: int
    unreplied: bool

    @property
    def translated(self) -> bool:
        """The destination was rewritten (DNAT): the reply comes from another address or port than was asked."""
        return (self.reply_src, self.reply_sport) != (self.dst, self.dport)


@functools.lru_cache(maxsize=2)  # KP504, KP528 and KP529 read the same dump: parsed once
def udp_entries(text: str) -> tuple[UdpEntry, ...]:
    """The UDP entries of a ``conntrack -L`` dump (IPv4 and IPv6 lines alike; other lines are not UDP's)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _ENTRY.match(line.strip())
        if m:
            src, dst, sport, dport, unrep, rsrc, _rdst, rsport, _rdport = m.groups()
            out.append(UdpEntry(n, line.strip(), src, dst, int(sport), int(dport), rsrc, int(rsport), bool(unrep)))
    return tuple(out)


def by_destination(entries: tuple[UdpEntry, ...]) -> dict[tuple[str, int], list[UdpEntry]]:
    out: dict[tuple[str, int], list[UdpEntry]] = {}
    for e in entries:
        out.setdefault((e.dst, e.dport), []).append(e)
    return out


def node_addresses(addresses: Addresses | None) -> set[str]:
    """Every address of the node's interfaces (a NodePort answers on each, loopback too in iptables mode)."""
    out = set()
    for link in addresses.links if addresses is not None else ():
        for a in link.get("addr_info") or ():
            if isinstance(a, dict) and isinstance(a.get("local"), str):
                out.add(a["local"])
    return out


def nodeport_addresses(node_ips: set[str], kp: KubeProxySettings | None) -> set[str]:
    """The node addresses kube-proxy takes NodePort traffic on, as far as they can be told: not loopback (localhost
    NodePorts exist in iptables mode only), and within nodePortAddresses when it is set (none when it is "primary":
    which addresses those are is the Node's record, not read here)."""
    import ipaddress

    out = {ip for ip in node_ips if not ipaddress.ip_address(ip).is_loopback}
    setting = kp.value("nodePortAddresses") if kp is not None else None
    if not setting:
        return out
    if "primary" in setting:
        return set()
    nets = []
    for text in setting:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return {ip for ip in out if any(ipaddress.ip_address(ip) in n for n in nets)}


@dataclass(frozen=True)
class Destination:
    kind: str  # "ClusterIP", "NodePort", "externalIP", "LoadBalancer IP"
    ip: str | None  # None: every node address (a NodePort)
    port: int


def service_destinations(svc, port: dict, node_ips: set[str]) -> list[tuple[Destination, str]]:
    """Where kube-proxy accepts ``port`` of ``svc``: (destination, the address) for each ClusterIP, externalIP and
    load-balancer ingress IP on the Service port, and each node address on the NodePort."""
    spec, number = svc.spec, port.get("port")
    out: list[tuple[Destination, str]] = []
    if isinstance(number, int):  # a port without a number matches no conntrack entry (their ports are numbers)
        out += [(Destination("ClusterIP", ip, number), ip) for ip in svc.cluster_ips]
        out += [
            (Destination("externalIP", ip, number), ip) for ip in spec.get("externalIPs") or () if isinstance(ip, str)
        ]
        ingress = ((svc.raw.get("status") or {}).get("loadBalancer") or {}).get("ingress") or ()
        lb: list[str] = [i["ip"] for i in ingress if isinstance(i, dict) and isinstance(i.get("ip"), str)]
        out += [(Destination("LoadBalancer IP", ip, number), ip) for ip in lb]
    node_port = port.get("nodePort")
    if svc.type in ("NodePort", "LoadBalancer") and isinstance(node_port, int) and node_port > 0:
        out += [(Destination("NodePort", None, node_port), ip) for ip in sorted(node_ips)]
    return out


def current_endpoints(svc, port: dict) -> set[str]:
    """The endpoints a flow to ``port`` may rightly be DNATed to: ready ones, and terminating ones still serving."""
    return {e.ip for e in svc.endpoints_for(port) if e.ready or e.serving_terminating}


def _udp_ports(services: Services, focus: Focus | None):
    for svc in in_focus(services, focus):
        for port in svc.ports:
            if (port.get("protocol") or "TCP").upper() == "UDP":
                yield svc, port


def _where(dest: Destination, ip: str) -> str:
    return f"NodePort {ip}:{dest.port}" if dest.ip is None else f"{dest.kind} {ip}:{dest.port}"


def _dest_data(found) -> list[dict]:
    keys = sorted({(d.kind, e.dst, d.port) for d, e in found})
    return [{"kind": k, "address": a, "port": p} for k, a, p in keys]


def _delete(dest: Destination, reply_src: str) -> str:
    """conntrack -D with the filter that selects exactly these entries (a NodePort's on every node address, as
    kube-proxy's own cleanup does)."""
    where = f"--orig-port-dst {dest.port}" if dest.ip is None else f"--orig-dst {dest.ip} --orig-port-dst {dest.port}"
    return f"conntrack -D -p udp {where} --reply-src {reply_src}"


@check(
    "KP504",
    "stale-udp-conntrack",
    "UDP conntrack entries still point to gone endpoints",
    "warning",
    advice_for="kube-proxy",
    symptom="After a pod behind a UDP Service (DNS, syslog, statsd, a game server; through its ClusterIP, NodePort, "
    "externalIP or load balancer) is replaced, some clients keep timing out for minutes.",
    why="""
        UDP has no connection end, so a client that keeps sending from the same port keeps its conntrack entry — and
        that entry keeps the old DNAT target, even after the endpoint is gone: the kernel consults the nat rules only
        for a flow's first packet. kube-proxy deletes such entries when endpoints change (ClusterIPs, NodePorts,
        externalIPs and load-balancer IPs alike); when it cannot (no conntrack binary, no permission) or misses one,
        clients are stuck on a dead endpoint until they change source port or stop sending for the UDP timeout.
    """,
    fix="Delete the stale entries (conntrack -D with the destination and the gone endpoint) and fix kube-proxy's "
    "conntrack cleanup (KP704).",
)
def stale_udp(
    new,
    services: Services,
    entries: ConntrackEntries,
    focus: Optional[Focus] = None,
    addresses: Optional[Addresses] = None,  # the node's addresses: where its NodePorts are reached
):
    table = by_destination(udp_entries(entries.text or ""))
    node_ips = node_addresses(addresses)
    for svc, port in _udp_ports(services, focus):
        current = current_endpoints(svc, port)
        stale: list[tuple[Destination, UdpEntry]] = []
        for dest, ip in service_destinations(svc, port, node_ips):
            for e in table.get((ip, dest.port), ()):
                if e.translated and e.reply_src not in current and e.reply_src != e.dst:
                    stale.append((dest, e))
        if not stale:
            continue
        gone = sorted({e.reply_src for _, e in stale})
        wheres = sorted({_where(d, e.dst) for d, e in stale})
        cmds = sorted({_delete(d, e.reply_src) for d, e in stale})
        n = len(stale)
        yield new(
            f"{n} UDP conntrack entr{'y' if n == 1 else 'ies'} to {svc.key} ({', '.join(wheres[:3])}) still "
            f"go{'es' if n == 1 else ''} to {', '.join(gone)}, which {'is' if len(gone) == 1 else 'are'} no longer "
            "an endpoint: the clients behind them are black-holed until they stop sending",
            fix=tuple(command(c) for c in cmds)
            + (
                note(
                    "kubectl -n kube-system logs <kube-proxy pod> | grep -i conntrack   # why kube-proxy did not "
                    "delete them (KP704)"
                ),
            ),
            evidence=[Evidence(entries.source, e.text, e.line) for _, e in stale[:3]]
            + [
                services.evidence(
                    svc, f"UDP port {port.get('port')}: endpoints now {', '.join(sorted(current)) or 'none'}"
                )
            ],
            subject=f"{svc.key}:{port.get('port')}",
            data=port_data(
                svc,
                port,
                destinations=_dest_data(stale),
                stale_endpoints=gone,
                entries=n,
            ),
        )


@check(
    "KP529",
    "udp-flow-before-endpoints",
    "UDP flows created while the Service had no endpoints bypass it now",
    "error",
    advice_for="kube-proxy",
    modes=("iptables", "nftables"),
    symptom="A UDP Service (DNS, syslog, metrics) got its endpoints, yet a client that started sending before that "
    "never gets through — until it is restarted or pauses longer than the UDP timeout; new clients work.",
    why="""
        The kernel runs the nat rules only for the first packet of a flow; every later packet follows the flow's
        conntrack entry. A UDP client that sent to the Service while it had no endpoints (or before kube-proxy had
        programmed it) got an entry without DNAT: its packets went where the ClusterIP or NodePort address routes
        (nowhere, or out by the default route). When the endpoints appear the DNAT rule is there, but this client's
        packets never meet it: each one refreshes the old entry (30 s, 120 s once answered), so a client that keeps
        sending — a DNS forwarder, a syslog or statsd shipper — stays stuck indefinitely. kube-proxy deletes such
        entries when a UDP Service gets its first endpoint; an entry still here means that cleanup failed or missed it.
    """,
    fix="Delete the untranslated entries (conntrack -D … --reply-src <the Service address>) so the next packet "
    "meets kube-proxy's DNAT; then find why kube-proxy did not (KP704).",
)
def udp_flow_before_endpoints(
    new,
    services: Services,
    entries: ConntrackEntries,
    focus: Optional[Focus] = None,
    addresses: Optional[Addresses] = None,
    kp: Optional[KubeProxySettings] = None,  # nodePortAddresses: an untranslated flow elsewhere is not a NodePort's
):
    table = by_destination(udp_entries(entries.text or ""))
    node_ips = nodeport_addresses(node_addresses(addresses), kp)
    for svc, port in _udp_ports(services, focus):
        current = current_endpoints(svc, port)
        if not current:
            continue  # still no endpoint: nothing to reach yet (KP101 says so)
        stuck: list[tuple[Destination, UdpEntry]] = []
        for dest, ip in service_destinations(svc, port, node_ips):
            if ip in current:
                continue  # a host-network endpoint on this address: its own flows are not translated
            stuck += [(dest, e) for e in table.get((ip, dest.port), ()) if not e.translated]
        if not stuck:
            continue
        n = len(stuck)
        wheres = sorted({_where(d, e.dst) for d, e in stuck})
        cmds = sorted(
            {f"conntrack -D -p udp --orig-dst {e.dst} --orig-port-dst {d.port} --reply-src {e.dst}" for d, e in stuck}
        )
        clients = sorted({f"{e.src}:{e.sport}" for _, e in stuck})
        yield new(
            f"{n} UDP flow{'s' if n != 1 else ''} to {svc.key} ({', '.join(wheres[:3])}) from "
            f"{', '.join(clients[:3])}{' …' if len(clients) > 3 else ''} {'were' if n != 1 else 'was'} never "
            f"translated (made while it had no endpoints) and still bypass{'' if n != 1 else 'es'} its endpoints "
            f"{', '.join(sorted(current)[:3])}",
            fix=tuple(command(c) for c in cmds)
            + (
                note(
                    "kubectl -n kube-system logs <kube-proxy pod> | grep -i conntrack   # why kube-proxy did not "
                    "delete them when the endpoints appeared (KP704)"
                ),
            ),
            evidence=[Evidence(entries.source, e.text, e.line) for _, e in stuck[:3]]
            + [services.evidence(svc, f"UDP port {port.get('port')}: endpoints now {', '.join(sorted(current))}")],
            subject=f"{svc.key}:{port.get('port')}",
            data=port_data(
                svc,
                port,
                destinations=_dest_data(stuck),
                clients=clients,
                endpoints=sorted(current),
                entries=n,
            ),
        )
