"""Session affinity with recorded state: an iptables ``-m recent --rcheck`` rule against the node's xt_recent tables.

kube-proxy's ClientIP affinity sends a client back to the endpoint whose recent table holds it while the entry is
younger than ``--seconds``; the tables are recorded in ``node/xt-recent.json`` (kpdiag/parse/recent.py). Without them
a trace assumes a new client (kpdiag/trace/xt_matches.py ``_m_recent``).
"""

from __future__ import annotations

import datetime
import ipaddress

from typing import TYPE_CHECKING

from ..parse.addr import int_to_ip

if TYPE_CHECKING:
    from ..parse.iptables import Match, Rule
    from ..parse.recent import RecentState
    from .walker import PacketState


def recorded(recent: RecentState, name: str, seconds: str | None, m: Match, st: PacketState, rule: Rule) -> float:
    """``-m recent --rcheck``/``--update`` against the recorded table ``name``: 1 when the packet's source (or, with
    ``--rdest``, destination) has an entry younger than ``--seconds`` when the tables were read, else 0."""
    if m.get("--hitcount") or m.get("--rttl"):
        return _unknown(st, rule, name, "--hitcount/--rttl")
    addr = ipaddress.ip_address(int_to_ip(st.dst if m.get("--rdest") else st.src, st.ver))
    mask = m.get("--mask")
    if mask is not None:
        try:
            addr = ipaddress.ip_address(int(addr) & int(ipaddress.ip_address(mask.value)))
        except ValueError:
            return _unknown(st, rule, name, f"--mask {mask.value}")
    last = recent.tables.get(name, {}).get(str(addr))
    where = recent.source
    if last is None:
        if not any(str(addr) in entries for entries in recent.tables.values()):  # else another rule takes it
            st.note(f"session affinity: {addr} has no entry in the node's recent tables ({where}): a new client")
        return 0.0
    age = recent.age(last)
    if age is None:
        st.note(
            f"session affinity ({name}): {addr} has an entry, but when it was last seen is not known ({where}): "
            "taken as recorded, the kernel may have let it expire",
            uncertain=True,
        )
        return 1.0
    try:
        limit = float(seconds) if seconds else None
    except ValueError:
        return _unknown(st, rule, name, f"--seconds {seconds}")
    if limit is not None and age > limit:
        st.note(f"session affinity ({name}): {addr}'s entry is {age:.0f} s old, past --seconds {seconds}: expired")
        return 0.0
    seen = recent.read_at - datetime.timedelta(seconds=age) if recent.read_at else None
    until = ""
    if limit is not None:
        end = (
            f"{(seen + datetime.timedelta(seconds=limit)):%Y-%m-%d %H:%M:%S} UTC"
            if seen
            else f"{limit - age:.0f} s after the tables were read"
        )
        until = f" until {end} (last seen + --seconds {seconds})"
    when = f"{seen:%Y-%m-%d %H:%M:%S} UTC" if seen else f"{age:.0f} s before the tables were read"
    st.note(
        f"session affinity ({name}): {addr} was recorded here, last seen {when} ({where}): the kernel sends it to "
        f"this endpoint again{until}"
    )
    return 1.0


def _unknown(st: PacketState, rule: Rule, name: str, what: str) -> float:
    st.note(f"{rule.where}: -m recent {what} ({name}): kpdiag cannot evaluate it", uncertain=True)
    return 0.0
