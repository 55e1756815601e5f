"""The node's links, addresses, routes and policy-routing rules read over rtnetlink (pyroute2), in the shape ``ip -j
addr``, ``ip -j route show table all`` and ``ip -j rule show`` print them (node/ip-addr.json, ip-route.json,
ip-rule.json)."""

from __future__ import annotations

import socket
from typing import Any

_SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}
_RT_TYPES = {
    1: "unicast",
    2: "local",
    3: "broadcast",
    4: "anycast",
    5: "multicast",
    6: "blackhole",
    7: "unreachable",
    8: "prohibit",
    9: "throw",
    10: "nat",
}
_TABLES = {253: "default", 254: "main", 255: "local"}


_RULE_ACTIONS = {1: None, 2: "goto", 3: "nop", 6: "blackhole", 7: "unreachable", 8: "prohibit"}
_FIB_RULE_INVERT = 0x2
_IP_PROTOS = {1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp"}


def _range(value) -> tuple[int, int] | None:
    """A netlink port or uid range as pyroute2 gives it ("1000:2000", or an object with start/end)."""
    if value is None:
        return None
    if isinstance(value, str):
        lo, _, hi = value.strip("'").partition(":")
        return int(lo), int(hi or lo)
    get = value.get_attr if hasattr(value, "get_attr") else value.get
    return int(get("start")), int(get("end"))


def pyroute2_rules(ipr) -> list[dict]:
    """The policy-routing rules of both families in the shape of ``ip -j rule show`` (plus ``family``)."""
    out = []
    for family, fam in ((socket.AF_INET, "inet"), (socket.AF_INET6, "inet6")):
        for r in ipr.get_rules(family=family):
            item: dict = {"family": fam, "priority": r.get_attr("FRA_PRIORITY") or 0}
            if r["flags"] & _FIB_RULE_INVERT:
                item["not"] = None
            for key, attr, length in (("src", "FRA_SRC", "src_len"), ("dst", "FRA_DST", "dst_len")):
                value = r.get_attr(attr)
                item[key] = value or "all" if key == "src" else value
                if value:
                    item[key + "len"] = r[length]
            if item.get("dst") is None:
                item.pop("dst", None)
            for key, attr in (("iif", "FRA_IIFNAME"), ("oif", "FRA_OIFNAME")):
                value = r.get_attr(attr)
                if value:
                    item[key] = value
            proto = r.get_attr("FRA_IP_PROTO")
            if proto:
                item["ipproto"] = _IP_PROTOS.get(int(proto), str(proto))
            mark = r.get_attr("FRA_FWMARK")
            if mark is not None:
                item["fwmark"] = hex(mark)
                item["fwmask"] = hex(r.get_attr("FRA_FWMASK") if r.get_attr("FRA_FWMASK") is not None else 0xFFFFFFFF)
            # ranges as ip -j prints them: "dport": 53, or "dport_start"/"dport_end"; "uid_start"/"uid_end"
            for key, attr in (("sport", "FRA_SPORT_RANGE"), ("dport", "FRA_DPORT_RANGE"), ("uid", "FRA_UID_RANGE")):
                rng = _range(r.get_attr(attr))
                if rng is None:
                    continue
                if key != "uid" and rng[0] == rng[1]:
                    item[key] = rng[0]
                else:
                    item[f"{key}_start"], item[f"{key}_end"] = rng
            for key, attr in (
                ("l3mdev", "FRA_L3MDEV"),
                ("suppress_prefixlen", "FRA_SUPPRESS_PREFIXLEN"),
                ("suppress_ifgroup", "FRA_SUPPRESS_IFGROUP"),
            ):
                value = r.get_attr(attr)
                if (
                    value is not None
                    and int(value) not in (0xFFFFFFFF, -1)
                    and not (attr == "FRA_L3MDEV" and not int(value))
                ):
                    item[key] = int(value)
            if r["tos"]:
                item["tos"] = hex(r["tos"])
            action = _RULE_ACTIONS.get(r["action"], str(r["action"]))
            if action is None:
                table = r.get_attr("FRA_TABLE") or r["table"]
                item["table"] = _TABLES.get(table, str(table))
            else:
                item["action"] = action
            out.append(item)
    return out


_IFF_FLAGS = (
    (0x1, "UP"),
    (0x2, "BROADCAST"),
    (0x8, "LOOPBACK"),
    (0x100, "PROMISC"),
    (0x1000, "MULTICAST"),
    (0x10000, "LOWER_UP"),
)
_IFF_UP, _IFF_RUNNING = 0x1, 0x40
# a route's nexthop flags (rtm_flags), as ``ip -j route`` names them
_RTNH_FLAGS = ((0x1, "dead"), (0x2, "pervasive"), (0x4, "onlink"), (0x8, "offload"), (0x10, "linkdown"))


def pyroute2_dump(ipr: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Links/addresses and routes in the shape of ``ip -j addr`` / ``ip -j route show table all``."""
    names: dict[int, str] = {}
    out_links: dict[int, dict[str, Any]] = {}
    for link in ipr.get_links():
        names[link["index"]] = link.get_attr("IFLA_IFNAME")
        out_links[link["index"]] = _link_entry(link)
    for addr in ipr.get_addr():
        entry = out_links.get(addr["index"])
        if entry is not None:
            entry["addr_info"].append(_addr_entry(addr))
    for entry in out_links.values():
        if "master_index" in entry:
            entry["master"] = names.get(entry.pop("master_index"))
    routes = [
        _route_entry(r, names)
        for family in (socket.AF_INET, socket.AF_INET6)
        for r in ipr.get_routes(family=family)  # every table
    ]
    return list(out_links.values()), routes


def _link_entry(link: Any) -> dict[str, Any]:
    """One link as ``ip -d -j addr`` shows it (its addresses added after)."""
    info = link.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    entry: dict[str, Any] = {
        "ifindex": link["index"],
        "ifname": link.get_attr("IFLA_IFNAME"),
        "mtu": link.get_attr("IFLA_MTU"),
        "operstate": link.get_attr("IFLA_OPERSTATE"),
        "address": link.get_attr("IFLA_ADDRESS"),
        "addr_info": [],
    }
    master = link.get_attr("IFLA_MASTER")
    if master:
        entry["master_index"] = master
    if kind:
        entry["linkinfo"] = {"info_kind": kind}
    flags = link["flags"]
    # as ip shows it: an interface that is up without carrier (not running) is NO-CARRIER, first
    no_carrier = ["NO-CARRIER"] if flags & _IFF_UP and not flags & _IFF_RUNNING else []
    entry["flags"] = no_carrier + [n for bit, n in _IFF_FLAGS if flags & bit]
    if kind in ("vxlan", "geneve"):  # the overlay's UDP port, as ip -d -j shows it (info_data.port)
        data = info.get_attr("IFLA_INFO_DATA")
        port = data.get_attr("IFLA_VXLAN_PORT" if kind == "vxlan" else "IFLA_GENEVE_PORT") if data is not None else None
        if port:
            entry["linkinfo"]["info_data"] = {"port": int(port)}
    slave = info.get_attr("IFLA_INFO_SLAVE_KIND") if info is not None else None
    if slave == "bridge":  # a bridge port: its hairpin mode, as ip -d -j shows it (info_slave_data.hairpin)
        data = info.get_attr("IFLA_INFO_SLAVE_DATA")
        mode = data.get_attr("IFLA_BRPORT_MODE") if data is not None else None
        entry.setdefault("linkinfo", {})["info_slave_kind"] = slave
        if mode is not None:
            entry["linkinfo"]["info_slave_data"] = {"hairpin": bool(mode)}
    return entry


def _addr_entry(addr: Any) -> dict[str, Any]:
    """One address as ``ip -j addr`` shows it in its link's ``addr_info``."""
    return {
        "family": "inet" if addr["family"] == socket.AF_INET else "inet6",
        "local": addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS"),
        "prefixlen": addr["prefixlen"],
        "scope": _SCOPES.get(addr["scope"], str(addr["scope"])),
        "label": addr.get_attr("IFA_LABEL"),
    }


def _route_entry(r: Any, names: dict[int, str]) -> dict[str, Any]:
    """One route as ``ip -j route show table all`` shows it."""
    table = r.get_attr("RTA_TABLE") or r["table"]
    dst = r.get_attr("RTA_DST")
    item: dict[str, Any] = {
        "type": _RT_TYPES.get(r["type"], str(r["type"])),
        "dst": f"{dst}/{r['dst_len']}" if dst and r["dst_len"] not in (32, 128) else (dst or "default"),
        "table": _TABLES.get(table, str(table)),
        "scope": _SCOPES.get(r["scope"], str(r["scope"])),
    }
    gw = r.get_attr("RTA_GATEWAY")
    if gw:
        item["gateway"] = gw
    oif = r.get_attr("RTA_OIF")
    if oif:
        item["dev"] = names.get(oif, str(oif))
    src = r.get_attr("RTA_PREFSRC")
    if src:
        item["prefsrc"] = src
    nh_flags = [n for bit, n in _RTNH_FLAGS if r["flags"] & bit]
    if nh_flags:  # linkdown: its device has no carrier; dead: never used
        item["flags"] = nh_flags
    return item
