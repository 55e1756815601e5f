"""firewalld (nftables backend) rejecting traffic the node forwards for its pods: its own inet table, traced."""

from __future__ import annotations

import ipaddress

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.evidence import clip
from kpdiag.model import Evidence

from kpdiag.state.typed import Addresses, Nft, Routes

from .shapes import links, routes

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
        connections to pods on other nodes and to the outside world are rejected. An accept in iptables (kube-proxy's
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

    blocked, untraced = [], []
    for dst, what in targets:
        try:
            hit = _drop(tracer.trace(Packet(src, dst, "tcp", 443, origin="pod", iif=bridge)).paths)
        except Exception as exc:  # a match the tracer cannot evaluate: no blame without proof
            untraced.append(f"{dst}: {exc.__class__.__name__}")
            continue
        if hit:
            blocked.append((dst, what, hit))
    if not blocked:
        if untraced:
            raise Skip(f"could not trace {'; '.join(untraced[:2])}")
        return
    dst, what, (share, step) = blocked[0]
    verdict = "rejects" if "reject" in step.text else "drops"
    cidr = str(own[0].supernet(new_prefix=16)) if own[0].prefixlen > 16 else str(own[0])
    yield new(
        f"firewalld {verdict} pod traffic the node forwards: {src} on {bridge} → {', '.join(b[1] + ' ' + b[0] for b in blocked)} "
        f"ends in {step.table} {step.chain}: {clip(step.text, 100)}",
        fix=(
            command(
                f"firewall-cmd --permanent --zone=trusted --add-source={cidr} && firewall-cmd --permanent "
                f"--zone=trusted --add-interface={bridge} && firewall-cmd --reload   # the pod network is trusted"
            ),
            note("add the overlay device too (flannel.1, vxlan.calico, tunl0 …) and check that masquerading stays on"),
            note(
                "or stop firewalld on the nodes (systemctl disable --now firewalld), as most distributions advise for Kubernetes"
            ),
            command(f"kpdiag trace --bundle <bundle> --src {src} --dst {dst} --dport 443   # where it ends"),
        ),
        evidence=[Evidence(nft.source, f"{step.hook}: {step.table} {step.chain}: {clip(step.text, 200)}")]
        + [Evidence(addresses.source, f"{bridge}: {', '.join(map(str, own))} (the pods' bridge)")]
        + [
            Evidence(
                route_list.source,
                f"traced: TCP {src} → {b[0]}:443, {b[1]}: {b[2][0] * 100:.0f}% of paths end there",
            )
            for b in blocked[:2]
        ],
        subject="node",
        data={
            "tables": [f"{f} {n}" for f, n in tables],
            "rule": step.text,
            "blocked": [{"dst": b[0], "what": b[1]} for b in blocked],
            "pod_bridge": bridge,
        },
    )
