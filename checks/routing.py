"""Routes: where packets to ClusterIPs go when kube-proxy does not translate them, the pod CIDR against the Service
CIDR, and whether this node can route to each endpoint."""

from __future__ import annotations

import ipaddress
import re
import shlex
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note, persist_sysctls
from kpdiag.model import Evidence
from kpdiag.parse.addr import parse_ip
from kpdiag.state.typed_api import EndpointSlices, Focus, Pods, Services
from kpdiag.state.typed_node import Addresses, Routes
from kpdiag.state.typed_proxy import Ipsets, Ipvs, KubeProxyConfig, KubeProxyRules, Nft, ProxyMode

from .service import in_focus


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


def _leaving(routing, ips: list[str]) -> dict:
    """The ClusterIPs a unicast route takes off the node, by that route (dst, gateway, dev)."""
    leaving = {}
    for ip in ips:
        route = routing.lookup(*parse_ip(ip))
        if route is not None and route.type == "unicast" and route.dev != "lo":
            leaving.setdefault((route.dst, route.gateway, route.dev), []).append(ip)
    return leaving


def _leaves_finding(new, family: int, ips: list[str], leaving: dict, apiserver_cidrs, routes: Routes, rs):
    """The finding for the route most of the ClusterIPs leave by: which range to refuse, and where."""
    (dst, gw, dev), some = max(leaving.items(), key=lambda kv: len(kv[1]))
    known = [n for n in apiserver_cidrs if n.version == family and ipaddress.ip_address(some[0]) in n]
    # the range to refuse: kube-apiserver's own, else only what the ClusterIPs seen here span (it may be wider)
    cidr = str(known[0]) if known else covering_prefix(ips)
    target = cidr if known else "<service CIDR>"
    via = f"via {gw} " if gw else ""
    ip_route = "ip -6 route" if family == 6 else "ip route"
    return new(
        f"{len(some)} of {len(ips)} ClusterIPs (in {cidr}) are routed {via}on {dev} (route {dst}): anything kube-proxy does not "
        f"DNAT — ping, other ports — leaves the node{' to ' + gw if gw else ''}",
        fix=(
            *(
                ()
                if known
                else (
                    "kubectl cluster-info dump | grep -m1 -o -- '--service-cluster-ip-range=[^\"]*'   # the "
                    f"service CIDR: the ClusterIPs seen here only show it holds {cidr}",
                )
            ),
            f"on the gateway {gw or '(the next hop)'}: {ip_route} add blackhole {target}   (or 'unreachable' to answer with ICMP errors) — "
            "or stop advertising/routing the service CIDR to the nodes",
            f"or on every node: {ip_route} add unreachable {target}   # refused at once instead of looping",
            note(
                f"test a Service with its port, e.g. kpdiag svc <name> -n <ns>, nc -vz {some[0]} <port> — never with ping"
            ),
        ),
        evidence=[
            Evidence(routes.source, f"{dst} {('via ' + gw + ' ') if gw else ''}dev {dev}"),
            Evidence(rs.source, f"ClusterIPs programmed: {', '.join(ips[:5])}{' …' if len(ips) > 5 else ''}"),
        ],
        subject=cidr,
        data={
            "family": family,
            "service_cidr" if known else "service_cidr_guess": cidr,
            "cluster_ips": len(ips),
            "leaving": len(some),
            "route": {"dst": dst, "gateway": gw, "dev": dev},
            "examples": some[:5],
        },
    )


@check(
    "KP601",
    "service-cidr-leaves-node",
    "Traffic to ClusterIPs that kube-proxy does not translate leaves the node",
    "info",
    needs=("whole-rules",),  # read nothing of: a partial bundle holds one Service's ClusterIPs, not the range's
    advice_for="kube-proxy",
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
def service_cidr_leaves(
    new, routes: Routes, rules: KubeProxyRules, proxy: Optional[ProxyMode] = None, pods: Optional[Pods] = None
):
    if proxy.dataplane.cluster_ips_stay_on_node:
        return  # ipvs: ClusterIPs are bound on kube-ipvs0; nftables: cluster-ips-check rejects/drops on the node
    routing = routes.routing
    from kpdiag.state.cluster import apiserver_service_cidrs

    apiserver_cidrs = apiserver_service_cidrs(pods.items if pods is not None else None)
    found = False
    for family, which in ((4, "iptables-save"), (6, "ip6tables-save")):  # a dual-stack node: each family's rules
        rs = rules.dump(which)  # a file the bundle lacks is None, not a problem
        if rs is None:
            continue
        ports = rules.programmed_in(which) or {}
        ips = sorted({p.cluster_ip for p in ports.values() if p.cluster_ip and (":" in p.cluster_ip) == (family == 6)})
        if not ips:
            continue
        found = True
        if not routing.knows(family):
            continue  # this family's routes were not recorded: nothing to say about them
        leaving = _leaving(routing, ips)
        if not leaving:
            continue
        yield _leaves_finding(new, family, ips, leaving, apiserver_cidrs, routes, rs)
    if not found:
        raise Skip("no ClusterIPs found in kube-proxy's rules")
    if not routing.has_routes:
        raise Skip("no routes known for this node")


def _service_cidrs(nft: Nft | None) -> tuple[list, str | None, list]:
    """(service CIDRs, how they are known, evidence) — kube-proxy's nftables rule "Drop traffic to unallocated
    ClusterIPs" names them exactly (kpdiag.dataplane.kube_nft.service_cidrs). Else none (the ClusterIPs themselves are
    compared one by one)."""
    rs = nft.ruleset() if nft is not None and nft.kube_proxy_family else None
    if rs is None:
        return [], None, []
    from kpdiag.dataplane.kube_nft import service_cidrs

    cidrs, evidence = [], []
    for family, found in service_cidrs(rs):
        cidrs += found
        text = ", ".join(map(str, found))
        evidence.append(
            Evidence(
                rs.source,
                f"table {family} kube-proxy chain cluster-ips-check: {family} daddr "
                f"{text if len(found) == 1 else '{ ' + text + ' }'} drop",
            )
        )
    how = "kube-proxy's nftables rule 'Drop traffic to unallocated ClusterIPs'" if cidrs else None
    return cidrs, how, evidence


def _ipvs_cluster_ips(ipsets: Ipsets, addresses: Addresses | None, ipvs: Ipvs | None) -> dict[str, str]:
    """The ClusterIPs of an IPVS node from kube-proxy's own records: its KUBE-CLUSTER-IP ipset (ClusterIP,proto:port),
    else the addresses bound on kube-ipvs0 that are virtual servers. Not every virtual server: kube-proxy also makes
    one per NodePort on every node address (cni0, flannel.1, docker0 … whose addresses lie in the pod CIDR)."""
    out: dict[str, str] = {}
    sets = ipsets.sets
    if sets and "KUBE-CLUSTER-IP" in sets:
        for raw in sets["KUBE-CLUSTER-IP"].raw_entries:
            out.setdefault(raw.split(",", 1)[0], f"{ipsets.source}: KUBE-CLUSTER-IP")
        return out
    bound = {
        a.get("local")
        for link in (addresses.links if addresses is not None else None) or []
        if link.get("ifname") == "kube-ipvs0"
        for a in link.get("addr_info") or []
    }
    for key in (ipvs.services if ipvs is not None else None) or {}:
        if str(key[1]) in bound:
            out.setdefault(str(key[1]), f"{ipvs.source}: virtual server on kube-ipvs0")
    return out


def _cluster_ips(
    services: Services | None,
    proxy: ProxyMode,
    nft: Nft | None,
    rules: KubeProxyRules | None,
    ipsets: Ipsets,
    addresses: Addresses | None,
    ipvs: Ipvs | None,
) -> dict[str, str]:
    """ClusterIP → where it was seen (the API, else kube-proxy's rules)."""
    out: dict[str, str] = {}
    svcs = services.every if services is not None else None
    for svc in svcs or []:
        for ip in svc.cluster_ips:
            out.setdefault(ip, f"{services.source}: {svc.key}")
    dp = proxy.dataplane
    ruleset = nft.ruleset() if dp.services_in_nft and nft is not None else None  # parsed only when it is read
    if ruleset is not None:
        from kpdiag.dataplane.kube_nft import cluster_ips

        for ip in cluster_ips(ruleset):
            out.setdefault(ip, f"{ruleset.source}: set cluster-ips")
    elif dp.services_in_ipvs:
        if not out:  # no API: the ClusterIPs as kube-proxy recorded them (never every virtual server: see below)
            out.update(_ipvs_cluster_ips(ipsets, addresses, ipvs))
    elif rules is not None:
        for p in rules.programmed.values():
            if p.cluster_ip:
                out.setdefault(p.cluster_ip, f"{rules.ruleset.source}: {p.name} cluster IP")
    return out


@check(
    "KP603",
    "pod-service-cidr-overlap",
    "The pod CIDR overlaps the Service CIDR",
    "error",
    needs=("whole-rules", "whole-services"),  # gates: it judges every rule and every Service
    symptom="Some Services are unreachable from pods while others work; traffic to a ClusterIP reaches a pod with the same "
    "address, or is not masqueraded, depending on the node.",
    why="""
        kube-proxy's clusterCIDR says which sources are pods (traffic from elsewhere is masqueraded) and the CNI
        routes the pod CIDR to pods; ClusterIPs are virtual addresses from the Service CIDR. When the two ranges
        overlap, a ClusterIP can also be a pod's address: kube-proxy's "! -s clusterCIDR" masquerade decisions are
        wrong for it, routes for pod subnets capture Service addresses, and a pod that gets that IP shadows the
        Service. The ranges are fixed when the cluster is created (kube-apiserver --service-cluster-ip-range,
        kube-controller-manager --cluster-cidr, the CNI's pool) and must not overlap.
    """,
    fix="Make kube-proxy's clusterCIDR the real pod CIDR (the CNI's pool, kube-controller-manager --cluster-cidr); if the "
    "cluster itself was built with overlapping ranges, the Service or pod range has to be migrated.",
)
def pod_service_overlap(
    new,
    config: KubeProxyConfig,
    addresses: Optional[Addresses] = None,
    rules: Optional[KubeProxyRules] = None,
    ipsets: Optional[Ipsets] = None,
    ipvs: Optional[Ipvs] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
):
    raw = str(config.get("clusterCIDR") or "").strip()
    ev_config, what = config.evidence("clusterCIDR"), "kube-proxy's clusterCIDR"
    edit = "kubectl -n kube-system edit configmap kube-proxy   # clusterCIDR: the CNI's pod pool{}, then restart kube-proxy"
    if not raw:  # not configured (a flag): kube-proxy's rules masquerade around it
        from .clustercidr import rules_cluster_cidr

        cidrs, ev_config = rules_cluster_cidr(rules, nft) or ((), ev_config)
        raw = ",".join(cidrs)
        if raw and config.detect_local_mode == "NodeCIDR":  # then the rules hold this node's own podCIDR
            what = "this node's podCIDR (kube-proxy's NodeCIDR rules)"
            edit = "# the pod range (kube-controller-manager --cluster-cidr, the CNI's pool) must be moved off the Service range"
    if not raw:
        raise Skip(
            "kube-proxy knows no clusterCIDR (neither its configuration nor its rules): nothing to compare (KP706)"
        )
    pods = []
    for part in raw.split(","):
        try:
            pods.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            raise Skip(f"clusterCIDR {part.strip()!r} is not a CIDR") from None
    svc_cidrs, how, cidr_ev = _service_cidrs(nft)
    for net in svc_cidrs:
        hit = [p for p in pods if p.version == net.version and p.overlaps(net)]
        if hit:
            yield new(
                f"{what} {hit[0]} overlaps the Service CIDR {net} ({how})",
                fix=(
                    "kubectl cluster-info dump | grep -m1 -E -- '--service-cluster-ip-range|--cluster-cidr'   # the ranges the cluster was built with",
                    edit.format(""),
                ),
                evidence=[e for e in (ev_config, *cidr_ev) if e],
                subject="node",
                data={"cluster_cidr": [str(p) for p in pods], "service_cidr": str(net), "overlap": str(hit[0])},
            )
            return
    inside = {
        ip: where
        for ip, where in _cluster_ips(services, proxy, nft, rules, ipsets, addresses, ipvs).items()
        if any(ipaddress.ip_address(ip) in p for p in pods if p.version == ipaddress.ip_address(ip).version)
    }
    if not inside:
        return
    first = sorted(inside)[:3]
    yield new(
        f"{len(inside)} ClusterIP(s) lie inside {what} {raw} (e.g. {', '.join(first)}): the pod CIDR overlaps "
        "the Service CIDR",
        fix=(
            "kubectl cluster-info dump | grep -m1 -E -- '--service-cluster-ip-range|--cluster-cidr'   # the ranges the cluster was built with",
            edit.format(" (not containing the Service range)"),
        ),
        evidence=[e for e in [ev_config] if e]
        + [Evidence(inside[ip].split(": ", 1)[0], f"{ip} ({inside[ip].split(': ', 1)[-1]})") for ip in first],
        subject="node",
        data={"cluster_cidr": [str(p) for p in pods], "cluster_ips_inside": sorted(inside)},
    )


@check(
    "KP602",
    "no-route-to-endpoint",
    "The node has no route to an endpoint",
    "error",
    explains=("KP112",),
    symptom="A share of connections to the Service time out — those DNATed to endpoints on some other node.",
    why="""
        After DNAT the node must route the packet to the endpoint's pod IP: directly (a local pod), through the
        overlay/tunnel device, or via a route the CNI installed. When the route for a pod CIDR is missing, blackholed
        or unreachable, every connection kube-proxy sends to endpoints there fails. The CNI agent on this node is the
        usual suspect.
    """,
    fix="Check the CNI on this node (its agent pod, its log) and the routes for the other nodes' pod CIDRs (ip route).",
)
def no_route(
    new,
    services: Services,
    slices: EndpointSlices,
    routes: Routes,
    focus: Optional[Focus] = None,
):
    routing = routes.routing
    if not routing.has_routes:
        raise Skip("no routes known for this node")
    for svc in in_focus(services, focus):
        bad = []
        for e in svc.endpoints:
            if not e.ready:
                continue
            try:
                route = routing.lookup(*parse_ip(e.ip))
            except ValueError:
                continue
            if route is not None and route.type in ("unreachable", "blackhole", "prohibit"):
                bad.append((e, route))
        if not bad:
            continue
        yield new(
            f"{svc.key}: no usable route from this node to endpoint{'s' if len(bad) > 1 else ''} {', '.join(e.ip for e, _ in bad)}"
            f" ({', '.join(sorted({r.type + ' ' + (r.dst or '') for _, r in bad}))})",
            fix=(
                f"ip route get {bad[0][0].ip}",
                "kubectl -n kube-system get pods -o wide | grep -iE 'flannel|calico|cilium|weave|kindnet'   # the CNI agent on this node",
            ),
            evidence=[Evidence(routes.source, f"{e.ip}: {r.type} {r.dst or ''}".strip()) for e, r in bad[:3]],
            subject=svc.key,
        )


def _endpoints(
    services: Services | None, rules: KubeProxyRules | None, proxy: ProxyMode | None, nft: Nft | None, ipvs: Ipvs | None
) -> list | None:
    """(endpoint IP, the Service it backs, evidence) for every endpoint: the API's ready ones, else what kube-proxy
    programmed in the mode it runs (nftables DNAT targets, IPVS real servers, iptables DNAT targets); None: none of
    them known."""
    out: list[tuple[str, str, Evidence]] = []
    if services is not None:
        for svc in services.every:
            for ip in sorted({e.ip for e in svc.endpoints if e.ready and e.ip}):
                out.append((ip, svc.key, services.evidence(svc, f"endpoint {ip} (ready)")))
        return out
    dp = proxy.dataplane if proxy is not None else None
    ruleset = nft.ruleset() if dp is not None and dp.services_in_nft and nft is not None else None
    if ruleset is not None:
        from kpdiag.dataplane.kube_nft import programmed_nft

        for sp in (programmed_nft(ruleset) or {}).values():
            name = sp.comment or sp.chain or "a Service"
            for target in sp.endpoints:
                out.append(
                    (target.rpartition(":")[0].strip("[]"), name, Evidence(nft.source, f"{name}: dnat to {target}"))
                )
        return out
    if dp is not None and dp.services_in_ipvs:
        if ipvs is None:
            return None
        for vs in ipvs.services.values():
            for r in vs.reals:
                if r.weight > 0:
                    out.append((r.addr, vs.name, Evidence(ipvs.source, f"-a {vs.name} -r {r.target}", r.line or None)))
        return out
    if rules is None:
        return None
    for port in rules.programmed.values():
        for target in port.endpoints:
            ip = target.rpartition(":")[0].strip("[]")
            out.append((ip, port.name, Evidence(rules.ruleset.source, f"{port.name} DNAT to {target}")))
    return out


def _sysctl_key(family: int, dev: str) -> str:
    return f"net.ipv{family}.conf.{dev.replace('.', '/')}.ignore_routes_with_linkdown"


@check(
    "KP614",
    "route-into-down-link",
    "Endpoints are routed into an interface without carrier",
    "error",
    explains=("KP112",),
    symptom="Connections to some endpoints fail with 'No route to host' after about 3 s (the client of a Service, the "
    "node itself), while the same addresses answer from other machines; often an external database or API behind a "
    "selectorless Service, in 172.17.0.0/16.",
    why="""
        A route to a device that is up but has no carrier (ip addr: NO-CARRIER, state DOWN; ip route: linkdown) stays
        in the table, and the kernel keeps choosing it: net.ipv4.conf.{all,DEV}.ignore_routes_with_linkdown is 0 by
        default. Docker's docker0 is the common case: its 172.17.0.0/16 route remains when its last container has
        gone, and it is more specific than the route to the real network of that range (a company network, a VPC, a
        peered database). Packets to an endpoint there go into docker0 and nowhere: the next hop is never resolved
        and after about 3 s the kernel answers ICMP host unreachable (the node's own connections: EHOSTUNREACH).
        A veth whose peer is down (a CNI or VPN interface left behind) does the same.
    """,
    fix="Stop the kernel choosing the dead route (ignore_routes_with_linkdown = 1 for that interface), and move the "
    'interface off the real network (Docker: its "bip" and default-address-pools) or remove it.',
)
def route_into_down_link(
    new,
    routes: Routes,
    services: Optional[Services] = None,
    rules: Optional[KubeProxyRules] = None,
    proxy: Optional[ProxyMode] = None,
    addresses: Optional[Addresses] = None,
    nft: Optional[Nft] = None,
    ipvs: Optional[Ipvs] = None,
):
    routing = routes.routing
    if not routing.has_routes:
        raise Skip("no routes known for this node")
    endpoints = _endpoints(services, rules, proxy, nft, ipvs)
    if endpoints is None:
        raise Skip("no endpoints known: neither the API's EndpointSlices nor kube-proxy's rules were read")
    captured: dict[tuple, dict[str, Evidence]] = {}
    for ip, svc, ev in endpoints:
        try:
            addr, family = parse_ip(ip)
        except ValueError:
            continue
        route = routing.lookup(addr, family)
        if route is not None and route.linkdown:
            captured.setdefault((svc, route.dst, route.dev, route.linkdown, family), {}).setdefault(ip, ev)
    for (svc, dst, dev, link, family), ips in sorted(captured.items()):
        yield _down_link_finding(new, routes, addresses, svc, (dst, dev, link, family), ips)


def _down_link_finding(new, routes, addresses, svc, down, ips: dict):
    dst, dev, link, family = down
    first = sorted(ips)[0]
    behind = routes.routing.without_linkdown(parse_ip(first)[0], family)
    instead = f"{behind.dst}{' via ' + behind.gateway if behind.gateway else ''} dev {behind.dev}" if behind else None
    key = _sysctl_key(family, dev)
    listed = sorted(ips)
    ip_cmd = "ip -6" if family == 6 else "ip"
    return new(
        f"{svc}: endpoint{'s' if len(ips) > 1 else ''} {', '.join(listed[:5])}{' …' if len(ips) > 5 else ''} "
        f"{'are' if len(ips) > 1 else 'is'} routed into {dev}, which has no carrier (route {dst} dev {dev} linkdown): "
        "connections there fail with 'No route to host'"
        + (f" — without that route they would leave by {instead}" if instead else ""),
        fix=(
            command(
                f"sudo sysctl -w {shlex.quote(key + '=1')}   # the kernel passes over {dev}'s routes while it has no carrier"
            ),
            command(persist_sysctls({key: 1}, "ignore-linkdown-" + re.sub(r"[^A-Za-z0-9_.-]", "_", dev))),
            note(
                'move Docker\'s bridge off that network: "bip" (and "default-address-pools") in /etc/docker/daemon.json, '
                "then restart Docker — or remove Docker where the node does not need it"
                if dev == "docker0"
                else f"remove {dev} or give it an address range no real network uses (whatever created it: a CNI, a VPN, Docker)"
            ),
            command(f"{ip_cmd} route get {shlex.quote(first)}   # now {instead or 'another route'}"),
        ),
        evidence=[
            Evidence(routes.source, f"{dst} dev {dev} linkdown"),
            *([Evidence(addresses.source, link)] if addresses is not None else []),
            *(ips[ip] for ip in listed[:3]),
            *([Evidence(routes.source, f"shadowed: {instead}")] if instead else []),
        ],
        subject=svc,
        data={
            "service": svc,
            "route": {"dst": dst, "dev": dev},
            "link": link,
            "endpoints": listed,
            "shadowed": {"dst": behind.dst, "dev": behind.dev, "gateway": behind.gateway} if behind else None,
            "sysctl": key,
        },
    )
