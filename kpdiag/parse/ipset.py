"""Parser for ``ipset save`` output, and membership tests for ``-m set --match-set``."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from .addr import Prefix, parse_ip, parse_prefix

_PROTOS = {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "icmpv6": 58}

# types whose dimensions kpdiag can evaluate: dimension kinds in order
_KINDS = {
    "hash:ip": ("ip",),
    "hash:net": ("net",),
    "hash:ip,port": ("ip", "port"),
    "hash:net,port": ("net", "port"),
    "hash:ip,port,ip": ("ip", "port", "ip"),
    "hash:ip,port,net": ("ip", "port", "net"),
    "hash:net,port,net": ("net", "port", "net"),
    "bitmap:port": ("port",),
    "hash:ip,mark": ("ip", "mark"),
}


@dataclass
class IpSet:
    name: str
    type: str
    family: str = "inet"
    lineno: int = 0
    options: list[str] = field(default_factory=list)
    entries: list[tuple] = field(default_factory=list)  # parsed dimension tuples
    raw_entries: list[str] = field(default_factory=list)
    _exact: set | None = None

    @property
    def kinds(self) -> tuple[str, ...] | None:
        return _KINDS.get(self.type)

    def lookup(self, values: list) -> bool:
        """``values`` one per dimension: ip → (int, version), port → (proto, port), mark → int."""
        kinds = self.kinds or ()  # (callers look a set up only when its kinds are known)
        if "net" not in kinds:
            if self._exact is None:
                self._exact = set(self.entries)
            return tuple(values) in self._exact
        for entry in self.entries:
            ok = True
            for kind, want, have in zip(kinds, entry, values):
                if kind == "net":
                    prefix: Prefix = want
                    if not prefix.contains(have[0], have[1]):
                        ok = False
                        break
                elif want != have:
                    ok = False
                    break
            if ok:
                return True
        return False


def _parse_port(text: str) -> tuple[str, int]:
    proto, sep, port = text.rpartition(":")
    if not sep:
        proto, port = "tcp", text
    return proto.lower(), int(port)


def _parse_element(kinds: tuple[str, ...], text: str) -> tuple[object, ...]:
    parts = text.split(",")
    if len(parts) != len(kinds):
        raise ValueError(f"element {text!r} does not have {len(kinds)} parts")
    out: list[object] = []
    for kind, part in zip(kinds, parts):
        if kind == "ip":
            out.append(parse_ip(part))
        elif kind == "net":
            out.append(parse_prefix(part))
        elif kind == "port":
            out.append(_parse_port(part))
        elif kind == "mark":
            out.append(int(part, 0))
    return tuple(out)


def parse_ipset_save(data: str, source: str = "ipset save") -> dict[str, IpSet]:
    sets: dict[str, IpSet] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        verb = parts[0]
        if verb in ("create", "-N", "-exist"):
            if len(parts) < 3:
                raise InputError(source, f"'create' needs a name and a type: {line}", lineno)
            s = IpSet(parts[1], parts[2], lineno=lineno, options=parts[3:])
            if "family" in parts:
                k = parts.index("family")
                if k + 1 < len(parts):
                    s.family = parts[k + 1]
            sets[s.name] = s
        elif verb in ("add", "-A"):
            if len(parts) < 3:
                raise InputError(source, f"'add' needs a set and an element: {line}", lineno)
            found = sets.get(parts[1])
            if found is None:
                raise InputError(source, f"'add' to set {parts[1]!r} that was not created before", lineno)
            s = found
            s.raw_entries.append(parts[2])
            if s.kinds is not None:
                try:
                    s.entries.append(_parse_element(s.kinds, parts[2]))
                except ValueError as exc:
                    raise InputError(source, f"bad element for {s.type}: {exc}", lineno) from None
        else:
            raise InputError(source, f"unexpected line: {line[:120]}", lineno)
    return sets
