"""What the active probes of one Service show, port by port — the one reading of probes/service.json that the
observation checks (KP111–KP114), KP201 and the verdict share, so they can never disagree.

For each ClusterIP × Service port: every connect through the Service (a series from distinct source ports, each with the
endpoint it reached when that was visible; one result in older bundles), and the result of each endpoint probed
directly at its targetPort. :func:`judge` explains the failed connects by the endpoints that fail directly before it
blames any layer, and sums the port up:

- ``works``: every connect through the Service answered, and every endpoint probed directly answered too;
- ``partial``: some connects (or some endpoints) fail — a share of clients' connections;
- ``fails``: no connect through the Service answered;
- ``unknown``: not probed, skipped, or a UDP port that stayed silent (open-and-silent and dropped look the same).

and names the layer at fault (``blame``): ``endpoints`` (some fail directly, and they explain every failed connect),
``backend`` (all fail directly), ``service-layer`` (connects fail that no endpoint failing directly explains) or
``unseen`` (connects fail and no endpoint was probed directly). :data:`kpdiag.checks.observed.VERDICT_CHECKS` maps each check to the blames
that may report it: findings of different blames — KP111/KP112 against KP113 or KP114 — never fire together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import math
from dataclasses import dataclass, field

from kpdiag.parse.addr import hostport

if TYPE_CHECKING:
    from kpdiag.state.cluster import Svc

OK_RESULTS = frozenset({"connected", "syn-ack", "udp-reply"})
REFUSED_RESULTS = frozenset({"refused", "rst", "port-unreachable"})
DROP_RESULTS = frozenset({"timeout"})
ICMP_ERRORS = frozenset({"host-unreachable", "net-unreachable", "admin-prohibited", "unreachable", "time-exceeded"})
NOT_OBSERVED = frozenset({"skipped", "interrupted", None})


def outcome(result: str | None, proto: str) -> str:
    """ok | refused | dropped | icmp-error | error | unknown for one probe result."""
    if result in OK_RESULTS:
        return "ok"
    if result in NOT_OBSERVED:
        return "unknown"
    if result in REFUSED_RESULTS:
        return "refused"
    if result in DROP_RESULTS:
        return "unknown" if proto == "udp" else "dropped"  # a silent UDP port is not a failure
    if result in ICMP_ERRORS:
        return "icmp-error"
    return "error"


@dataclass
class DirectProbe:
    ip: str
    port: int
    proto: str
    result: str
    pod: str | None = None
    node: str | None = None
    terminating: bool = False

    @property
    def target(self) -> str:
        return hostport(self.ip, self.port)

    @property
    def outcome(self) -> str:
        return outcome(self.result, self.proto)

    def label(self) -> str:
        where = ", ".join(x for x in (self.pod, f"node {self.node}" if self.node else None) if x)
        return f"{self.target}" + (f" ({where})" if where else "")

    @property
    def failure(self) -> str | None:
        """refused | silent (dropped, an ICMP error, an error) | None (it answered, or not observed)."""
        return _failure(self.outcome)


def _failure(o: str) -> str | None:
    if o == "refused":
        return "refused"
    return "silent" if o in ("dropped", "icmp-error", "error") else None


@dataclass
class PortObservation:
    svc_key: str
    cluster_ip: str
    port: int
    proto: str
    port_spec: dict[str, Any]
    service_result: str | None  # through the ClusterIP (a failed connect's, when one failed); None when not probed
    service_from: str | None = None
    direct: list[DirectProbe] = field(default_factory=list)
    through: list[dict[str, Any]] = field(default_factory=list)  # every connect (probe) through the ClusterIP, in order
    series: dict[str, Any] | None = (
        None  # the series' summary (wanted, sent, stopped, p_missed, reached_known), when recorded
    )
    affinity: bool = False  # sessionAffinity ClientIP: kube-proxy sends every connect of this client to one endpoint

    @property
    def target(self) -> str:
        return f"{hostport(self.cluster_ip, self.port)}/{self.proto}"

    @property
    def service_outcome(self) -> str:
        return outcome(self.service_result, self.proto)

    @property
    def ok_direct(self) -> list[DirectProbe]:
        return [d for d in self.direct if d.outcome == "ok"]

    @property
    def failing_direct(self) -> list[DirectProbe]:
        return [d for d in self.direct if d.outcome in ("refused", "dropped", "icmp-error", "error")]

    def data(self) -> dict[str, Any]:
        """This port's observation as data (a finding's ``data``): through the Service, and each endpoint directly."""
        return {
            "service": self.svc_key,
            "cluster_ip": self.cluster_ip,
            "port": self.port,
            "protocol": self.proto,
            "status": self.status,
            "through_service": {
                "result": self.service_result,
                "outcome": self.service_outcome,
                "from": self.service_from,
            },
            "judgement": self.judgement.data(),
            "endpoints": [
                {
                    "target": d.target,
                    "pod": d.pod,
                    "node": d.node,
                    "result": d.result,
                    "outcome": d.outcome,
                    "terminating": d.terminating,
                }
                for d in self.direct
            ],
        }

    @property
    def judgement(self) -> "Judgement":
        if "_judgement" not in self.__dict__:
            self.__dict__["_judgement"] = judge(self)
        judgement: Judgement = self.__dict__["_judgement"]
        return judgement

    @property
    def status(self) -> str:
        return self.judgement.status

    def may_report(self, blames: Iterable[str]) -> bool:
        """Whether a check that reports the layers ``blames`` may report this port: only the check(s) of its
        judgement's blame (each verdict check declares its blames: checks/observed.py VERDICT_CHECKS)."""
        return self.judgement.blame in blames


CHANCE = 1e-3  # failed connects more than dead endpoints give with this probability or less: something else fails too


def tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


@dataclass(frozen=True)
class Judgement:
    """One port's verdict: what failed through the Service, how much of it the endpoints failing directly explain."""

    status: str  # works | partial | fails | unknown
    blame: str  # none | endpoints | backend | service-layer | unseen
    connects: int  # connects (probes) through the ClusterIP with an answer or a failure
    failed: int
    explained: int  # failed connects the endpoints failing directly account for
    unexplained: int
    attributed: int  # connects whose endpoint is known (conntrack on the node)
    reached: tuple[str, ...]  # endpoints (ip:port) connects were seen to reach
    chance: float | None  # P(this many failures or more from the dead endpoints alone), unattributed failures
    endpoints: int  # endpoints kube-proxy chooses among (the series'), else the ones probed directly

    def data(self) -> dict[str, Any]:
        return {
            "blame": self.blame,
            "connects": self.connects,
            "failed": self.failed,
            "explained": self.explained,
            "unexplained": self.unexplained,
            "attributed": self.attributed,
            "reached": list(self.reached),
            "chance": self.chance,
            "endpoints": self.endpoints,
        }


def _explain(
    obs: PortObservation, fails: list[dict[str, Any]], n_unattr: int, total: int
) -> tuple[int, int, float | None]:
    """(explained, unexplained, chance) of the failed connects: one that reached an endpoint failing directly is
    explained, one that reached an endpoint that answers (or one no Service lists) is not; the others, whose endpoint
    is not known, are explained as far as the endpoints failing the same way (refused, silent) account for them."""
    dead = {d.target: d for d in obs.failing_direct}
    explained = unexplained = 0
    chance = None
    unknown: dict[str, int] = {}
    for r in fails:
        reached = (r.get("detail") or {}).get("reached") if isinstance(r.get("detail"), dict) else None
        kind = _failure(outcome(r.get("result"), obs.proto)) or "silent"
        if reached:
            if reached in dead and dead[reached].failure == kind:
                explained += 1
            else:
                unexplained += 1
        else:
            unknown[kind] = unknown.get(kind, 0) + 1
    for kind, k in sorted(unknown.items()):
        share = sum(1 for d in dead.values() if d.failure == kind) / total if total else 0.0
        # with session affinity the connects are one choice, not many: all failing is what one dead endpoint gives
        p = tail(1, 1, share) if obs.affinity else tail(n_unattr, k, share)
        chance = p if chance is None else min(chance, p)
        if share and p >= CHANCE:
            explained += k
        else:  # no endpoint fails this way, or far more connects fail than the dead endpoints give
            excess = k - int(round(n_unattr * share)) if share and not obs.affinity else k
            explained += k - max(1, excess)
            unexplained += max(1, excess)
    return explained, unexplained, chance


def judge(obs: PortObservation) -> Judgement:
    """Explain every failed connect through the ClusterIP by the endpoints that fail directly before blaming a layer."""
    seen = [r for r in obs.through if outcome(r.get("result"), obs.proto) != "unknown"]
    fails = [r for r in seen if outcome(r.get("result"), obs.proto) != "ok"]
    reached = [r["detail"]["reached"] for r in seen if isinstance(r.get("detail"), dict) and r["detail"].get("reached")]
    total = max(len(obs.direct), int((obs.series or {}).get("endpoints") or 0))
    explained, unexplained, chance = _explain(obs, fails, len(seen) - len(reached), total)
    dead, alive = obs.failing_direct, obs.ok_direct
    if not seen:
        status, blame = "unknown", ("endpoints" if dead and alive else "backend" if dead else "none")
    elif unexplained:
        blame = "service-layer" if alive else ("backend" if dead else "unseen")
        status = "fails" if len(fails) == len(seen) else "partial"
    elif dead and alive:  # the endpoints that answer carry the others' share: it works in part
        status, blame = "partial", "endpoints"
    elif dead:
        status, blame = ("fails" if len(fails) == len(seen) else "partial"), "backend"
    else:
        status, blame = "works", "none"
    return Judgement(
        status,
        blame,
        len(seen),
        len(fails),
        explained,
        unexplained,
        len(reached),
        tuple(sorted(set(reached))),
        chance,
        total,
    )


def share_line(obs: PortObservation) -> str:
    """How often a client fails, as the endpoints explain it: "about 1 in 2 connections fail" (the counts observed,
    which vary from run to run, are in :func:`confidence`)."""
    bad, n = len(obs.failing_direct), obs.judgement.endpoints or len(obs.direct)
    return f"about {bad} in {n} connections fail"


def confidence(obs: PortObservation) -> str:
    """What the verdict on this port rests on: how many connects, which endpoints were reached, which answer directly."""
    j = obs.judgement
    ports = {(r.get("detail") or {}).get("sport") for r in obs.through if isinstance(r.get("detail"), dict)} - {None}
    bits = [
        f"{j.connects} connect(s) through {obs.target}"
        + (f" from {len(ports)} source ports" if len(ports) > 1 else "")
        + f", {j.failed} failed"
    ]
    if obs.direct:
        bits.append(
            "directly: "
            + ", ".join(f"{d.label()} {'answers' if d.outcome == 'ok' else d.result}" for d in obs.direct[:6])
            + (f" and {len(obs.direct) - 6} more" if len(obs.direct) > 6 else "")
        )
    s = obs.series or {}
    if j.attributed:
        counts: dict[str, int] = {}
        for r in obs.through:
            e = (r.get("detail") or {}).get("reached") if isinstance(r.get("detail"), dict) else None
            if e:
                counts[e] = counts.get(e, 0) + 1
        bits.append("reached (conntrack): " + ", ".join(f"{e} ×{c}" for e, c in sorted(counts.items())))
    elif s:
        bits.append(f"which endpoint each connect reached is not known here ({s.get('why_unknown') or 'not recorded'})")
    if s:
        bits.append(
            f"P(an endpoint never reached) = {float(s.get('p_missed') or 0):.2g}"
            + (f"; stopped at {s.get('sent')} of {s.get('wanted')}: {s['stopped']}" if s.get("stopped") else "")
        )
    if obs.affinity and j.endpoints > 1:
        bits.append(
            "sessionAffinity ClientIP: kube-proxy sends this client's connects to one endpoint, so they count as one"
        )
    elif j.connects == 1 and j.endpoints > 1:
        bits.append(f"one connect cannot reach {j.endpoints} endpoints: the endpoints' share is inferred")
    return "; ".join(bits)


def _through(state: Any, target: str, proto: str) -> list[dict[str, Any]]:
    """Every probe through the ClusterIP ``target``: the connects of its series (or the one connect of an older
    bundle), else the SYN probe; UDP's probes."""
    kinds = ("tcp-connect", "tcp-syn") if proto == "tcp" else ("udp",)
    for kind in kinds:
        got = [r for r in state.probe_results(kind) if r.get("target") == target and r.get("result") != "skipped"]
        if got:
            return got
    return []


def observations(state: Any, svc: Svc) -> list[PortObservation]:
    """Every (ClusterIP, port) of ``svc`` that was probed, with the direct probes of its endpoints (``state``: the
    state, or the typed input kpdiag.state.typed_api.Probes — what is read is its ``probes`` and ``probe_results``)."""
    if state.probes is None:
        return []
    out: list[PortObservation] = []
    for ip in svc.cluster_ips:
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").lower()
            number = port.get("port")
            if proto not in ("tcp", "udp") or not isinstance(number, int):
                continue
            target = f"{hostport(ip, number)}/{proto}"
            through = _through(state, target, proto)
            failed = [r for r in through if outcome(r.get("result"), proto) not in ("ok", "unknown")]
            res = failed[0] if failed else (through[0] if through else None)
            series = next(
                (
                    x
                    for x in (state.probes or {}).get("series") or []
                    if isinstance(x, dict) and x.get("target") == target
                ),
                None,
            )
            obs = PortObservation(
                svc.key,
                ip,
                number,
                proto,
                port,
                res.get("result") if res else None,
                res.get("from") if res else None,
                through=through,
                series=series,
                affinity=svc.spec.get("sessionAffinity") == "ClientIP",
            )
            family = 6 if ":" in ip else 4
            seen = set()
            for e in svc.endpoints_for(port, family=family):
                t = svc.target_of(e, port)
                if t is None or (e.ip, t) in seen:
                    continue
                seen.add((e.ip, t))
                direct = next(
                    (
                        r
                        for r in state.probe_results("tcp-connect" if proto == "tcp" else "udp")
                        if r.get("target") == f"{hostport(e.ip, t)}/{proto}"
                    ),
                    None,
                )
                if direct is None or direct.get("result") == "skipped":
                    continue
                obs.direct.append(DirectProbe(e.ip, int(t), proto, direct.get("result"), e.pod, e.node, e.terminating))
            if res is None and not obs.direct:
                continue
            out.append(obs)
    return out


def headline_status(obs: list[PortObservation]) -> str:
    """The Service as a whole: fails if any port fails, partial if any is partial, works if all work, else unknown."""
    statuses = {o.status for o in obs}
    for s in ("fails", "partial"):
        if s in statuses:
            return s
    return "works" if "works" in statuses else "unknown"
