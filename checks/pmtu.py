"""A path-MTU black hole: pods whose MTU is above the path's, and a host firewall that drops the ICMP
"fragmentation needed" that would tell them — traced, as the kernel would send it, through the node's rules."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.evidence import clip
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_node import Addresses, Manifest, Routes
from kpdiag.state.typed_proxy import KubeProxyRules, Nft

from .hostnet import MtuExcess, pod_mtu_excess

FRAG_NEEDED = (3, 4)  # ICMP destination unreachable, fragmentation needed and DF set


def _v4_nets(link: dict) -> list:
    out = []
    for a in link.get("addr_info") or []:
        if a.get("family") == "inet" and a.get("local") and a.get("scope", "global") == "global":
            try:
                out.append(ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}"))
            except ValueError:
                continue
    return out


def _pod_target(excess: MtuExcess, addresses: Addresses, routes: Routes) -> tuple[str, str, str] | None:
    """(the node's address the kernel sends the ICMP from, a pod's address behind a too-big interface, that
    interface): a bridge's pod subnet, else a host route into a cali*/lxc* device."""
    by_name = {link.get("ifname"): link for link in addresses.links if isinstance(link.get("ifname"), str)}
    uplink = by_name.get(excess.uplink[0]) or {}
    fallback = next((str(i.ip) for i in _v4_nets(uplink)), None)
    for link in excess.too_big:
        bridge = by_name.get(link.get("master") or "") or (link if _v4_nets(link) else None)
        for iface in _v4_nets(bridge) if bridge else []:
            if iface.network.num_addresses >= 4:
                host = next(h for h in iface.network.hosts() if h != iface.ip)
                return str(iface.ip), str(host + 8 if iface.network.num_addresses > 16 else host), link["ifname"]
        for r in routes.routes:
            dst = r.get("dst")
            if r.get("dev") == link["ifname"] and isinstance(dst, str) and "." in dst and fallback:
                return fallback, dst.split("/")[0], link["ifname"]
    return None


def _tracer(rules: KubeProxyRules | None, nft: Nft | None, routes: Routes):
    """Every rule of the node at its hook: iptables' tables with the other nftables tables (a host firewall), or the
    nftables ruleset alone where there is no iptables dump."""
    ruleset = nft.ruleset() if nft is not None else None
    rs = rules.ruleset if rules is not None else None
    if rs is not None:
        from kpdiag.trace.netfilter import IptablesTracer

        return IptablesTracer(rs, routes.routing, nft=ruleset)
    if ruleset is not None:
        from kpdiag.trace.nftables import NftTracer

        return NftTracer(ruleset, routes.routing, mode="nftables")
    return None


def _fixes(step, limit: int, owner: str) -> list:
    hook = step.hook.upper()
    out = []
    if " " in step.table:  # an nftables table ("inet hostfw")
        out.append(
            command(
                f"nft insert rule {step.table} {step.chain} ct state related accept   # ICMP errors of tracked flows"
            )
        )
        out.append(
            command(
                f"nft insert rule {step.table} {step.chain} icmp type destination-unreachable icmp code frag-needed "
                f"accept; nft insert rule {step.table} {step.chain} icmpv6 type packet-too-big accept"
            )
        )
    else:
        out.append(
            command(
                f"iptables -I {step.chain} 1 -p icmp --icmp-type fragmentation-needed -j ACCEPT && "
                f"ip6tables -I {step.chain} 1 -p icmpv6 --icmpv6-type packet-too-big -j ACCEPT"
            )
        )
        out.append(note(f"or accept RELATED in {hook} before the drop: -m conntrack --ctstate RELATED -j ACCEPT"))
    if owner == "firewalld":
        out.append(
            command(
                "firewall-cmd --permanent --remove-icmp-block=fragmentation-needed --remove-icmp-block=packet-too-big "
                "&& firewall-cmd --reload"
            )
        )
    out.append(note(f"and/or lower the pods' MTU to {limit}: the CNI's mtu setting, then restart the pods"))
    out.append(note("persist the rule where this firewall keeps its rules (its saved ruleset or nft configuration)"))
    return out


@check(
    "KP524",
    "pmtu-black-hole",
    "A path-MTU black hole: the firewall drops ICMP 'fragmentation needed' while pods send packets the path cannot carry",
    "error",
    explains=("KP508",),
    symptom="Small requests and responses work, large ones hang: a TLS handshake with a long certificate chain, an "
    "upload, a big API response; ping works, curl of a large page stalls after the headers; nothing is logged.",
    why="""
        A pod sends full-size TCP segments as big as its interface's MTU allows, with the Don't Fragment bit set. Where
        the path is narrower (the uplink, or an overlay device that needs room for its encapsulation), the router at
        the narrow link — this node, when the narrow link is its own — drops each such packet and answers with an ICMP
        "fragmentation needed" (IPv6: packet too big) carrying the MTU that fits; the sender's kernel lowers its
        path MTU and resends smaller (path-MTU discovery). The node sends that ICMP itself, so it passes the node's
        OUTPUT hook (an ICMP from a router further on passes INPUT or FORWARD); conntrack marks it RELATED to the
        connection. A firewall that drops ICMP there, or accepts only ESTABLISHED and not RELATED, keeps the sender
        from ever learning the MTU: it resends the same large segment until the connection times out — a black
        hole. Small packets pass, so connections open and then hang. Either condition alone is harmless: a
        consistent MTU sends no such ICMP, and a working ICMP lets TCP adapt at the cost of one round trip.
    """,
    fix="Accept ICMP 'fragmentation needed' (and ICMPv6 packet-too-big), or RELATED, before the rule that drops it "
    "(the exact iptables / nft / firewall-cmd command is in the finding), and/or lower the pods' MTU to what fits.",
)
def pmtu_black_hole(
    new,
    addresses: Addresses,
    routes: Routes,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    manifest: Optional[Manifest] = None,
):
    excess = pod_mtu_excess(addresses, routes)
    if excess is None:
        raise Skip("the node's uplink (the default route's interface) or its MTU is not known")
    if not excess.too_big:
        return  # the pods' MTU fits the path: no "fragmentation needed" is ever needed on this node
    target = _pod_target(excess, addresses, routes)
    if target is None:
        raise Skip("no IPv4 address of a pod behind the interfaces whose MTU is too large: nothing to trace")
    tracer = _tracer(rules, nft, routes)
    if tracer is None:
        raise Skip("none of this node's rules could be read (iptables-save / nft -j list ruleset)")
    from kpdiag.trace.model import Packet

    from .firewall import _drop, _owner

    src, pod_ip, dev = target
    pkt = Packet(src, pod_ip, "icmp", origin="node", icmp_type=3, icmp_code=4, ct_state="related")
    try:
        result = tracer.trace(pkt)
    except Exception as exc:  # a rule the tracer cannot evaluate: say so rather than guess
        raise Skip(f"could not trace the ICMP to {pod_ip}: {exc.__class__.__name__}: {exc}") from None
    hit = _drop(result.paths)
    if hit is None:
        return  # the node's rules let the ICMP through (accepted as RELATED, or not filtered)
    share, step = hit
    chains = frozenset(rules.ruleset.chain_names("filter")) if rules is not None and rules.ruleset else frozenset()
    owner = _owner(step, chains)
    sizes = sorted({link["mtu"] for link in excess.too_big})
    verb = "rejects" if step.action.lower().startswith("reject") else "drops"
    yield new(
        f"{owner} {verb} the ICMP 'fragmentation needed' this node sends its pods ({step.hook} {step.table} "
        f"{step.chain}: {clip(step.text, 100)}), and pods have MTU {'/'.join(map(str, sizes))} above the "
        f"{excess.limit} bytes that fit through {excess.why}: large packets from pods are dropped and their senders "
        "never learn the path's MTU (a PMTU black hole)",
        fix=tuple(_fixes(step, excess.limit, owner))
        + (
            command(
                f"ping -M do -s {max(sizes) - 28} <an address beyond {excess.uplink[0]}>   # from a pod: no reply and no "
                f"'Frag needed'; -s {excess.limit - 28} is answered"
            ),
        ),
        evidence=[_step_evidence(step, nft, rules, manifest)]
        + [Evidence(addresses.source, f"{link['ifname']}: mtu {link['mtu']}") for link in excess.too_big[:3]]
        + [Evidence(addresses.source, f"{excess.uplink[0]} (default route): mtu {excess.uplink[1]}")]
        + [Evidence(addresses.source, f"{lk['ifname']}: kind {k}, mtu {lk['mtu']}") for lk, k, _ in excess.carrying[:2]]
        + [
            Evidence(
                routes.source,
                f"traced: ICMP 3/4 (related) {src} → {pod_ip} (behind {dev}) from the node: "
                f"{share * 100:.0f}% of paths end there",
            )
        ],
        subject="node",
        data={
            "rule": step.text,
            "hook": step.hook,
            "table": step.table,
            "chain": step.chain,
            "pod_mtu": max(sizes),
            "path_mtu": excess.limit,
            "icmp": {"src": src, "dst": pod_ip, "type": 3, "code": 4, "ct_state": "related"},
        },
    )


def _step_evidence(step, nft, rules, manifest) -> Evidence:
    text = f"{step.hook}: {step.table} {step.chain}: {clip(step.text, 200)}"
    if step.source and step.source.rsplit(":", 1)[-1].isdigit():
        src, line = step.source.rsplit(":", 1)
        return Evidence(src, text, int(line))
    if " " in step.table and nft is not None:
        return Evidence(nft.source, text)
    return Evidence(rules.ruleset.source if rules is not None else manifest.bundle, text)
