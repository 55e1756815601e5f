"""Where packets to ClusterIPs go when kube-proxy does not translate them."""

from __future__ import annotations

import ipaddress

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.parse.addr import parse_ip


def covering_prefix(ips: list[str]) -> str:
    """The smallest prefix containing every address, all of one IP version (a guess at the service CIDR)."""
    addrs = [ipaddress.ip_address(ip) for ip in ips]
    bits = addrs[0].max_prefixlen
    if len(set(addrs)) == 1:  # one address says nothing about the range: kubeadm's defaults, /12 and /112
        return str(ipaddress.ip_network(f"{addrs[0]}/{12 if bits == 32 else 112}", strict=False))
    nums = [int(a) for a in addrs]
    lo, hi = min(nums), max(nums)
    plen = bits - (lo ^ hi).bit_length()
    return str(ipaddress.ip_network((lo >> (bits - plen) << (bits - plen), plen)))


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
    routing = ctx.routing
    found = False
    for family, which in ((4, "iptables-save"), (6, "ip6tables-save")):  # a dual-stack node: each family's rules
        rs = ctx.iptables(which)  # a file the bundle lacks is None, not a problem
        if rs is None:
            continue
        ports = ctx.programmed(which) or {}
        ips = sorted({p.cluster_ip for p in ports.values() if p.cluster_ip and (":" in p.cluster_ip) == (family == 6)})
        if not ips:
            continue
        found = True
        if not routing.knows(family):
            continue  # this family's routes were not recorded: nothing to say about them
        leaving = {}
        for ip in ips:
            route = routing.lookup(*parse_ip(ip))
            if route is not None and route.type == "unicast" and route.dev != "lo":
                leaving.setdefault((route.dst, route.gateway, route.dev), []).append(ip)
        if not leaving:
            continue
        (dst, gw, dev), some = max(leaving.items(), key=lambda kv: len(kv[1]))
        cidr = covering_prefix(ips)
        via = f"via {gw} " if gw else ""
        ip_route = "ip -6 route" if family == 6 else "ip route"
        yield new(
            f"{len(some)} of {len(ips)} ClusterIPs (in {cidr}) are routed {via}on {dev} (route {dst}): anything kube-proxy does not "
            f"DNAT — ping, other ports — leaves the node{' to ' + gw if gw else ''}",
            fix=(
                f"on the gateway {gw or '(the next hop)'}: {ip_route} add blackhole {cidr}   (or 'unreachable' to answer with ICMP errors) — "
                "or stop advertising/routing the service CIDR to the nodes",
                f"or on every node: {ip_route} add unreachable {cidr}   # refused at once instead of looping",
                f"test a Service with its port, e.g. kpdiag svc <name> -n <ns>, nc -vz {some[0]} <port> — never with ping",
            ),
            evidence=[Evidence(ctx.bundle.display("node/ip-route.json"), f"{dst} {('via ' + gw + ' ') if gw else ''}dev {dev}"),
                      Evidence(rs.source, f"ClusterIPs programmed: {', '.join(ips[:5])}{' …' if len(ips) > 5 else ''}")],
            subject=cidr,
        )
    if not found:
        raise Skip("no ClusterIPs found in kube-proxy's rules")
    if not routing.has_routes:
        raise Skip("no routes known for this node")
