"""The overlay between nodes: its UDP port in the host firewall, and the VXLAN checksum-offload bug."""

from __future__ import annotations

from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.bundle import sources

from kpdiag.state.typed_api import NodePodCIDRs
from kpdiag.state.typed_node import Addresses, EthtoolOffload, Kernel, Routes
from kpdiag.state.typed_proxy import KubeProxyRules, Nft, ProxyMode, Tracer

from .shapes import d, links, lst, routes

# the UDP port of each overlay kind when the device does not say (ip -d shows it for vxlan; geneve's is fixed)
DEFAULT_PORTS = {"flannel.1": 8472, "cilium_vxlan": 8472, "vxlan.calico": 4789, "vxlan-v6.calico": 4789}
KIND_PORTS = {"vxlan": 4789, "geneve": 6081}


def overlay_devices(addresses: Addresses) -> list[tuple[str, str, int]]:
    """(device, kind, UDP port) of the node's VXLAN and Geneve devices."""
    out = []
    for link in links(addresses.links):
        name = link.get("ifname")
        info = link["linkinfo"]
        kind = info.get("info_kind")
        if not isinstance(name, str) or kind not in ("vxlan", "geneve"):
            continue
        port = (info.get("info_data") or {}).get("port")
        if not isinstance(port, int) or not port:
            port = DEFAULT_PORTS.get(name, KIND_PORTS[kind])
        out.append((name, kind, port))
    return out


def _peer(nodes: NodePodCIDRs | None, route_list: Routes, node_ip: str) -> tuple[str, str]:
    """Another node's address (cluster/nodes.json), else the default gateway: the source of overlay packets."""
    for n in nodes.objects if nodes is not None else ():
        for a in lst(d(d(n).get("status")).get("addresses")):
            if (
                isinstance(a, dict)
                and a.get("type") == "InternalIP"
                and isinstance(a.get("address"), str)
                and a["address"] != node_ip
            ):
                if ":" not in a["address"]:
                    return a["address"], f"node {d(n.get('metadata')).get('name')}"
    for r in routes(route_list.routes):
        if r.get("dst") == "default" and r.get("gateway") and ":" not in r["gateway"]:
            return r["gateway"], "the default gateway (no other node's address known)"
    return "192.0.2.1", "a peer (no other node's address known)"


def _trace_overlay(devices, tracers, peer: str, node_ip: str, uplink: str) -> tuple[list, list[str]]:
    """Trace each overlay port arriving from ``peer`` and leaving for it through each tracer: (blocked, untraced) —
    blocked as (device, kind, port, direction, the step that dropped)."""
    from kpdiag.trace.model import Packet

    from .firewall import _drop

    blocked: list = []
    untraced: list[str] = []
    for dev, kind, port in devices:
        for direction, pkt in (
            ("arriving", Packet(peer, node_ip, "udp", port, sport=port, origin="external", iif=uplink)),
            ("leaving", Packet(node_ip, peer, "udp", port, sport=port, origin="node")),
        ):
            for tr in tracers:
                if tr is None:
                    continue
                try:
                    hit = _drop(tr.trace(pkt).paths)
                except Exception as exc:  # a match the tracer cannot evaluate: no blame without proof
                    untraced.append(f"{port}/udp {direction}: {exc.__class__.__name__}")
                    continue
                if hit:
                    blocked.append((dev, kind, port, direction, hit[1]))
                    break
    return blocked, untraced


def _finding(new, blocked, rules, nft, addresses: Addresses, route_list: Routes, nodes, peer_of, node):
    """The one finding: the first blocked overlay port, who drops it, and how to allow it."""
    from .firewall import _owner

    peer, peer_what = peer_of
    node_ip, uplink = node
    rs = rules.ruleset if rules is not None else None
    chains = frozenset(rs.chain_names("filter")) if rs is not None else frozenset()
    dev, kind, port, direction, step = blocked[0]
    owner = _owner(step, chains)
    src, _, line = (step.source or "").rpartition(":")
    if " " in step.table:  # an nftables table ("inet hostfw")
        allow = f"nft insert rule {step.table} {step.chain} udp dport {port} accept"
        ev_src = nft.source if nft is not None else sources.NFT_RULESET
    else:
        allow = f"iptables -I {step.chain} -p udp --dport {port} -j ACCEPT"
        ev_src = src or (rs.source if rs is not None else sources.IPTABLES_SAVE)
    if owner == "firewalld":
        allow = f"firewall-cmd --permanent --add-port={port}/udp && firewall-cmd --reload"
    dirs = sorted({b[3] for b in blocked})
    return new(
        f"the host firewall drops the {kind} overlay's UDP port {port} ({dev}) {' and '.join(dirs)} between nodes "
        f"({owner}: {step.table} {step.chain}: {clip(step.text, 100)}): pod traffic to and from other nodes is lost",
        fix=(
            command(f"{allow}   # restrict to the nodes' subnet with a source match where the firewall allows it"),
            note(
                f"kpdiag sees the host's firewall only: UDP {port} must also be open between the nodes in the cloud "
                "security group / network ACL (AWS security group, Azure NSG, GCP firewall rule), which is not visible here"
            ),
            command(
                f"tcpdump -ni {uplink} udp port {port}   # on both nodes while pinging a pod across: do they arrive?"
            ),
        ),
        evidence=[
            Evidence(
                ev_src,
                f"{step.hook}: {step.table} {step.chain}: {clip(step.text, 200)}",
                int(line) if line.isdigit() else None,
            ),
            Evidence(addresses.source, f"{dev}: {kind}, UDP port {port}"),
            Evidence(
                nodes.source if "node " in peer_what else route_list.source,
                f"traced: UDP {peer} → {node_ip}:{port} ({peer_what}) and back",
            ),
        ],
        subject=dev,
        data={
            "device": dev,
            "kind": kind,
            "port": port,
            "directions": dirs,
            "rule": step.text,
            "owner": owner,
            "not_visible": "cloud security groups and network ACLs between the nodes",
        },
    )


@check(
    "KP521",
    "overlay-port-blocked",
    "The host firewall drops the overlay's UDP port between nodes",
    "error",
    symptom="Pods reach pods on their own node and nothing on other nodes; Services answer only when kube-proxy picks a "
    "local endpoint (1 in N connections works); DNS fails from nodes without a CoreDNS pod.",
    why="""
        A VXLAN or Geneve overlay carries pod-to-pod traffic between nodes inside UDP packets: flannel and Cilium on
        port 8472, Calico VXLAN on 4789, Geneve on 6081. The host's firewall sees those packets like any other UDP
        traffic arriving at (INPUT) and leaving (OUTPUT) the node: a drop policy or reject rule that does not allow the
        port — firewalld's default zone, a hardened iptables INPUT chain, an nftables inet filter table — silently
        eats the overlay, and every cross-node pod connection times out. The same port must also be open in whatever
        filters between the nodes that kpdiag cannot see: cloud security groups, network ACLs, switch ACLs.
    """,
    fix="Allow the overlay's UDP port from the other nodes in the host firewall, input and output (firewalld: "
    "firewall-cmd --permanent --add-port=8472/udp; iptables: -I INPUT -p udp --dport 8472 -s <node subnet> -j ACCEPT), "
    "and in the cloud security group / network ACL between the nodes.",
)
def overlay_port_blocked(
    new,
    addresses: Addresses,
    route_list: Routes,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    tracers: Optional[Tracer] = None,
    nodes: Optional[NodePodCIDRs] = None,
):
    devices = overlay_devices(addresses)
    if not devices:
        return  # no VXLAN/Geneve device: no overlay port to keep open
    from .firewall import _host_firewall, _node_ip

    node = _node_ip(route_list.routes, addresses.links)
    if node is None:
        raise Skip("the node's address on its uplink (the default route's interface) is not known")
    node_ip, uplink = node
    peer, peer_what = _peer(nodes, route_list, node_ip)
    dp = proxy.dataplane
    tracer = tracers.of_mode() if dp.has_own_tracer or not dp.known else None  # unknown: its iptables rules
    host_fw = _host_firewall(nft.ruleset() if nft is not None else None, route_list.routing, dp)
    if tracer is None and host_fw is None:
        raise Skip("none of this node's rules could be read (iptables-save / nft -j list ruleset)")
    blocked, untraced = _trace_overlay(devices, (tracer, host_fw), peer, node_ip, uplink)
    if not blocked:
        if untraced:
            raise Skip(f"could not trace {'; '.join(untraced[:2])}")
        return
    yield _finding(new, blocked, rules, nft, addresses, route_list, nodes, (peer, peer_what), node)


# ------------------------------------------------------------------------------------------ checksum offload

FIXED_IN = (5, 7, 0)  # the first mainline kernel without the bug (Calico's felix disables the offload below it)


def _masquerade(rules: KubeProxyRules | None):
    """(the first MASQUERADE --random-fully rule, does kube-proxy clear its mark before masquerading) — kube-proxy
    1.19 (and 1.16.13/1.17.9/1.18.6) writes "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000" (iptables-save shows
    --set-xmark 0x4000/0x0), so the VXLAN packet that carries a masqueraded one is not NATed again."""
    rs = rules.ruleset if rules is not None else None
    if rs is None:
        return None, None
    first, cleared = None, False
    for chain in rs.chain_names("nat"):
        c = rs.chain("nat", chain)
        for rule in c.rules if c is not None else []:
            if first is None and "--random-fully" in rule.text:
                first = rule
            if chain == "KUBE-POSTROUTING" and (
                "--set-xmark 0x4000/0x0" in rule.text or "--xor-mark 0x4000" in rule.text
            ):
                cleared = True
    return first, cleared


@check(
    "KP522",
    "vxlan-checksum-offload",
    "VXLAN checksum offload on a kernel with the NAT checksum bug (63-second delays)",
    "error",
    severities=("warning", "error"),
    symptom="From a node (or a hostNetwork pod), connections to a ClusterIP or NodePort whose endpoint is on another node "
    "take 63 seconds (or 1, 3, 7 … seconds) to open; DNS from nodes times out; the receiving node logs 'UDP: bad "
    "checksum … to …:8472'.",
    why="""
        Encapsulating a packet into a VXLAN device reuses the same kernel packet, mark included. A packet kube-proxy
        marked for masquerade (0x4000: node-originated Service traffic, NodePort traffic forwarded to another node)
        therefore meets KUBE-POSTROUTING's MASQUERADE --random-fully twice: once as itself and once as the outer VXLAN
        UDP packet, whose source port is rewritten again. With the device's UDP checksum offload on
        (tx-checksum-ip-generic: on) the outer checksum is left partial for the "hardware" to finish, and kernels
        before 5.7 update that partial checksum wrongly on NAT: the VXLAN packet leaves with a bad UDP checksum and
        the receiving node drops it ("UDP: bad checksum … to …:8472"). TCP retransmits the SYN after 1, 2, 4, 8, 16
        and 32 seconds: the first one that gets through arrives after 63 seconds. kube-proxy 1.19 (and
        1.16.13/1.17.9/1.18.6) clears its mark before masquerading, which removes its own share of the trigger;
        another masquerade rule that matches the outer packet (a CNI's) can still set it off. Kernels from 5.7 on
        get the checksum right; distribution kernels may carry the fix earlier (RHEL 8's 4.18 does). Turning the
        device's checksum offload off avoids it on any kernel (Calico does so by itself on kernels before 5.7).
    """,
    fix="ethtool -K <vxlan device> tx-checksum-ip-generic off on every node (made permanent with a udev rule or the CNI's "
    "option: Calico's FelixConfiguration featureDetectOverride ChecksumOffloadBroken=true), or upgrade the kernel to ≥ 5.7.",
)
def vxlan_checksum_offload(
    new,
    ethtool: EthtoolOffload,
    uname: Kernel,
    addresses: Optional[Addresses] = None,
    rules: Optional[KubeProxyRules] = None,
):
    offloads, kernel = ethtool.features, uname.version
    kinds = {
        link.get("ifname"): (link.get("linkinfo") or {}).get("info_kind")
        for link in links(addresses.links if addresses is not None else None)
    }
    on = [
        (dev, f)
        for dev, feats in sorted(offloads.devices.items())
        if kinds.get(dev, "vxlan") == "vxlan"
        for f in [feats.get("tx-checksum-ip-generic")]
        if f is not None and f.on
    ]
    if not on or tuple(kernel) >= FIXED_IN:
        return
    release = uname.release
    enterprise = ".el8" in release or ".el9" in release  # RHEL 8 backported the fix into its 4.18
    masq, cleared = _masquerade(rules)
    devs = [dev for dev, _ in on]
    # an error only for the exact trigger: a masquerade --random-fully whose mark survives into the VXLAN packet
    certain = masq is not None and cleared is False and not enterprise
    summary = (
        f"kernel {release} (before 5.7) with UDP checksum offload on the VXLAN device{'s' if len(devs) > 1 else ''} "
        f"{', '.join(devs)} (tx-checksum-ip-generic: on)"
    )
    if certain:
        summary += (
            " and kube-proxy's MASQUERADE --random-fully without its mark reset, so the VXLAN packet is NATed a second "
            "time: node-originated Service traffic and NodePorts to other nodes leave with a bad UDP checksum and are "
            "dropped by the receiving node (63-second connection delays)"
        )
    else:
        summary += (
            ": VXLAN packets that a masquerade rule NATs again leave with a bad UDP checksum and are dropped by the "
            "receiving node (63-second connection delays)"
        )
        if cleared:
            summary += "; kube-proxy clears its mark, so only another masquerade rule meeting the VXLAN packet (a CNI's) sets it off"
        if enterprise:
            summary += "; this RHEL kernel may carry the fix — look for 'UDP: bad checksum' in the other nodes' dmesg"
    yield new(
        summary,
        severity="error" if certain else "warning",
        fix=(
            command(
                f"ethtool -K {devs[0]} tx-checksum-ip-generic off   # now, on this node (every node with this kernel)"
            ),
            note(
                f'make it permanent: a udev rule, e.g. SUBSYSTEM=="net", ACTION=="add", KERNEL=="{devs[0]}", '
                f'RUN+="/usr/sbin/ethtool -K {devs[0]} tx-checksum-ip-generic off"; Calico: FelixConfiguration '
                "featureDetectOverride: ChecksumOffloadBroken=true — or upgrade the node's kernel to 5.7 or later"
            ),
            note("and a kube-proxy of 1.19 or later (1.16.13, 1.17.9, 1.18.6), which clears its masquerade mark")
            if certain
            else note(
                "check which masquerade rules meet the VXLAN packets: iptables-save -t nat | grep -e MASQUERADE -e SNAT"
            ),
            command("dmesg | grep -i 'bad checksum'   # on the receiving node: the dropped VXLAN packets"),
        ),
        evidence=[Evidence(offloads.source, f"{dev}: {f.text}", f.line) for dev, f in on[:3]]
        + [Evidence(uname.source, release, 1)]
        + ([Evidence(masq.source, masq.text, masq.lineno)] if masq is not None else []),
        subject=devs[0],
        data={
            "kernel": release,
            "devices": devs,
            "random_fully": masq is not None,
            "kube_proxy_clears_mark": cleared,
            "fixed_in": "5.7",
        },
    )
