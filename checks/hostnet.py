"""The node's own network settings that break Service traffic without any rule being wrong: reverse-path filtering,
IPv6 forwarding on a dual-stack node, and MTUs that do not leave room for the overlay's encapsulation."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable, Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import persist_sysctls
from kpdiag.model import Evidence
from kpdiag.state.typed_api import Services
from kpdiag.state.typed_node import Addresses, PartialServices, Routes, Sysctls
from kpdiag.state.typed_proxy import Ip6Programmed, Ipvs, Nft

PERSIST = "/etc/sysctl.d/99-kubernetes.conf"


def _links(addresses: Addresses) -> list[dict]:
    return [link for link in addresses.links if isinstance(link.get("ifname"), str)]


def _default_dev(routes: Iterable[dict] | None, version: int = 4) -> str | None:
    """The interface of the main table's default route of IP version ``version`` (the node's uplink), among ``routes``
    (ip -j route objects)."""
    for r in routes or []:
        if r.get("dst") != "default" or r.get("table") not in (None, "main") or not r.get("dev"):
            continue
        gw = r.get("gateway") or ""
        if version == 6 and ":" not in gw and r.get("gateway") is not None:
            continue
        if version == 4 and ":" in gw:
            continue
        if r.get("type") in ("blackhole", "unreachable", "prohibit"):
            continue
        return r["dev"]
    return None


def _global_v4(link: dict) -> list[str]:
    return [
        f"{a.get('local')}/{a.get('prefixlen')}"
        for a in link.get("addr_info") or []
        if a.get("family") == "inet" and a.get("scope", "global") == "global" and a.get("local")
    ]


def _sysctl_if(sysctls: Sysctls, family: str, ifname: str, key: str):
    """net.ipv4.conf.IFACE.KEY — sysctl -a writes a dot in an interface name as '/' (flannel.1 → flannel/1)."""
    for name in (ifname, ifname.replace(".", "/")):
        v = sysctls.value(f"net.{family}.conf.{name}.{key}")
        if v is not None:
            return v
    return None


# ------------------------------------------------------------------------------------------ rp_filter


def _as_int(v) -> int | None:
    try:
        return int(v.value.strip())
    except (AttributeError, ValueError):
        return None


@check(
    "KP506",
    "rp-filter-strict",
    "Strict reverse-path filtering drops Service traffic on a second interface",
    "warning",
    symptom="NodePorts and LoadBalancer traffic work on one of the node's addresses and time out on another; "
    "nothing is logged, no rule counter moves.",
    why="""
        With rp_filter = 1 (strict) the kernel drops a packet when the route back to its source does not leave
        through the interface the packet came in on. The effective value for an interface is the larger of
        net.ipv4.conf.all.rp_filter and net.ipv4.conf.IFACE.rp_filter. On a node whose default route leaves through
        one interface, every client that is not on a second interface's own subnets fails the check when its packets
        arrive on that second interface: NodePort, LoadBalancer and externalIPs traffic sent to that interface's
        address is dropped before kube-proxy's rules see it (multi-NIC nodes, a second VLAN, a storage or
        load-balancer network).
    """,
    fix="Use loose mode (2) on the node: sysctl -w net.ipv4.conf.all.rp_filter=2 and net.ipv4.conf.IFACE.rp_filter=2 "
    "(persist in /etc/sysctl.d), or route replies back out the interface they came in on (policy routing).",
)
def rp_filter_strict(new, sysctls: Sysctls, addresses: Addresses, routes: Routes):
    uplink = _default_dev(routes.routes, 4)
    if uplink is None:
        return  # no default route: every source is routed by specific prefixes; nothing general to say
    all_v = sysctls.value("net.ipv4.conf.all.rp_filter")
    all_n = _as_int(all_v)
    links = _links(addresses)
    bridges = {link.get("master") for link in links if link.get("master")}
    for link in links:
        name = link["ifname"]
        addrs = _global_v4(link)
        if name in ("lo", uplink, "kube-ipvs0") or not addrs or link.get("operstate") == "DOWN":
            continue
        if name in bridges or _kind(link) in TUNNEL_OVERHEAD or name.startswith(("cali", "lxc", "cilium_", "veth")):
            continue  # pod-facing: what arrives there comes from the pods behind it, which are routed back the same way
        if_v = _sysctl_if(sysctls, "ipv4", name, "rp_filter")
        if_n = _as_int(if_v)
        if if_n is None or all_n is None:
            continue  # one of the two is unknown: the effective value (their max) cannot be told
        if max(all_n, if_n) != 1:
            continue
        nets = ", ".join(str(ipaddress.ip_interface(a).network) for a in addrs)
        yield new(
            f"rp_filter is strict on {name} (effective max(all={all_n}, {name}={if_n}) = 1) and the default route leaves via "
            f"{uplink}: NodePort and LoadBalancer traffic to {', '.join(a.split('/')[0] for a in addrs)} from anywhere but "
            f"{nets} is dropped on arrival",
            fix=(
                f"sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{name}.rp_filter=2   # loose: the source must be routable at all",
                persist_sysctls({"net.ipv4.conf.all.rp_filter": 2, f"net.ipv4.conf.{name}.rp_filter": 2}, "rp-filter"),
                f"ip route get {addrs[0].split('/')[0]} from <client IP> iif {name}   # fails ('invalid argument') when the check rejects that client",
                f"or answer out of {name}: ip rule add from <{name} address> table 100; ip route add default via <gateway on {name}> dev {name} table 100",
            ),
            evidence=[
                e
                for e in (
                    sysctls.evidence("net.ipv4.conf.all.rp_filter"),
                    Evidence(if_v.source, if_v.text, if_v.line) if if_v is not None else None,
                )
                if e
            ]
            + [
                Evidence(addresses.source, f"{name}: {', '.join(addrs)}"),
                Evidence(routes.source, f"default dev {uplink}"),
            ],
            subject=name,
            data={
                "interface": name,
                "addresses": addrs,
                "default_route_dev": uplink,
                "effective_rp_filter": max(all_n, if_n),
                **sysctls.data({"net.ipv4.conf.all.rp_filter": 2, f"net.ipv4.conf.{name}.rp_filter": 2}),
            },
        )


# ------------------------------------------------------------------------------------------ IPv6 forwarding


def _ipv6_services(
    rules6: Ip6Programmed | None, ipvs: Ipvs | None, nft: Nft | None, services: Services | None
) -> list[str]:
    """Why this node carries IPv6 Service traffic: kube-proxy's IPv6 rules, IPv6 virtual servers, IPv6 ClusterIPs."""
    why = []
    progs6 = rules6.ports if rules6 is not None else None
    if progs6:
        why.append(f"{rules6.source}: {len(progs6)} IPv6 service ports in KUBE-SERVICES")
    if nft is not None and nft.text and '"family": "ip6", "name": "kube-proxy"' in nft.text:
        why.append(f"{nft.source}: table ip6 kube-proxy")
    if ipvs is not None and ipvs.services:
        v6 = [k for k in ipvs.services if ":" in str(k[1])]
        if v6:
            why.append(f"{ipvs.source}: {len(v6)} IPv6 virtual servers")
    svcs = services.every if services is not None else None
    if svcs:
        v6 = [s.key for s in svcs if any(":" in ip for ip in s.cluster_ips)]
        if v6:
            why.append(f"{services.source}: {len(v6)} Services with IPv6 ClusterIPs (e.g. {v6[0]})")
    return why


@check(
    "KP507",
    "ipv6-forward-off",
    "IPv6 forwarding is off on a dual-stack node",
    "error",
    symptom="Services answer over IPv4 and time out over IPv6 (AAAA records, IPv6 ClusterIPs, IPv6 NodePorts) from or to pods on other nodes.",
    why="""
        IPv4 and IPv6 forwarding are separate switches. On a dual-stack node kube-proxy programs IPv6 Services too
        (ip6tables, table ip6 kube-proxy, IPv6 virtual servers), and an IPv6 Service packet DNATed to a pod must be
        forwarded like its IPv4 twin. With net.ipv6.conf.all.forwarding = 0 the kernel drops it silently. KP501
        looks at IPv4 only; images and hardening scripts often turn on one family and not the other.
    """,
    fix=f"sysctl -w net.ipv6.conf.all.forwarding=1, persisted in {PERSIST}.",
)
def ipv6_forward_off(
    new,
    sysctls: Sysctls,
    rules6: Optional[Ip6Programmed] = None,
    ipvs: Optional[Ipvs] = None,
    nft: Optional[Nft] = None,
    services: Optional[Services] = None,
    partial: Optional[PartialServices] = None,
):
    why = _ipv6_services(rules6, ipvs, nft, services)
    if not why and partial.partial:
        raise Skip(
            "a partial bundle: only one Service's rules and API objects were read (kpdiag node --service; manifest: "
            "partial) and none is IPv6: whether this node carries IPv6 Services is not known"
        )
    if not why:
        return  # no IPv6 Service on this node: IPv6 forwarding is not kube-proxy's business
    v = sysctls.value("net.ipv6.conf.all.forwarding")
    if v is None:
        raise Skip("this node has IPv6 Services, but net.ipv6.conf.all.forwarding is not in the collected sysctls")
    if v.value.strip() != "0":
        return
    yield new(
        "net.ipv6.conf.all.forwarding = 0 on a node with IPv6 Services: IPv6 Service traffic to pods is not forwarded",
        fix=(
            "sysctl -w net.ipv6.conf.all.forwarding=1",
            persist_sysctls({"net.ipv6.conf.all.forwarding": 1}, "ipv6-forwarding") + "   # keep it across reboots",
            "grep -r 'ipv6.*forwarding' /etc/sysctl.conf /etc/sysctl.d/ /usr/lib/sysctl.d/   # find what turned it off",
        ),
        evidence=[sysctls.evidence("net.ipv6.conf.all.forwarding")]
        + [Evidence(w.split(": ", 1)[0], w.split(": ", 1)[1]) for w in why],
        subject="node",
        data=sysctls.data({"net.ipv6.conf.all.forwarding": 1}),
    )


# ------------------------------------------------------------------------------------------ MTU

TUNNEL_OVERHEAD = {"vxlan": 50, "geneve": 50, "ipip": 20, "wireguard": 60, "gre": 24, "gretap": 38}
TUNNEL_NAMES = {
    "flannel.1": "vxlan",
    "vxlan.calico": "vxlan",
    "vxlan-v6.calico": "vxlan",
    "cilium_vxlan": "vxlan",
    "cilium_geneve": "geneve",
    "genev_sys_6081": "geneve",
    "vxlan_sys_4789": "vxlan",
    "tunl0": "ipip",
    "flannel-wg": "wireguard",
    "flannel-wg-v6": "wireguard",
    "cilium_wg0": "wireguard",
    "wireguard.cali": "wireguard",
    "weave": None,
}
NOT_POD_BRIDGES = ("docker", "br-", "virbr", "lxcbr", "cni-podman")  # Docker, its networks, libvirt, LXC, podman
POD_PREFIXES = ("veth", "cali", "lxc", "vxlan_sys", "azv", "eni", "gke")


def _kind(link: dict) -> str | None:
    kind = (link.get("linkinfo") or {}).get("info_kind")
    if kind:
        return kind
    name = link.get("ifname", "")
    if name in TUNNEL_NAMES:
        return TUNNEL_NAMES[name]
    if name.startswith("wg"):
        return "wireguard"
    return None


def _routes_via(routes: Routes, dev: str) -> list[str]:
    return [
        r.get("dst")
        for r in routes.routes
        if r.get("dev") == dev
        and r.get("dst") not in (None, "default")
        and r.get("table") in (None, "main")
        and not str(r.get("dst")).startswith("fe80")
    ]


@dataclass(frozen=True)
class MtuExcess:
    """The pods' side against the path under it: ``limit`` (the largest packet that fits: the uplink's MTU, or a
    carrying tunnel's MTU / uplink − overhead), ``why`` (that limit in words), ``too_big`` (pod-facing interfaces —
    node ends of pod veths, the bridges with ports, cali*/lxc* — whose MTU exceeds it), ``carrying`` (the tunnels
    with pod routes: (link, kind, overhead)), ``uplink`` (its name and MTU)."""

    limit: int
    why: str
    too_big: list
    carrying: list
    uplink: tuple


def _pod_links(links: list, by_name: dict, uplink_name: str | None, tunnel_names: set) -> list:
    """The pods' side of the node: the bridges with ports (not a bond, the uplink, Docker's or libvirt's), their
    ports, and the node ends of routed pod veths (cali*, lxc*)."""
    bridges = {link.get("master") for link in links if link.get("master")} - {uplink_name}
    bridges = {
        b
        for b in bridges
        if b in by_name and _kind(by_name[b]) in (None, "bridge") and not b.startswith(NOT_POD_BRIDGES)
    }  # not a bond, not the uplink, not Docker's or libvirt's bridge (their containers are not pods)
    return [
        link
        for link in links
        if isinstance(link.get("mtu"), int)
        and link["ifname"] not in ("lo", uplink_name, "kube-ipvs0")
        and link["ifname"] not in tunnel_names
        and (link["ifname"] in bridges or link.get("master") in bridges or link["ifname"].startswith(("cali", "lxc")))
    ]


def pod_mtu_excess(addresses: Addresses, routes: Routes) -> MtuExcess | None:
    """KP508's facts (also read by KP524): None when the uplink or its MTU is not known."""
    links = _links(addresses)
    by_name = {link["ifname"]: link for link in links}
    uplink_name = _default_dev(routes.routes, 4) or _default_dev(routes.routes, 6)
    uplink = by_name.get(uplink_name or "")
    if uplink is None or not isinstance(uplink.get("mtu"), int):
        return None
    u = uplink["mtu"]
    tunnels = [
        (link, _kind(link), TUNNEL_OVERHEAD[_kind(link)])
        for link in links
        if _kind(link) in TUNNEL_OVERHEAD and isinstance(link.get("mtu"), int) and link["ifname"] != uplink_name
    ]
    # the pods' side: node ends of pod veths (cali*, lxc*, veth* in a bridge) and the bridges with ports
    carrying = [(link, kind, over) for link, kind, over in tunnels if _routes_via(routes, link["ifname"])]
    if carrying:
        limit = min(min(link["mtu"], u - over) for link, _, over in carrying)
        why = " / ".join(
            f"{link['ifname']} ({kind}, mtu {link['mtu']}, uplink {u} − {over})" for link, kind, over in carrying
        )
    else:
        limit, why = u, f"the uplink {uplink_name}"
    tunnel_names = {t[0]["ifname"] for t in tunnels}
    pods = _pod_links(links, by_name, uplink_name, tunnel_names)
    too_big = [link for link in pods if link["mtu"] > limit]
    return MtuExcess(limit, why, too_big, carrying, (uplink_name, u))


@check(
    "KP508",
    "mtu-mismatch",
    "Pod or tunnel MTU larger than the path under it",
    "warning",
    severities=("warning", "error"),
    symptom="Small requests through a Service work, large ones hang: TLS handshakes with big certificates, file uploads, "
    "database result sets; ping works, curl of a large page stalls after the first bytes.",
    why="""
        An overlay (VXLAN, Geneve, IPIP, WireGuard) wraps each pod packet in another one: VXLAN and Geneve add 50
        bytes (more over IPv6 or with Geneve options), IPIP 20, WireGuard 60. The tunnel's MTU must be the uplink's
        minus that overhead, and the pods' interfaces (and the CNI bridge) must be no larger than the tunnel. When
        they are larger, full-size packets cannot cross: the encapsulated frame exceeds the uplink's MTU and is
        dropped, often without the ICMP "fragmentation needed" that would let TCP shrink its segments. Connections
        open fine (small packets) and stall on the first full-size segment. Pods whose MTU exceeds what fits are an
        error (their full-size packets are dropped); a tunnel larger than its uplink while the pods are small enough
        is a warning (nothing sends packets that big yet).
    """,
    fix="Set the CNI's MTU to the uplink's MTU minus the tunnel overhead (flannel, Calico, Cilium all have an mtu setting) "
    "and recreate the pods (a pod keeps the MTU it was created with).",
)
def mtu_mismatch(new, addresses: Addresses, routes: Routes):
    links = _links(addresses)
    by_name = {link["ifname"]: link for link in links}
    uplink_name = _default_dev(routes.routes, 4) or _default_dev(routes.routes, 6)
    uplink = by_name.get(uplink_name or "")
    if uplink is None or not isinstance(uplink.get("mtu"), int):
        raise Skip("the node's uplink (the default route's interface) or its MTU is not known")
    u = uplink["mtu"]
    addr_src = addresses.source
    up_ev = Evidence(addr_src, f"{uplink_name} (default route): mtu {u}")
    tunnels = []
    for link in links:
        kind = _kind(link)
        if kind in TUNNEL_OVERHEAD and isinstance(link.get("mtu"), int) and link["ifname"] != uplink_name:
            tunnels.append((link, kind, TUNNEL_OVERHEAD[kind]))
    for link, kind, over in tunnels:
        # only a tunnel that pod routes use: flow-based devices (Cilium's cilium_vxlan, OVS's vxlan_sys_4789) carry no
        # routes and get their MTU from the routes that lead to them
        if link["mtu"] > u - over and _routes_via(routes, link["ifname"]):
            yield new(
                f"tunnel {link['ifname']} ({kind}) has MTU {link['mtu']}, but {uplink_name} carries {u}: with {over} bytes of {kind} "
                f"overhead full-size tunnel packets are {link['mtu'] + over} bytes and do not fit (the tunnel's MTU must be ≤ {u - over})",
                fix=(
                    f"ip link set {link['ifname']} mtu {u - over}   # now; then make the CNI configuration say so (it recreates the device)",
                    'flannel: net-conf.json "Backend" … (MTU follows the uplink unless set); Calico: FelixConfiguration vxlanMTU/'
                    "ipipMTU/wireguardMTU; Cilium: --mtu",
                    f"ping -M do -s {u - over - 28} <pod IP on another node>   # passes; -s {link['mtu'] - 28} does not",
                ),
                evidence=[Evidence(addr_src, f"{link['ifname']}: kind {kind}, mtu {link['mtu']}"), up_ev],
                subject=link["ifname"],
            )
    excess = pod_mtu_excess(addresses, routes)
    if excess is None or not excess.too_big:
        return
    limit, why, too_big, carrying = excess.limit, excess.why, excess.too_big, excess.carrying
    sizes = sorted({link["mtu"] for link in too_big})
    names = [link["ifname"] for link in too_big]
    yield new(
        f"{len(too_big)} pod interface(s) ({', '.join(names[:5])}{' …' if len(names) > 5 else ''}) have MTU "
        f"{'/'.join(map(str, sizes))}, larger than the {limit} bytes that fit through {why}: full-size packets between pods "
        f"on different nodes (and Service traffic to them) are dropped",
        severity="error",  # pods send packets the path cannot carry: traffic is dropped, not only at risk
        fix=(
            f"set the CNI's MTU to {limit} (flannel: it derives it from the tunnel; Calico: FelixConfiguration mtu / veth_mtu in "
            "the calico-config ConfigMap; Cilium: --mtu) and restart the pods (kubectl rollout restart …)",
            f"ip link set <bridge> mtu {limit}   # the bridge follows its smallest port",
            f"ping -M do -s {limit - 28} <pod IP on another node>   # from a pod: passes; -s {max(sizes) - 28} does not",
        ),
        evidence=[
            Evidence(
                addr_src,
                f"{link['ifname']}: mtu {link['mtu']}"
                + (f", in bridge {link['master']}" if link.get("master") else ""),
            )
            for link in too_big[:5]
        ]
        + [up_ev]
        + [
            Evidence(
                addr_src,
                f"{link['ifname']}: kind {kind}, mtu {link['mtu']}; routes {', '.join(_routes_via(routes, link['ifname'])[:3])}",
            )
            for link, kind, _ in carrying
        ],
        subject="node",
    )
