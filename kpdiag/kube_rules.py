"""What kube-proxy programmed, read back from its iptables rules: services, ClusterIPs, endpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from .parse.iptables import Rule, Ruleset


@dataclass
class ProgrammedPort:
    name: str  # "ns/svc:port" (kube-proxy's comment)
    cluster_ip: str | None
    proto: str | None
    port: int | None
    chain: str | None  # KUBE-SVC-… (None when the port has no endpoints)
    rule: Rule | None  # the KUBE-SERVICES rule
    endpoints: list[str] = field(default_factory=list)  # "ip:port" DNAT targets
    no_endpoints_rule: Rule | None = None  # filter REJECT "has no endpoints"
    cluster_cidr: str | None = None  # from "! -s CIDR … -j KUBE-MARK-MASQ"


def _comment_name(rule: Rule) -> str | None:
    c = rule.comment
    if not c:
        return None
    for suffix in (" cluster IP", " has no endpoints", " external IP", " loadbalancer IP", " has no local endpoints"):
        if c.endswith(suffix):
            return c[: -len(suffix)]
    return c


def _dport(rule: Rule) -> int | None:
    for m in rule.matches:
        if m.module in ("tcp", "udp", "sctp"):
            opt = m.get("--dport") or m.get("--destination-port")
            if opt and opt.value.isdigit():
                return int(opt.value)
    return None


def programmed_ports(rs: Ruleset) -> dict[str, ProgrammedPort]:
    """Every service port kube-proxy programmed, by ``ns/svc:port`` name (ClusterIP entries)."""
    out: dict[str, ProgrammedPort] = {}
    services = rs.chain("nat", "KUBE-SERVICES")
    if services is not None:
        for r in services.rules:
            c = r.comment or ""
            if not c.endswith(" cluster IP") or not r.target or not r.target.startswith("KUBE-SVC-"):
                continue
            name = _comment_name(r)
            port = ProgrammedPort(name, r.dst.text.split("/")[0] if r.dst else None, r.proto, _dport(r), r.target, r)
            chain = rs.chain("nat", r.target)
            if chain is not None:
                for sr in chain.rules:
                    if sr.target == "KUBE-MARK-MASQ" and sr.src is not None and sr.src_neg:
                        port.cluster_cidr = sr.src.text
                    elif sr.target and sr.target.startswith("KUBE-SEP-"):
                        sep = rs.chain("nat", sr.target)
                        for er in sep.rules if sep is not None else []:
                            if er.target == "DNAT":
                                opt = er.target_opt("--to-destination")
                                if opt:
                                    port.endpoints.append(opt.value)
            out[name] = port
    filt = rs.chain("filter", "KUBE-SERVICES")
    if filt is not None:
        for r in filt.rules:
            c = r.comment or ""
            if c.endswith(" has no endpoints") and r.target in ("REJECT", "DROP"):
                name = _comment_name(r)
                port = out.get(name)
                if port is None:
                    port = out[name] = ProgrammedPort(name, r.dst.text.split("/")[0] if r.dst else None, r.proto, _dport(r), None, None)
                port.no_endpoints_rule = r
    return out


def cluster_cidr(rs: Ruleset) -> str | None:
    for p in programmed_ports(rs).values():
        if p.cluster_cidr:
            return p.cluster_cidr
    return None
