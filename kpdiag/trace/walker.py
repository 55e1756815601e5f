"""The walk every tracer shares: a packet's state on one path (:class:`PacketState`, forked where a ruleset branches)
and the hook order of the netfilter stack with the routing decision between the hooks (:class:`PacketWalker`).
The iptables tracer (``netfilter.py``), the nftables tracer (``nftables.py``) and the IPVS tracer (``ipvs.py``)
subclass it and supply how their rules are evaluated."""

from __future__ import annotations

from .model import Packet, Path, Step, TraceResult, endpoint_text, ip_text
from .routing import RoutingTable
from ..parse.addr import parse_ip

MAX_DEPTH = 64
MAX_PATHS = 4096


class PacketState:
    """A packet on one path (mutable; forked where the ruleset branches)."""

    __slots__ = (
        "prob",
        "src",
        "dst",
        "ver",
        "proto",
        "sport",
        "dport",
        "icmp_type",
        "icmp_code",
        "iif",
        "oif",
        "mark",
        "ctmark",
        "ct_dnat",
        "ct_snat",
        "untracked",
        "orig_dst",
        "orig_dport",
        "steps",
        "notes",
        "uncertain",
        "dnat",
        "masquerade",
        "snat",
        "rules_evaluated",
        "hook",
        "reject_with",
        "local_redirect",
        "nat_done",
        "origin",
    )

    def fork(self, factor: float) -> "PacketState":
        other = PacketState.__new__(PacketState)
        for name in PacketState.__slots__:
            setattr(other, name, getattr(self, name))
        other.steps = list(self.steps)
        other.notes = list(self.notes)
        other.prob = self.prob * factor
        return other

    def note(self, text: str, uncertain: bool = False) -> None:
        if text not in self.notes:
            self.notes.append(text)
        if uncertain:
            self.uncertain = True


class PacketWalker:
    """What every tracer shares: the packet's first state, the hooks in kernel order, the routing
    decision, and turning finished states into paths. Subclasses provide ``_hook(HOOK, …)``."""

    rs = None
    routing: RoutingTable
    mode = "?"

    def trace(self, packet: Packet) -> TraceResult:
        st = self._initial(packet)
        finished: list[PacketState] = []
        if packet.origin == "node":
            live = self._hook("OUTPUT", [st], finished)
            local, fwd = self._route(live, finished)
            post = self._hook("POSTROUTING", local + fwd, finished)
            local_after = []
            for s in post:
                if s.oif == "lo":
                    s.iif = "lo"
                    local_after.append(s)
                else:
                    s.hook = "delivered:forward"
                    finished.append(s)
            for s in self._hook("INPUT", local_after, finished):
                for s2 in self._local_in(s, finished):
                    s2.hook = "delivered:local"
                    finished.append(s2)
        elif self.routing.dropped_on_receipt(st.src, st.dst, st.ver):
            why = self.routing.dropped_on_receipt(st.src, st.dst, st.ver)
            st.steps.append(Step("receive", "-", "-", None, why, "dropped by the kernel"))
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
                s.hook = "delivered:forward"
                finished.append(s)
        paths = tuple(_explained(self._to_path(s)) for s in finished)
        total = sum(p.probability for p in paths)
        notes = []
        if abs(total - 1.0) > 1e-6:
            notes.append(f"path probabilities sum to {total:.6f}, not 1 (more than {MAX_PATHS} paths were cut)")
        return TraceResult(
            packet=packet,
            mode=self.mode,
            paths=paths,
            rules_evaluated=max((p.rules_evaluated for p in paths), default=0),
            notes=tuple(notes),
            sources=(self.rs.source,),
        )

    def _hook(
        self, hook: str, states: list[PacketState], finished: list[PacketState]
    ) -> list[PacketState]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _local_in(self, st: PacketState, finished: list[PacketState]) -> list[PacketState]:
        """What happens to a locally delivered packet after INPUT (IPVS hooks in here); default: delivered."""
        return [st]

    # ------------------------------------------------------------------ hooks
    def _initial(self, packet: Packet) -> PacketState:
        st = PacketState.__new__(PacketState)
        st.prob = 1.0
        st.src, st.ver = parse_ip(packet.src)
        st.dst, _ = parse_ip(packet.dst)
        st.proto = packet.proto
        st.sport = packet.sport if packet.proto != "icmp" else None
        st.dport = packet.dport if packet.proto != "icmp" else None
        st.icmp_type, st.icmp_code = packet.icmp_type, packet.icmp_code
        st.iif = packet.iif if packet.origin != "node" else None
        st.origin = packet.origin
        st.oif = None
        st.mark = st.ctmark = 0
        st.ct_dnat = st.ct_snat = st.untracked = False
        st.orig_dst, st.orig_dport = st.dst, st.dport
        st.steps, st.notes = [], []
        st.uncertain = False
        st.dnat = st.snat = None
        st.masquerade = False
        st.rules_evaluated = 0
        st.hook = ""
        st.reject_with = None
        st.local_redirect = False
        st.nat_done = None
        if packet.origin == "node":
            self._set_oif(st)
        return st

    def _route_lookup(self, st: PacketState):
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

    def _route(
        self, states: list[PacketState], finished: list[PacketState], incoming: bool = False
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
                st.steps.append(Step("routing", "-", "-", None, why, "martian: dropped by the kernel"))
                st.note(why, uncertain=unsure)
                st.hook = "drop"
                finished.append(st)
                continue
            if st.local_redirect or self.routing.is_local(st.dst, st.ver):
                st.oif = "lo"
                local.append(st)
                continue
            off = self.routing.not_forwarded(st.ver, st.iif) if incoming else None
            if off is not None:
                why, unsure = off
                st.steps.append(
                    Step("routing", "-", "-", None, why.split(":", 1)[0], "not forwarded: dropped by the kernel")
                )
                st.note(why, uncertain=unsure)
                st.hook = "drop"
                finished.append(st)
                continue
            route = self._route_lookup(st)
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
            elif route.type in ("blackhole", "unreachable", "prohibit"):
                st.steps.append(
                    Step(
                        "routing",
                        "-",
                        "-",
                        None,
                        f"{route.type} {route.dst}",
                        f"route type {route.type}: not forwarded",
                    )
                )
                st.note(
                    f"the node's route for {ip_text(st.dst, st.ver)} is {route.type} ({route.dst}): the packet is not forwarded"
                )
                st.hook = "drop"
                st.reject_with = None if route.type == "blackhole" else f"route {route.type}"
                finished.append(st)
                continue
            else:
                st.oif = route.dev
            fwd.append(st)
        return local, fwd

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
        )


def _explained(path: Path) -> Path:
    """A drop or reject by one of kube-proxy's own rules gets a note saying what it means."""
    from dataclasses import replace

    from .kube import verdict_note

    note = verdict_note(path)
    return replace(path, notes=path.notes + (note,)) if note else path
