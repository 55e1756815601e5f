"""Source-NAT port collisions: many connections from pods to one destination, masqueraded without --random-fully,
lose the race for a source port (conntrack insert_failed) — told apart from the DNS race (UDP to kube-dns)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import TYPE_CHECKING, Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_node import ConntrackEntries, ConntrackStats
from kpdiag.state.typed_proxy import KubeProxyRules, Tracer

if TYPE_CHECKING:
    from kpdiag.trace.model import Step

MIN_FLOWS = 50  # source-NATed flows to one destination before collisions on its port range are the likely cause
_CT = re.compile(
    r"^(\w+)\s+\d+\s+\d+\s+(?:([A-Z_]+)\s+)?src=(\S+) dst=(\S+) sport=\d+ dport=(\d+)\s.*?src=(\S+) dst=(\S+) sport=(\d+)"
)


@functools.lru_cache(maxsize=1)  # KP503, KP611 and KP612 read the same (up to 100,000-entry) dump: parsed once
def conntrack_summary(text: str) -> tuple[Counter, Counter, dict, Counter]:
    """From `conntrack -L`, in one pass and kept small: source-NATed flows per (proto, dst, dport); flows to port 53
    per (proto, dst); one pod source per source-NATed destination (to trace); ESTABLISHED TCP connections per
    (dst, dport, the address that answers). The caller must not change what it gets back."""
    snat: Counter = Counter()
    dns: Counter = Counter()
    example: dict = {}
    established: Counter = Counter()
    for m in map(_CT.match, text.splitlines()):
        if not m:
            continue
        proto, state, src, dst, dport, rsrc, rdst, _rsport = m.groups()
        dport = int(dport)
        if dport == 53:
            dns[(proto, dst)] += 1
        if rdst != src:  # the reply goes to another address than the original source: source NAT
            snat[(proto, dst, dport)] += 1
            example.setdefault((proto, dst, dport), src)
        if proto == "tcp" and state == "ESTABLISHED":
            established[(dst, dport, rsrc)] += 1
    return snat, dns, example, established


def conntrack_flows(text: str) -> tuple[Counter, Counter, dict]:
    snat, dns, example, _ = conntrack_summary(text)
    return snat, dns, example


def snat_collision(stats: ConntrackStats, entries: ConntrackEntries | None, tracers: Tracer | None) -> dict | None:
    """The SNAT-collision case when the node shows it: insert_failed > 0, one destination with many source-NATed flows,
    and the rule that masquerades them (traced) without --random-fully; else None."""
    failed = stats.stats.get("insert_failed", 0)
    text = entries.text if entries is not None else None
    if not failed or not text:
        return None
    snat, dns, example = conntrack_flows(text)
    if not snat:
        return None
    (proto, dst, dport), flows = snat.most_common(1)[0]
    if flows < MIN_FLOWS or proto not in ("tcp", "udp") or (proto == "udp" and dport == 53):
        return None
    tracer = tracers.iptables() if tracers is not None else None
    if tracer is None:
        return None
    from kpdiag.trace.model import Packet

    try:
        result = tracer.trace(Packet(example[(proto, dst, dport)], dst, proto, dport, origin="pod"))
    except Exception:  # a match the tracer cannot evaluate: no blame without the rule
        return None
    rules: list[Step] = []
    for p in result.paths:
        for s in p.steps:
            if s.action.upper() in ("MASQUERADE", "SNAT") or " -j MASQUERADE" in s.text or " -j SNAT" in s.text:
                if s.text not in [r.text for r in rules]:
                    rules.append(s)
    if not rules or all("--random-fully" in r.text for r in rules):
        return None
    return {
        "proto": proto,
        "dst": dst,
        "dport": dport,
        "flows": flows,
        "insert_failed": failed,
        "rules": [r for r in rules if "--random-fully" not in r.text],
        "dns_flows": sum(dns.values()),
    }


@check(
    "KP611",
    "snat-port-collisions",
    "Source-NAT port collisions: masquerade without --random-fully under many connections to one destination",
    "warning",
    symptom="Connections from pods to one busy external endpoint (an API, a database, a registry) sometimes take 1 s or "
    "3 s to open, or time out, under load; conntrack -S shows insert_failed climbing; DNS is not involved.",
    why="""
        When pods' connections leave the node they are masqueraded to the node's address. For each new connection
        the kernel picks a source port so that (node IP, port, destination IP, destination port) is unique — but it
        picks it before the connection is confirmed in the conntrack table, and without --random-fully it searches
        from the same starting point for every connection to the same destination. Two pods opening connections to
        the same destination at the same moment can get the same port: the second insert fails (insert_failed), its
        SYN is dropped and retried after 1 s, then 3 s. The more connections to one destination, the likelier. With
        --random-fully (NF_NAT_RANGE_PROTO_RANDOM_FULLY) each connection gets a random port and collisions become
        rare. This is not the DNS race, which is UDP to kube-dns (A and AAAA queries of one socket racing); KP503
        speaks of that one.
    """,
    fix="Add --random-fully to the masquerade rule the traffic meets (the CNI's: flannel ≥ 0.11 and the bridge plugin "
    "do when iptables supports it; an old CNI or a hand-written rule does not), or give the traffic more source "
    "addresses / fewer new connections to one destination (connection pooling, keep-alive).",
)
def snat_port_collisions(
    new, stats: ConntrackStats, entries: ConntrackEntries, rules: KubeProxyRules, tracers: Optional[Tracer] = None
):
    if "insert_failed" not in stats.stats:
        raise Skip(f"conntrack -S statistics ({stats.source}) were not collected")
    case = snat_collision(stats, entries, tracers)
    if case is None:
        return
    rule = case["rules"][0]
    src, _, line = (rule.source or "").rpartition(":")
    where = f"{rule.table} {rule.chain}"
    fixed = rule.text.replace(" -j MASQUERADE", " -j MASQUERADE --random-fully", 1)
    dest = f"{case['dst']}:{case['dport']}/{case['proto']}"
    yield new(
        f"conntrack insert_failed = {case['insert_failed']} with {case['flows']} source-NATed connections to {dest}, "
        f"masqueraded by a rule without --random-fully ({where}): source-port collisions drop new connections to that "
        "destination (not the DNS race)",
        fix=(
            command(f"iptables -t {rule.table} -R {rule.chain} {rule.rule} {fixed.split(' ', 2)[2]}")
            if rule.rule and fixed.startswith("-A ")
            else note(f"add --random-fully to: {rule.text}"),
            note(
                "make it last: the rule belongs to the CNI or the host's configuration — flannel: a release ≥ 0.11 "
                "(it adds --random-fully itself); the bridge plugin's ipMasq rules: a current plugin; a hand-written "
                "rule: add --random-fully where it is written"
            ),
            command("watch -n5 'conntrack -S | grep -o \"insert_failed=[0-9]*\"'   # should stop climbing"),
        ),
        evidence=[
            Evidence(
                src or rule.source or rules.ruleset.source,
                rule.text,
                int(line) if line.isdigit() else None,
            ),
            stats.evidence("insert_failed", case["insert_failed"]),
            Evidence(
                entries.source,
                f"{case['flows']} {case['proto'].upper()} entries to {dest} with source NAT"
                + (f"; {case['dns_flows']} to port 53" if case["dns_flows"] else "; none to port 53 (not DNS)"),
            ),
        ],
        subject=dest,
        data={
            "insert_failed": case["insert_failed"],
            "destination": dest,
            "flows": case["flows"],
            "dns_flows": case["dns_flows"],
            "rule": rule.text,
        },
    )
