"""IPVS state read through the kernel's generic netlink "IPVS" family (pyroute2), and /proc/net/ip_vs_conn.

The result is written in ipvsadm's own formats (``-Sn`` into ``node/ipvsadm.txt``, ``-Ln`` into
``node/ipvsadm-list.txt``), so a bundle reads the same whichever way it was collected and the
parsers in :mod:`kpdiag.parse.ipvs` stay the only readers. Only dump requests are sent: nothing
is changed.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass, field

from ..parse.addr import hostport

# include/uapi/linux/ip_vs.h
FWD_MASK = 0x0007
FWD_NAMES = {0: "masq", 1: "local", 2: "tunnel", 3: "route", 4: "bypass"}
SAVE_FWD = {"masq": "-m", "tunnel": "-i", "route": "-g", "local": "-g"}  # ipvsadm -S prints Local as -g
LIST_FWD = {"masq": "Masq", "local": "Local", "tunnel": "Tunnel", "route": "Route", "bypass": "Bypass"}
SVC_F_PERSISTENT = 0x0001
SVC_F_ONEPACKET = 0x0004
PROTOCOLS = {socket.IPPROTO_TCP: "tcp", socket.IPPROTO_UDP: "udp", 132: "sctp"}
SAVE_PROTO = {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}

CONN_MAX_LINES = 200_000  # /proc/net/ip_vs_conn has one line per connection: millions on a busy node


class IpvsUnavailable(Exception):
    """The kernel has no IPVS generic netlink family (ip_vs not loaded)."""


@dataclass
class Dest:
    addr: str
    port: int
    forward: str = "masq"
    weight: int = 1
    active: int = 0
    inactive: int = 0
    persistent: int = 0


@dataclass
class Service:
    proto: str  # tcp | udp | sctp | fwmark
    addr: str | None
    port: int | None
    fwmark: int | None = None
    scheduler: str = "wlc"
    timeout: int | None = None  # persistence timeout, only with the persistent flag
    onepacket: bool = False
    dests: list[Dest] = field(default_factory=list)


def _attr(nla, name: str, default=None):
    value = nla.get_attr(name)
    return default if value is None else value


def service_from_nla(nla) -> Service:
    """A decoded IPVS_CMD_ATTR_SERVICE attribute → Service."""
    flags = nla.get_attr("IPVS_SVC_ATTR_FLAGS")
    bits = flags["flags"] if flags is not None else 0
    mark = _attr(nla, "IPVS_SVC_ATTR_FWMARK", 0)
    sched = _attr(nla, "IPVS_SVC_ATTR_SCHED_NAME", "wlc")
    if mark:
        svc = Service("fwmark", None, None, mark, sched)
    else:
        proto = _attr(nla, "IPVS_SVC_ATTR_PROTOCOL", 0)
        svc = Service(
            PROTOCOLS.get(proto, str(proto)),
            str(_attr(nla, "IPVS_SVC_ATTR_ADDR", "")),
            _attr(nla, "IPVS_SVC_ATTR_PORT", 0),
            None,
            sched,
        )
    if bits & SVC_F_PERSISTENT:
        svc.timeout = _attr(nla, "IPVS_SVC_ATTR_TIMEOUT", 0)
    svc.onepacket = bool(bits & SVC_F_ONEPACKET)
    return svc


def dest_from_nla(nla) -> Dest:
    method = _attr(nla, "IPVS_DEST_ATTR_FWD_METHOD", 0) & FWD_MASK
    return Dest(
        str(_attr(nla, "IPVS_DEST_ATTR_ADDR", "")),
        _attr(nla, "IPVS_DEST_ATTR_PORT", 0),
        FWD_NAMES.get(method, str(method)),
        _attr(nla, "IPVS_DEST_ATTR_WEIGHT", 0),
        _attr(nla, "IPVS_DEST_ATTR_ACTIVE_CONNS", 0),
        _attr(nla, "IPVS_DEST_ATTR_INACT_CONNS", 0),
        _attr(nla, "IPVS_DEST_ATTR_PERSIST_CONNS", 0),
    )


def dump() -> list[Service]:
    """Every virtual service with its real servers, through netlink. Raises IpvsUnavailable when the
    kernel has no IPVS family (ip_vs not loaded); other errors propagate for the caller's fallback."""
    from pyroute2 import IPVS, IPVSService
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        sock = IPVS()
    except NetlinkError as exc:
        if exc.code == 2:  # ENOENT: CTRL_CMD_GETFAMILY found no "IPVS"
            raise IpvsUnavailable("the kernel has no IPVS generic netlink family (ip_vs not loaded)") from None
        raise
    try:
        out = []
        for msg in sock.service("dump"):
            svc = service_from_nla(msg.get_attr("IPVS_CMD_ATTR_SERVICE"))
            key = IPVSService.from_message(msg)
            for dmsg in sock.dest("dump", service=key):
                svc.dests.append(dest_from_nla(dmsg.get_attr("IPVS_CMD_ATTR_DEST")))
            out.append(svc)
        return out
    finally:
        sock.close()


def render_save(services: list[Service]) -> str:
    """``ipvsadm -Sn`` text."""
    lines = []
    for s in services:
        what = (
            f"-f {s.fwmark}"
            if s.fwmark is not None
            else f"{SAVE_PROTO.get(s.proto, '-t')} {hostport(s.addr or '', s.port or 0)}"
        )
        line = f"-A {what} -s {s.scheduler}"
        if s.timeout is not None:
            line += f" -p {s.timeout}"
        if s.onepacket:
            line += " -o"
        lines.append(line)
        for d in s.dests:
            lines.append(f"-a {what} -r {hostport(d.addr, d.port)} {SAVE_FWD.get(d.forward, '-g')} -w {d.weight}")
    return "".join(line + "\n" for line in lines)


def render_list(services: list[Service]) -> str:
    """``ipvsadm -Ln`` text (with connection counts)."""
    out = [
        "IP Virtual Server version (read through netlink by kpdiag)",
        "Prot LocalAddress:Port Scheduler Flags",
        "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
    ]
    for s in services:
        head = (
            f"FWM  {s.fwmark}"
            if s.fwmark is not None
            else f"{s.proto.upper():<4} {hostport(s.addr or '', s.port or 0)}"
        )
        line = f"{head} {s.scheduler}"
        if s.timeout is not None:
            line += f" persistent {s.timeout}"
        if s.onepacket:
            line += " ops"
        out.append(line)
        for d in s.dests:
            out.append(
                f"  -> {hostport(d.addr, d.port):<28} {LIST_FWD.get(d.forward, d.forward):<7} {d.weight:<6} {d.active:<10} {d.inactive}"
            )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- /proc/net/ip_vs_conn


def _conn_addr(tok: str) -> str:
    tok = tok.strip("[]")
    if len(tok) == 8 and ":" not in tok:
        return str(ipaddress.IPv4Address(int(tok, 16)))
    return str(ipaddress.IPv6Address(tok))


def conn_counts(fh, max_lines: int = CONN_MAX_LINES) -> dict:
    """Count /proc/net/ip_vs_conn lines by (protocol, virtual address, real server, state), reading at most
    ``max_lines`` connections. Lines that do not parse are counted, never fatal."""
    counts: dict[tuple, int] = {}
    read = bad = 0
    truncated = False
    for n, raw in enumerate(fh):
        if n == 0 and raw.startswith("Pro "):
            continue
        if read >= max_lines:
            truncated = True
            break
        read += 1
        toks = raw.split()
        try:
            key = (
                toks[0].lower(),
                _conn_addr(toks[3]),
                int(toks[4], 16),
                _conn_addr(toks[5]),
                int(toks[6], 16),
                toks[7],
            )
        except (IndexError, ValueError):
            bad += 1
            continue
        counts[key] = counts.get(key, 0) + 1
    entries = [
        {"proto": k[0], "vaddr": k[1], "vport": k[2], "daddr": k[3], "dport": k[4], "state": k[5], "count": c}
        for k, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {
        "format": "kpdiag.ipvs-conn/v1",
        "connections_read": read,
        "truncated": truncated,
        "max_lines": max_lines,
        "unparsed": bad,
        "entries": entries,
    }


def conn_counts_json(path: str, max_lines: int = CONN_MAX_LINES) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return json.dumps(conn_counts(fh, max_lines), indent=1)
