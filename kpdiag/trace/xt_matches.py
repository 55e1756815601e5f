"""The iptables match modules (``-m MODULE``) the tracer evaluates: one function a module, found by name in MATCHERS.

Each gives the probability that the packet matches (0, 1, or in between for ``-m statistic``); kpdiag/trace/netfilter.py
walks the rules and calls them. The parser keeps any module's options verbatim, so supporting a new match is one
function here and its entry in :data:`MATCHERS`; a module not in it makes the path uncertain."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..parse.addr import parse_ip, parse_prefix
from ..parse.iptables import Match, Opt, Rule
from .walker import PacketState
from kpdiag.bundle import sources

if TYPE_CHECKING:
    from .netfilter import IptablesTracer

ICMP_TYPES: dict[str, tuple[int, int | None] | None] = {
    "any": None,
    "echo-reply": (0, None),
    "pong": (0, None),
    "destination-unreachable": (3, None),
    "network-unreachable": (3, 0),
    "host-unreachable": (3, 1),
    "protocol-unreachable": (3, 2),
    "port-unreachable": (3, 3),
    "fragmentation-needed": (3, 4),
    "source-quench": (4, None),
    "redirect": (5, None),
    "echo-request": (8, None),
    "ping": (8, None),
    "time-exceeded": (11, None),
    "ttl-exceeded": (11, None),
    "ttl-zero-during-transit": (11, 0),
    "parameter-problem": (12, None),
    "timestamp-request": (13, None),
    "timestamp-reply": (14, None),
}

_MULTICAST = parse_prefix("224.0.0.0/4")


def _port_in(spec: str, port: int | None) -> bool:
    if port is None:
        return False
    lo, sep, hi = spec.partition(":")
    if not sep:
        return port == int(spec)
    return (int(lo) if lo else 0) <= port <= (int(hi) if hi else 65535)


def mark_spec(text: str) -> tuple[int, int]:
    value, sep, mask = text.partition("/")
    return int(value, 0), (int(mask, 0) if sep else 0xFFFFFFFF)


def unknown_opt(rule: Rule, m: Match, opt: Opt, st: PacketState) -> float:
    """An option of a known match that kpdiag cannot evaluate: the path is uncertain, the rule taken as not matching."""
    st.note(
        f"{rule.where}: -m {m.module} {opt.name} cannot be evaluated by kpdiag; assumed not matching",
        uncertain=True,
    )
    return 0.0


# ---------------------------------------------------------------------- matchers
def _m_comment(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    return 1.0


def _m_l4(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    if m.module != st.proto:
        return 0.0
    for opt in m.opts:
        name = opt.name
        if name in ("--dport", "--destination-port"):
            ok = _port_in(opt.value, st.dport)
        elif name in ("--sport", "--source-port"):
            ok = _port_in(opt.value, st.sport)
        elif name == "--syn":
            ok = True  # the first packet of a TCP connection is a SYN
        elif name == "--tcp-flags":
            mask = set(opt.args[0].split(",")) if opt.args else set()
            comp = set(opt.args[1].split(",")) if len(opt.args) > 1 else set()
            if "ALL" in mask:
                mask = {"SYN", "ACK", "FIN", "RST", "URG", "PSH"}
            have = {"SYN"} & mask
            ok = have == (comp & mask) if "NONE" not in comp else not have
        elif name in ("--chunk-types",):
            return unknown_opt(rule, m, opt, st)
        else:
            return unknown_opt(rule, m, opt, st)
        if ok == opt.neg:
            return 0.0
    return 1.0


def _m_multiport(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        specs = opt.value.split(",")
        if opt.name in ("--dports", "--destination-ports"):
            ok = any(_port_in(s, st.dport) for s in specs)
        elif opt.name in ("--sports", "--source-ports"):
            ok = any(_port_in(s, st.sport) for s in specs)
        elif opt.name == "--ports":
            ok = any(_port_in(s, st.dport) or _port_in(s, st.sport) for s in specs)
        else:
            return unknown_opt(rule, m, opt, st)
        if ok == opt.neg:
            return 0.0
    return 1.0


def _m_icmp(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    if st.proto != "icmp":
        return 0.0
    for opt in m.opts:
        if opt.name != "--icmp-type":
            return unknown_opt(rule, m, opt, st)
        spec = opt.value
        if spec in ICMP_TYPES:
            tc = ICMP_TYPES[spec]
        else:
            t, _, c = spec.partition("/")
            try:
                tc = (int(t), int(c) if c else None)
            except ValueError:
                return unknown_opt(rule, m, opt, st)
        ok = tc is None or (tc[0] == st.icmp_type and (tc[1] is None or tc[1] == st.icmp_code))
        if ok == opt.neg:
            return 0.0
    return 1.0


def _m_mark(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        if opt.name != "--mark":
            return unknown_opt(rule, m, opt, st)
        v, mask = mark_spec(opt.value)
        value = st.mark if m.module == "mark" else st.ctmark
        if ((value & mask) == v) == opt.neg:
            return 0.0
    return 1.0


def _ct_states(st: PacketState) -> set[str]:
    if st.untracked:
        return {"UNTRACKED"}
    states = {st.ct_state.upper()}
    if st.ct_dnat:
        states.add("DNAT")
    if st.ct_snat:
        states.add("SNAT")
    return states


def _m_conntrack(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        name = opt.name
        if name in ("--ctstate", "--state"):
            ok = bool(set(opt.value.upper().split(",")) & _ct_states(st))
        elif name == "--ctstatus":
            ok = "NONE" in opt.value.upper().split(",")
        elif name == "--ctproto":
            ok = opt.value.lower() == st.proto
        elif name == "--ctorigdst":
            pre = parse_prefix(opt.value)
            ok = pre.contains(st.orig_dst, st.ver)
        elif name == "--ctorigdstport":
            ok = _port_in(opt.value, st.orig_dport)
        elif name == "--ctorigsrc":
            ok = parse_prefix(opt.value).contains(st.src, st.ver)
        elif name == "--ctdir":
            ok = opt.value.upper() == "ORIGINAL"
        else:
            return unknown_opt(rule, m, opt, st)
        if ok == opt.neg:
            return 0.0
    return 1.0


def _addr_type(tr: IptablesTracer, addr: int, ver: int, types: list[str], st: PacketState) -> bool | None:
    local = tr.routing.is_local(addr, ver)
    result = False
    for t in types:
        t = t.upper()
        if t == "LOCAL":
            hit = local
        elif t == "UNICAST":
            hit = not local and not (ver == 4 and _MULTICAST.contains(addr, 4)) and addr != 0xFFFFFFFF
        elif t == "MULTICAST":
            hit = ver == 4 and _MULTICAST.contains(addr, 4)
        elif t == "BROADCAST":
            hit = ver == 4 and addr == 0xFFFFFFFF
        elif t in ("BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE", "ANYCAST", "UNSPEC"):
            route = tr.routing.lookup(addr, ver)
            hit = route is not None and route.type.upper() == t
        else:
            return None
        result = result or hit
    return result


def _m_addrtype(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        if opt.name in ("--src-type", "--dst-type"):
            addr = st.src if opt.name == "--src-type" else st.dst
            ok = _addr_type(tr, addr, st.ver, opt.value.split(","), st)
            if ok is None:
                return unknown_opt(rule, m, opt, st)
        elif opt.name in ("--limit-iface-in", "--limit-iface-out"):
            continue  # restricts which interface's addresses count; the node's own addresses are used
        else:
            return unknown_opt(rule, m, opt, st)
        if ok == opt.neg:
            return 0.0
    return 1.0


def _m_statistic(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    mode = m.get("--mode")
    if mode is None or mode.value == "random":
        prob = m.get("--probability")
        if prob is None:
            return unknown_opt(rule, m, m.opts[0] if m.opts else type("O", (), {"name": "--probability"})(), st)
        p = float(prob.value)
        return 1.0 - p if prob.neg else p
    if mode.value == "nth":
        every = m.get("--every")
        n = int(every.value) if every else 1
        st.note(
            f"{rule.where}: -m statistic --mode nth: which of every {n} connections this is depends on history; each branch has probability 1/{n}"
        )
        return 1.0 / n
    return unknown_opt(rule, m, mode, st)


def _m_recent(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    names = m.get("--name")
    name = names.value if names else "DEFAULT"
    if m.get("--set") or m.get("--remove"):
        return 1.0  # these record or forget; they always match
    seconds = m.get("--seconds")
    if tr.recent is None:
        st.note(
            f"session affinity ({name}): kpdiag assumes this client was not seen before; a client seen within "
            f"{seconds.value + ' s' if seconds else 'the recent window'} goes back to the same endpoint"
        )
        return 0.0
    from .affinity import recorded

    return recorded(tr.recent, name, seconds.value if seconds else None, m, st, rule)


def _m_set(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        if opt.name != "--match-set":
            if opt.name in (
                "--return-nomatch",
                "--update-counters",
                "--update-subcounters",
                "--packets-eq",
                "--bytes-eq",
            ):
                continue
            return unknown_opt(rule, m, opt, st)
        if len(opt.args) < 2:
            return unknown_opt(rule, m, opt, st)
        name, flags = opt.args[0], opt.args[1].split(",")
        if tr.ipsets is None:
            st.note(
                f"{rule.where}: ipset {name} needed but no ipset list was given ({sources.IPSET}); assumed not matching",
                uncertain=True,
            )
            return 0.0
        s = tr.ipsets.get(name)
        if s is None or s.kinds is None:
            why = "is not in the ipset list" if s is None else f"has type {s.type}, which kpdiag cannot evaluate"
            st.note(f"{rule.where}: ipset {name} {why}; assumed not matching", uncertain=True)
            return 0.0
        values: list[Any] = []
        for kind, flag in zip(s.kinds, flags):
            is_src = flag == "src"
            if kind in ("ip", "net"):
                values.append((st.src if is_src else st.dst, st.ver))
            elif kind == "port":
                values.append((st.proto, st.sport if is_src else st.dport))
            elif kind == "mark":
                values.append(st.mark)
        if len(values) != len(s.kinds):
            st.note(f"{rule.where}: ipset {name} needs {len(s.kinds)} flags, got {opt.args[1]}", uncertain=True)
            return 0.0
        ok = s.lookup(values)
        if ok == opt.neg:
            return 0.0
    return 1.0


def _m_iprange(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        if opt.name not in ("--src-range", "--dst-range"):
            return unknown_opt(rule, m, opt, st)
        lo, _, hi = opt.value.partition("-")
        a, _ = parse_ip(lo)
        b, _ = parse_ip(hi or lo)
        addr = st.src if opt.name == "--src-range" else st.dst
        if (a <= addr <= b) == opt.neg:
            return 0.0
    return 1.0


def _m_always(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    return 1.0


def _m_pkttype(tr: IptablesTracer, m: Match, st: PacketState, rule: Rule) -> float:
    for opt in m.opts:
        if opt.name != "--pkt-type":
            return unknown_opt(rule, m, opt, st)
        kind = "multicast" if st.ver == 4 and _MULTICAST.contains(st.dst, 4) else "unicast"
        if (opt.value == kind) == opt.neg:
            return 0.0
    return 1.0


MATCHERS = {
    "comment": _m_comment,
    "tcp": _m_l4,
    "udp": _m_l4,
    "sctp": _m_l4,
    "multiport": _m_multiport,
    "icmp": _m_icmp,
    "mark": _m_mark,
    "connmark": _m_mark,
    "conntrack": _m_conntrack,
    "state": _m_conntrack,
    "addrtype": _m_addrtype,
    "statistic": _m_statistic,
    "recent": _m_recent,
    "set": _m_set,
    "iprange": _m_iprange,
    "limit": _m_always,
    "pkttype": _m_pkttype,
}
