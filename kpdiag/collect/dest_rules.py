"""A focused read for one packet (a live ``kpdiag trace``): only the rules a packet to DST:PORT/PROTO can meet.

A live trace follows one packet, so it needs the hook chains of each table and the chains their rules can send
that packet to — not the whole ruleset, whose dump (``iptables-save``) takes a minute on a 10,000-Service node. The
walk is the one ``kpdiag node --service`` makes (kpdiag/collect/service_rules.py: each table's hook chains listed
with ``iptables -t TABLE -S CHAIN``, their jumps followed), keyed by the destination instead of a Service name: a
kube-proxy per-Service chain (KUBE-SVC/SVL/EXT/FW/SEP/XLB) is entered only from a rule that can match the packet —
its destination address (``-d``, an address or a prefix), port (``--dport``, a port or a range) and protocol
(``-p``) are the packet's, or absent, or negated (:func:`kpdiag.collect.service_rules.may_meet`, the same test
that decides which other Service's rule can take a Service's packets) — or from a per-Service chain already
entered; every other jump is followed. kube-proxy's per-Service chains are all in the nat table and are entered
before the packet is translated (PREROUTING, OUTPUT), so the destination as sent is the one to match.

nftables mode (:class:`NftDestinationFocused`) reads kube-proxy's table over netlink as ``kpdiag node --service``
does (kpdiag/collect/service_rules.py :class:`NftablesFocused`, kpdiag/collect/nft_netlink.py), walked by
:class:`DestWalk`: the base chains and every chain their rules reach, and of each named set or verdict map looked up
by the packet's destination (address, protocol, port — ``ip daddr . meta l4proto . th dport``, a NodePort map's
``meta l4proto . th dport``, ``ip daddr @cluster-ips``) only the elements whose key the packet can match, as sent or
as a ``dnat`` read on its way sends it; the chains their verdicts name are read as they are reached. A set looked up
by anything else (an affinity set, by source) is read whole; whatever the reader cannot decode exactly (an unknown
expression, an interval set, typeof) makes it read the whole dump.

When a chain cannot be listed, or the mode has no reader here (IPVS), the whole rules are read as without a
destination, and the reason is recorded as a problem of the rules' source (the trace prints it).
"""

from __future__ import annotations


from kpdiag.bundle import sources
from kpdiag.collect.service_rules import (
    NftablesFocused,
    NftWalk,
    fall_back,
    run_reader,
    BUILTIN_CHAINS,
    PER_SERVICE,
    TARGETS,
    _DEST,
    _JUMP,
    _QUOTED,
    Destination,
    IptablesFocused,
    _tokens,
    chain_closure,
    detect_mode,
    jump_of,
)


def targets(lines: list[str], table: str, dest: Destination, mine: bool) -> list[str]:
    """The chains that ``lines`` (one chain's ``-S`` output) jump to and that a packet to ``dest`` can reach: every
    jump from a per-Service chain (``mine``) or to a chain that is not a per-Service one; another jump only when its
    rule can match the packet (:func:`may_meet`)."""
    out = []
    for line in lines:
        if not line.startswith("-A "):
            continue
        if not mine:  # fast path: most of KUBE-SERVICES and KUBE-NODEPORTS is other destinations' jumps
            m = _JUMP.search(line, line.rfind('"') + 1)  # after any quoted comment
            if m is not None and m.group(1).startswith(PER_SERVICE):
                d = _DEST.search(_QUOTED.sub('""', line))
                if d is not None and d.group(1) is None and not dest.dest_ok(d.group(2)):
                    continue  # another destination's chain
        toks = _tokens(line)
        target = jump_of(toks)
        if not target or target in TARGETS or target in BUILTIN_CHAINS[table]:
            continue
        if target.startswith(PER_SERVICE) and not mine:
            if not dest.may_meet(toks):
                continue  # a per-Service chain this packet cannot enter here
        out.append(target)
    return out


class DestinationFocused(IptablesFocused):
    """iptables mode: the chains a packet to ``dest`` can meet, through ``iptables -S`` (both families)."""

    def __init__(self, collector, dest: Destination):
        super().__init__(collector, "")
        self.dest = dest
        self.packets = f"a packet to {dest}"

    def _closure(self, lister, tables: list[str]) -> dict[str, dict[str, list[str]]]:
        return chain_closure(
            lister, tables, "", follow=lambda lines, table, mine: targets(lines, table, self.dest, mine)
        )

    def collect(self) -> None:
        super().collect()
        self.partial = {
            "destination": str(self.dest),
            "mode": self.mode,
            "holds": {
                source: f"only the chains {self.packets} can meet (iptables -t TABLE -S CHAIN, one by one): each "
                "table's hook chains and every chain they jump to, kube-proxy's per-Service chains only from a rule "
                "that can match that destination"
                for source in self.partial["holds"]
            },
            "chains": self.partial["chains"],
        }


def _key_part(expr) -> str | None:
    """What a part of a set lookup's key is, in the packet's terms: "addr" (``ip daddr``), "proto" (``meta l4proto``),
    "port" (``th dport``, ``tcp dport`` …), else None."""
    if not isinstance(expr, dict):
        return None
    if expr.get("meta", {}).get("key") == "l4proto":
        return "proto"
    payload = expr.get("payload") or {}
    if payload.get("field") == "daddr" and payload.get("protocol") in ("ip", "ip6"):
        return "addr"
    if payload.get("field") == "dport" and payload.get("protocol") in ("th", "tcp", "udp", "sctp"):
        return "port"
    return None


_FIELD_PART = {"ip4": "addr", "ip6": "addr", "proto": "proto", "port": "port"}


class DestWalk(NftWalk):
    """One kube-proxy nftables table read for one packet (:class:`NftWalk`, keyed by its destination): the elements
    of a set looked up by the packet's destination are kept when every part of their key can be the packet's — its
    address, protocol and port as sent, or as a ``dnat`` in a chain read sends it (the later hooks look their maps up
    with those). Keys are compared as the kernel's bytes, field by field."""

    def __init__(self, nl, family: str, table: str, dest: Destination, deadline: float | None = None):
        super().__init__(nl, family, table, "", deadline=deadline)
        self.dest = dest

    def _start(self) -> None:
        from kpdiag.collect.nft_netlink import PROTOS

        d = self.dest
        self.addrs = None if d.addr is None else {d.addr.packed}  # None: any
        numbers = {name: num for num, name in PROTOS.items()}
        names = ("icmp", "ipv6-icmp") if d.proto == "icmp" else (d.proto,)
        self.protos = {bytes([numbers[n]]) for n in names if n in numbers} or None
        self.ports = None if d.port is None and d.proto != "icmp" else ({d.port} - {None})
        self._want = {"ip4": self.addrs, "ip6": self.addrs, "proto": self.protos}  # the same sets, grown in place

    def _keep(self, data, i: int) -> bool:
        key, off = data.key(i), 0
        for kind, length in data.info.fields:
            part = key[off : off + length]
            want = self._want.get(kind)
            if kind == "port":
                if self.ports is not None and int.from_bytes(part[:2], "big") not in self.ports:
                    return False
            elif want is not None and (part[:1] if kind == "proto" else part) not in want:
                return False
            off += (length + 3) & ~3
        return True

    def _learn(self, kept) -> bool:
        grew = False
        for raw, port in self._dnats():
            if self.addrs is not None and raw not in self.addrs:
                self.addrs.add(raw)
                grew = True
            if port is not None and self.ports is not None and port not in self.ports:
                self.ports.add(port)
                grew = True
        return grew

    def _reducible(self, name: str, data) -> bool:
        """Only a set every rule looks up (no update) by the packet's destination, part by part of its key."""
        uses = self.used.get(name, ())
        if not uses or any("elem" in e or ("left" in e and e.get("op") not in ("==", "!=")) for e in uses):
            return False
        fields = [_FIELD_PART.get(kind) for kind, _ in data.info.fields]
        for e in uses:
            key = e.get("left") if "left" in e else e.get("key")
            parts = key["concat"] if isinstance(key, dict) and "concat" in key else [key]
            if len(parts) != len(fields) or any(_key_part(p) != f or f is None for p, f in zip(parts, fields)):
                return False
        return True


class NftDestinationFocused(NftablesFocused):
    """nftables mode: kube-proxy's table(s) over netlink as a packet to a destination meets them (:class:`DestWalk`)."""

    walk = DestWalk
    subject = "destination"
    holds = (
        "only the chains a packet to {what} can meet in kube-proxy's table (read over netlink chain by chain): its "
        "base chains and every chain they reach; its sets and verdict maps looked up by the destination with only "
        "the elements whose key the packet can match (as sent, or as a dnat on its way sends it), the others whole; "
        "the other nftables tables whole"
    )


READERS = {cls.mode: cls for cls in (DestinationFocused, NftDestinationFocused)}  # by the dataplane class's name


def reads_destination(mode: str | None) -> bool:
    """Can a live trace in ``mode`` read only one destination's rules?"""
    from kpdiag.dataplane import get

    plane = get(mode)
    return plane.reads_one_service and plane.name in READERS


def focused_on(dest: Destination):
    """What :meth:`NodeCollector.collect` calls to read the rules (``rules=``): those a packet to ``dest`` can meet."""
    return lambda collector: collect_for_destination(collector, dest)


def collect_for_destination(collector, dest: Destination) -> None:
    """Read the rules a packet to ``dest`` can meet into ``collector.out``; ``collector.partial`` says what was read
    (empty when the whole rules were read: the reason is then an error of the rules' source)."""
    mode = detect_mode(collector)
    what = f"the rules a packet to {dest} can meet"
    if reads_destination(mode):
        run_reader(collector, READERS[mode](collector, dest), what)
    else:
        fall_back(
            collector,
            sources.IPTABLES_SAVE,
            f"focused read of {what} not possible (kube-proxy runs {mode} mode: a live trace reads its rules whole): "
            "the whole rules were read",
        )
