"""kube-proxy's IPVS mode: a virtual server per ClusterIP/NodePort with its endpoints as real servers, the ClusterIPs
bound on kube-ipvs0, and iptables/ipset rules around them (KUBE-IPVS-FILTER, KUBE-LOAD-BALANCER …)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from kpdiag.dataplane.base import (
    ServiceTable,
    KUBE_PROXY_RESTART,
    Dataplane,
    PortView,
    Words,
    cluster_ips,
    dataplane,
    get,
)

if TYPE_CHECKING:
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.state.cluster import Svc
    from kpdiag.state.node import NodeState
    from kpdiag.trace.walker import PacketWalker


@dataplane
class Ipvs(Dataplane):
    name = "ipvs"
    label = "kube-proxy (IPVS mode)"
    title = "IPVS"
    order = 30
    precedence = 3
    services_live = "IPVS is"
    has_own_tracer = True
    preflight = True
    cluster_ips_stay_on_node = True  # bound on kube-ipvs0: answered (or refused) by the node itself
    cluster_ips_bound = True
    keeps_service_names = False
    services_in_ipvs = True
    reads_one_service = True  # the Service's virtual servers one by one over netlink (kpdiag/collect/ipvs_rules.py)
    per_service_reject_comments = False
    trace_sources = ("iptables-save", "ipvsadm", "ipset", "ip-addr", "ip-route", "sysctl")

    ports_verb = "IPVS sends new connections to"

    def ports_skip(self, running: Dataplane, preflight: str | None, table: Any) -> str | None:
        if get(preflight).services_in_ipvs:  # --preflight ipvs: whatever runs now
            return None
        if not running.known:
            return "kube-proxy's mode is unknown (no /proxyMode, configuration or rules)"
        return super().ports_skip(running, preflight, table)

    def port_views(self, services: Iterable[Svc], ipvs: Any) -> Iterator[PortView]:
        """``ipvs``: kpdiag.state.typed_proxy.Ipvs; a port's endpoints are its real servers of weight > 0."""
        for svc in services:
            for port in svc.ports:
                for family, ip in cluster_ips(svc):  # IPVS holds both families' virtual servers
                    key = ((port.get("protocol") or "TCP").lower(), ip, int(port["port"]))
                    vs = ipvs.services.get(key)
                    reals = (r.target for r in vs.reals if r.weight > 0) if vs is not None else ()
                    yield PortView.of(svc, port, family, ip, vs, reals, (ipvs, key))

    def missing_words(self, v: PortView) -> Words:
        from kpdiag.parse.addr import hostport

        ipvs, (proto, ip, number) = v.context
        addr = hostport(ip, number)
        return Words(
            f"{v.svc.key} {addr}/{proto} has ready endpoints but no IPVS virtual server on this node",
            (
                f"ipvsadm -Ln {_flag(proto)} {addr}",
                "kubectl -n kube-system logs <kube-proxy pod on this node> | grep -iE 'ipvs|ipset' | tail",
            ),
            ipvs.absent(_flag(proto), addr),
        )

    def mismatch_words(self, v: PortView, have: set[str], text: str) -> Words:
        from kpdiag.parse.addr import hostport

        ipvs, (proto, ip, number) = v.context
        vs = v.programmed
        return Words(
            f"{v.svc.key} {vs.name}: {text}",
            (f"ipvsadm -Ln {_flag(proto)} {hostport(ip, number)}", KUBE_PROXY_RESTART),
            ipvs.reals(vs, have),
        )

    def signs(self, state: NodeState) -> str | None:
        from kpdiag.bundle import sources

        rs = state.iptables()
        if rs is not None and (
            "KUBE-IPVS-FILTER" in rs.chain_names("filter") or "KUBE-LOAD-BALANCER" in rs.chain_names("nat")
        ):
            return "iptables chains KUBE-IPVS-FILTER / KUBE-LOAD-BALANCER"
        text = state.bundle.read_text(sources.IPVSADM)
        if text and any(line.startswith("-A ") for line in text.splitlines()):
            return "IPVS virtual servers (ipvsadm -Sn)"
        if any(link.get("ifname") == "kube-ipvs0" for link in state.ip_addr or []):
            return "interface kube-ipvs0"
        return None

    def service_table(self, state: NodeState) -> ServiceTable | None:
        services = state.ipvs
        if services is None:
            return None
        bound = _bound(state)
        table: ServiceTable = {}
        for vs in services.values():
            if vs.addr is None or (bound is not None and vs.addr not in bound):
                continue  # fwmark services and NodePorts on the node's own addresses are per node
            table[f"{vs.addr}:{vs.port}/{vs.proto}"] = (
                "",
                tuple(sorted(r.target for r in vs.reals if r.weight > 0)),
                False,
            )
        return table

    def tracer(self, state: NodeState, family: int = 4, rules: Ruleset | None = None) -> PacketWalker | None:
        from kpdiag.trace.ipvs import IpvsTracer

        rs = rules if rules is not None else state.iptables("ip6tables-save" if family == 6 else "iptables-save")
        if rs is None or state.ipvs is None:
            return None
        vs_ct = state.sysctl_value("net.ipv4.vs.conntrack")
        vs_conntrack = None if vs_ct is None else vs_ct.value.strip() != "0"
        return IpvsTracer(rs, state.routing, state.ipsets, state.ipvs, vs_conntrack=vs_conntrack)

    def trace_missing(self, state: NodeState) -> str | None:
        from kpdiag.bundle import sources

        return None if state.ipvs is not None else f"no IPVS state to trace ({sources.IPVSADM} missing or unreadable)"


def _bound(state: NodeState) -> set[str] | None:
    """The addresses on kube-ipvs0 (the ClusterIPs kube-proxy bound), or None when the addresses were not read."""
    links = state.ip_addr
    if links is None:
        return None
    for link in links:
        if link.get("ifname") == "kube-ipvs0":
            return {a.get("local") for a in link.get("addr_info") or [] if a.get("local")}
    return None


def _flag(proto: str) -> str:
    return "-t" if proto == "tcp" else "-u"
