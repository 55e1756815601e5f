"""kube-proxy's iptables mode: KUBE-SERVICES → KUBE-SVC-*/KUBE-SVL-* → KUBE-SEP-* DNAT, in the nat table."""

from __future__ import annotations

from kpdiag.dataplane.base import Dataplane, dataplane


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

    def signs(self, state) -> str | None:
        rs = state.iptables()
        if rs is not None and any(n.startswith(("KUBE-SVC-", "KUBE-SEP-")) for n in rs.chain_names("nat")):
            return "iptables chains KUBE-SVC-*/KUBE-SEP-* in the nat table"
        return None

    def service_table(self, state):
        progs = state.programmed()
        if progs is None:
            return None
        table = {}
        for ports in (progs, state.programmed("ip6tables-save") or {}):  # a dual-stack node's IPv6 Services
            for p in ports.values():
                if p.cluster_ip and p.port:
                    table[f"{p.cluster_ip}:{p.port}/{(p.proto or 'tcp').lower()}"] = (
                        p.name,
                        tuple(sorted(p.endpoints)),
                        p.local_policy,
                    )
        return table

    def tracer(self, state, family: int = 4):
        if family != 6:
            return state.tracer()
        from kpdiag.trace.netfilter import IptablesTracer

        rs = state.iptables("ip6tables-save")
        return None if rs is None else IptablesTracer(rs, state.routing, state.ipsets)
