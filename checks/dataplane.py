"""One dataplane model for every proxy mode: a Service port on one ClusterIP, and what this node programs for it.

kube-proxy writes the same thing three ways — a KUBE-SVC/KUBE-SVL chain (iptables), a virtual server with real
servers (IPVS), a service-/local- chain behind the service-ips map (nftables). Each mode has one adapter here that
reads its rules into :class:`PortView` (the API's Service port, whether the mode programmed it, the endpoints it
sends new connections to, and where that is written). The two questions every mode asks are then answered once:

* :func:`missing` — the port has ready endpoints in the API, and this node programmed nothing for it;
* :func:`mismatch` — it is programmed, and its endpoints are not the ones kube-proxy should use here (ready, else
  serving-terminating; narrowed by topology hints; this node's own under internalTrafficPolicy: Local).

The findings keep their mode's id (KP202/KP203 iptables, KP302/KP303 IPVS, KP402/KP403 nftables): the ids are in
users' ``--select``/``--ignore`` lists and in their runbooks, and the fix commands are the mode's own. The adapter
supplies the words (which rule or map is missing, which command shows it); the decision is here, the same for all.
A fourth mode (a replacement such as Cilium) is one more adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from kpdiag import dataplane as dataplanes
from kpdiag import evidence as ev
from kpdiag.bundle import sources
from kpdiag.checkapi import Skip
from kpdiag.model import Evidence
from kpdiag.parse.addr import hostport

from .service import _services, _svc_ev, drift, wanted_targets


@dataclass
class PortView:
    """One Service port on one ClusterIP, as the API defines it and as this node's rules program it."""

    svc: object
    port: dict
    family: int  # 4 or 6
    ip: str  # the ClusterIP of that family
    ready: int  # ready endpoints of that family in the API
    programmed: object | None  # the mode's object (KUBE-SVC chain, virtual server, nft chain); None: not programmed
    endpoints: frozenset[str] = frozenset()  # where it sends new connections ("ip:port", "[ip6]:port")
    context: object = None  # the mode's own extras for its words (the ruleset, the map family, the key)

    @property
    def number(self) -> int:
        return int(self.port.get("port"))

    @property
    def proto(self) -> str:
        return (self.port.get("protocol") or "TCP").lower()


@dataclass(frozen=True)
class Words:
    """One finding's words in one mode: the summary, the commands that show the rules, and where they say it."""

    summary: str
    fix: tuple[str, ...]
    rules: Evidence  # the rule, virtual server or map element (or its absence)


@dataclass(frozen=True)
class Adapter:
    """What one proxy mode contributes: its port views, and its words for the two findings."""

    mode: str
    views: Callable[[object], Iterable[PortView]]
    missing_words: Callable[[object, PortView], Words]
    mismatch_words: Callable[[object, PortView, set, str], Words]  # (ctx, view, have, drift text)
    verb: str = "the node DNATs to"  # how the drift says where new connections go
    counts_share: bool = False  # a drift also says which share of connections goes astray (iptables' words)

    @property
    def dataplane(self):
        return dataplanes.get(self.mode)


def missing(ctx, new, adapter: Adapter):
    """Service ports with ready endpoints that this node's rules do not program at all."""
    for view in adapter.views(ctx):
        if view.ready and view.programmed is None:
            words = adapter.missing_words(ctx, view)
            yield new(
                words.summary,
                fix=words.fix,
                evidence=[_svc_ev(ctx, view.svc, _api_side(view, adapter)), words.rules],
                subject=f"{view.svc.key}:{view.number}",
                data={**_data(view, adapter.mode), "programmed": False, "ready_endpoints": view.ready},
            )


def mismatch(ctx, new, adapter: Adapter):
    """Programmed Service ports whose endpoints differ from the ones kube-proxy should use on this node."""
    for view in adapter.views(ctx):
        if view.programmed is None:
            continue
        want = wanted_targets(ctx, view.svc, view.port, view.family)
        if not want:
            continue  # nothing usable (KP101/KP102 say so), or this node's name/zone is unknown: not judged
        have = set(view.endpoints)
        if have == want:
            continue
        text, api_ev = drift(ctx, have, want, verb=adapter.verb)
        gone = have - want
        if gone and adapter.counts_share:  # iptables' words have always said which share goes astray
            text += (
                f" (~{len(gone) / len(have) * 100:.0f}% of connections go to endpoints this node should not use: "
                "not ready, gone, or hinted for another zone)"
            )
        words = adapter.mismatch_words(ctx, view, have, text)
        yield new(
            words.summary,
            fix=words.fix,
            evidence=[words.rules, api_ev],
            subject=f"{view.svc.key}:{view.number}",
            data={
                **_data(view, adapter.mode),
                "programmed": True,
                "endpoints": sorted(have),
                "expected": sorted(want),
                "stale": sorted(have - want),
                "missing": sorted(want - have),
            },
        )


def _data(view: PortView, mode: str) -> dict:
    return {
        "service": view.svc.key,
        "port": view.number,
        "protocol": view.proto,
        "cluster_ip": view.ip,
        "family": view.family,
        "mode": mode,
    }


def _api_side(view: PortView, adapter: Adapter) -> str:
    if adapter.counts_share:
        return f"clusterIP {view.ip} port {view.number}, {view.ready} ready endpoint(s)"
    return f"clusterIP {view.ip} port {view.number}/{view.proto}"


def _ready(svc, port, family: int) -> int:
    return sum(1 for e in svc.endpoints_for(port, family=family) if e.ready)


def _ips(svc):
    return [(6 if ":" in ip else 4, ip) for ip in svc.cluster_ips]


KUBE_PROXY_LOG = "kubectl -n kube-system logs <kube-proxy pod on this node> --tail=100"
KUBE_PROXY_RESTART = "kubectl -n kube-system delete pod <kube-proxy pod on this node>"


# ----------------------------------------------------------------------------------------------------- iptables
def _elsewhere(ctx, adapter: Adapter) -> None:
    """Skip when kube-proxy runs another known mode than the adapter's: its rules are not where Services live."""
    running = ctx.dataplane
    if running.known and running is not adapter.dataplane:
        raise Skip(adapter.dataplane.not_where_services_live(running))


def _iptables_views(ctx):
    _elsewhere(ctx, IPTABLES)
    for svc in _services(ctx):
        done = set()
        for family, ip in _ips(svc):
            if family in done:
                continue
            done.add(family)
            which = "ip6tables-save" if family == 6 else "iptables-save"
            rs = ctx.iptables(which)
            if rs is None:
                continue  # a dual-stack Service's IPv6 side is judged only when ip6tables-save was read
            progs = ctx.programmed(which) or {}
            for port in svc.ports:
                name = svc.kube_proxy_name(port)
                prog = progs.get(name)
                present = prog is not None and bool(
                    prog.chain or prog.local_policy
                )  # KUBE-SVC/KUBE-SVL, or Local's DROP
                yield PortView(
                    svc,
                    port,
                    family,
                    ip,
                    _ready(svc, port, family),
                    prog if present else None,
                    frozenset(prog.endpoints) if present else frozenset(),
                    (rs, name),
                )


def _iptables_missing(ctx, v: PortView) -> Words:
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


def _iptables_mismatch(ctx, v: PortView, have: set, text: str) -> Words:
    rs, _ = v.context
    return Words(
        f"{v.svc.key} port {v.number}{' (IPv6)' if v.family == 6 else ''}: {text}",
        (KUBE_PROXY_LOG, KUBE_PROXY_RESTART + "   # forces a full resync"),
        ev.iptables_programmed(rs, v.programmed, have),
    )


IPTABLES = Adapter("iptables", _iptables_views, _iptables_missing, _iptables_mismatch, counts_share=True)


# ----------------------------------------------------------------------------------------------------- IPVS
def ipvs_services(ctx):
    if not dataplanes.get(ctx.preflight).services_in_ipvs:  # --preflight ipvs: whatever runs now
        if not ctx.dataplane.known:
            raise Skip("kube-proxy's mode is unknown (no /proxyMode, configuration or rules)")
        _elsewhere(ctx, IPVS)
    services = ctx.ipvs
    if services is None:
        raise Skip(f"kube-proxy runs in IPVS mode but no IPVS state was collected ({sources.IPVSADM})")
    return services


def _ipvs_views(ctx):
    services = ipvs_services(ctx)
    for svc in _services(ctx):
        for port in svc.ports:
            for family, ip in _ips(svc):  # IPVS holds both families' virtual servers
                key = ((port.get("protocol") or "TCP").lower(), ip, int(port.get("port")))
                vs = services.get(key)
                reals = frozenset(r.target for r in vs.reals if r.weight > 0) if vs is not None else frozenset()
                yield PortView(svc, port, family, ip, _ready(svc, port, family), vs, reals, key)


def _ipvs_flag(proto: str) -> str:
    return "-t" if proto == "tcp" else "-u"


def _ipvs_missing(ctx, v: PortView) -> Words:
    proto, ip, number = v.context
    addr = hostport(ip, number)
    return Words(
        f"{v.svc.key} {addr}/{proto} has ready endpoints but no IPVS virtual server on this node",
        (
            f"ipvsadm -Ln {_ipvs_flag(proto)} {addr}",
            "kubectl -n kube-system logs <kube-proxy pod on this node> | grep -iE 'ipvs|ipset' | tail",
        ),
        ev.ipvs_absent(ctx, _ipvs_flag(proto), addr),
    )


def _ipvs_mismatch(ctx, v: PortView, have: set, text: str) -> Words:
    proto, ip, number = v.context
    vs = v.programmed
    return Words(
        f"{v.svc.key} {vs.name}: {text}",
        (f"ipvsadm -Ln {_ipvs_flag(proto)} {hostport(ip, number)}", KUBE_PROXY_RESTART),
        ev.ipvs_reals(ctx, vs, have),
    )


IPVS = Adapter("ipvs", _ipvs_views, _ipvs_missing, _ipvs_mismatch, verb="IPVS sends new connections to")


# ----------------------------------------------------------------------------------------------------- nftables
def nft_programmed(ctx):
    """(kube-proxy's nftables ruleset, its programmed ports keyed (ClusterIP, proto, port)), or Skip with why."""
    from kpdiag.state.kube_nft import programmed_nft

    _elsewhere(ctx, NFTABLES)
    if not ctx.nft_kube_proxy_table:  # (and no need to parse a big iptables-nft ruleset)
        raise Skip("no kube-proxy nftables table on this node (table ip/ip6 kube-proxy): not nftables mode")
    rs = ctx.nft()
    if rs is None:
        raise Skip(f"{sources.NFT_RULESET} could not be parsed (see 'could not read')")
    return rs, programmed_nft(rs)


def _nft_views(ctx):
    rs, prog = nft_programmed(ctx)
    for svc in _services(ctx):
        for port in svc.ports:
            for family, ip in _ips(svc):  # a dual-stack Service's IPv6 side is in table ip6 kube-proxy
                key = (ip, (port.get("protocol") or "TCP").lower(), int(port.get("port")))
                p = prog.get(key)
                present = p is not None and bool(p.chain or p.local_policy)  # a service-/local- chain, or Local's drop
                yield PortView(
                    svc,
                    port,
                    family,
                    ip,
                    _ready(svc, port, family),
                    p if present else None,
                    frozenset(p.endpoints) if present else frozenset(),
                    (rs, key, "ip6" if family == 6 else "ip"),
                )


def _nft_missing(ctx, v: PortView) -> Words:
    rs, key, fam = v.context
    return Words(
        f"{v.svc.key} {key[0]}:{key[2]}/{key[1]} has ready endpoints, but kube-proxy's service-ips map on this node has no entry for it",
        (f"nft list map {fam} kube-proxy service-ips | grep -F " + key[0], KUBE_PROXY_LOG),
        ev.nft_absent(rs, fam, key),
    )


def _nft_mismatch(ctx, v: PortView, have: set, text: str) -> Words:
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


NFTABLES = Adapter("nftables", _nft_views, _nft_missing, _nft_mismatch)

ADAPTERS = {a.mode: a for a in (IPTABLES, IPVS, NFTABLES)}
