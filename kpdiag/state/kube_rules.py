"""What kube-proxy programmed, read back from its iptables rules: services, ClusterIPs, endpoints."""

from __future__ import annotations

from typing import Any

import re
from dataclasses import dataclass, field

from kpdiag.parse.iptables import Rule, Ruleset


@dataclass
class ProgrammedPort:
    name: str  # "ns/svc:port" (kube-proxy's comment)
    cluster_ip: str | None
    proto: str | None
    port: int | None
    chain: str | None  # KUBE-SVC-… (None when the port has no endpoints)
    rule_ref: tuple[Any, ...] | None = None  # (Chain, position) of the KUBE-SERVICES rule
    endpoints: list[str] = field(default_factory=list)  # "ip:port" DNAT targets
    no_endpoints_ref: tuple[Any, ...] | None = None  # (Chain, position) of filter REJECT "has no endpoints"
    cluster_cidr: str | None = None  # from "! -s CIDR … -j KUBE-MARK-MASQ"
    local_policy: bool = False  # internalTrafficPolicy: Local — KUBE-SVL (this node's endpoints only) or a DROP
    no_local_ref: tuple[Any, ...] | None = None  # (Chain, position) of filter DROP "has no local endpoints" (ClusterIP)

    @property
    def rule(self) -> Rule | None:
        return self.rule_ref[0].rule_at(self.rule_ref[1]) if self.rule_ref else None

    @property
    def no_endpoints_rule(self) -> Rule | None:
        return self.no_endpoints_ref[0].rule_at(self.no_endpoints_ref[1]) if self.no_endpoints_ref else None


# kube-proxy's rules have a fixed shape: read the few fields needed straight from the text
# (structuring 170,000 rules of a 10,000-service node would take seconds)
_COMMENT = re.compile(r'--comment (?:"((?:[^"\\]|\\.)*)"|(\S+))')
_DST = re.compile(r"(?:^|\s)-d (\S+)")
_PROTO = re.compile(r"(?:^|\s)-p (\S+)")
_DPORT = re.compile(r"--dport (\d+)")
_TARGET = re.compile(r"(?:^|\s)-j (\S+)")
_TO = re.compile(r"--to-destination (\S+)")
_NEG_SRC = re.compile(r"(?:^|\s)! -s (\S+)")


def _field(regex: re.Pattern[str], text: str) -> str | None:
    m = regex.search(text)
    if not m:
        return None
    return next((g for g in m.groups() if g is not None), None)


def _comment(text: str) -> str | None:
    m = _COMMENT.search(text)
    if not m:
        return None
    return m.group(1).replace('\\"', '"') if m.group(1) is not None else m.group(2)


def _strip(comment: str) -> str:
    for suffix in (" cluster IP", " has no endpoints", " external IP", " loadbalancer IP", " has no local endpoints"):
        if comment.endswith(suffix):
            return comment[: -len(suffix)]
    return comment


def _follow(rs: Ruleset, port: ProgrammedPort) -> None:
    """Fill in what a port's KUBE-SVC/SVL chain shows: the cluster CIDR it masquerades around, its endpoints."""
    chain = rs.chain("nat", port.chain) if port.chain else None
    for sr in chain.lines if chain is not None else []:
        t = _field(_TARGET, sr)
        if t == "KUBE-MARK-MASQ":
            src = _field(_NEG_SRC, sr)
            if src:
                port.cluster_cidr = src
        elif t and t.startswith("KUBE-SEP-"):
            sep = rs.chain("nat", t)
            for er in sep.lines if sep is not None else []:
                to = _field(_TO, er)
                if to:
                    port.endpoints.append(to)


def _port(
    name: str, text: str, target: str | None, ref: tuple[Any, ...] | None = None, local_policy: bool = False
) -> ProgrammedPort:
    """A port as a KUBE-SERVICES rule ``text`` names it (its ClusterIP, protocol and port)."""
    dst = _field(_DST, text)
    dport = _field(_DPORT, text)
    return ProgrammedPort(
        name,
        dst.split("/")[0] if dst else None,
        _field(_PROTO, text),
        int(dport) if dport else None,
        target,
        ref,
        local_policy=local_policy,
    )


def programmed_ports(rs: Ruleset, only: str | None = None) -> dict[str, ProgrammedPort]:
    """Every service port kube-proxy programmed, by ``ns/svc:port`` name (ClusterIP entries); ``only`` (NS/NAME):
    that Service's ports alone (a partial bundle holds no other Service's chains)."""
    out: dict[str, ProgrammedPort] = {}
    services = rs.chain("nat", "KUBE-SERVICES")
    for pos, text in enumerate(services.lines if services is not None else []):
        if only is not None and only not in text:
            continue
        c = _comment(text) or ""
        target = _field(_TARGET, text)
        if not c.endswith(" cluster IP") or not target or not target.startswith(("KUBE-SVC-", "KUBE-SVL-")):
            continue
        name = _strip(c)
        port = _port(name, text, target, (services, pos), local_policy=target.startswith("KUBE-SVL-"))
        _follow(rs, port)
        out[name] = port
    filt = rs.chain("filter", "KUBE-SERVICES")
    for pos, text in enumerate(filt.lines if filt is not None else []):
        if only is not None and only not in text:
            continue
        c = _comment(text) or ""
        local = c.endswith(" has no local endpoints")  # internalTrafficPolicy: Local, none on this node
        if (local or c.endswith(" has no endpoints")) and _field(_TARGET, text) in ("REJECT", "DROP"):
            name = _strip(c)
            found = out.get(name)
            if found is None:
                found = out[name] = _port(name, text, None)
            if local:
                found.local_policy, found.no_local_ref = True, (filt, pos)
            else:
                found.no_endpoints_ref = (filt, pos)
    return out


def cluster_cidr(ports: dict[str, ProgrammedPort] | None) -> str | None:
    """The cluster CIDR kube-proxy masquerades around ("! -s CIDR -j KUBE-MARK-MASQ"), if any port shows it."""
    return next((p.cluster_cidr for p in (ports or {}).values() if p.cluster_cidr), None)
