"""What the active probes of one Service show, port by port — the one reading of probes/service.json that the
observation checks (KP111–KP114), KP201 and the verdict share, so they can never disagree.

For each ClusterIP × Service port: the result through the Service (TCP connect, else the SYN probe; UDP), and the result
of each endpoint probed directly at its targetPort. A status sums it up:

- ``works``: through the Service it answered, and every endpoint probed directly answered too;
- ``partial``: through the Service it answered, but some endpoints do not (a share of connections fail);
- ``fails``: through the Service it did not answer (refused, reset, timeout, an ICMP error);
- ``unknown``: not probed, skipped, or a UDP port that stayed silent (open-and-silent and dropped look the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kpdiag.parse.addr import hostport

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
        return f"{self.target}" + (f" ({self.pod})" if self.pod else "")


@dataclass
class PortObservation:
    svc_key: str
    cluster_ip: str
    port: int
    proto: str
    port_spec: dict
    service_result: str | None  # through the ClusterIP; None when not probed
    service_from: str | None = None
    direct: list[DirectProbe] = field(default_factory=list)

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

    def data(self) -> dict:
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
    def status(self) -> str:
        s = self.service_outcome
        if s == "ok":
            return "partial" if self.failing_direct else "works"
        if s == "unknown":
            return "unknown"
        return "fails"


def observations(state, svc) -> list[PortObservation]:
    """Every (ClusterIP, port) of ``svc`` that was probed, with the direct probes of its endpoints (``state``: the
    state, or the typed input kpdiag.state.typed.Probes — what is read is its ``probes`` and ``probe_results``)."""
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
            kinds = ("tcp-connect", "tcp-syn") if proto == "tcp" else ("udp",)
            res = None
            for kind in kinds:
                res = next(
                    (
                        r
                        for r in state.probe_results(kind)
                        if r.get("target") == target and r.get("result") not in ("skipped",)
                    ),
                    None,
                )
                if res is not None:
                    break
            obs = PortObservation(
                svc.key, ip, number, proto, port, res.get("result") if res else None, res.get("from") if res else None
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
