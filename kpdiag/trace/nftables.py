"""Trace one packet through an nftables ruleset (kube-proxy's ``table ip kube-proxy`` and any other).

Base chains of the ``ip`` and ``inet`` families run per hook in priority order (so a host
firewall in another table is seen too); ``jump``/``goto``/``return``, verdict maps on
concatenated keys, ``numgen random mod N`` (every index its own path, probability 1/N),
``fib … type``, ``ct state``, ``meta mark`` arithmetic, ``dnat``/``snat``/``masquerade``,
``reject``/``drop``. An expression kpdiag cannot evaluate marks the path uncertain, with a note.
"""

from __future__ import annotations

import json
from typing import Any

from ..parse.addr import Prefix, parse_ip, parse_prefix
from ..parse.nft import NftChain, NftRule, NftRuleset, render_value
from .model import Step, endpoint_text
from .walker import MAX_DEPTH, PacketState, PacketWalker
from .routing import RoutingTable

Json = Any  # a value of `nft -j`'s JSON (an expression, a literal, a set's element)
Action = Any  # what a rule does: None (next rule), "accept", "drop", …, or (jump | goto, chain name)

HASHES = {"numgen", "jhash", "symhash"}  # map keys that spread connections over N values
FAMILIES = ("ip", "inet")  # the tables an IPv4 packet meets
FAMILIES6 = ("ip6", "inet")
PROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 132: "sctp", 58: "icmpv6"}
TYPE_KINDS = {
    "ipv4_addr": "ip",
    "ipv6_addr": "ip",
    "inet_proto": "proto",
    "inet_service": "port",
    "mark": "int",
    "ifname": "str",
    "ether_addr": "str",
    "integer": "int",
    "verdict": "verdict",
}


# nft's names of ICMP types and codes (`icmp type echo-request`, `icmp code frag-needed`)
ICMP_NAMES = {
    "icmptype": {
        "echo-reply": 0,
        "destination-unreachable": 3,
        "source-quench": 4,
        "redirect": 5,
        "echo-request": 8,
        "router-advertisement": 9,
        "router-solicitation": 10,
        "time-exceeded": 11,
        "parameter-problem": 12,
        "timestamp-request": 13,
        "timestamp-reply": 14,
        "info-request": 15,
        "info-reply": 16,
        "address-mask-request": 17,
        "address-mask-reply": 18,
    },
    "icmpcode": {
        "net-unreachable": 0,
        "host-unreachable": 1,
        "prot-unreachable": 2,
        "port-unreachable": 3,
        "frag-needed": 4,
        "net-prohibited": 9,
        "host-prohibited": 10,
        "admin-prohibited": 13,
    },
}


class Unknown(Exception):
    """An expression kpdiag cannot evaluate (the message says which)."""


def _kind_of(left: Json) -> str:
    if isinstance(left, dict):
        if "payload" in left:
            f = left["payload"].get("field")
            if f in ("saddr", "daddr"):
                return "ip"
            if f in ("sport", "dport"):
                return "port"
            if f == "protocol":
                return "proto"
            if left["payload"].get("protocol") == "icmp" and f in ("type", "code"):
                return f"icmp{f}"
            return "int"
        if "meta" in left:
            key = left["meta"].get("key")
            return {
                "l4proto": "proto",
                "mark": "int",
                "iifname": "str",
                "oifname": "str",
                "iif": "str",
                "oif": "str",
                "nfproto": "str",
                "protocol": "str",
            }.get(key, "int")
        if "ct" in left:
            key = left["ct"].get("key")
            return {"state": "ctstate", "mark": "int", "status": "ctstate", "original": "ip"}.get(key, "int")
        if "fib" in left:
            return "str"
        if "concat" in left:
            return "concat"
        for op in ("&", "|", "^"):
            if op in left:
                return "int"
    return "str"


def _norm(kind: str, v: Json) -> Any:
    """A right-hand value (literal, prefix, range) in the same terms as the packet's values; a value kpdiag cannot
    read in those terms makes the rule Unknown (the path uncertain), never an error."""
    try:
        return _norm_value(kind, v)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise Unknown(f"value {v!r} ({exc.__class__.__name__})") from None


def _norm_value(kind: str, v: Json) -> Any:
    if isinstance(v, dict):
        if "prefix" in v:
            return parse_prefix(f"{v['prefix']['addr']}/{v['prefix']['len']}")
        if "range" in v:
            lo, hi = v["range"]
            return ("range", _norm(kind, lo), _norm(kind, hi))
        if "elem" in v:
            return _norm(kind, v["elem"].get("val"))
        raise Unknown(f"value {v}")
    if kind == "ip":
        return parse_ip(str(v))[0]
    if kind == "port":
        return int(v)
    if kind == "proto":
        return PROTO_NAMES.get(v, str(v).lower()) if isinstance(v, int) else str(v).lower()
    if kind == "int":
        return int(v, 0) if isinstance(v, str) else int(v)
    if kind == "ctstate":
        return {v} if isinstance(v, str) else set(v)
    if kind in ("icmptype", "icmpcode"):
        return int(v) if not isinstance(v, str) else ICMP_NAMES[kind][v]
    return v


def _member(value: Any, elem: Any) -> bool:
    if isinstance(elem, Prefix):
        return isinstance(value, int) and elem.contains(value, 4 if value <= 0xFFFFFFFF else 6)
    if isinstance(elem, tuple) and elem and elem[0] == "range":
        return bool(elem[1] <= value <= elem[2])
    if isinstance(elem, set):
        return bool(value & elem) if isinstance(value, set) else value in elem
    return bool(value == elem)


class _SetIndex:
    """A set or map's elements, normalized, with exact lookups in a dict."""

    def __init__(self, kinds: list[str], elems: list[Json], is_map: bool) -> None:
        self.kinds = kinds
        self.exact: dict[tuple[Any, ...], Json] = {}
        self.intervals: list[tuple[tuple[Any, ...], Json]] = []
        for raw in elems:
            key, value = (raw[0], raw[1]) if is_map and isinstance(raw, list) and len(raw) == 2 else (raw, None)
            if isinstance(key, dict) and "elem" in key:
                key = key["elem"].get("val")
            if isinstance(key, dict) and "concat" in key:
                parts = tuple(_norm(k, p) for k, p in zip(kinds, key["concat"]))
            else:
                parts = (_norm(kinds[0], key),)
            if any(isinstance(p, (Prefix, tuple, set)) for p in parts):
                self.intervals.append((parts, value))
            else:
                self.exact[parts] = value

    def lookup(self, key: tuple[Any, ...]) -> tuple[bool, Json]:
        if key in self.exact:
            return True, self.exact[key]
        for parts, value in self.intervals:
            if all(_member(k, p) for k, p in zip(key, parts)):
                return True, value
        return False, None


class NftTracer(PacketWalker):
    rs: NftRuleset

    def __init__(self, ruleset: NftRuleset, routing: RoutingTable | None = None, mode: str = "nftables") -> None:
        self.rs = ruleset
        self.routing = routing or RoutingTable()
        self.mode = mode
        self._sets: dict[tuple[str, str, str], _SetIndex] = {}  # named sets and maps, indexed once
        self._anon: dict[int, tuple[Json, _SetIndex]] = {}  # anonymous maps, by their expression's id
        self._groups: dict[tuple[Any, ...], tuple[Json, list[tuple[float, bool, Json]]]] = {}

    # ----------------------------------------------------------------- hooks
    def _hook(self, hook: str, states: list[PacketState], finished: list[PacketState]) -> list[PacketState]:
        """Every base chain of the ip/inet (IPv6: ip6/inet) families on this hook, by priority."""
        hook_name = hook
        hook = hook.lower()
        families = FAMILIES6 if states and states[0].ver == 6 else FAMILIES  # DNAT keeps the family
        for chain in self.rs.base_chains(families, hook):
            states = self._base_chain(chain, hook_name, states, finished)
        return states

    def _base_chain(
        self, chain: NftChain, hook_name: str, states: list[PacketState], finished: list[PacketState]
    ) -> list[PacketState]:
        """Run one base chain on ``hook_name`` (PREROUTING, …) for every state; return those it lets through (the
        iptables tracer calls this too, for the nft tables of a node whose kube-proxy runs in iptables mode)."""
        hook = hook_name.lower()
        nxt = []
        for st in states:
            if chain.type == "nat" and st.nat_passes(hook):
                nxt.append(st)
                continue
            st.hook = hook_name
            before = st.nat_binding()
            for s2, outcome in self._run(chain, st, 0, 0):
                if outcome == "return":
                    outcome = chain.policy or "accept"
                    if outcome != "accept":
                        s2.add(
                            Step(
                                s2.hook,
                                f"{chain.family} {chain.table}",
                                chain.name,
                                None,
                                f"policy {outcome}",
                                f"policy {outcome}",
                            )
                        )
                if chain.type == "nat":
                    s2.bind_if_changed(before, hook)
                if outcome == "accept":
                    nxt.append(s2)
                else:
                    s2.hook = outcome
                    finished.append(s2)
        if hook == "output" and chain.type == "nat":
            for st in nxt:
                if st.ct_dnat:
                    self._set_oif(st)  # re-route after DNAT in OUTPUT
        return nxt

    # ----------------------------------------------------------------- chains and rules
    def _run(self, chain: NftChain, st: PacketState, start: int, depth: int) -> list[tuple[PacketState, str]]:
        budget = self.budget
        if budget.stopped:
            self._cut(st)
            return []
        if depth > MAX_DEPTH:
            self._cut(st, f"more than {MAX_DEPTH} nested jumps (at {chain.family} {chain.table} {chain.name}: a loop?)")
            return []
        out: list[tuple[PacketState, str]] = []
        todo: list[tuple[PacketState, int]] = [(st, start)]  # walks of this chain still to do (a stack, not recursion)
        while todo:
            st, start = todo.pop()
            if budget.stopped:
                self._cut(st)
                continue
            todo.extend(reversed(self._walk(chain, st, start, depth, out)))
        return out

    def _walk(
        self, chain: NftChain, st: PacketState, start: int, depth: int, out: list[tuple[PacketState, str]]
    ) -> list[tuple[PacketState, int]]:
        """One walk of ``chain`` from ``start``; finished outcomes go to ``out``; returns the walks it leaves to do
        (the branches of a numgen map or a dnat map that go on with the next rule, continuations after a jump)."""
        budget = self.budget
        rules = chain.rules
        for pos in range(start, len(rules)):
            if not budget.spend():
                self._cut(st)
                return []
            st.rules_evaluated += 1
            results = self._rule(rules[pos], st)
            if len(results) == 1 and results[0][1] is None:
                st = results[0][0]
                continue
            later = []
            for s2, action in results:
                if action is None:
                    later.append((s2, pos + 1))
                elif isinstance(action, tuple):
                    verb, target = action
                    sub = self.rs.chain(chain.family, chain.table, target)
                    if sub is None:
                        s2.note(f"{chain.name}: {verb} to missing chain {target}", uncertain=True)
                        later.append((s2, pos + 1))
                        continue
                    for s3, o3 in self._run(sub, s2, 0, depth + 1):
                        if o3 == "return" and verb == "jump":
                            later.append((s3, pos + 1))
                        else:
                            out.append((s3, o3))
                else:
                    out.append((s2, action))
            return later
        out.append((st, "return"))
        return []

    def _step(self, rule: NftRule, st: PacketState, action: str) -> None:
        st.add(
            Step(
                st.hook,
                f"{rule.family} {rule.table}",
                rule.chain,
                rule.index,
                rule.text,
                action,
                f"{self.rs.source}#handle{rule.handle}" if rule.handle is not None else self.rs.source,
            )
        )

    def _rule(self, rule: NftRule, st: PacketState) -> list[tuple[PacketState, Action]]:
        """Evaluate one rule: [(state, action)] — action None (next rule), "accept"/"drop"/"reject"/"return", or (jump|goto, chain)."""
        return self._exprs(rule, rule.expr, 0, st)

    def _exprs(self, rule: NftRule, exprs: list[Json], i: int, st: PacketState) -> list[tuple[PacketState, Action]]:
        while i < len(exprs):
            e = exprs[i]
            ((k, v),) = list(e.items())[:1]
            try:
                if k == "match":
                    if not self._match(rule, v, st):
                        return [(st, None)]
                elif k == "vmap":
                    key = v.get("key")
                    if isinstance(key, dict) and key.keys() & HASHES:
                        return self._numgen(rule, key, v.get("data"), st)
                    found, verdict = self._lookup(rule, key, v.get("data"), st)
                    if not found:
                        return [(st, None)]
                    return [(st, self._verdict(rule, verdict, st))]
                elif k in ("accept", "drop", "return", "continue", "jump", "goto"):
                    return [(st, self._verdict(rule, e, st))]
                elif k == "reject":
                    st.reject_with = (
                        (v or {}).get("expr") or "port-unreachable" if isinstance(v, dict) else "port-unreachable"
                    )
                    self._step(rule, st, f"reject ({st.reject_with})")
                    return [(st, "reject")]
                elif k == "dnat":
                    return self._dnat(rule, v if isinstance(v, dict) else {}, st)
                elif k == "snat":
                    v = v if isinstance(v, dict) else {}
                    st.snat = render_value(v.get("addr")) + (
                        f":{render_value(v['port'])}" if v.get("port") is not None else ""
                    )
                    st.ct_snat = True
                    self._step(rule, st, f"SNAT to {st.snat}")
                    return [(st, "accept")]
                elif k == "masquerade":
                    st.masquerade = st.ct_snat = True
                    self._step(rule, st, "masquerade (source becomes the outgoing interface's address)")
                    return [(st, "accept")]
                elif k == "redirect":
                    port = v.get("port") if isinstance(v, dict) else None
                    if isinstance(port, int):
                        st.dport = port
                    elif port is not None:
                        raise Unknown(f"redirect to port {render_value(port)}")
                    st.local_redirect = st.ct_dnat = True
                    st.dnat = f"(node itself):{st.dport}"
                    self._step(rule, st, f"redirect to the node's own port {st.dport}")
                    return [(st, "accept")]
                elif k == "mangle":
                    self._mangle(rule, v, st)
                elif k == "notrack":
                    st.untracked = True
                    self._step(rule, st, "notrack")
                elif k == "set":
                    if v.get("op") in ("update", "add"):
                        st.note(
                            f"session affinity: {rule.chain} records the client in {v.get('set')} (kpdiag assumes a client not seen before)"
                        )
                elif k in ("counter", "log", "limit", "quota", "meter", "comment"):
                    pass
                elif k == "xt":
                    raise Unknown("an iptables-nft compatibility expression (trace it with --rules from iptables-save)")
                else:
                    raise Unknown(f"expression '{k}'")
            except Unknown as exc:
                st.note(
                    f"{rule.family} {rule.table} {rule.chain} rule {rule.index}: {exc} cannot be evaluated; assumed not matching",
                    uncertain=True,
                )
                return [(st, None)]
            i += 1
        self._step(rule, st, "continue")
        return [(st, None)]

    def _elements(self, rule: NftRule, data: Json) -> list[tuple[Json, Json]]:
        """(key, value) of every element of a map given inline or by name (@name)."""
        if isinstance(data, str) and data.startswith("@"):
            named = self.rs.set(rule.family, rule.table, data[1:])
            if named is None:
                raise Unknown(f"map {data} (not in the ruleset)")
            elems = named.elems
        elif isinstance(data, dict) and isinstance(data.get("set"), list):
            elems = data["set"]
        else:
            raise Unknown(f"map data {render_value(data)}")
        out = []
        for raw in elems:
            if not (isinstance(raw, list) and len(raw) == 2):
                raise Unknown(f"map element {render_value(raw)}")
            key, value = raw
            if isinstance(key, dict) and "elem" in key:
                key = key["elem"].get("val")
            out.append((key, value))
        return out

    def _index_groups(
        self, rule: NftRule, expr: dict[str, Json], data: Json, st: PacketState
    ) -> list[tuple[float, bool, Json]]:
        """A map looked up by ``numgen``/``jhash``/``symhash … mod N``: the N indices grouped by the value each one
        takes — [(share, found, value)] in index order, one per distinct value and one for the indices the map
        lacks (found False). Work is per element, not per index: ``mod 100000000`` costs what ``mod 2`` does."""
        kind = next(k for k in expr if k in HASHES)
        spec = expr[kind] if isinstance(expr[kind], dict) else {}
        try:
            mod, offset = int(spec.get("mod", 0)), int(spec.get("offset", 0) or 0)
        except (TypeError, ValueError):
            raise Unknown(f"{kind} {spec}") from None
        if mod <= 0:
            raise Unknown(f"{kind} mod {mod}")
        if kind != "numgen":
            st.note(
                f"{rule.chain}: {kind} mod {mod}: which branch a connection takes is a hash of its addresses/ports "
                "(kpdiag does not compute the kernel's hash); each branch is shown with its share of the hash values"
            )
        elif spec.get("mode") != "random":
            st.note(
                f"{rule.chain}: numgen {spec.get('mode')} depends on the connections before this one; each branch is "
                f"shown with its share of the {mod} values"
            )
        ckey = (data if isinstance(data, str) else id(data), rule.family, rule.table, mod, offset)
        cached = self._groups.get(ckey)
        if cached is not None and (isinstance(data, str) or cached[0] is data):
            return cached[1]  # a big map is grouped once per trace setup, not once per path
        lo, hi = offset, offset + mod - 1
        groups: dict[str, list[Any]] = {}
        covered = 0
        for key, value in self._elements(rule, data):
            try:
                if isinstance(key, dict) and "range" in key:
                    a, b = (int(x) for x in key["range"])
                else:
                    a = b = int(key)
            except (TypeError, ValueError):
                raise Unknown(f"{kind} map key {render_value(key)}") from None
            n = min(b, hi) - max(a, lo) + 1
            if n <= 0:
                continue
            covered += n
            g = groups.setdefault(json.dumps(value, sort_keys=True), [0, max(a, lo), value])
            g[0] += n
        out = [(n / mod, True, value) for n, _, value in sorted(groups.values(), key=lambda g: g[1])]
        if covered < mod:
            out.append(((mod - covered) / mod, False, None))
        self._groups[ckey] = (data, out)
        return out

    def _branches(self, st: PacketState, shares: list[float]) -> list[PacketState | None]:
        """One state per share (the last one is ``st`` itself); None where the path budget refused a fork."""
        out: list[PacketState | None] = []
        for n, share in enumerate(shares):
            if n == len(shares) - 1:
                st.prob *= share
                out.append(st)
            else:
                out.append(self._fork(st, share))
        return out

    def _numgen(
        self, rule: NftRule, key: dict[str, Json], data: Json, st: PacketState
    ) -> list[tuple[PacketState, Action]]:
        groups = self._index_groups(rule, key, data, st)
        out: list[tuple[PacketState, Action]] = []
        for branch, (_, found, verdict) in zip(self._branches(st, [g[0] for g in groups]), groups):
            if branch is not None:
                out.append((branch, self._verdict(rule, verdict, branch) if found else None))
        return out

    def _nat_values(self, rule: NftRule, expr: Json, st: PacketState) -> list[tuple[float, bool, Json]]:
        """A dnat address or port: a literal, a range, or a map (keyed by the packet, or by numgen/jhash: one
        branch per value) → [(share, found, value)]; found False: the map has no element for this packet."""
        if expr is None or isinstance(expr, (str, int)):
            return [(1.0, True, expr)]
        if isinstance(expr, dict):
            if "range" in expr:
                return [(1.0, True, expr)]
            if "map" in expr and isinstance(expr["map"], dict):
                m = expr["map"]
                key = m.get("key")
                if isinstance(key, dict) and key.keys() & HASHES:
                    return self._index_groups(rule, key, m.get("data"), st)
                found, value = self._lookup(rule, key, m.get("data"), st)
                return [(1.0, found, value)]
        raise Unknown(f"dnat to {render_value(expr)}")

    def _dnat(self, rule: NftRule, v: dict[str, Json], st: PacketState) -> list[tuple[PacketState, Action]]:
        """``dnat to``: an address (literal, range, map by the packet's fields or by numgen/jhash), a port (literal,
        range, map), or both from one map of ``addr . port`` (``dnat ip addr . port to …``); every value a map can
        give is its own path with its share."""
        combos = []
        for pa, fa, addr in self._nat_values(rule, v.get("addr"), st):
            for pp, fp, port in self._nat_values(rule, v.get("port"), st):
                combos.append((pa * pp, fa and fp, addr, port))
        flags = v.get("flags") or []
        flags = [flags] if isinstance(flags, str) else list(flags) if isinstance(flags, list) else []
        out: list[tuple[PacketState, Action]] = []
        for branch, (_, found, addr, port) in zip(self._branches(st, [c[0] for c in combos]), combos):
            if branch is None:
                continue
            if not found:
                branch.note(f"{rule.chain}: the dnat map has no element for this packet: the rule does not match")
                self._step(rule, branch, "dnat map: no element (continue)")
                out.append((branch, None))
                continue
            if isinstance(addr, dict) and "concat" in addr and len(addr["concat"]) == 2:
                addr, port = addr["concat"]
            try:
                out.append((branch, self._apply_dnat(rule, branch, addr, port, flags)))
            except (ValueError, TypeError):
                raise Unknown(f"dnat to {render_value(addr)}:{render_value(port)}") from None
        return out

    def _apply_dnat(self, rule: NftRule, st: PacketState, addr: Json, port: Json, flags: list[str]) -> str:
        shown_addr = None
        if isinstance(addr, dict) and "range" in addr:
            lo, hi = addr["range"]
            st.dst = parse_ip(str(lo))[0]
            shown_addr = f"{lo}-{hi}"
            st.note(
                f"{rule.chain}: dnat to the address range {lo}-{hi}: the kernel picks one address per client (a hash of "
                "its addresses); shown and routed is the first"
            )
        elif isinstance(addr, str):
            st.dst = parse_ip(addr)[0]
        elif addr is not None:
            raise Unknown(f"dnat address {render_value(addr)}")
        shown_port = None
        if isinstance(port, dict) and "range" in port:
            lo, hi = (int(x) for x in port["range"])
            if {"random", "fully-random"} & set(flags):
                st.dport = lo
                shown_port = f"{lo}-{hi}"
                st.note(f"{rule.chain}: dnat to ports {lo}-{hi} with {','.join(flags)}: the kernel picks one at random")
            elif st.dport is not None and lo <= st.dport <= hi:
                pass  # the kernel keeps a destination port that is already in the range
            else:
                st.dport = lo  # else the first free port of the range: the first, for a new connection
        elif isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            st.dport = int(port)
        elif port is not None:
            raise Unknown(f"dnat port {render_value(port)}")
        st.ct_dnat = True
        st.dnat = endpoint_text(st.dst, st.ver, st.dport)
        if shown_addr or shown_port:
            host = shown_addr or endpoint_text(st.dst, st.ver, None)
            st.dnat = f"{host}:{shown_port or st.dport}" if st.dport is not None else host
        self._step(rule, st, f"DNAT to {st.dnat}")
        return "accept"

    def _verdict(self, rule: NftRule, verdict: Json, st: PacketState) -> Action:
        if isinstance(verdict, str):
            verdict = {verdict: None}
        if not isinstance(verdict, dict):
            raise Unknown(f"verdict {verdict}")
        ((k, v),) = list(verdict.items())[:1]
        if k in ("jump", "goto"):
            self._step(rule, st, f"{k} {v.get('target')}")
            return (k, v.get("target"))
        if k == "continue":
            self._step(rule, st, "continue")
            return None
        self._step(rule, st, k)
        return k

    # ----------------------------------------------------------------- values
    def _value(self, rule: NftRule, left: Json, st: PacketState) -> Any:
        """The value an expression's left side takes for this packet (raises _NoMatch when the expression cannot
        apply to it, Unknown when kpdiag cannot tell)."""
        if not isinstance(left, dict):
            return left
        if "payload" in left:
            return _payload(left["payload"], st)
        if "meta" in left:
            return _meta(left["meta"].get("key"), st)
        if "ct" in left:
            return _ct(left["ct"].get("key"), st)
        if "fib" in left:
            return self._fib(left["fib"], st)
        if "concat" in left:
            return tuple(self._value(rule, x, st) for x in left["concat"])
        for op in ("&", "|", "^"):
            if op in left:
                a, b = left[op]
                av, bv = (
                    self._value(rule, a, st),
                    _norm("int", b) if not isinstance(b, dict) else self._value(rule, b, st),
                )
                return {"&": av & bv, "|": av | bv, "^": av ^ bv}[op]
        raise Unknown(f"expression {list(left)[0]}")

    def _fib(self, fib: Json, st: PacketState) -> str:
        """``fib saddr|daddr type``: the type of route the address takes."""
        flags, result = fib.get("flags") or [], fib.get("result")
        if result != "type":
            raise Unknown(f"fib {result}")
        addr = st.src if "saddr" in flags else st.dst
        if self.routing.is_local(addr, st.ver):
            return "local"
        route = self.routing.lookup(addr, st.ver)
        if route is None:
            return "unicast"
        return {
            "unicast": "unicast",
            "blackhole": "blackhole",
            "unreachable": "unreachable",
            "prohibit": "prohibit",
        }.get(route.type, route.type)

    def _set_index(self, rule: NftRule, ref: str, kinds_hint: list[str] | None) -> _SetIndex:
        key = (rule.family, rule.table, ref.lstrip("@"))
        idx = self._sets.get(key)
        if idx is None:
            s = self.rs.set(*key)
            if s is None:
                raise Unknown(f"set {ref} (not in the ruleset)")
            types = s.type if isinstance(s.type, list) else [s.type]
            kinds = [TYPE_KINDS.get(t, "str") for t in types]
            idx = _SetIndex(kinds, s.elems, s.is_map)
            self._sets[key] = idx
        return idx

    def _lookup(
        self,
        rule: NftRule,
        key_expr: Json,
        data: Json,
        st: PacketState,
        key_value: tuple[Any, ...] | None = None,
        kinds: list[str] | None = None,
    ) -> tuple[bool, Json]:
        if key_value is None:
            try:
                value = self._value(rule, key_expr, st)
            except _NoMatch:
                return False, None
            key_value = value if isinstance(value, tuple) else (value,)
            kinds = (
                [_kind_of(x) for x in key_expr["concat"]]
                if isinstance(key_expr, dict) and "concat" in key_expr
                else [_kind_of(key_expr)]
            )
        if isinstance(data, str) and data.startswith("@"):
            idx = self._set_index(rule, data, kinds)
        elif isinstance(data, dict) and "set" in data:
            anon = self._anon.get(id(data))  # an anonymous map, indexed once per rule (its expression is kept)
            if anon is None or anon[0] is not data:
                anon = (data, _SetIndex(kinds or [], data["set"], True))
                self._anon[id(data)] = anon
            idx = anon[1]
        else:
            raise Unknown(f"map data {data}")
        s = self.rs.set(rule.family, rule.table, data.lstrip("@")) if isinstance(data, str) else None
        if s is not None and "timeout" in s.flags and not s.elems:
            st.note(f"session affinity ({s.name}): kpdiag assumes this client was not seen before")
        return idx.lookup(tuple(key_value))

    def _match(self, rule: NftRule, m: dict[str, Json], st: PacketState) -> bool:
        op, left, right = m.get("op", "=="), m.get("left"), m.get("right")
        try:
            value = self._value(rule, left, st)
        except _NoMatch:
            return False
        kind = _kind_of(left)
        if isinstance(right, str) and right.startswith("@"):
            s = self.rs.set(rule.family, rule.table, right[1:])
            if s is not None and "timeout" in s.flags and not s.elems:
                st.note(f"session affinity ({s.name}): kpdiag assumes this client was not seen before")
            idx = self._set_index(rule, right, None)
            found, _ = idx.lookup(value if isinstance(value, tuple) else (value,))
            return found if op in ("==", "in") else not found
        if isinstance(right, dict) and "set" in right:
            elems = [_norm(kind, x) for x in right["set"]]
            hit = any(_member(value, e) for e in elems)
            return hit if op in ("==", "in") else not hit
        if kind == "ctstate":
            want = _norm(kind, right)
            hit = bool(value & want)
            return hit if op in ("==", "in") else not hit
        target = _norm(kind, right)
        hit = _member(value, target)
        if op in ("==", "in"):
            return hit
        if op == "!=":
            return not hit
        if op in ("<", ">", "<=", ">="):
            return bool({"<": value < target, ">": value > target, "<=": value <= target, ">=": value >= target}[op])
        raise Unknown(f"operator {op}")

    def _mangle(self, rule: NftRule, v: dict[str, Json], st: PacketState) -> None:
        key = v.get("key", {})
        selector = (key.get("meta") or key.get("ct")) if isinstance(key, dict) else None
        if not (isinstance(selector, dict) and selector.get("key") == "mark"):
            raise Unknown("mangle of something other than the mark")
        before = st.mark if "meta" in key else st.ctmark
        value = self._value(rule, v.get("value"), st)
        value = int(value) & 0xFFFFFFFF
        if "meta" in key:
            st.mark = value
        else:
            st.ctmark = value
        self._step(rule, st, f"mark 0x{before:x} -> 0x{value:x}")


class _NoMatch(Exception):
    """The packet lacks the header the expression reads (e.g. tcp dport on a UDP packet): no match."""


def _payload(p: Json, st: PacketState) -> Any:
    """A header field (``payload``) of the packet."""
    proto, f = p.get("protocol"), p.get("field")
    if proto in ("ip", "ip6") and (proto == "ip6") != (st.ver == 6):
        raise _NoMatch()  # an IPv4 header match on an IPv6 packet (inet tables see both), or the reverse
    if f == "saddr" and proto in ("ip", "ip6"):
        return st.src
    if f == "daddr" and proto in ("ip", "ip6"):
        return st.dst
    if (f == "protocol" and proto == "ip") or (f == "nexthdr" and proto == "ip6"):
        return st.proto
    if f in ("sport", "dport") and proto in ("th", "tcp", "udp", "sctp"):
        if proto != "th" and proto != st.proto:
            raise _NoMatch()
        return st.sport if f == "sport" else st.dport
    if proto == "icmp" and f in ("type", "code"):
        if st.proto != "icmp":
            raise _NoMatch()
        return st.icmp_type if f == "type" else st.icmp_code
    raise Unknown(f"payload {proto} {f}")


def _meta(key: object, st: PacketState) -> Any:
    """A ``meta`` key of the packet."""
    if key == "l4proto":
        return st.proto
    if key == "mark":
        return st.mark
    if key in ("iifname", "iif"):
        if st.iif is None:
            if st.hook in ("OUTPUT", "POSTROUTING"):
                return ""
            raise Unknown("the input interface (give --iif)")
        return st.iif
    if key in ("oifname", "oif"):
        if st.oif is None:
            raise Unknown("the output interface (no route known)")
        return st.oif
    if key == "nfproto":
        return "ipv6" if st.ver == 6 else "ipv4"
    if key == "protocol":
        return "ip6" if st.ver == 6 else "ip"
    raise Unknown(f"meta {key}")


def _ct(key: object, st: PacketState) -> Any:
    """A ``ct`` key of the packet's connection."""
    if key == "state":
        if st.untracked:
            return {"untracked"}
        return {st.ct_state}
    if key == "status":
        s = set()
        if st.ct_dnat:
            s.add("dnat")
        if st.ct_snat:
            s.add("snat")
        return s
    if key == "mark":
        return st.ctmark
    raise Unknown(f"ct {key}")
