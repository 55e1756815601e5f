"""Where packets to ClusterIPs go when kube-proxy does not translate them."""

from __future__ import annotations

import ipaddress

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.parse.addr import parse_ip


def covering_prefix(ips: list[str]) -> str:
    """The smallest prefix containing every address (a guess at the service CIDR)."""
    nums = [int(ipaddress.IPv4Address(ip)) for ip in ips]
    lo, hi = min(nums), max(nums)
    plen = 32 - (lo ^ hi).bit_length()
    return str(ipaddress.IPv4Network((lo >> (32 - plen) << (32 - plen), plen)))


@check(
    "KP601", "service-cidr-leaves-node", "Traffic to ClusterIPs that kube-proxy does not translate leaves the node", "info",
    needs=("routes", "iptables"),
    symptom="ping to a ClusterIP answers 'Time to live exceeded' (or nothing); a ClusterIP on a port the Service does not define hangs instead of being refused.",
    why="""
        A ClusterIP is virtual: no interface has it. In iptables (and nftables) mode kube-proxy only translates
        TCP/UDP/SCTP packets to the Service's own ports; everything else — ping, traceroute, other ports — is routed
        like a packet to any unknown address: to the node's default gateway. If that gateway routes the service
        CIDR back to the nodes (a static route, a BGP advertisement), the packet bounces between node and gateway
        until its TTL runs out, and the client sees "Time to live exceeded" from the gateway.
    """,
    fix="Give the service CIDR a blackhole/unreachable route on the gateway (or on the nodes) so unmatched traffic is refused at once; test Services with their TCP/UDP port, never with ping.",
)
def service_cidr_leaves(ctx, new):
    mode, _ = ctx.proxy_mode
    if mode in ("ipvs", "nftables"):
        return  # ipvs: ClusterIPs are bound on kube-ipvs0; nftables: cluster-ips-check rejects/drops on the node
    ports = ctx.programmed() or {}
    ips = sorted({p.cluster_ip for p in ports.values() if p.cluster_ip and ":" not in p.cluster_ip})
    if not ips:
        raise Skip("no ClusterIPs found in kube-proxy's rules")
    routing = ctx.routing
    leaving = {}
    for ip in ips:
        route = routing.lookup(*parse_ip(ip))
        if route is None:
            raise Skip("no routes known for this node")
        if route.type == "unicast" and route.dev != "lo":
            leaving.setdefault((route.dst, route.gateway, route.dev), []).append(ip)
    if not leaving:
        return
    (dst, gw, dev), some = max(leaving.items(), key=lambda kv: len(kv[1]))
    cidr = covering_prefix(ips)
    via = f"via {gw} " if gw else ""
    yield new(
        f"{len(some)} of {len(ips)} ClusterIPs (in {cidr}) are routed {via}on {dev} (route {dst}): anything kube-proxy does not "
        f"DNAT — ping, other ports — leaves the node{' to ' + gw if gw else ''}",
        fix=(
            f"on the gateway {gw or '(the next hop)'}: ip route add blackhole {cidr}   (or 'unreachable' to answer with ICMP errors) — "
            "or stop advertising/routing the service CIDR to the nodes",
            f"or on every node: ip route add unreachable {cidr}   # refused at once instead of looping",
            f"test a Service with its port, e.g. kpdiag svc <name> -n <ns>, nc -vz {some[0]} <port> — never with ping",
        ),
        evidence=[Evidence(ctx.bundle.display("node/ip-route.json"), f"{dst} {('via ' + gw + ' ') if gw else ''}dev {dev}"),
                  Evidence(ctx.iptables().source, f"ClusterIPs programmed: {', '.join(ips[:5])}{' …' if len(ips) > 5 else ''}")],
        subject=cidr,
    )
