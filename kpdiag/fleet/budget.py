"""The memory all node reports of one cluster run may take together (`kpdiag cluster`, `kpdiag analyze DIR`).

One report is capped on its own (64 MiB of text); this caps their sum, so that many big reports cannot take the
machine's memory. What is counted is an estimate of the report once parsed, from its JSON text as it is read: its
bytes, plus what each object, array, string and element costs in Python (a report of many small objects takes
several times its text). A programmed table identical to one already kept is shared (intern_programmed) and not
counted twice. A report that would pass the cap is not read (or not kept): its node is named, with the cap, and the
diagnosis goes on with the others.
"""

from __future__ import annotations

import threading

TOTAL_REPORTS = 256 * 1024 * 1024  # estimated bytes of memory for every node report of a run together

# Python's cost of a JSON token beyond its text (64-bit CPython: a dict is ~200 bytes, a list ~60, a str object
# ~50 over its characters, a pointer per element), measured with tracemalloc over reports and their worst shapes
_OBJECT, _ARRAY, _QUOTE, _COMMA = 150, 60, 24, 16


def weight(data: bytes) -> int:
    """The estimated memory of the parsed JSON ``data`` (a whole text or one chunk of it: the counts add up)."""
    return (
        len(data)
        + _OBJECT * data.count(b"{")
        + _ARRAY * data.count(b"[")
        + _QUOTE * data.count(b'"')
        + _COMMA * data.count(b",")
    )


def mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


class ReportsOverBudget(Exception):
    """This report would take the node reports of the run past the cap."""


class ReportBudget:
    """What the reports kept so far take, against the cap; thread-safe (the workers read reports at once)."""

    def __init__(self, limit: int = TOTAL_REPORTS):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        """Count ``n`` more, or raise ReportsOverBudget (nothing counted) when that would pass the cap."""
        with self._lock:
            if self.used + n > self.limit:
                raise ReportsOverBudget()
            self.used += n

    def give(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)

    def reason(self, what: str) -> str:
        """The one line for a report that was not read or not kept."""
        return (
            f"{what}: not read: the node reports together would pass kpdiag's cap of {mib(self.limit)} in memory "
            "(estimated from their JSON; the nodes read first are kept)"
        )


def table_weight(report: dict) -> int:
    """The weight of a report's programmed table, which a report shares with a node kept before it when both have the
    same table (kpdiag/fleet/aggregate.py ``intern_programmed``): what is given back then."""
    prog = (report.get("extra") or {}).get("programmed")
    return len(prog["entries"]) if isinstance(prog, dict) and isinstance(prog.get("entries"), str) else 0
