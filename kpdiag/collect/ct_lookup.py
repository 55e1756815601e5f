"""Which endpoint one connection through a ClusterIP reached: conntrack's reply tuple, asked over ctnetlink.

kube-proxy's DNAT happens in the network namespace of the node (a client pod's own conntrack table sees no NAT: the
ClusterIP is all it knows). When kpdiag runs in the node's network namespace, the conntrack entry of its own connect
(original tuple: this source address and port → ClusterIP:port) has the endpoint as the reply tuple's source. Read-only:
one IPCTNL_MSG_CT_GET per connection, for that exact tuple. Anything else — no entry, the reply source is the ClusterIP
itself (no NAT here), no CAP_NET_ADMIN, no conntrack — answers None, and the caller says it could not tell.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

from .nft_netlink import NETLINK_NETFILTER, NLA_F_NESTED, NLMSG_ERROR, _attr, attrs

NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_GET = 1
NLM_F_REQUEST = 0x1
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY = 1, 2
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
NFNLGRP_CONNTRACK_NEW = 1  # the multicast group of new entries, as a bind() mask
TIMEOUT = 0.5  # seconds for the kernel's answer to one GET


def _tuple(src: str, sport: int, dst: str, dport: int, proto: int) -> bytes:
    v6 = ":" in dst
    s, d = (ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
    ip = _attr(CTA_IP_V6_SRC if v6 else CTA_IP_V4_SRC, s) + _attr(CTA_IP_V6_DST if v6 else CTA_IP_V4_DST, d)
    pr = (
        _attr(CTA_PROTO_NUM, bytes([proto]))
        + _attr(CTA_PROTO_SRC_PORT, struct.pack(">H", sport))
        + _attr(CTA_PROTO_DST_PORT, struct.pack(">H", dport))
    )
    return _attr(CTA_TUPLE_IP | NLA_F_NESTED, ip) + _attr(CTA_TUPLE_PROTO | NLA_F_NESTED, pr)


def _source(payload: bytes, which: int = CTA_TUPLE_REPLY) -> tuple[str, int] | None:
    """(address, port) of a tuple's source in a conntrack entry's attributes (the reply tuple's: where it went)."""
    tup = attrs(payload).get(which)
    if tup is None:
        return None
    t = attrs(tup)
    ip, pr = attrs(t.get(CTA_TUPLE_IP, b"")), attrs(t.get(CTA_TUPLE_PROTO, b""))
    raw = ip.get(CTA_IP_V4_SRC) or ip.get(CTA_IP_V6_SRC)
    port = pr.get(CTA_PROTO_SRC_PORT)
    if raw is None or port is None or len(port) < 2:
        return None
    return str(ipaddress.ip_address(raw)), struct.unpack(">H", port[:2])[0]


def _events(data: bytes) -> list[bytes]:
    """The payloads of the conntrack event messages in one read."""
    out, off = [], 0
    while off + 20 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 20:
            break
        if kind >> 8 == NFNL_SUBSYS_CTNETLINK:
            out.append(data[off + 20 : off + length])
        off += (length + 3) & ~3
    return out


class ConntrackLookup:
    """One ctnetlink socket for a series of lookups, and one that hears new entries (a connect reset at once is gone
    from the table before it can be asked for); :meth:`reached` is None whenever the answer is not known."""

    def __init__(self):
        self.sock = self.events = None
        self.why_not: str | None = None
        self.heard: dict[tuple, tuple[str, int]] = {}  # original (src, sport, dst, dport) → reply source
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
            self.sock.bind((0, 0))
            self.sock.settimeout(TIMEOUT)
        except OSError as exc:
            self.why_not = f"conntrack cannot be asked here: {exc.strerror or exc}"
            return
        try:
            self.events = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
            self.events.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.events.bind((0, NFNLGRP_CONNTRACK_NEW))
            self.events.setblocking(False)
        except OSError:
            self.events = None  # the GET alone: a reset connect stays unattributed
        self.seq = 0

    def close(self) -> None:
        for s in (self.sock, self.events):
            if s is not None:
                s.close()
        self.sock = self.events = None

    def _drain(self, limit: int = 256) -> None:
        """Read the new-entry events queued so far (bounded: a busy node's others are read and dropped)."""
        for _ in range(limit):
            try:
                data = self.events.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ENOBUFS: events were lost; the ones that follow still count
                continue
            for payload in _events(data):
                orig, reply = _source(payload, CTA_TUPLE_ORIG), _source(payload)
                dst = _dest(payload)
                if orig and reply and dst:
                    self.heard[(orig[0], orig[1], dst[0], dst[1])] = reply
                    if len(self.heard) > 4096:
                        self.heard.pop(next(iter(self.heard)))

    def reached(self, src: str, sport: int, dst: str, dport: int, proto: int = socket.IPPROTO_TCP):
        """(endpoint ip, port) the connection src:sport → dst:dport was translated to, or None (``why_not`` says why)."""
        if self.sock is None:
            return None
        if self.events is not None:
            self._drain()
            got = self.heard.pop((src, sport, dst, dport), None)
            if got is not None:
                return self._translated(got, dst)
        self.seq += 1
        family = socket.AF_INET6 if ":" in dst else socket.AF_INET
        body = struct.pack("=BBH", family, 0, 0) + _attr(
            CTA_TUPLE_ORIG | NLA_F_NESTED, _tuple(src, sport, dst, dport, proto)
        )
        head = struct.pack(
            "=IHHII", 16 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET, NLM_F_REQUEST, self.seq, 0
        )
        try:
            self.sock.send(head + body)
            data = self.sock.recv(65536)
        except OSError as exc:
            self.why_not = f"conntrack did not answer: {exc.strerror or exc}"
            return None
        if len(data) < 20:
            return None
        length, kind = struct.unpack_from("=IH", data, 0)
        if kind == NLMSG_ERROR:
            err = -struct.unpack_from("=i", data, 16)[0]
            self.why_not = (
                "no conntrack entry for the connect here"
                if err == 2
                else f"conntrack refused the lookup: {os.strerror(err)}"
            )
            return None
        got = _source(data[20:length])
        return None if got is None else self._translated(got, dst)

    def _translated(self, got: tuple[str, int], dst: str):
        if got[0] == dst:  # not translated in this network namespace: the node's table holds the answer
            self.why_not = "no NAT in this network namespace: kube-proxy's DNAT happens on the node"
            return None
        return got


def _dest(payload: bytes) -> tuple[str, int] | None:
    """(address, port) of the original tuple's destination."""
    tup = attrs(payload).get(CTA_TUPLE_ORIG)
    if tup is None:
        return None
    t = attrs(tup)
    ip, pr = attrs(t.get(CTA_TUPLE_IP, b"")), attrs(t.get(CTA_TUPLE_PROTO, b""))
    raw = ip.get(CTA_IP_V4_DST) or ip.get(CTA_IP_V6_DST)
    port = pr.get(CTA_PROTO_DST_PORT)
    if raw is None or port is None or len(port) < 2:
        return None
    return str(ipaddress.ip_address(raw)), struct.unpack(">H", port[:2])[0]
