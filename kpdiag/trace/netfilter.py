"""Trace one packet through an iptables ruleset the way the kernel's netfilter hooks walk it.

Hooks in kernel order: PREROUTING (raw, mangle, nat) → routing → INPUT (mangle, filter,
security, nat) or FORWARD (mangle, filter, security) → POSTROUTING (mangle, nat) for a packet
arriving from outside; OUTPUT (raw, mangle, nat, filter, security) → routing → POSTROUTING
(→ over loopback when local: PREROUTING and INPUT again, without their nat chains) for a packet
the node sends itself.

Every probabilistic match (``-m statistic``) forks the path; every path carries its
probability, the rules it hit, its DNAT/SNAT/masquerade and its verdict. A match or target
kpdiag cannot evaluate never crashes the trace: the path is marked uncertain with a note.

The packet is the first one of a new connection (conntrack state NEW), which is the one that
the nat table sees and the one kube-proxy's rules are written for.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from heapq import merge

import re
from typing import TYPE_CHECKING

from ..errors import InputError
from ..parse.addr import ip4_to_int, parse_ip
from ..parse.iptables import Chain, Rule, Ruleset
from .model import Step, endpoint_text
from .routing import RoutingTable
from .walker import MAX_DEPTH, PacketState, PacketWalker
from .xt_matches import MATCHERS, mark_spec

if TYPE_CHECKING:
    from ..parse.ipset import IpSet
    from ..parse.nft import NftChain, NftRuleset
    from ..parse.recent import RecentState
    from .nftables import NftTracer

INDEX_MIN_RULES = 24

HOOK_TABLES = {
    "PREROUTING": ("raw", "mangle", "nat"),
    "INPUT": ("mangle", "filter", "security", "nat"),
    "FORWARD": ("mangle", "filter", "security"),
    "OUTPUT": ("raw", "mangle", "nat", "filter", "security"),
    "POSTROUTING": ("mangle", "nat"),
}

_NOOP_TARGETS = {
    "LOG",
    "NFLOG",
    "ULOG",
    "TRACE",
    "AUDIT",
    "CHECKSUM",
    "TCPMSS",
    "TOS",
    "DSCP",
    "TTL",
    "HL",
    "CLASSIFY",
    "IDLETIMER",
    "SECMARK",
    "CONNSECMARK",
}


_QUOTED_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # linear (see parse/iptables.py _TOKEN_RE)
_DST_RE = re.compile(r"(?:^|\s)(!\s+)?(?:-d|--destination|--dst)\s+(\S+)")


def _exact_dst(text: str) -> int | None:
    """The single IPv4 address a rule's ``-d`` demands (``-d X`` or ``-d X/32``), else None."""
    if '"' in text:
        text = _QUOTED_RE.sub('""', text)
    found = _DST_RE.findall(text)
    if len(found) != 1:
        return None
    neg, value = found[0]
    if neg:
        return None
    addr, _, plen = value.partition("/")
    if plen not in ("", "32", "255.255.255.255"):
        return None
    try:
        return ip4_to_int(addr)
    except ValueError:
        return None


def _iface_match(pattern: str, name: str) -> bool:
    if pattern.endswith("+"):
        return name.startswith(pattern[:-1])
    return name == pattern


# the priorities iptables(-nft) registers its tables at, by hook (nat: dstnat before routing, srcnat after)
TABLE_PRIO = {"raw": -300, "mangle": -150, "filter": 0, "security": 50}
NAT_PRIO = {"PREROUTING": -100, "OUTPUT": -100, "INPUT": 100, "POSTROUTING": 100}
IPTABLES_NFT_TABLES = {"raw", "mangle", "nat", "filter", "security"}


def acts_at_hooks(ruleset: Ruleset) -> bool:
    """Do these iptables rules do anything to a packet: a rule in a built-in chain, or a policy other than ACCEPT?
    (iptables-nft's empty tables, which every iptables command creates, do nothing.)"""
    return any(
        len(chain) or chain.policy not in (None, "ACCEPT")
        for table in IPTABLES_NFT_TABLES
        for hook in HOOK_TABLES
        if table in HOOK_TABLES[hook] and (chain := ruleset.chain(table, hook)) is not None
    )


class IptablesTracer(PacketWalker):
    """Trace packets through one parsed :class:`Ruleset`; reuse it for many packets.

    ``nft``: the node's nftables ruleset; its base chains other than iptables-nft's own tables (``ip``/``ip6``
    raw, mangle, nat, filter, security: the rules iptables-save already shows) run at their hooks too, ordered with
    the iptables tables by priority — a host firewall (firewalld's ``inet firewalld``, a hand-written ``inet filter``)
    sees forwarded pod traffic as well."""

    rs: Ruleset

    def __init__(
        self,
        ruleset: Ruleset,
        routing: RoutingTable | None = None,
        ipsets: dict[str, IpSet] | None = None,
        mode: str = "iptables",
        nft: NftRuleset | None = None,
    ) -> None:
        self.rs = ruleset
        self.routing = routing or RoutingTable()
        self.ipsets = ipsets
        self.mode = mode
        # per chain: rule positions by exact destination, the others, and the merged candidates by destination
        self._indexes: dict[tuple[str, str], tuple[dict[int, list[int]], list[int], dict[int, list[int]]]] = {}
        self.nft = nft
        self._nft_tracer: NftTracer | None = None
        self.recent: RecentState | None = (
            None  # the node's xt_recent tables (kpdiag/parse/recent.py), when recorded: session affinity
        )

    def _nft_chains(self, hook: str, ver: int) -> list[NftChain]:
        if self.nft is None:
            return []
        families = ("ip6", "inet") if ver == 6 else ("ip", "inet")
        return [
            c
            for c in self.nft.base_chains(families, hook.lower())
            if not (c.family in ("ip", "ip6") and c.table in IPTABLES_NFT_TABLES)
        ]

    def _hook(self, hook: str, states: list[PacketState], finished: list[PacketState]) -> list[PacketState]:
        """Run every table of ``hook`` in priority order (with the nft base chains of other tables on that hook, when
        the node's nftables ruleset is known); return the states that get through."""
        order: list[tuple[int, int, int, str | NftChain]] = [
            (NAT_PRIO[hook] if t == "nat" else TABLE_PRIO[t], 0, n, t) for n, t in enumerate(HOOK_TABLES[hook])
        ]
        others = self._nft_chains(hook, states[0].ver) if states else []
        nft_tracer = None
        if others and self.nft is not None:
            from .nftables import NftTracer

            if self._nft_tracer is None:
                self._nft_tracer = NftTracer(self.nft, self.routing, mode=self.mode)
            nft_tracer = self._nft_tracer
            nft_tracer.budget = self.budget
            order += [(c.prio if c.prio is not None else 0, 1, n, c) for n, c in enumerate(others)]
            order.sort(key=lambda o: o[:3])
        for _, _, _, table_name in order:
            if not isinstance(table_name, str):
                c = table_name
                assert nft_tracer is not None  # an nft chain is in the order only with its tracer
                if c.type == "nat" and c.prio == NAT_PRIO[hook]:
                    for st in states:
                        if st.nat_done == hook.lower():
                            st.note(
                                f"{c.family} {c.table}/{c.name} has the priority of iptables' nat {hook} ({c.prio}): "
                                "the kernel runs the one registered last first; kpdiag ran iptables' first, which bound "
                                "the connection, so the kernel runs no other nat chain of the hook"
                            )
                states = nft_tracer._base_chain(c, hook, states, finished)
                continue
            chain = self.rs.chain(table_name, hook)
            if chain is None:
                continue
            nxt: list[PacketState] = []
            for st in states:
                if table_name == "nat" and st.nat_passes(hook):
                    nxt.append(st)
                    continue
                st.hook = hook
                before = st.nat_binding()
                for s2, outcome in self._run(chain, st, 0, 0):
                    if table_name == "nat":
                        s2.bind_if_changed(before, hook)  # the nft base chains after it see it bound (NftTracer)
                    if outcome == "return":
                        outcome = chain.policy or "ACCEPT"
                        if outcome != "ACCEPT":
                            s2.add(
                                Step(
                                    hook,
                                    table_name,
                                    hook,
                                    None,
                                    f":{hook} {outcome}",
                                    f"policy {outcome}",
                                    f"{self.rs.source}:{chain.lineno}",
                                )
                            )
                    if outcome == "ACCEPT":
                        nxt.append(s2)
                    else:
                        s2.hook = outcome.lower()
                        finished.append(s2)
            states = nxt
            if hook == "OUTPUT" and table_name == "nat":
                for st in states:
                    if st.ct_dnat:
                        self._set_oif(st)  # re-route after DNAT in OUTPUT
        return states

    # ------------------------------------------------------------------ chains
    def _candidates(self, chain: Chain, st: PacketState) -> list[int] | None:
        """Rule positions that can match this packet, in order (an index keeps first-match order).

        Big chains (KUBE-SERVICES: one rule per service port) are indexed by the rules' exact
        destination (``-d X/32``, not negated), read from the raw text without structuring every
        rule. A rule with any other destination test stays in the generic list, walked in order.
        """
        n = len(chain)
        if n < INDEX_MIN_RULES:
            return None
        key = (chain.table, chain.name)
        idx = self._indexes.get(key)
        if idx is None:
            by_dst: dict[int, list[int]] = {}
            generic: list[int] = []
            for pos, text in enumerate(chain.lines):
                addr = _exact_dst(text)
                if addr is None:
                    generic.append(pos)
                else:
                    by_dst.setdefault(addr, []).append(pos)
            idx = (by_dst, generic, {})
            self._indexes[key] = idx
        by_dst, generic, cache = idx
        if st.ver != 4:
            return None
        cand = cache.get(st.dst)
        if cand is None:
            hit = by_dst.get(st.dst)
            cand = list(merge(hit, generic)) if hit else generic
            if len(cache) < 65536:
                cache[st.dst] = cand
        return cand

    def _run(self, chain: Chain, st: PacketState, start: int, depth: int) -> list[tuple[PacketState, str]]:
        """Walk ``chain`` from rule ``start`` (0-based); return (state, outcome) for every path.

        outcome: "return" (fell off the end or RETURN), "ACCEPT", "DROP", "REJECT".
        """
        budget = self.budget
        if budget.stopped:
            self._cut(st)
            return []
        if depth > MAX_DEPTH:
            self._cut(st, f"more than {MAX_DEPTH} nested jumps (at {chain.table}/{chain.name}: a loop?)")
            return []
        out: list[tuple[PacketState, str]] = []
        # walks of this chain still to do, as a stack (the top is next): the "did not match" side of random matches
        # and the continuations after a jump returns — kept here, not in recursion, so that a chain of thousands of
        # statistic rules (a Service with thousands of endpoints) or of jump-and-return rules walks in constant stack
        todo: list[tuple[PacketState, int]] = [(st, start)]
        while todo:
            st, start = todo.pop()
            if budget.stopped:
                self._cut(st)
                continue
            later = self._walk(chain, st, start, depth, out)
            todo.extend(reversed(later))  # in rule order: continuations first, then the other sides of forks
        return out

    def _walk(
        self, chain: Chain, st: PacketState, start: int, depth: int, out: list[tuple[PacketState, str]]
    ) -> list[tuple[PacketState, int]]:
        """One walk of ``chain`` from ``start``; finished outcomes go to ``out``; returns the walks it leaves to do."""
        budget = self.budget
        n_rules = len(chain)
        cand = self._candidates(chain, st)
        if cand is None:
            positions: Sequence[int] = range(start, n_rules)
        else:
            positions = cand[bisect_left(cand, start) :] if start else cand
        cursor = start
        deferred: list[tuple[PacketState, int]] = []  # the "did not match" side of random matches
        for pos in positions:
            if not budget.spend():
                self._cut(st)
                break
            try:
                rule = chain.rule_at(pos)
            except InputError as exc:
                st.note(f"{exc}; rule skipped", uncertain=True)
                continue
            p = self._match(rule, st)
            if p <= 0.0:
                continue
            st.rules_evaluated += pos + 1 - cursor
            cursor = pos + 1
            if p < 1.0:
                other = self._fork(st, 1.0 - p)
                if other is not None:
                    deferred.append((other, pos + 1))
                st.prob *= p
            sub = self.rs.chain(rule.table, rule.target) if rule.target else None
            if sub is not None and not sub.builtin:
                self._step(rule, st, f"{'goto' if rule.goto else 'jump'} {rule.target}")
                resume = []
                for s2, outcome in self._run(sub, st, 0, depth + 1):
                    if outcome == "return" and not rule.goto:
                        resume.append((s2, rule.index))  # continue after the jump
                    else:
                        out.append((s2, outcome))
                return resume + deferred
            verdict = self._target(rule, st)
            if verdict is None:
                continue  # non-terminal target: next rule
            out.append((st, verdict))
            break
        else:
            st.rules_evaluated += n_rules - cursor
            out.append((st, "return"))
        return deferred

    def _step(self, rule: Rule, st: PacketState, action: str) -> None:
        st.add(Step(st.hook, rule.table, rule.chain, rule.index, rule.text, action, rule.where))

    def _target(self, rule: Rule, st: PacketState) -> str | None:
        """A target other than a jump to a user chain: its outcome, or None to go on with the next rule."""
        t = rule.target
        if t is None:
            self._step(rule, st, "no target (counts only)")
            return None
        sub = self.rs.chain(rule.table, t)
        if t == "ACCEPT":
            self._step(rule, st, "ACCEPT")
            return "ACCEPT"
        if t == "DROP":
            self._step(rule, st, "DROP")
            return "DROP"
        if t == "REJECT":
            opt = rule.target_opt("--reject-with")
            st.reject_with = opt.value if opt else "icmp-port-unreachable"
            self._step(rule, st, f"REJECT ({st.reject_with})")
            return "REJECT"
        if t == "RETURN":
            self._step(rule, st, "RETURN")
            return "return"
        if t == "DNAT":
            return self._dnat(rule, st)
        if t == "MASQUERADE":
            st.masquerade = True
            st.ct_snat = True
            self._step(rule, st, "MASQUERADE (source becomes the outgoing interface's address)")
            return "ACCEPT"
        if t == "SNAT":
            opt = rule.target_opt("--to-source")
            st.snat = opt.value if opt else "?"
            st.ct_snat = True
            self._step(rule, st, f"SNAT to {st.snat}")
            return "ACCEPT"
        if t == "REDIRECT":
            opt = rule.target_opt("--to-ports")
            port = int(opt.value.split("-")[0]) if opt and opt.value else st.dport
            st.dnat = f"(node itself):{port}"
            st.local_redirect = True
            st.dport = port
            st.ct_dnat = True
            self._step(rule, st, f"REDIRECT to the node's own port {port}")
            st.note("REDIRECT sends the packet to a local socket (legacy userspace proxy portal)")
            return "ACCEPT"
        if t == "MARK":
            self._mark(rule, st, "mark")
            return None
        if t == "CONNMARK":
            self._connmark(rule, st)
            return None
        if t == "NOTRACK" or (t == "CT" and rule.target_opt("--notrack")):
            st.untracked = True
            self._step(rule, st, "NOTRACK (connection tracking off: no NAT)")
            return None
        if t == "CT":
            self._step(rule, st, "CT (helper/zone; no effect on the path)")
            return None
        if t in _NOOP_TARGETS:
            self._step(rule, st, f"{t} (no effect on the path)")
            return None
        if t in ("QUEUE", "NFQUEUE"):
            self._step(rule, st, f"{t}: handed to a userspace program")
            st.note(
                f"{rule.where}: {t} gives the packet to a userspace program whose verdict kpdiag cannot know; assumed ACCEPT",
                uncertain=True,
            )
            return "ACCEPT"
        if sub is not None:  # jump to a built-in chain name: not allowed by the kernel
            st.note(f"{rule.where}: jump to built-in chain {t}", uncertain=True)
            return None
        self._step(rule, st, f"{t} (unknown target: not evaluated)")
        st.note(
            f"{rule.where}: target {t} is unknown to kpdiag or names a missing chain; assumed to continue",
            uncertain=True,
        )
        return None

    def _dnat(self, rule: Rule, st: PacketState) -> str:
        opt = rule.target_opt("--to-destination") or rule.target_opt("--to")
        if opt is None or not opt.value:
            st.note(f"{rule.where}: DNAT without --to-destination", uncertain=True)
            self._step(rule, st, "DNAT (no destination)")
            return "ACCEPT"
        spec = opt.value
        if spec.startswith("["):  # [v6]:port
            host, _, port = spec[1:].partition("]:")
        elif spec.count(":") == 1:
            host, _, port = spec.partition(":")
        else:
            host, port = spec, ""
        first_host = host.split("-")[0]
        if "-" in host:
            st.note(
                f"{rule.where}: DNAT to a range {host}; the kernel picks one address per connection, shown is the first",
                uncertain=False,
            )
        try:
            st.dst, _ = parse_ip(first_host) if first_host else (st.dst, st.ver)
        except ValueError:
            st.note(f"{rule.where}: cannot read DNAT destination {spec!r}", uncertain=True)
        if port:
            st.dport = int(port.split("-")[0])
        st.ct_dnat = True
        st.dnat = endpoint_text(st.dst, st.ver, st.dport)
        self._step(rule, st, f"DNAT to {st.dnat}")
        return "ACCEPT"

    def _mark(self, rule: Rule, st: PacketState, attr: str) -> None:
        before = getattr(st, attr)
        value = before
        for opt in rule.target_opts:
            name = opt.name
            if name in ("--set-xmark", "--set-mark"):
                v, m = mark_spec(opt.value)
                value = ((value & ~m) ^ v) if name == "--set-xmark" else ((value & ~m) | v)
            elif name == "--or-mark":
                value |= int(opt.value, 0)
            elif name == "--and-mark":
                value &= int(opt.value, 0)
            elif name == "--xor-mark":
                value ^= int(opt.value, 0)
        value &= 0xFFFFFFFF
        setattr(st, attr, value)
        self._step(rule, st, f"{'MARK' if attr == 'mark' else 'CONNMARK'} 0x{before:x} -> 0x{value:x}")

    def _connmark(self, rule: Rule, st: PacketState) -> None:
        if rule.target_opt("--save-mark"):
            st.ctmark = st.mark
            self._step(rule, st, f"CONNMARK save 0x{st.mark:x}")
        elif rule.target_opt("--restore-mark"):
            st.mark = st.ctmark
            self._step(rule, st, f"CONNMARK restore 0x{st.mark:x}")
        else:
            self._mark(rule, st, "ctmark")

    # ------------------------------------------------------------------ matches
    def _match(self, rule: Rule, st: PacketState) -> float:
        """Probability that ``rule`` matches ``st`` (0, 1, or in between for random matches)."""
        d = rule.dst
        if d is not None:
            if (d.version == st.ver and (st.dst & d.mask) == d.net) == rule.dst_neg:
                return 0.0
        s = rule.src
        if s is not None:
            if (s.version == st.ver and (st.src & s.mask) == s.net) == rule.src_neg:
                return 0.0
        proto = rule.proto
        if proto is not None and proto != "all" and proto != "0":
            same = proto == st.proto or (
                proto.isascii()
                and proto.isdigit()
                and int(proto) == {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1}.get(st.proto)
            )
            if same == rule.proto_neg:
                return 0.0
        if rule.frag:
            return 0.0  # kpdiag traces the first (unfragmented) packet
        if rule.iif is not None:
            if st.iif is None:
                if st.hook in ("OUTPUT", "POSTROUTING"):
                    # a packet the node sends has no input device: "-i X" never matches, "! -i X" always
                    if not rule.iif_neg:
                        return 0.0
                    return self._matches(rule, st) if rule.matches else 1.0
                st.note(
                    f"{rule.where}: rule tests the input interface ({'! ' if rule.iif_neg else ''}-i {rule.iif}) and the packet's is unknown (give --iif); assumed not matching",
                    uncertain=True,
                )
                return 0.0
            if _iface_match(rule.iif, st.iif) == rule.iif_neg:
                return 0.0
        if rule.oif is not None:
            if st.oif is None:
                if st.hook in ("PREROUTING", "INPUT"):
                    if not rule.oif_neg:
                        return 0.0
                    return self._matches(rule, st) if rule.matches else 1.0
                st.note(
                    f"{rule.where}: rule tests the output interface (-o {rule.oif}) and kpdiag does not know the route; assumed not matching",
                    uncertain=True,
                )
                return 0.0
            if _iface_match(rule.oif, st.oif) == rule.oif_neg:
                return 0.0
        if not rule.matches:
            return 1.0
        return self._matches(rule, st)

    def _matches(self, rule: Rule, st: PacketState) -> float:
        p = 1.0
        for m in rule.matches:
            fn = MATCHERS.get(m.module)
            if fn is None:
                st.note(
                    f"{rule.where}: -m {m.module} cannot be evaluated by kpdiag; assumed not matching", uncertain=True
                )
                return 0.0
            q = fn(self, m, st, rule)
            if q <= 0.0:
                return 0.0
            p *= q
        return p
