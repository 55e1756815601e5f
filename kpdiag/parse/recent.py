"""The ``xt_recent`` tables (``/proc/net/xt_recent/NAME``) as the node collector records them: session affinity state.

kube-proxy's ClientIP affinity (iptables mode) records each client in the ``recent`` table of the endpoint it was
sent to (``-m recent --name KUBE-SEP-… --set``) and sends the client's next connections there while the entry is
younger than ``--seconds`` (``--rcheck``). The kernel prints an entry as
``src=ADDR ttl: T last_seen: J oldest_pkt: I J1, J2, …`` where J are jiffies (kernel ticks since boot, offset), so
the file also records the jiffies and the time since boot at the moment it was read, from ``/proc/timer_list``:
the ticks per second (HZ) follow from them (on a 64-bit kernel jiffies start at 2^32 - 300·HZ at boot).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
from dataclasses import dataclass, field

from kpdiag.errors import InputError

_ENTRY = re.compile(r"^src=(\S+) ttl: \d+ last_seen: (\d+) oldest_pkt: \d+")
COMMON_HZ = (100, 250, 300, 1000)
INITIAL_JIFFIES = 2**32  # + HZ·(uptime - 300): a 64-bit kernel's jiffies (INITIAL_JIFFIES = (u32)(-300·HZ))


def hz_from(jiffies: int, uptime: float) -> int | None:
    """The kernel's ticks per second from its jiffies and the seconds since boot at the same moment; None when they
    do not tell it (too soon after boot, or no common HZ within 3 %)."""
    if uptime - 300 < 30:
        return None
    raw = (jiffies - INITIAL_JIFFIES) / (uptime - 300)
    best = min(COMMON_HZ, key=lambda hz: abs(hz - raw))
    return best if abs(best - raw) <= 0.03 * best else None


@dataclass(frozen=True)
class RecentState:
    """Every recorded ``xt_recent`` table: {name: {address: last seen (jiffies)}}, and when it was read."""

    source: str
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    read_at: datetime.datetime | None = None
    jiffies: int | None = None
    hz: int | None = None

    def age(self, last_seen: int) -> float | None:
        """Seconds between an entry's last sighting and the moment the tables were read (None: not known)."""
        if self.jiffies is None or self.hz is None:
            return None
        return max(0, self.jiffies - last_seen) / self.hz


def parse_xt_recent(text: str, source: str = "xt-recent.json") -> RecentState:
    """``{"read_at": ISO time, "jiffies": N, "uptime": S, "tables": {NAME: the file's text}}`` → RecentState."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(source, f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), dict):
        raise InputError(source, 'not an object with "tables"')
    tables: dict[str, dict[str, int]] = {}
    for name, body in doc["tables"].items():
        if not isinstance(body, str):
            raise InputError(source, f"table {name!r}: not the file's text")
        entries = tables.setdefault(str(name), {})
        for n, line in enumerate(body.splitlines(), 1):
            m = _ENTRY.match(line)
            if m is None:
                raise InputError(source, f"table {name!r} line {n}: not an xt_recent entry: {line[:80]!r}")
            try:
                entries[str(ipaddress.ip_address(m.group(1)))] = int(m.group(2))
            except ValueError:
                raise InputError(source, f"table {name!r} line {n}: {m.group(1)[:60]!r} is not an address") from None
    jiffies, uptime = doc.get("jiffies"), doc.get("uptime")
    ok = isinstance(jiffies, int) and isinstance(uptime, (int, float)) and not isinstance(uptime, bool)
    read_at = None
    if isinstance(doc.get("read_at"), str):
        try:
            read_at = datetime.datetime.fromisoformat(doc["read_at"].replace("Z", "+00:00"))
        except ValueError:
            raise InputError(source, f"read_at {doc['read_at'][:40]!r} is not an ISO time") from None
    return RecentState(
        source,
        tables,
        read_at,
        jiffies if ok else None,
        hz_from(jiffies, float(uptime))
        if isinstance(jiffies, int) and isinstance(uptime, (int, float)) and ok
        else None,
    )
