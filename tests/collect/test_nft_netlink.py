"""kpdiag/collect/nft_netlink.py without a kernel: rule and set messages built as the kernel sends them (the register
layout ``nft --debug=netlink`` shows for kube-proxy's rules) decode to what ``nft -j`` prints, and anything else is
refused. The same decoder against the kernel and nft itself: tests/lab/test_nft_focused_oracle.py."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from kpdiag.collect import nft_netlink as nn
from kpdiag.collect.nft_rules import RuleDecoder


def _a(kind: int, payload: bytes) -> bytes:
    return nn._attr(kind, payload)


def _n(kind: int, *parts: bytes) -> bytes:
    return nn._attr(kind | nn.NLA_F_NESTED, b"".join(parts))


def _u32(v: int) -> bytes:
    return struct.pack(">I", v)


def _data(value: bytes) -> bytes:
    return _a(nn.DATA_VALUE, value)


def _expr(name: str, *attrs: bytes) -> bytes:
    return _n(1, _a(1, name.encode() + b"\0"), _n(2, *attrs))


def _rule(*exprs: bytes, comment: str | None = None) -> dict[int, bytes]:
    a = {nn.RULE_HANDLE: struct.pack(">Q", 7), nn.RULE_EXPRESSIONS: b"".join(exprs)}
    if comment is not None:
        text = comment.encode() + b"\0"
        a[nn.RULE_USERDATA] = bytes([0, len(text)]) + text
    return a


def _decoder(sets=None) -> RuleDecoder:
    return RuleDecoder("ip", "kube-proxy", sets or {}.__getitem__)


def test_a_service_chains_first_rule():
    # ip daddr 10.96.0.11 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
    rule = _rule(
        _expr("payload", _a(1, _u32(1)), _a(2, _u32(1)), _a(3, _u32(16)), _a(4, _u32(4))),
        _expr("cmp", _a(1, _u32(1)), _a(2, _u32(0)), _n(3, _data(bytes([10, 96, 0, 11])))),
        _expr("meta", _a(1, _u32(1)), _a(2, _u32(16))),
        _expr("cmp", _a(1, _u32(1)), _a(2, _u32(0)), _n(3, _data(bytes([6])))),
        _expr("payload", _a(1, _u32(1)), _a(2, _u32(2)), _a(3, _u32(2)), _a(4, _u32(2))),
        _expr("cmp", _a(1, _u32(1)), _a(2, _u32(0)), _n(3, _data(struct.pack(">H", 80)))),
        _expr("payload", _a(1, _u32(1)), _a(2, _u32(1)), _a(3, _u32(12)), _a(4, _u32(2))),
        _expr("cmp", _a(1, _u32(1)), _a(2, _u32(1)), _n(3, _data(bytes([10, 244])))),
        _expr("immediate", _a(1, _u32(0)), _n(2, _n(nn.DATA_VERDICT, _a(1, _u32(0xFFFFFFFD)), _a(2, b"mark-for-masquerade\0")))),
        comment="a comment",
    )  # fmt: skip
    got, targets, used = _decoder().rule("service-X", rule)
    assert got["rule"]["expr"] == [
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.96.0.11"}},
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 80}},
        {
            "match": {
                "op": "!=",
                "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                "right": {"prefix": {"addr": "10.244.0.0", "len": 16}},
            }
        },
        {"jump": {"target": "mark-for-masquerade"}},
    ]
    assert got["rule"]["comment"] == "a comment" and got["rule"]["handle"] == 7
    assert targets == ["mark-for-masquerade"] and used == []


def test_meta_l4proto_without_a_transport_match_stays():
    rule = _rule(
        _expr("meta", _a(1, _u32(1)), _a(2, _u32(16))),
        _expr("cmp", _a(1, _u32(1)), _a(2, _u32(0)), _n(3, _data(bytes([17])))),
        _expr("immediate", _a(1, _u32(1)), _n(2, _data(bytes([10, 244, 0, 2])))),
        _expr("immediate", _a(1, _u32(2)), _n(2, _data(struct.pack(">H", 53)))),
        _expr("nat", _a(1, _u32(1)), _a(2, _u32(2)), _a(3, _u32(1)), _a(4, _u32(1)), _a(5, _u32(2)), _a(6, _u32(2)),
              _a(7, _u32(3))),
    )  # fmt: skip
    got, _, _ = _decoder().rule("endpoint-X", rule)
    assert got["rule"]["expr"] == [
        {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "udp"}},
        {"dnat": {"addr": "10.244.0.2", "port": 53}},
    ]


@pytest.mark.parametrize(
    "expr, why",
    [
        (_expr("meta", _a(1, _u32(1)), _a(2, _u32(23))), "meta key 23"),  # meta cpu
        (_expr("log"), "expression 'log'"),
        (_expr("payload", _a(1, _u32(1)), _a(2, _u32(1)), _a(3, _u32(9)), _a(4, _u32(1))), "network header payload"),
    ],
)
def test_anything_else_is_refused(expr, why):
    with pytest.raises(nn.Undecodable, match=why):
        _decoder().rule("c", _rule(expr))


def test_a_register_read_before_it_is_loaded_is_refused():
    rule = _rule(_expr("cmp", _a(1, _u32(1)), _a(2, _u32(0)), _n(3, _data(b"\0\0\0\1"))))
    with pytest.raises(nn.Undecodable, match="before it is loaded"):
        _decoder().rule("c", rule)


def test_set_keys_and_declarations():
    concat = (7 << 12) | (12 << 6) | 13  # ipv4_addr . inet_proto . inet_service, as nft stores it
    assert nn.key_fields(concat, 12) == [("ip4", 4), ("proto", 1), ("port", 2)]
    key = bytes([10, 96, 0, 11]) + bytes([6, 0, 0, 0]) + struct.pack(">H", 80) + b"\0\0"
    assert nn.key_json(nn.key_fields(concat, 12), key)[0] == {"concat": ["10.96.0.11", "tcp", 80]}
    with pytest.raises(nn.Undecodable):
        nn.key_fields((7 << 6) | 40, 8)  # a type this module does not print
    info = {
        nn.SET_TABLE: b"kube-proxy\0",
        nn.SET_NAME: b"service-ips\0",
        nn.SET_FLAGS: _u32(nn.SET_F_MAP),
        nn.SET_KEY_TYPE: _u32(concat),
        nn.SET_KEY_LEN: _u32(12),
        nn.SET_DATA_TYPE: _u32(nn.DATA_VERDICT_TYPE),
        nn.SET_HANDLE: struct.pack(">Q", 6),
    }
    s = nn.SetInfo("ip", info)
    assert s.declaration() == {
        "family": "ip",
        "name": "service-ips",
        "table": "kube-proxy",
        "type": ["ipv4_addr", "inet_proto", "inet_service"],
        "handle": 6,
        "map": "verdict",
    }
    elem = _n(nn.ELEM_KEY, _data(key)) + _n(
        nn.ELEM_DATA, _n(nn.DATA_VERDICT, _a(1, _u32(0xFFFFFFFC)), _a(2, b"service-X\0"))
    )
    data = nn.SetData(s, [elem])
    assert data.key(0) == key
    assert data.sorted([0])[0][0] == [{"concat": ["10.96.0.11", "tcp", 80]}, {"goto": {"target": "service-X"}}]
    with pytest.raises(nn.Undecodable, match="interval"):
        nn.SetInfo("ip", {**info, nn.SET_FLAGS: _u32(nn.SET_F_MAP | nn.SET_F_INTERVAL)})


def _interval_set(name: str, flags: int, key_len: int = 4) -> nn.SetInfo:
    return nn.SetInfo(
        "ip",
        {
            nn.SET_TABLE: b"kube-proxy\0",
            nn.SET_NAME: name.encode() + b"\0",
            nn.SET_FLAGS: _u32(flags),
            nn.SET_KEY_TYPE: _u32(7 if key_len == 4 else 8),
            nn.SET_KEY_LEN: _u32(key_len),
        },
    )


def _mark(addr: str, end: bool = False, udata: bytes = b"") -> bytes:
    import ipaddress

    out = _n(nn.ELEM_KEY, _data(ipaddress.ip_address(addr).packed))
    if end:
        out += _a(nn.ELEM_FLAGS, struct.pack(">I", nn.ELEM_F_INTERVAL_END))
    return out + (_a(nn.ELEM_USERDATA, udata) if udata else b"")


def test_an_anonymous_interval_set_is_rebuilt_as_nft_prints_it():
    """kube-proxy's "ip daddr { CIDR, CIDR }" (two ServiceCIDRs, two loadBalancerSourceRanges) is an anonymous
    interval set: the kernel holds each range as a start key and an end key (the address after it; nft adds one at 0),
    in any order; a range to the top of the space has no end key (nft flags it open in the element's user data).
    tests/lab/test_nft_focused_oracle.py compares the same against nft -j on the kernel."""
    info = _interval_set("__set0", nn.SET_F_ANONYMOUS | nn.SET_F_INTERVAL)
    raw = [
        _mark("10.101.0.0", end=True),
        _mark("10.100.0.0"),
        _mark("10.97.0.0", end=True),
        _mark("10.96.0.0"),
        _mark("10.0.0.6", end=True),
        _mark("10.0.0.1"),
        _mark("9.0.0.2", end=True),
        _mark("9.0.0.1"),
        _mark("0.0.0.0", end=True),
        _mark("255.255.255.0", udata=bytes([nn.UDATA_ELEM_FLAGS, 4, 1, 0, 0, 0])),  # nftnl udata: type, len
    ]
    assert nn.SetData(info, raw).intervals() == [
        "9.0.0.1",
        {"range": ["10.0.0.1", "10.0.0.5"]},
        {"prefix": {"addr": "10.96.0.0", "len": 16}},
        {"prefix": {"addr": "10.100.0.0", "len": 16}},
        {"prefix": {"addr": "255.255.255.0", "len": 24}},
    ]
    with pytest.raises(nn.Undecodable, match="two ranges start"):
        nn.SetData(info, [_mark("10.0.0.1"), _mark("10.0.0.9")]).intervals()
    with pytest.raises(nn.Undecodable, match="a comment"):  # an element comment: user data other than its flags
        nn.SetData(info, [_mark("10.0.0.1", udata=bytes([0, 3]) + b"hi\0")]).intervals()
    with pytest.raises(nn.Undecodable, match="interval set other than"):  # a named one is not kube-proxy's
        _interval_set("cidrs", nn.SET_F_INTERVAL)


# ------------------------------------------------------------------------------------------- the socket
def _msg(kind: int, flags: int, seq: int, payload: bytes = b"") -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload


def _chain_msg(seq: int, table: str, name: str, base: bool, flags: int = nn.NLM_F_MULTI) -> bytes:
    body = struct.pack("=BBH", 2, 0, 0) + nn._strattr(nn.CHAIN_TABLE, table) + nn._strattr(nn.CHAIN_NAME, name)
    if base:
        body += _n(nn.CHAIN_HOOK, _a(nn.HOOK_NUM, _u32(2)), _a(nn.HOOK_PRIORITY, _u32(0)))
        body += nn._strattr(nn.CHAIN_TYPE, "filter")
    return _msg((nn.NFNL_SUBSYS_NFTABLES << 8) | 3, flags, seq, body)  # NFT_MSG_NEWCHAIN


def _fed(*blocks: bytes) -> nn.Netlink:
    """A Netlink whose socket is one end of a socket pair: the other end has sent ``blocks``, one datagram each, as
    the kernel sends a dump's parts (the request sent goes to that end and is not read)."""
    nl = nn.Netlink()
    nl.sock.close()
    nl.sock, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    nl.sock.settimeout(2)  # a dump that misses its end fails here instead of waiting
    for b in blocks:
        peer.send(b)
    nl._peer = peer  # kept open
    return nl


def test_a_dump_interrupted_by_a_change_is_marked_and_ends_at_done():
    """NLM_F_DUMP_INTR on any answer (the kernel's ruleset changed while it dumped) sets ``interrupted``, and an
    NLMSG_DONE that carries it still ends the dump, in a block of answers without a base chain too."""
    multi, intr = nn.NLM_F_MULTI, nn.NLM_F_MULTI | nn.NLM_F_DUMP_INTR
    chains = b"".join(_chain_msg(1, "kube-proxy", f"service-{i:04d}", base=False) for i in range(100))
    assert len(chains) > 4096
    done = _msg(nn.NLMSG_DONE, intr, 1, struct.pack("=i", 0))
    nl = _fed(chains + _chain_msg(1, "kube-proxy", "filter-input", base=False, flags=intr) + done)
    assert nl.base_chains("ip", "kube-proxy") == [] and nl.interrupted
    nl = _fed(chains + _msg(nn.NLMSG_DONE, multi, 1, struct.pack("=i", 0)))
    assert nl.base_chains("ip", "kube-proxy") == [] and not nl.interrupted
    nl = _fed(chains, _chain_msg(1, "kube-proxy", "filter-forward", base=True) + done)
    assert [nn._str(a[nn.CHAIN_NAME]) for a in nl.base_chains("ip", "kube-proxy")] == ["filter-forward"]
    assert nl.interrupted
    nl = _fed(_chain_msg(1, "kube-proxy", "x", base=False, flags=intr) + done)
    assert len(nl.dump(nn.MSG_GETCHAIN, 2)) == 1 and nl.interrupted


def test_base_chains_are_the_tables_own():
    """The kernel may answer a chain dump filtered by table with every table's chains: another table's base chain of
    the same name (iptables-nft's FORWARD, a table's own nat-prerouting) is not the table's."""
    done = _msg(nn.NLMSG_DONE, nn.NLM_F_MULTI, 1, struct.pack("=i", 0))
    nl = _fed(
        _chain_msg(1, "filter", "FORWARD", base=True)
        + _chain_msg(1, "other", "nat-prerouting", base=True)
        + _chain_msg(1, "kube-proxy", "nat-prerouting", base=True)
        + done
    )
    got = nl.base_chains("ip", "kube-proxy")
    assert [(nn._str(a[nn.CHAIN_TABLE]), nn._str(a[nn.CHAIN_NAME])) for a in got] == [("kube-proxy", "nat-prerouting")]


def test_a_spent_budget_ends_the_walk_without_waiting():
    """One deadline for the whole walk (every chain, set and generation read), not a timeout per answer: a walk whose
    deadline is past is not focused, in one line, before anything is sent."""
    from kpdiag.collect.service_rules import NFT_BUDGET, NftWalk, NotFocused

    nl = _fed()
    with pytest.raises(
        NotFocused, match=rf"^reading table ip kube-proxy took more than the focused read's {NFT_BUDGET:g} s$"
    ):
        NftWalk(nl, "ip", "kube-proxy", "a/b", deadline=time.monotonic() - 1).walk()
    assert nl.seq == 0  # nothing asked
    nl.deadline = time.monotonic() + 0.2  # the kernel does not answer: the wait ends at the deadline, not TIMEOUT
    with pytest.raises(nn.OutOfTime):
        nl.dump(nn.MSG_GETTABLE, 0)
    assert nl.sock.gettimeout() <= 0.2
