"""kube-proxy's iptables mode: KUBE-SERVICES → KUBE-SVC-*/KUBE-SVL-* → KUBE-SEP-* DNAT, in the nat table."""

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
class Iptables(Dataplane):
    reads_one_service = True  # iptables -t TABLE -S CHAIN, chain by chain (kpdiag/collect/service_rules.py)
    name = "iptables"
    label = "kube-proxy (iptables mode)"
    order = 10
    precedence = 2
    services_live = "its iptables rules are"
    has_own_tracer = True
    shows_local_policy = True  # KUBE-SVL, or a DROP "has no local endpoints"
    not_in_use = ("ipvs",)
    counts_share = True

    def signs(self, state: NodeState) -> str | None:
        rs = state.iptables()
        if rs is not None and any(n.startswith(("KUBE-SVC-", "KUBE-SEP-")) for n in rs.chain_names("nat")):
            return "iptables chains KUBE-SVC-*/KUBE-SEP-* in the nat table"
        return None

    def service_table(self, state: NodeState) -> ServiceTable | None:
        progs = state.programmed()
        if progs is None:
            return None
        table: ServiceTable = {}
        for ports in (progs, state.programmed("ip6tables-save") or {}):  # a dual-stack node's IPv6 Services
            for p in ports.values():
                if p.cluster_ip and p.port:
                    table[f"{p.cluster_ip}:{p.port}/{(p.proto or 'tcp').lower()}"] = (
                        p.name,
                        tuple(sorted(p.endpoints)),
                        p.local_policy,
                    )
        return table

    def tracer(self, state: NodeState, family: int = 4, rules: Ruleset | None = None) -> PacketWalker | None:
        if family != 6 and rules is not None:
            from kpdiag.trace.netfilter import IptablesTracer

            return IptablesTracer(rules, state.routing, state.ipsets)
        if family != 6:
            return state.tracer()
        from kpdiag.trace.netfilter import IptablesTracer

        rs = state.iptables("ip6tables-save")
        return None if rs is None else IptablesTracer(rs, state.routing, state.ipsets)

    def port_views(self, services: Iterable[Svc], rules: Any) -> Iterator[PortView]:
        """``rules``: kpdiag.state.typed_proxy.KubeProxyRules (the KUBE-SVC/KUBE-SVL chains of state/kube_rules.py)."""
        for svc in services:
            done = set()
            for family, ip in cluster_ips(svc):
                if family in done:
                    continue
                done.add(family)
                which = "ip6tables-save" if family == 6 else "iptables-save"
                rs = rules.dump(which)
                if rs is None:
                    continue  # a dual-stack Service's IPv6 side is judged only when ip6tables-save was read
                progs = rules.programmed_in(which) or {}
                for port in svc.ports:
                    name = svc.kube_proxy_name(port)
                    prog = progs.get(name)
                    shown = (
                        prog if prog is not None and bool(prog.chain or prog.local_policy) else None
                    )  # KUBE-SVC/SVL, Local's DROP
                    yield PortView.of(
                        svc,
                        port,
                        family,
                        ip,
                        shown,
                        shown.endpoints if shown is not None else (),
                        (rs, name),
                    )

    def missing_words(self, v: PortView) -> Words:
        from kpdiag import evidence as ev

        rs, name = v.context
        v6 = " (IPv6)" if v.family == 6 else ""
        return Words(
            f"{v.svc.key} port {v.number}{v6} has ready endpoints in the API but no rule on this node: kube-proxy has not programmed it",
            (
                "kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide   # running on this node?",
                KUBE_PROXY_LOG,
                f"{'ip6tables-save' if v.family == 6 else 'iptables-save'} -t nat | grep -F '{name}'",
            ),
            ev.iptables_absent(rs, name),
        )

    def mismatch_words(self, v: PortView, have: set[str], text: str) -> Words:
        from kpdiag import evidence as ev

        rs, _ = v.context
        return Words(
            f"{v.svc.key} port {v.number}{' (IPv6)' if v.family == 6 else ''}: {text}",
            (KUBE_PROXY_LOG, KUBE_PROXY_RESTART + "   # forces a full resync"),
            ev.iptables_programmed(rs, v.programmed, have),
        )
