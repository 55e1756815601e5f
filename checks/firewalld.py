"""firewalld (nftables backend) rejecting traffic the node forwards for its pods: its own inet table, traced."""

from __future__ import annotations

import ipaddress

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.evidence import clip
from kpdiag.model import Evidence

from kpdiag.state.typed_node import Addresses, Routes
from kpdiag.state.typed_proxy import Nft

from .shapes import links, routes

from .hostnet import NOT_POD_BRIDGES

EXTERNAL = "203.0.113.5"  # a destination outside the cluster (TEST-NET-3)


def _firewalld_tracer(nft: Nft, route_list: Routes):
    """An nftables tracer over firewalld's own tables only (inet firewalld, and ip/ip6 firewalld of old releases)."""
    rs = nft.ruleset()
    if rs is None:
        return None, []
    keep = [t for t in rs.tables if "firewalld" in t[1]]
    if not keep:
        return None, []
    from kpdiag.parse.nft import NftRuleset
    from kpdiag.trace.nftables import NftTracer

    only = NftRuleset(
        rs.source,
        chains={k: c for k, c in rs.chains.items() if (k[0], k[1]) in keep},
        sets={k: v for k, v in rs.sets.items() if (k[0], k[1]) in keep},
        tables=keep,
    )
    return NftTracer(only, route_list.routing, mode="firewalld"), keep


def _pod_side(addresses: Addresses) -> tuple[str, str, list] | None:
    """(a pod address, the pod bridge it sits behind, the bridge's subnets) — the source of forwarded pod traffic."""
    ifaces = links(addresses.links)
    masters = {link.get("master") for link in ifaces if link.get("master")}
    for link in ifaces:
        if link["ifname"] not in masters or (link.get("linkinfo") or {}).get("info_kind") not in (None, "bridge"):
            continue
        if link["ifname"].startswith(NOT_POD_BRIDGES):
            continue  # Docker's or libvirt's bridge: its containers are not pods
        for a in link.get("addr_info") or []:
            if a.get("family") == "inet" and a.get("local") and a.get("scope", "global") == "global":
                try:
                    net = ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}").network
                except ValueError:
                    continue
                if net.num_addresses >= 4:
                    host = next(h for h in net.hosts() if str(h) != a["local"])
                    return str(host + 8 if net.num_addresses > 16 else host), link["ifname"], [net]
    return None


OVERLAY_KINDS = ("vxlan", "geneve", "ipip", "wireguard")
OVERLAY_NAMES = ("flannel", "vxlan", "tunl", "wireguard", "weave")


def _overlay_in(addresses: Addresses, route_list: Routes, own: list) -> tuple[str, str, str] | None:
    """(a pod on another node, a pod of this node, the overlay device) for traffic another node's pod sends to this
    node's pods: it arrives on the overlay device and is forwarded to the pod bridge."""
    kinds = {link["ifname"]: (link.get("linkinfo") or {}).get("info_kind") for link in links(addresses.links)}
    for r in routes(route_list.routes):
        dev, dst = str(r.get("dev") or ""), r.get("dst")
        if not isinstance(dst, str) or dst == "default" or ":" in dst or dev not in kinds:
            continue
        if kinds[dev] not in OVERLAY_KINDS and not dev.startswith(OVERLAY_NAMES):
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if net.num_addresses >= 4 and not any(net.overlaps(o) for o in own):
            return str(net.network_address + 5), str(next(own[0].hosts()) + 9), dev
    return None


def _remote_pod(route_list: Routes, own: list) -> tuple[str, str] | None:
    """A pod address on another node: a route into a pod range that is not this node's (overlay or host-gw)."""
    for r in routes(route_list.routes):
        dst = r.get("dst")
        if not isinstance(dst, str) or dst == "default" or r.get("table") not in (None, "main") or ":" in dst:
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if net.prefixlen < 16 or net.num_addresses < 4 or any(net.overlaps(o) for o in own):
            continue
        if (r.get("dev") or "").startswith(("flannel", "vxlan", "cilium", "tunl", "cali", "weave")) or (
            own and net.subnet_of(ipaddress.ip_network(f"{own[0].network_address}/16", strict=False))
        ):
            return str(net.network_address + 5), f"route {dst}{' dev ' + r['dev'] if r.get('dev') else ''}"
    return None


@check(
    "KP523",
    "firewalld-rejects-pod-traffic",
    "firewalld rejects traffic the node forwards for its pods",
    "error",
    symptom="On RHEL-family nodes (RHEL, Rocky, Alma, Fedora, CentOS Stream) pods cannot reach pods on other nodes or "
    "anything outside the cluster ('No route to host', ICMP admin-prohibited), while Services whose traffic is DNATed "
    "work; stopping firewalld makes it work.",
    why="""
        firewalld's nftables backend keeps its own table (inet firewalld). Its forward chain accepts replies and
        DNATed connections (ct status dnat: the traffic kube-proxy translated), then sends everything else through
        the zones of the incoming interface and ends in "reject with icmpx admin-prohibited". The CNI's interfaces
        (cni0, flannel.1, cali*, …) are in no zone, or in one that does not allow forwarding, so a pod's own
        connections to pods on other nodes and to the outside world are rejected — and so is what other nodes' pods
        send to the pods here, which arrives on the overlay device (flannel.1, vxlan.calico, tunl0): trusting the pod
        bridge alone lets pods send but not be reached from other nodes. An accept in iptables (kube-proxy's
        or the CNI's rules) does not bind another table: the packet must pass firewalld's table too.
    """,
    fix="Put the pod network in firewalld's trusted zone (firewall-cmd --permanent --zone=trusted --add-source=<pod "
    "CIDR> and --add-interface=<CNI interfaces>, then firewall-cmd --reload), or disable firewalld on the nodes as "
    "most Kubernetes distributions advise.",
)
def firewalld_rejects(new, nft: Nft, addresses: Addresses, route_list: Routes):
    tracer, tables = _firewalld_tracer(nft, route_list)
    if tracer is None:
        return  # no firewalld table on this node
    pod = _pod_side(addresses)
    if pod is None:
        raise Skip("no pod bridge with an address found: the source of forwarded pod traffic is not known")
    src, bridge, own = pod
    targets = [(EXTERNAL, "outside the cluster (the default route)")]
    remote = _remote_pod(route_list, own)
    if remote is not None:
        targets.insert(0, (remote[0], f"a pod on another node ({remote[1]})"))
    from kpdiag.trace.model import Packet

    from .firewall import _drop

    packets = [(Packet(src, dst, "tcp", 443, origin="pod", iif=bridge), what) for dst, what in targets]
    inbound = _overlay_in(addresses, route_list, own)
    if inbound is not None:  # another node's pod to a pod here: in on the overlay, forwarded to the pod bridge
        far, near, dev = inbound
        packets.append((Packet(far, near, "tcp", 443, iif=dev), "a pod on this node"))
    blocked, untraced = [], []
    for packet, what in packets:
        dst = packet.dst
        try:
            hit = _drop(tracer.trace(packet).paths)
        except Exception as exc:  # a match the tracer cannot evaluate: no blame without proof
            untraced.append(f"{dst}: {exc.__class__.__name__}")
            continue
        if hit:
            blocked.append((dst, what, hit, packet))
    if not blocked:
        if untraced:
            raise Skip(f"could not trace {'; '.join(untraced[:2])}")
        return
    dst, what, (share, step), first = blocked[0]
    verdict = "rejects" if "reject" in step.text else "drops"
    cidr = str(own[0].supernet(new_prefix=16)) if own[0].prefixlen > 16 else str(own[0])
    flows = ", ".join(f"{b[3].src} on {b[3].iif} → {b[1]} {b[0]}" for b in blocked)
    devs = "--zone=trusted " + " ".join(
        f"--add-interface={d}" for d in dict.fromkeys([bridge] + [b[3].iif for b in blocked])
    )
    yield new(
        f"firewalld {verdict} pod traffic the node forwards: {flows} ends in {step.table} {step.chain}: "
        f"{clip(step.text, 100)}",
        fix=(
            command(
                f"firewall-cmd --permanent --zone=trusted --add-source={cidr} && firewall-cmd --permanent {devs} "
                "&& firewall-cmd --reload   # the pod network and its interfaces are trusted"
            ),
            note("check that masquerading stays on for traffic leaving the cluster"),
            note(
                "or stop firewalld on the nodes (systemctl disable --now firewalld), as most distributions advise for Kubernetes"
            ),
            command(f"kpdiag trace --bundle <bundle> --src {first.src} --dst {dst} --dport 443   # where it ends"),
        ),
        evidence=[Evidence(nft.source, f"{step.hook}: {step.table} {step.chain}: {clip(step.text, 200)}")]
        + [Evidence(addresses.source, f"{bridge}: {', '.join(map(str, own))} (the pods' bridge)")]
        + [
            Evidence(
                route_list.source,
                f"traced: TCP {b[3].src} (in on {b[3].iif}) → {b[0]}:443, {b[1]}: {b[2][0] * 100:.0f}% of paths end there",
            )
            for b in blocked[:2]
        ],
        subject="node",
        data={
            "tables": [f"{f} {n}" for f, n in tables],
            "rule": step.text,
            "blocked": [{"src": b[3].src, "iif": b[3].iif, "dst": b[0], "what": b[1]} for b in blocked],
            "pod_bridge": bridge,
        },
    )
