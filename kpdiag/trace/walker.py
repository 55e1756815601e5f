"""The walk every tracer shares: a packet's state on one path (:class:`PacketState`, forked where a ruleset branches)
and the hook order of the netfilter stack with the routing decision between the hooks (:class:`PacketWalker`).
The iptables tracer (``netfilter.py``), the nftables tracer (``nftables.py``) and the IPVS tracer (``ipvs.py``)
subclass it and supply how their rules are evaluated."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .model import Packet, Path, Step, TraceResult, endpoint_text, ip_text
from .routing import NO_ROUTE, Route, RoutingTable
from ..parse.addr import parse_ip

MAX_DEPTH = 64  # nested jumps on one path (the kernel refuses rulesets with loops; deeper is treated as one)
MAX_PATHS = 4096  # paths one trace follows, all chains and hooks together (every fork counts)
MAX_WORK = 100_000  # rule evaluations one trace may make, all paths together
MAX_STEPS = 1000  # steps kept per path (the last one always: it is the verdict)
MAX_SHOWN_STEPS = 40_000  # steps in one result, all paths together; past it each path shows its first and last ones


STOPPED = ("blackhole", "unreachable", "prohibit")
# What the kernel does with a packet it must forward and cannot route (net/ipv4/route.c ip_error, from the error the
# lookup gave: fib_props / fib rule actions): (the ICMP error sent back, or None for a silent drop; what happens)
ICMP_ERRORS = {
    "none": (
        "icmp-net-unreachable",
        "no route: the kernel answers ICMP network unreachable (the client fails at once)",
    ),
    "unreachable": ("icmp-host-unreachable", "an unreachable route: the kernel answers ICMP host unreachable"),
    "prohibit": ("icmp-admin-prohibited", "a prohibit route: the kernel answers ICMP administratively prohibited"),
    "blackhole": (None, "a blackhole route: the kernel drops it silently (the client times out)"),
    "rule-unreachable": ("icmp-net-unreachable", "the kernel answers ICMP network unreachable"),
    "rule-prohibit": ("icmp-admin-prohibited", "the kernel answers ICMP administratively prohibited"),
    "rule-blackhole": (None, "the kernel drops it silently (the client times out)"),
}
# The node's own packet whose route lookup fails: connect()/send() returns the error at once (no packet is sent)
LOCAL_ERRORS = {
    "none": ("ENETUNREACH", "connect() fails with 'Network is unreachable'"),
    "unreachable": ("EHOSTUNREACH", "connect() fails with 'No route to host'"),
    "prohibit": ("EACCES", "connect() fails with 'Permission denied'"),
    "blackhole": ("EINVAL", "connect() fails with 'Invalid argument'"),
}


class _Rules(Protocol):
    """What the walker reads of any tracer's ruleset: where it came from."""

    @property
    def source(self) -> str: ...


class Budget:
    """The work one trace may do, shared by every path and chain: rule evaluations (:data:`MAX_WORK`) and paths
    (:data:`MAX_PATHS`). A path that would exceed it is not followed; its probability is counted as not traced and
    the result says so (uncertain) — the trace never grows without bound."""

    __slots__ = ("work", "paths", "cut_prob", "cut_paths", "reasons", "stopped")

    def __init__(self) -> None:
        self.work = 0
        self.paths = 1
        self.cut_prob = 0.0
        self.cut_paths = 0
        self.reasons: list[str] = []
        self.stopped = False  # the rule-evaluation budget is spent: nothing more is walked

    def why(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def spend(self, n: int = 1) -> bool:
        """Count ``n`` rule evaluations; False (and stopped) when the budget is spent."""
        if self.stopped:
            return False
        self.work += n
        if self.work > MAX_WORK:
            self.stopped = True
            self.why(f"{MAX_WORK:,} rule evaluations")
            return False
        return True


@dataclass(slots=True)
class PacketState:
    """A packet on one path (mutable; forked where the ruleset branches)."""

    src: int  # the address as a number (parse_ip), of IP version ``ver``
    dst: int
    ver: int
    proto: str
    sport: int | None  # None for ICMP
    dport: int | None
    icmp_type: int
    icmp_code: int
    iif: str | None
    origin: str  # external | pod | node
    orig_dst: int  # before any DNAT
    orig_dport: int | None
    prob: float = 1.0
    oif: str | None = None
    mark: int = 0
    ctmark: int = 0
    ct_dnat: bool = False
    ct_snat: bool = False
    untracked: bool = False
    ct_state: str = "new"  # as conntrack sees the packet: new, related, established (kpdiag.trace.model.CT_STATES)
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    uncertain: bool = False
    dnat: str | None = None  # the endpoint as shown ("10.0.0.1:80")
    masquerade: bool = False
    snat: str | None = None
    rules_evaluated: int = 0
    hook: str = ""
    reject_with: str | None = None
    local_redirect: bool = False
    nat_done: str | None = None  # the hook whose nat chain bound the connection (lower case)
    route: Route | None = None

    def fork(self, factor: float) -> PacketState:
        """A copy for one branch, ``factor`` of this path's probability (its own steps and notes)."""
        return replace(self, prob=self.prob * factor, steps=list(self.steps), notes=list(self.notes))

    def nat_passes(self, hook: str) -> bool:
        """Whether the nat chains of ``hook`` let this packet pass unseen: an untracked packet has no conntrack entry,
        and the kernel runs no further nat chain of a hook once one gave the connection its binding
        (nf_nat_inet_fn) — be it iptables' nat table or an nft chain of type nat."""
        return self.untracked or self.ct_state != "new" or self.nat_done == hook.lower()

    def nat_binding(self) -> tuple[bool, bool, str | None]:
        """What a nat chain can change of the connection (compared before and after one: :meth:`bind_if_changed`)."""
        return (self.ct_dnat, self.masquerade, self.snat)

    def bind_if_changed(self, before: tuple[bool, bool, str | None], hook: str) -> None:
        """A nat chain of ``hook`` that changed the binding bound the connection: no other nat chain of it runs."""
        if self.nat_binding() != before:
            self.nat_done = hook.lower()

    def add(self, step: Step) -> None:
        """Record a step; past :data:`MAX_STEPS` the middle is elided and the latest step kept (it may be the verdict)."""
        steps = self.steps
        if len(steps) < MAX_STEPS:
            steps.append(step)
        elif len(steps) == MAX_STEPS:
            steps[-1] = Step(step.hook, "-", "-", None, "", f"(steps after the first {MAX_STEPS - 1} are not shown)")
            steps.append(step)
        else:
            steps[-1] = step

    def note(self, text: str, uncertain: bool = False) -> None:
        if text not in self.notes:
            self.notes.append(text)
        if uncertain:
            self.uncertain = True


class PacketWalker:
    """What every tracer shares: the packet's first state, the hooks in kernel order, the routing
    decision, and turning finished states into paths. Subclasses provide ``_hook(HOOK, …)``."""

    rs: _Rules
    routing: RoutingTable
    mode = "?"

    def trace(self, packet: Packet) -> TraceResult:
        self.budget = Budget()
        st = self._initial(packet)
        finished: list[PacketState] = []
        if packet.origin == "node":
            if self._unroutable(st, finished, local_out=True):
                live = []
            else:
                live = self._hook("OUTPUT", [st], finished)
            local, fwd = self._route(live, finished, local_out=True)
            post = self._hook("POSTROUTING", local + fwd, finished)
            local_after = []
            for s in post:
                if s.oif == "lo":
                    s.iif = "lo"
                    local_after.append(s)
                else:
                    self._leave(s, finished)
            for s in self._hook("INPUT", self._loopback(local_after, finished), finished):
                for s2 in self._local_in(s, finished):
                    s2.hook = "delivered:local"
                    finished.append(s2)
        elif self.routing.dropped_on_receipt(st.src, st.dst, st.ver):
            why = self.routing.dropped_on_receipt(st.src, st.dst, st.ver) or ""
            st.add(Step("receive", "-", "-", None, why, "dropped by the kernel"))
            st.note(why)
            st.hook = "drop"
            finished.append(st)
        else:
            live = self._hook("PREROUTING", [st], finished)
            local, fwd = self._route(live, finished, incoming=True)
            for s in self._hook("INPUT", local, finished):
                for s2 in self._local_in(s, finished):
                    s2.hook = "delivered:local"
                    finished.append(s2)
            fwd = self._hook("FORWARD", fwd, finished)
            for s in self._hook("POSTROUTING", fwd, finished):
                self._leave(s, finished)
        if sum(len(s.steps) for s in finished) > MAX_SHOWN_STEPS:
            keep = max(4, MAX_SHOWN_STEPS // (2 * len(finished)) - 1)
            for s in finished:
                if len(s.steps) > 2 * keep + 1:
                    gap = Step(s.steps[keep].hook, "-", "-", None, "", f"({len(s.steps) - 2 * keep} steps not shown)")
                    s.steps = s.steps[:keep] + [gap] + s.steps[-keep:]
        paths = tuple(_explained(self._to_path(s)) for s in finished)
        total = sum(p.probability for p in paths)
        notes = []
        b = self.budget
        incomplete = None
        if b.cut_paths:
            incomplete = (
                f"too many paths: {len(paths) + b.cut_paths} explored, stopped at budget ({', '.join(b.reasons)}): "
                f"{len(paths)} path{'s' if len(paths) != 1 else ''} traced to the end, {b.cut_paths} not followed "
                f"({_share(b.cut_prob)} of this packet's chances not traced); the answer is incomplete"
            )
            notes.append(incomplete)
        elif not paths:
            incomplete = "no path came out of the trace (kpdiag could not follow the packet to a verdict)"
            notes.append(incomplete)
        elif abs(total - 1.0) > 1e-6:
            incomplete = f"path probabilities sum to {total:.6f}, not 1: some way the packet can go was not traced"
            notes.append(incomplete)
        return TraceResult(
            packet=packet,
            mode=self.mode,
            paths=paths,
            rules_evaluated=max((p.rules_evaluated for p in paths), default=0),
            notes=tuple(notes),
            sources=(self.rs.source,),
            incomplete=incomplete,
        )

    # ------------------------------------------------------------------ the budget
    def _fork(self, st: PacketState, factor: float) -> PacketState | None:
        """A copy of ``st`` for another branch (probability ``factor`` of it), or None when the path budget is
        spent: that branch is not followed and its probability is counted as not traced."""
        b = self.budget
        if b.stopped or b.paths >= MAX_PATHS:
            b.why(f"{MAX_PATHS:,} paths" if not b.stopped else f"{MAX_WORK:,} rule evaluations")
            b.cut_prob += st.prob * factor
            b.cut_paths += 1
            return None
        b.paths += 1
        return st.fork(factor)

    def _cut(self, st: PacketState, reason: str | None = None) -> None:
        """Stop following ``st`` (the budget is spent, or ``reason``)."""
        b = self.budget
        if reason:
            b.why(reason)
        b.cut_prob += st.prob
        b.cut_paths += 1

    def _hook(
        self, hook: str, states: list[PacketState], finished: list[PacketState]
    ) -> list[PacketState]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _loopback(self, states: list[PacketState], finished: list[PacketState]) -> list[PacketState]:
        """The node's own packet to a local address after POSTROUTING: the loopback device hands it back to the
        receive path, so PREROUTING runs again (raw, mangle, nftables filter chains such as kube-proxy's
        filter-prerouting-pre-dnat) before INPUT — but no nat chain of PREROUTING or INPUT: the connection got both
        its bindings in OUTPUT and POSTROUTING (nf_nat_inet_fn runs nat chains only for an unset one). The route
        the packet carries is kept (no new routing decision)."""
        for st in states:
            st.nat_done = "prerouting"
        out = self._hook("PREROUTING", states, finished)
        for st in out:
            st.nat_done = "input"
        return out

    def _local_in(self, st: PacketState, finished: list[PacketState]) -> list[PacketState]:
        """What happens to a locally delivered packet after INPUT (IPVS hooks in here); default: delivered."""
        return [st]

    # ------------------------------------------------------------------ hooks
    def _initial(self, packet: Packet) -> PacketState:
        src, ver = parse_ip(packet.src)
        dst, _ = parse_ip(packet.dst)
        dport = packet.dport if packet.proto != "icmp" else None
        st = PacketState(
            src=src,
            dst=dst,
            ver=ver,
            proto=packet.proto,
            sport=packet.sport if packet.proto != "icmp" else None,
            dport=dport,
            icmp_type=packet.icmp_type,
            icmp_code=packet.icmp_code,
            iif=packet.iif if packet.origin != "node" else None,
            origin=packet.origin,
            orig_dst=dst,
            orig_dport=dport,
            ct_state=packet.ct_state,
        )
        if packet.origin == "node":
            self._set_oif(st)
        return st

    def _route_lookup(self, st: PacketState) -> Route | None:
        """The routing decision for this packet: its destination, and for the node's policy-routing rules its source,
        input interface ("lo" for the node's own packets), mark, protocol and ports."""
        iif = "lo" if st.origin == "node" else st.iif  # the kernel matches the node's own packets as input from lo
        route = self.routing.lookup(
            st.dst, st.ver, src=st.src, iif=iif, mark=st.mark, proto=st.proto, sport=st.sport, dport=st.dport
        )
        if route is not None:
            if route.rule and route.table == "-":  # the rule's own action: blackhole, unreachable, prohibit
                st.note(f"the policy-routing rule '{route.rule}' stops it ({route.type})")
            elif route.rule and route.table != "main":
                st.note(
                    f"routed by the policy-routing rule '{route.rule}' (table {route.table}), not by the main table"
                )
            if route.uncertain:
                st.note(route.uncertain, uncertain=True)
        return route

    def _set_oif(self, st: PacketState) -> None:
        route = self._route_lookup(st)
        st.oif = route.dev if route is not None else None
        st.route = route

    def _unroutable(self, st: PacketState, finished: list[PacketState], local_out: bool = False) -> bool:
        """The node's own packet before OUTPUT: when its route lookup fails, connect()/send() fails at once with the
        routing error and no netfilter hook sees the packet. True when ``st`` ended here."""
        route = st.route
        if route is None or route.type not in STOPPED:
            return False
        kind = route.type if route.dst != NO_ROUTE else "none"
        if route.rule and route.table == "-" and kind == "unreachable":
            kind = "none"  # an 'unreachable' ip rule answers ENETUNREACH, an unreachable route EHOSTUNREACH
        err, text = LOCAL_ERRORS[kind]
        self._stop(st, route, "reject", err, f"the node's own packet cannot be routed: {text} at once", finished)
        return True

    def _stop(
        self,
        st: PacketState,
        route: Route,
        verdict: str,
        reject_with: str | None,
        what: str,
        finished: list[PacketState],
    ) -> None:
        where = "no route" if route.dst == NO_ROUTE else f"{route.type} {route.dst}"
        if route.rule and route.table == "-":
            where = f"ip rule '{route.rule}' ({route.type})"
        st.add(Step("routing", "-", "-", None, where, what))
        st.note(f"the node's route to {ip_text(st.dst, st.ver)}: {where}: {what}")
        st.hook = verdict
        st.reject_with = reject_with
        st.route = route
        finished.append(st)

    def _route(
        self,
        states: list[PacketState],
        finished: list[PacketState],
        incoming: bool = False,
        local_out: bool = False,
    ) -> tuple[list[PacketState], list[PacketState]]:
        """The routing decision after PREROUTING / OUTPUT: local delivery or forward (or no route); a packet that
        arrived on an interface (``incoming``) with a loopback address is a martian (RoutingTable.martian)."""
        local, fwd = [], []
        for st in states:
            martian = (
                None if not incoming or st.local_redirect else self.routing.martian(st.src, st.dst, st.ver, st.iif)
            )
            if martian is not None:
                why, unsure = martian
                st.add(Step("routing", "-", "-", None, why, "martian: dropped by the kernel"))
                st.note(why, uncertain=unsure)
                st.hook = "drop"
                finished.append(st)
                continue
            if st.local_redirect or self.routing.is_local(st.dst, st.ver):
                st.oif = "lo"
                st.route = Route("local", dev="lo", table="local", dst=ip_text(st.dst, st.ver))
                local.append(st)
                continue
            off = self.routing.not_forwarded(st.ver, st.iif) if incoming else None
            if off is not None:
                why, unsure = off
                st.add(Step("routing", "-", "-", None, why.split(":", 1)[0], "not forwarded: dropped by the kernel"))
                st.note(why, uncertain=unsure)
                st.hook = "drop"
                finished.append(st)
                continue
            route = self._route_lookup(st)
            st.route = route
            if route is None:
                st.oif = None
                if not self.routing.local_ips:
                    st.note(
                        "no node addresses known (give --local-ip or a bundle): every destination is treated as not local"
                    )
                elif self.routing.has_routes:  # routes of the other family only
                    st.note(
                        f"no IPv{st.ver} routes are known (the bundle's routes are IPv{10 - st.ver} only): assumed forwarded",
                        uncertain=True,
                    )
            elif route.type in STOPPED:
                if local_out:
                    # re-routed after DNAT in OUTPUT (ip_route_me_harder): the packet is dropped; TCP retries its SYN
                    # (connect() times out), the first route lookup having succeeded
                    self._stop(
                        st, route, "drop", None, "the node's own packet is dropped after DNAT (no ICMP error)", finished
                    )
                else:
                    kind = route.type if route.dst != NO_ROUTE else "none"
                    if route.rule and route.table == "-":
                        kind = "rule-" + route.type
                    icmp, text = ICMP_ERRORS[kind]
                    if st.ver == 6 and icmp:
                        # ip6_pkt_drop: no route and unreachable routes → no route (code 0), prohibit → code 1
                        icmp = "icmp6-adm-prohibited" if "prohibited" in icmp else "icmp6-no-route"
                        what = "administratively prohibited" if "prohibited" in icmp else "no route to destination"
                        text = f"{text.split(':')[0]}: the kernel answers ICMPv6 {what} (the client fails at once)"
                    self._stop(st, route, "reject" if icmp else "drop", icmp, text, finished)
                continue
            else:
                st.oif = route.dev
            fwd.append(st)
        return local, fwd

    def _leave(self, st: PacketState, finished: list[PacketState]) -> None:
        """After POSTROUTING the packet leaves by its route's device — unless that device has no carrier: the kernel
        chose the route (ignore_routes_with_linkdown is 0) but its queue drops every packet, ARP/ND never resolves
        the next hop, and after about 3 s the kernel answers ICMP host (IPv6: address) unreachable; the node's own
        connect() fails with EHOSTUNREACH (tests/lab/test_linkdown_oracle.py)."""
        route = st.route
        if route is None or not route.linkdown:
            st.hook = "delivered:forward"
            finished.append(st)
            return
        hop = route.gateway or ip_text(st.dst, st.ver)
        if st.origin == "node":
            err, what = "EHOSTUNREACH", "connect() fails with 'No route to host' after about 3 s"
        else:
            err = "icmp6-addr-unreachable" if st.ver == 6 else "icmp-host-unreachable"
            what = f"the kernel answers ICMP {'address' if st.ver == 6 else 'host'} unreachable after about 3 s"
        st.add(Step("transmit", "-", "-", None, f"{route.dst} dev {route.dev} linkdown", "lost: no carrier"))
        st.note(
            f"the route {route.dst} leaves by {route.dev}, which has no carrier ({route.linkdown}): the kernel still "
            f"chooses it (ignore_routes_with_linkdown is 0) but sends nothing — {hop} is never resolved and {what}"
        )
        st.hook = "reject"
        st.reject_with = err
        finished.append(st)

    def _to_path(self, st: PacketState) -> Path:
        outcome = st.hook
        if outcome.startswith("delivered:"):
            verdict, delivery = "accept", outcome.split(":", 1)[1]
        elif outcome == "reject":
            verdict, delivery = "reject", None
        else:
            verdict, delivery = "drop", None
        return Path(
            probability=round(st.prob, 12),
            verdict=verdict,
            dnat=st.dnat,
            masquerade=st.masquerade and verdict == "accept",
            steps=tuple(st.steps),
            notes=tuple(st.notes),
            uncertain=st.uncertain,
            snat=st.snat if verdict == "accept" else None,
            delivery=delivery,
            final_dst=endpoint_text(st.dst, st.ver, st.dport),
            rules_evaluated=st.rules_evaluated,
            reject_with=st.reject_with if verdict == "reject" else None,
            route=_route_dict(st.route),
        )


def _route_dict(route: Route | None) -> dict[str, Any] | None:
    if route is None:
        return None
    return {
        "type": route.type,
        "prefix": route.dst,
        "dev": route.dev,
        "gateway": route.gateway,
        "table": route.table if route.table != "-" else None,
        **({"linkdown": route.linkdown} if route.linkdown else {}),
    }


def _share(p: float) -> str:
    return f"{p * 100:.4g} %"


def _explained(path: Path) -> Path:
    """A drop or reject by one of kube-proxy's own rules gets a note saying what it means."""
    from dataclasses import replace

    from .kube import verdict_note

    note = verdict_note(path)
    return replace(path, notes=path.notes + (note,)) if note else path
