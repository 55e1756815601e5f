"""IPVS mode: the iptables rules kube-proxy keeps (with ipsets), local delivery to the ClusterIP bound
on kube-ipvs0, then the IPVS virtual service: one path per real server, its probability the steady-state
share of new connections under the scheduler and weights (weight 0 takes no new connections)."""

from __future__ import annotations

from ..parse.addr import hostport, parse_ip
from ..parse.ipset import IpSet
from ..parse.iptables import Rule, Ruleset
from ..parse.ipvs import RealServer, VirtualService
from .model import Step, ip_text
from .netfilter import IptablesTracer
from .routing import RoutingTable
from .walker import STOPPED, PacketState

WEIGHTED = {"wrr", "wlc", "sed", "nq", "mh", "fo", "ovf"}
SCHED_NOTES = {
    "sh": "source hashing: each client always gets the same server; shown is the share over many clients",
    "dh": "destination hashing: one server per destination; shown is the share over many",
    "lc": "least-connection: the next connection goes to the server with the fewest; shown is the steady-state share",
    "wlc": "weighted least-connection: shown is the steady-state share (proportional to weights)",
}


class IpvsTracer(IptablesTracer):
    def __init__(
        self,
        ruleset: Ruleset,
        routing: RoutingTable | None,
        ipsets: dict[str, IpSet] | None,
        services: dict[tuple[object, ...], VirtualService],
        mode: str = "ipvs",
        vs_conntrack: bool | None = None,
    ) -> None:
        super().__init__(ruleset, routing, ipsets, mode=mode)
        self.services = services
        # net.ipv4.vs.conntrack (None: the node's sysctls do not say). 0: IPVS keeps no conntrack entry for what it
        # forwards (ip_vs_notrack): nat's POSTROUTING never sees the packet (no masquerade) and conntrack takes the
        # real server's reply for a stray packet — kernel lab tests/ipvsvm, scenario vs-conntrack-off
        self.vs_conntrack = vs_conntrack
        self._invalid_drop: Rule | bool | None = None  # False: looked for, there is none

    def _invalid_drop_rule(self) -> Rule | None:
        """The filter rule that drops conntrack-INVALID packets (kube-proxy's KUBE-FORWARD has one), if any."""
        if self._invalid_drop is None:
            self._invalid_drop = next(
                (
                    r
                    for r in self.rs.iter_rules()
                    if r.table == "filter"
                    and "INVALID" in r.text
                    and "--ctstate" in r.text
                    and r.text.endswith("-j DROP")
                ),
                False,
            )
        return self._invalid_drop if isinstance(self._invalid_drop, Rule) else None

    def _untracked_reply(self, b: PacketState, r: RealServer, finished: list[PacketState]) -> bool:
        """With net.ipv4.vs.conntrack = 0 a TCP real server's SYN-ACK has no conntrack entry: INVALID, and
        kube-proxy's INVALID rule drops it — the client times out. True when the path ended here."""
        b.untracked = True
        if b.proto != "tcp":
            b.note(
                "net.ipv4.vs.conntrack = 0: IPVS keeps no conntrack entry for this connection, so kube-proxy's "
                "masquerade does not apply to it (KP306)",
                uncertain=True,
            )
            return False
        rule = self._invalid_drop_rule()
        if rule is None:
            b.note(
                f"net.ipv4.vs.conntrack = 0: conntrack has no entry for this connection, so {r.target}'s reply is "
                "INVALID to it; no rule here drops INVALID packets, but nothing masquerades the connection (KP306)",
                uncertain=True,
            )
            return False
        b.add(
            Step(
                "FORWARD",
                rule.table,
                rule.chain,
                rule.index,
                rule.text,
                f"the reply from {r.target} is INVALID (net.ipv4.vs.conntrack = 0): DROP",
                rule.where,
            )
        )
        b.note(
            f"net.ipv4.vs.conntrack = 0: IPVS keeps no conntrack entry for this connection, so the reply (SYN-ACK) from "
            f"{r.target} is INVALID to conntrack and '{rule.text}' drops it: the client times out (KP306)"
        )
        b.hook = "drop"
        finished.append(b)
        return True

    def _lookup(self, st: PacketState) -> VirtualService | None:
        """The kernel's order (ip_vs_ctl.c ip_vs_service_find): the packet's firewall mark first, then (protocol,
        address, port), then the catch-all port 0 at that address."""
        vs = self.services.get(("fwmark", st.mark)) if st.mark else None
        if vs is None:
            addr = ip_text(st.dst, st.ver)
            vs = self.services.get((st.proto, addr, st.dport)) or self.services.get((st.proto, addr, 0))
        return vs

    def _local_in(self, st: PacketState, finished: list[PacketState]) -> list[PacketState]:
        vs = self._lookup(st)
        if vs is None:
            if st.proto in ("tcp", "udp", "sctp"):
                st.note(
                    f"no IPVS virtual service for {st.proto} {ip_text(st.dst, st.ver)}:{st.dport} (KP302): the node itself receives the packet"
                )
            return [st]
        live = [r for r in vs.reals if r.weight > 0]
        st.add(
            Step(
                "INPUT",
                "ipvs",
                vs.name,
                None,
                f"-A {vs.name} -s {vs.scheduler}" + (f" -p {vs.persistent}" if vs.persistent else ""),
                f"IPVS virtual service ({vs.scheduler}, {len(live)} of {len(vs.reals)} real servers take new connections)",
            )
        )
        if vs.scheduler in SCHED_NOTES:
            st.note(SCHED_NOTES[vs.scheduler])
        if vs.persistent:
            st.note(f"persistence {vs.persistent} s: a client seen within that time returns to the same real server")
        if not live:
            # ip_vs_core.c: the scheduler finds no destination → ip_vs_leave() sends ICMP port unreachable (for TCP
            # and UDP alike: IPVS runs below the socket layer and cannot send a TCP RST) and drops the packet
            icmp = "icmp6-port-unreachable" if st.ver == 6 else "icmp-port-unreachable"
            st.note(
                f"IPVS {vs.name} has no available real server ({len(vs.reals)} listed, none with weight > 0): the kernel "
                f"answers new connections with ICMP port unreachable ('no destination available'): connection refused"
            )
            st.add(Step("INPUT", "ipvs", vs.name, None, f"-A {vs.name}", f"no destination available: {icmp}"))
            st.hook = "reject"
            st.reject_with = icmp
            finished.append(st)
            return []
        for b, r in self._schedule(st, vs, live):  # IPVS sends the packet on: out through POSTROUTING
            self._send(b, r, finished)
        return []

    def _schedule(
        self, st: PacketState, vs: VirtualService, live: list[RealServer]
    ) -> list[tuple[PacketState, RealServer]]:
        """A path for each real server that takes new connections, with its share (by weight for the weighted schedulers),
        its packet sent there."""
        total = sum(r.weight for r in live) if vs.scheduler in WEIGHTED else len(live)
        out = []
        for n, r in enumerate(live):
            share = (r.weight if vs.scheduler in WEIGHTED else 1) / total
            if len(live) == 1:
                b = st
            elif n == len(live) - 1:
                b = st
                b.prob *= share
            else:
                forked = self._fork(st, share)
                if forked is None:
                    continue
                b = forked
            b.dst = parse_ip(r.addr)[0]
            b.dport = r.port or st.dport  # a real server of port 0 keeps the packet's (ip_vs_schedule)
            b.ct_dnat = True
            b.dnat = r.target if r.port else hostport(r.addr, b.dport)
            b.add(
                Step(
                    "INPUT",
                    "ipvs",
                    vs.name,
                    None,
                    f"-a {vs.name} -r {r.target} -{r.forward[0]} -w {r.weight}",
                    f"IPVS {r.forward} to {r.target} (weight {r.weight})",
                )
            )
            if r.forward != "masq":
                b.note(
                    f"IPVS forwards to {r.target} by {r.forward}, not NAT: the reply must not come back through this node"
                )
            out.append((b, r))
        return out

    def _send(self, b: PacketState, r: RealServer, finished: list[PacketState]) -> None:
        """A packet IPVS sends to real server ``r``: routed, then out through POSTROUTING (masquerade decided there)."""
        self._set_oif(b)
        route = b.route
        if route is not None and route.type in STOPPED:
            # ip_vs_xmit.c __ip_vs_get_out_rt: no output route to the real server → dst_link_failure() sends
            # ICMP host unreachable, whatever the route's type
            self._stop(
                b,
                route,
                "reject",
                "icmp6-addr-unreachable" if b.ver == 6 else "icmp-host-unreachable",
                "IPVS cannot route to this real server: the kernel answers ICMP host unreachable",
                finished,
            )
            return
        if self.vs_conntrack is False and self._untracked_reply(b, r, finished):
            return
        for b2 in self._hook("POSTROUTING", [b], finished):
            self._leave(b2, finished)
