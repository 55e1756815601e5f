"""The kernel's neighbour (ARP/NDP) tables: too small for the node's neighbours, or already overflowing."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.bundle import sources
from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note, persist_sysctls
from kpdiag.model import Evidence
from kpdiag.state.typed_api import NodeObject, NodeObjects, Pods
from kpdiag.state.typed_node import Addresses, KernelLog, NeighThresholds, Neighbours

FAMILIES = {"ipv4": ("arp_cache", 4), "ipv6": ("ndisc_cache", 6)}
DONE = ("Succeeded", "Failed")


def _thresholds(sysctls: NeighThresholds, fam: str) -> dict[int, int] | None:
    out = {}
    for n in (1, 2, 3):
        v = sysctls.get(f"net.{fam}.neigh.default.gc_thresh{n}")
        if v is None or not v.isdigit():
            return None
        out[n] = int(v)
    return out


def _local_pods(pods: Pods | None, me: NodeObject | None, version: int) -> int | None:
    """Pods of this node with an address of IP ``version`` that are neither hostNetwork nor finished; None when the pods
    or this node's name are not known."""
    if pods is None or me is None or not me.name:
        return None
    n = 0
    for pod in pods.items:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if not isinstance(spec, dict) or not isinstance(status, dict):
            continue
        if spec.get("nodeName") != me.name or spec.get("hostNetwork") or status.get("phase") in DONE:
            continue
        ips = [p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, dict)] or [status.get("podIP")]
        if any(isinstance(ip, str) and (":" in ip) == (version == 6) for ip in ips):
            n += 1
    return n


def _lan_nodes(nodes: NodeObjects | None, me: NodeObject | None, addresses: Addresses | None, version: int):
    """Other Nodes whose InternalIP is on one of this node's own subnets (each is a neighbour: ARP/NDP, not a
    gateway); None when the Nodes or the addresses are not known."""
    if nodes is None or addresses is None or len(nodes.objects) < 2:
        return None  # one Node (this one, as `kpdiag node` reads it): the others are not known
    nets = []
    for link in addresses.links:
        for a in link.get("addr_info") or []:
            if a.get("scope", "global") == "global" and a.get("local"):
                try:
                    net = ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen')}").network
                except ValueError:
                    continue
                if net.version == version and net.prefixlen < net.max_prefixlen:
                    nets.append(net)
    n = 0
    for obj in nodes.objects:
        ip = nodes.internal_ip(obj)
        if me is not None and nodes.name(obj) == me.name or not ip:
            continue
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            continue
        n += any(addr in net for net in nets)
    return n


def _need(fam, neigh, nodes, pods, me, addresses) -> tuple[int | None, list[str]]:
    """(the neighbours this node needs, the arithmetic in words)."""
    version = FAMILIES[fam][1]
    parts, total = [], 0
    table = neigh.tables.families.get(fam) if neigh is not None else None
    seen = None
    if table is not None:
        seen = table.total if table.total is not None else table.entries
    lan, local = _lan_nodes(nodes, me, addresses, version), _local_pods(pods, me, version)
    if lan is not None:
        total += lan
        parts.append(f"{lan} other Nodes on this node's subnets")
    if local is not None:
        total += 2 * local
        parts.append(f"2 × {local} local pods (the node's entry for each pod, each pod's for its gateway)")
    if not parts and seen is None:
        return None, []
    words = " + ".join(parts) + f" = {total}" if parts else ""
    if seen is not None and seen > total:
        words = f"{seen} entries in the table now" + (f" (more than {words})" if words else "")
        total = seen
    elif seen is not None:
        words += f" (the table holds {seen} now)"
    return total, [words]


def _sizes(need: int) -> dict[int, int]:
    """gc_thresh values with room for ``need``: thresh3 a power of two ≥ 2 × need (at least 4096), thresh2 half of
    it, thresh1 a quarter (the kernel collects nothing below thresh1)."""
    t3 = 4096
    while t3 < 2 * need:
        t3 *= 2
    return {1: t3 // 4, 2: t3 // 2, 3: t3}


@check(
    "KP525",
    "neighbour-table-overflow",
    "The neighbour (ARP/NDP) table overflows, or is too small for this node's neighbours",
    "warning",
    severities=("error", "warning"),
    symptom="Pods on busy or large nodes intermittently cannot reach other pods, nodes or their gateway; connections "
    "stall for a few seconds and recover; `ping` says 'No buffer space available'; the kernel logs 'neighbour: "
    "arp_cache: neighbor table overflow!'.",
    why="""
        Every address a node talks to directly on a link — the other nodes on its subnet, each local pod behind
        its veth or bridge, and, since the table is the kernel's and shared by all network namespaces, each pod's
        own entry for its gateway — takes an entry in the neighbour table. Its size is bounded by
        net.ipv4.neigh.default.gc_thresh1/2/3 (128/512/1024 by default; the same for IPv6): above gc_thresh2 the kernel
        evicts entries every 5 seconds, at gc_thresh3 it refuses new ones ("neighbor table overflow") and the
        packet waiting for that address is dropped. Large flat networks (host-gw, cloud VPC CNIs) and nodes with
        many pods pass the defaults.
    """,
    fix="Raise gc_thresh1/2/3 above what the node needs (net.ipv4.neigh.default.* and net.ipv6.neigh.default.*) "
    "with sysctl -w and a file in /etc/sysctl.d.",
)
def neighbour_table(
    new,
    sysctls: NeighThresholds,
    neigh: Optional[Neighbours] = None,
    log: Optional[KernelLog] = None,
    nodes: Optional[NodeObjects] = None,
    pods: Optional[Pods] = None,
    me: Optional[NodeObject] = None,
    addresses: Optional[Addresses] = None,
):
    skipped = []
    for fam, (cache, _) in FAMILIES.items():
        t = _thresholds(sysctls, fam)
        overflow = [(n, text) for n, text in (log.log.overflows() if log is not None else []) if cache in text]
        table = neigh.tables.families.get(fam) if neigh is not None else None
        fulls = table.table_fulls if table is not None and table.table_fulls else 0
        need, words = _need(fam, neigh, nodes, pods, me, addresses)
        where = neigh.tables.source if neigh is not None else (pods.source if pods is not None else str(sources.PODS))
        if t is None:
            if overflow or fulls:
                yield _finding(new, fam, None, need, words, overflow, fulls, log, neigh, sysctls, where)
            else:
                skipped.append(f"net.{fam}.neigh.default.gc_thresh1/2/3 are not in the collected sysctls")
            continue
        if overflow or fulls:
            yield _finding(new, fam, t, need, words, overflow, fulls, log, neigh, sysctls, where)
        elif need is None:
            skipped.append(
                f"{fam}: neither the neighbour table ({sources.NEIGH}) nor the Nodes and pods were collected: how many "
                "neighbours the node needs is not known"
            )
        elif need > t[3] or (neigh is not None and table is not None and (table.total or 0) >= t[2]):
            yield _finding(new, fam, t, need, words, [], 0, log, neigh, sysctls, where)
    if len(skipped) == len(FAMILIES):
        raise Skip(skipped[0])


def _finding(new, fam, t, need, words, overflow, fulls, log, neigh, sysctls, where):
    cache = FAMILIES[fam][0]
    keys = {n: f"net.{fam}.neigh.default.gc_thresh{n}" for n in (1, 2, 3)}
    want = _sizes(max(need or 0, t[3] if t else 1024))
    evidence = [Evidence(log.log.source, text, n) for n, text in overflow[-2:]]
    if fulls:
        evidence.append(Evidence(neigh.tables.source, f"{fam}: table_fulls {fulls} (/proc/net/stat/{cache})"))
    evidence += [e for n in (1, 2, 3) if (e := sysctls.evidence(keys[n])) is not None]
    if words:
        evidence.append(Evidence(where, f"{fam}: needs {words[0]}"))
    limit = f"gc_thresh3 = {t[3]}" if t else "gc_thresh3 (not collected)"
    if overflow or fulls:
        said = " and ".join(
            s
            for s in (
                f"{len(overflow)} 'neighbor table overflow' line(s) in the kernel log" if overflow else "",
                f"the kernel refused {fulls} new entries (table_fulls)" if fulls else "",
            )
            if s
        )
        summary = f"the {fam} neighbour table ({cache}) overflowed: {said}; {limit}" + (
            f", the node needs {need}: {words[0]}" if need is not None and words else ""
        )
        severity = "error"
    else:
        summary = (
            f"the {fam} neighbour table is too small for this node: it needs {need} entries ({words[0]}), "
            f"{limit} (gc_thresh2 = {t[2]}: above it the kernel evicts entries every 5 s)"
        )
        severity = "warning"
    settings = {keys[n]: want[n] for n in (1, 2, 3)}
    return new(
        summary,
        severity=severity,
        fix=(
            command("sysctl -w " + " ".join(f"{k}={v}" for k, v in settings.items())),
            command(persist_sysctls(settings, "neighbour-table") + "   # keep it across reboots"),
            note(
                f"thresh3 {want[3]} = a power of two ≥ 2 × {need or 'the current limit'}; thresh2 and thresh1 half and a quarter"
            ),
            command(
                f"cat /proc/net/stat/{cache}   # 'entries' (hex) falls below gc_thresh2, table_fulls stops growing"
            ),
        ),
        evidence=evidence,
        subject="node",
        data={
            "family": fam,
            "needed": need,
            "overflows": len(overflow),
            "table_fulls": fulls,
            **sysctls.data(settings),
        },
    )
