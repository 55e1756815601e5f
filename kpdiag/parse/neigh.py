"""node/neigh.json (the neighbour tables, counted) and node/kernel-log.txt (the kernel's lines about the network)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdiag.errors import InputError

FAMILIES = ("ipv4", "ipv6")
OVERFLOW = re.compile(r"neighbou?r table overflow")


@dataclass(frozen=True)
class NeighFamily:
    """One family's table: ``entries`` of the node's namespace that the kernel may collect (what gc_thresh bounds),
    ``permanent`` (exempt), ``devices`` (entries by device, the largest), ``truncated`` (too many to count here);
    ``total``/``table_fulls``/``forced_gc_runs`` from /proc/net/stat (every namespace), None when not read."""

    family: str
    entries: int | None = None
    permanent: int | None = None
    devices: dict = field(default_factory=dict)
    truncated: bool = False
    total: int | None = None
    table_fulls: int | None = None
    forced_gc_runs: int | None = None


@dataclass(frozen=True)
class NeighTables:
    source: str
    families: dict  # "ipv4" | "ipv6" → NeighFamily


def _count(value, what: str, source: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(source, f"{what}: not a count ({value!r})")
    return value


def parse_neigh(text: str, source: str = "neigh.json") -> NeighTables:
    from kpdiag.parse.decode import load_json

    try:
        doc = load_json(text)
    except ValueError as exc:
        raise InputError(source, f"not JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("format") != "kpdiag.neigh/v1":
        raise InputError(source, 'expected a JSON object with "format": "kpdiag.neigh/v1"')
    stat = doc.get("stat") or {}
    if not isinstance(stat, dict):
        raise InputError(source, '"stat": not an object')
    out = {}
    for fam in FAMILIES:
        part, st = doc.get(fam) or {}, stat.get(fam) or {}
        if not isinstance(part, dict) or not isinstance(st, dict):
            raise InputError(source, f"{fam}: not an object")
        devices = part.get("devices") or {}
        if not isinstance(devices, dict) or not all(isinstance(k, str) for k in devices):
            raise InputError(source, f"{fam}.devices: not an object of counts by device")
        out[fam] = NeighFamily(
            fam,
            _count(part.get("entries"), f"{fam}.entries", source),
            _count(part.get("permanent"), f"{fam}.permanent", source),
            {k: _count(v, f"{fam}.devices.{k}", source) for k, v in devices.items()},
            part.get("truncated") is True,
            _count(st.get("entries"), f"stat.{fam}.entries", source),
            _count(st.get("table_fulls"), f"stat.{fam}.table_fulls", source),
            _count(st.get("forced_gc_runs"), f"stat.{fam}.forced_gc_runs", source),
        )
    return NeighTables(source, out)


@dataclass(frozen=True)
class KernelLog:
    """The kernel's log lines about the network: (line number in the file, text)."""

    source: str
    lines: tuple

    def overflows(self) -> list[tuple[int, str]]:
        """The "neighbour table overflow" lines."""
        return [(n, t) for n, t in self.lines if OVERFLOW.search(t)]


def parse_kernel_log(text: str, source: str = "kernel log") -> KernelLog:
    if "\x00" in text:
        raise InputError(source, "binary data, not the kernel's log lines")
    lines = tuple((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#"))
    return KernelLog(source, lines)
