"""What a trace returns: a packet, its possible paths, each with probability, steps and verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..parse.addr import hostport, int_to_ip, parse_ip

PROTO_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "sctp": 132, "icmpv6": 58, "ipv6-icmp": 58, "all": 0}
SCHEMA = "kpdiag.trace/v1"
CT_STATES = ("new", "related", "established")


@dataclass(frozen=True)
class Packet:
    src: str
    dst: str
    proto: str = "tcp"
    dport: int | None = None
    sport: int = 40000
    origin: str = "external"  # external | pod | node
    iif: str | None = None
    icmp_type: int = 8  # echo-request
    icmp_code: int = 0
    # the conntrack state the packet arrives with: "new" (the first packet of a connection), "related" (an ICMP error
    # about a tracked connection, such as "fragmentation needed") or "established"; only a new packet meets nat chains
    ct_state: str = "new"

    def __post_init__(self) -> None:
        proto = self.proto.lower()
        if proto not in ("tcp", "udp", "sctp", "icmp"):
            raise ValueError(f"protocol must be tcp, udp, sctp or icmp, not {self.proto!r}")
        object.__setattr__(self, "proto", proto)
        if self.origin not in ("external", "pod", "node"):
            raise ValueError(f"--from must be external, pod or node, not {self.origin!r}")
        versions = []
        for name in ("src", "dst"):
            try:
                versions.append(parse_ip(getattr(self, name))[1])
            except ValueError:
                raise ValueError(f"--{name} {getattr(self, name)!r} is not an IP address") from None
        if versions[0] != versions[1]:
            raise ValueError(
                f"--src {self.src} is IPv{versions[0]} and --dst {self.dst} IPv{versions[1]}: a packet has one IP version"
            )
        if proto != "icmp" and self.dport is None:
            raise ValueError(f"{proto} needs --dport")
        if self.dport is not None and not 0 <= self.dport <= 65535:
            raise ValueError(f"--dport {self.dport} is not a port number")
        if not 0 <= self.sport <= 65535:
            raise ValueError(f"--sport {self.sport} is not a port number")
        if self.ct_state not in CT_STATES:
            raise ValueError(f"the conntrack state must be one of {', '.join(CT_STATES)}, not {self.ct_state!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["from"] = d.pop("origin")
        if self.proto != "icmp":
            d.pop("icmp_type")
            d.pop("icmp_code")
        if self.ct_state == "new":
            d.pop("ct_state")
        return d


@dataclass(frozen=True)
class Step:
    hook: str
    table: str
    chain: str
    rule: int | None  # 1-based index in the chain; None for a chain policy or a non-rule step
    text: str
    action: str
    source: str | None = None  # file:line

    def to_dict(self) -> dict[str, Any]:
        return {
            "hook": self.hook,
            "table": self.table,
            "chain": self.chain,
            "rule": self.rule,
            "text": self.text,
            "action": self.action,
            "source": self.source,
        }


@dataclass(frozen=True)
class Path:
    probability: float
    verdict: str  # accept | drop | reject
    dnat: str | None
    masquerade: bool
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    uncertain: bool = False
    snat: str | None = None
    delivery: str | None = None  # "local" | "forward" | None (dropped before routing)
    final_dst: str | None = None
    rules_evaluated: int = 0
    reject_with: str | None = None
    # the routing decision after DNAT: {"type", "prefix", "dev", "gateway", "table"}; None before routing
    route: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "probability": self.probability,
            "verdict": self.verdict,
            "dnat": self.dnat,
            "masquerade": self.masquerade,
            "steps": [s.to_dict() for s in self.steps],
            "notes": list(self.notes),
            "uncertain": self.uncertain,
            "snat": self.snat,
            "delivery": self.delivery,
            "final_dst": self.final_dst,
            "rules_evaluated": self.rules_evaluated,
            "reject_with": self.reject_with,
            "route": dict(self.route) if self.route is not None else None,
        }


@dataclass(frozen=True)
class TraceResult:
    packet: Packet
    mode: str
    paths: tuple[Path, ...]
    rules_evaluated: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    sources: tuple[str, ...] = ()
    # not None when the trace did not follow every path (its work budget, a jump loop): why, for the notes; the
    # probability that was not traced is 1 - the sum of the paths'
    incomplete: str | None = None
    # a live trace that read only the rules its packet can meet: what the read held (kpdiag/collect/dest_rules.py)
    read: dict[str, Any] | None = None
    # kpdiag trace --kernel: the kernel's own trace of the probe and how it compares (kpdiag/trace/kernel.py)
    kernel: dict[str, Any] | None = None

    @property
    def uncertain(self) -> bool:
        return self.incomplete is not None or not self.paths or any(p.uncertain for p in self.paths)

    @property
    def complete(self) -> bool:
        return self.incomplete is None and bool(self.paths)

    def dnat_set(self) -> set[str]:
        return {p.dnat for p in self.paths if p.dnat}

    def verdicts(self) -> set[str]:
        return {p.verdict for p in self.paths}

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema": SCHEMA,
            "packet": self.packet.to_dict(),
            "mode": self.mode,
            "paths": [p.to_dict() for p in self.paths],
            "rules_evaluated": self.rules_evaluated,
            "uncertain": self.uncertain,
            "complete": self.complete,
            "notes": list(self.notes),
            "sources": list(self.sources),
        }
        if self.read is not None:
            out["read"] = self.read
        if self.kernel is not None:
            out["kernel"] = self.kernel
        return out


def ip_text(value: int, version: int = 4) -> str:
    return int_to_ip(value, version)


def endpoint_text(value: int, version: int, port: int | None) -> str:
    """An address held as an integer, with its port: ip:port, [ip6]:port, or the address alone."""
    return hostport(int_to_ip(value, version), port)
