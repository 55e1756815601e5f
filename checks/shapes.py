"""Reading the node's interface and route JSON (ip -j addr / route, written by anyone) without trusting its shape: a
field of the wrong type reads as absent, never as an exception."""

from __future__ import annotations


def d(value) -> dict:
    return value if isinstance(value, dict) else {}


def lst(value) -> list:
    return value if isinstance(value, list) else []


def s(value) -> str | None:
    return value if isinstance(value, str) else None


def links(ip_addr) -> list[dict]:
    """The interfaces (``ip -j addr`` objects; None: not collected) with a name, each a dict whose linkinfo, info_data, info_slave_data, addr_info and flags have
    the types ip -j gives them (wrong ones dropped)."""
    out = []
    for link in ip_addr or []:
        name = s(link.get("ifname"))
        if not name:
            continue
        info = d(link.get("linkinfo"))
        out.append(
            {
                **link,
                "ifname": name,
                "master": s(link.get("master")),
                "flags": [f for f in lst(link.get("flags")) if isinstance(f, str)],
                "linkinfo": {
                    "info_kind": s(info.get("info_kind")),
                    "info_slave_kind": s(info.get("info_slave_kind")),
                    "info_data": d(info.get("info_data")),
                    "info_slave_data": d(info.get("info_slave_data")),
                },
                "addr_info": [
                    a
                    for a in lst(link.get("addr_info"))
                    if isinstance(a, dict)
                    and isinstance(a.get("local"), str)
                    and isinstance(a.get("prefixlen", 0), int)
                ],
            }
        )
    return out


def routes(ip_route) -> list[dict]:
    """The routes (``ip -j route`` objects; None: not collected) whose dst, dev, gateway and table are strings where
    present."""
    out = []
    for r in ip_route or []:
        if not isinstance(r.get("dst", ""), str) or not isinstance(r.get("dev", ""), str):
            continue
        if not isinstance(r.get("gateway", ""), str) or not isinstance(r.get("table", "main"), (str, int)):
            continue
        out.append(r)
    return out
