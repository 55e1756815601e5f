"""kube-proxy's nftables mode (Kubernetes ≥ 1.29): table ip/ip6 kube-proxy, its service-ips and service-nodeports
maps, service-/local-/endpoint- chains; cluster-ips-check rejects what no Service port matches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from kpdiag.dataplane.base import (
    ServiceTable,
    KUBE_PROXY_LOG,
    KUBE_PROXY_RESTART,
    Dataplane,
    PortView,
    Words,
    cluster_ips,
    dataplane,
)

if TYPE_CHECKING:
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.state.cluster import Svc
    from kpdiag.state.node import NodeState
    from kpdiag.trace.walker import PacketWalker


@dataplane
class Nftables(Dataplane):
    name = "nftables"
    reads_one_service = True  # kube-proxy's table over netlink, chain by chain (kpdiag/collect/service_rules.py)
    label = "kube-proxy (nftables mode)"
    order = 40
    precedence = 4
    services_live = "its nftables table is"
    has_own_tracer = True
    preflight = True
    traced_with_iptables = False
    shows_local_policy = True  # a local-… chain, or drop in no-endpoint-services
    cluster_ips_stay_on_node = True  # cluster-ips-check rejects/drops on the node
    services_in_nft = True
    not_in_use = ("ipvs",)
    trace_sources = ("nft-ruleset", "ip-addr", "ip-route", "sysctl")

    def signs(self, state: NodeState) -> str | None:
        family = state.nft_kube_proxy_table
        return f"nftables table {family} kube-proxy" if family else None

    def service_table(self, state: NodeState) -> ServiceTable | None:
        from kpdiag.dataplane.kube_nft import cluster_ips, programmed_nft

        rs = state.nft()
        ports = programmed_nft(rs) if rs is not None else None
        if ports is None:
            return None
        cips = set(cluster_ips(rs)) if rs is not None else set()
        table: ServiceTable = {}
        for (ip, proto, port), sp in ports.items():
            if sp.external or (cips and ip not in cips):
                continue  # external and load-balancer IPs: the iptables and IPVS tables hold ClusterIPs only
            # kube-proxy's chain name: service-HASH-ns/name/proto/portname ("ns/name/proto/" for a port without a
            # name, whose ServicePortName is plain ns/name)
            parts = (sp.chain or "").split("-", 2)
            bits = parts[2].split("/") if len(parts) == 3 else []
            name = (
                (f"{bits[0]}/{bits[1]}" + (f":{bits[3]}" if bits[3] else "")) if len(bits) == 4 else (sp.comment or "")
            )
            table[f"{ip}:{port}/{proto}"] = (name, tuple(sorted(sp.endpoints)), sp.local_policy)
        return table

    def tracer(self, state: NodeState, family: int = 4, rules: Ruleset | None = None) -> PacketWalker | None:
        """kube-proxy's table (and the node's other nftables tables) for the packets of ``family``; when the node's
        iptables rules of that family act at the hooks too (a CNI's portmap DNAT, a leftover KUBE-SERVICES, a FORWARD
        drop), the kernel runs both: the iptables walk with the nftables base chains ordered among its tables by
        priority (kpdiag/trace/netfilter.py), as in iptables mode with a host firewall."""
        from kpdiag.trace.netfilter import IptablesTracer, acts_at_hooks
        from kpdiag.trace.nftables import NftTracer

        rs = state.nft()
        if rs is None:
            return None
        if rules is None:
            rules = state.iptables("ip6tables-save" if family == 6 else "iptables-save")
        if rules is not None and acts_at_hooks(rules):
            return IptablesTracer(rules, state.routing, state.ipsets, mode=self.name, nft=rs)
        return NftTracer(rs, state.routing)  # the ip6/inet tables for IPv6 packets

    def trace_rules(self, state: NodeState, family: int = 4) -> tuple[object, str, str]:
        from kpdiag.bundle import sources

        return state.nft(), sources.NFT_RULESET, "an nftables ruleset"

    def ports_skip(self, running: Dataplane, preflight: str | None, nft: Any) -> str | None:
        """``nft``: kpdiag.state.typed_proxy.Nft."""
        from kpdiag.bundle import sources

        why = super().ports_skip(running, preflight, nft)
        if why:
            return why
        if not nft.kube_proxy_family:  # (and no need to parse a big iptables-nft ruleset)
            return "no kube-proxy nftables table on this node (table ip/ip6 kube-proxy): not nftables mode"
        if nft.ruleset() is None:
            return f"{sources.NFT_RULESET} could not be parsed (see 'could not read')"
        return None

    def port_views(self, services: Iterable[Svc], nft: Any) -> Iterator[PortView]:
        """``nft``: kpdiag.state.typed_proxy.Nft (the service-/local- chains of dataplane/kube_nft.py)."""
        from kpdiag.dataplane.kube_nft import programmed_nft

        rs = nft.ruleset()
        prog = programmed_nft(rs) or {}
        for svc in services:
            for port in svc.ports:
                for family, ip in cluster_ips(svc):  # a dual-stack Service's IPv6 side is in table ip6 kube-proxy
                    key = (ip, (port.get("protocol") or "TCP").lower(), int(port["port"]))
                    p = prog.get(key)
                    shown = (
                        p if p is not None and bool(p.chain or p.local_policy) else None
                    )  # service-/local- chain, Local's drop
                    yield PortView.of(
                        svc,
                        port,
                        family,
                        ip,
                        shown,
                        shown.endpoints if shown is not None else (),
                        (rs, key, "ip6" if family == 6 else "ip"),
                    )

    def missing_words(self, v: PortView) -> Words:
        from kpdiag import evidence as ev

        rs, key, fam = v.context
        return Words(
            f"{v.svc.key} {key[0]}:{key[2]}/{key[1]} has ready endpoints, but kube-proxy's service-ips map on this node has no entry for it",
            (f"nft list map {fam} kube-proxy service-ips | grep -F " + key[0], KUBE_PROXY_LOG),
            ev.nft_absent(rs, fam, key),
        )

    def mismatch_words(self, v: PortView, have: set[str], text: str) -> Words:
        from kpdiag import evidence as ev

        rs, key, fam = v.context
        p = v.programmed
        return Words(
            f"{v.svc.key} {key[0]}:{key[2]}: {text}",
            (
                f"nft list chain {fam} kube-proxy '{p.chain}'"
                if p.chain
                else f"nft list map {fam} kube-proxy no-endpoint-services",
                KUBE_PROXY_RESTART,
            ),
            ev.nft_programmed(rs, fam, p, have),
        )
