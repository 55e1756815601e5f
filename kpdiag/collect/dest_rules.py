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

When a chain cannot be listed, or the mode has no reader here (IPVS; nftables, whose focused reader in
service_rules.py is keyed by a Service), the whole rules are read as without a destination, and the reason is recorded
as a problem of ``iptables-save`` (the trace prints it).
"""

from __future__ import annotations


from kpdiag.bundle import sources
from kpdiag.collect.service_rules import (
    BUILTIN_CHAINS,
    PER_SERVICE,
    RULE_STEPS,
    TARGETS,
    _DEST,
    _JUMP,
    _QUOTED,
    Destination,
    IptablesFocused,
    _tokens,
    NotFocused,
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


READERS = {cls.mode: cls for cls in (DestinationFocused,)}  # by the dataplane class's name: iptables only, for now


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
    (empty when the whole rules were read: the reason is then an error of ``iptables-save``)."""
    mode = detect_mode(collector)
    why = None
    if reads_destination(mode):
        rules = READERS[mode](collector, dest)
        try:
            rules.collect()
        except NotFocused as exc:
            why = str(exc)
        else:
            for step in rules.after:
                getattr(collector, step)()
            collector.partial = rules.partial
            return
    else:
        why = f"kube-proxy runs {mode} mode: a live trace reads its rules whole"
    collector._err(
        sources.IPTABLES_SAVE,
        f"focused read of the rules a packet to {dest} can meet not possible ({why}): the whole rules were read",
    )
    for step in RULE_STEPS:
        collector.out.files.pop("node/.nft-table", None)
        getattr(collector, step)()
