"""Connection tracking: the table every Service connection needs an entry in."""

from __future__ import annotations

from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.state.typed_node import ConntrackEntries, ConntrackStats
from kpdiag.state.typed_proxy import Tracer


def _table_full(new, conntrack: ConntrackStats):
    """The finding for a table near full (count against max), or None; Skip when neither the sysctls nor the
    statistics were collected."""
    count_v = conntrack.sysctl("net.netfilter.nf_conntrack_count")
    max_v = conntrack.sysctl("net.netfilter.nf_conntrack_max") or conntrack.sysctl("net.nf_conntrack_max")
    if count_v is not None and max_v is not None:
        try:
            count, limit = int(count_v.value), int(max_v.value)
        except ValueError:
            raise Skip("nf_conntrack_count / nf_conntrack_max are not numbers") from None
        if limit > 0 and count >= 0.8 * limit:
            pct = 100.0 * count / limit
            return new(
                f"conntrack table {pct:.0f}% full ({count} of {limit} entries): new Service connections are dropped when it fills",
                severity="error" if pct >= 95 else "warning",
                fix=(
                    "conntrack -S    # drop / early_drop rising means it is already dropping",
                    "conntrack -L -o extended | awk '{print $3}' | sort | uniq -c | sort -rn | head   # who holds the entries",
                    "kubectl -n kube-system edit configmap kube-proxy   # conntrack: {maxPerCore: 65536, min: 262144}; then "
                    "kubectl -n kube-system rollout restart daemonset kube-proxy",
                    f"sysctl -w net.netfilter.nf_conntrack_max={limit * 2}   # immediate relief (kube-proxy may set it back)",
                ),
                evidence=[
                    conntrack.sysctl_evidence("net.netfilter.nf_conntrack_count"),
                    conntrack.sysctl_evidence("net.netfilter.nf_conntrack_max"),
                ],
                subject="node",
                data={"count": count, "max": limit, "percent_full": round(pct, 1)},
            )
    elif not conntrack.stats:
        raise Skip("neither nf_conntrack_count/max nor conntrack -S statistics were collected")
    return None


def _insert_failed(new, conntrack: ConntrackStats, entries, tracers):
    """insert_failed: the DNS race, or — when the entries hold no DNS flow — a race of another kind (SNAT
    collisions are KP611's)."""
    stats = conntrack.stats
    failed = stats.get("insert_failed", 0)
    from .snat import snat_collision

    if failed > 0 and snat_collision(conntrack, entries, tracers) is None:  # SNAT collisions are KP611's, not DNS
        from .snat import conntrack_flows

        text = entries.text if entries is not None else None
        dns = sum(conntrack_flows(text)[1].values()) if text else None
        evidence = [conntrack.evidence("insert_failed", failed)]
        if dns == 0:  # the entries were collected and none is DNS: do not blame the DNS race
            yield new(
                f"conntrack insert_failed = {failed}: packets of new flows lost the race to create their conntrack entry "
                "and were dropped; the conntrack entries show no DNS traffic, so it is not the DNS race",
                explanation=(
                    "insert_failed counts packets dropped because another packet created the same conntrack entry (or "
                    "took the same NAT mapping) first. The classic cause, UDP DNS queries racing, does not fit here: "
                    "the node's conntrack entries hold no port-53 flow. Look at which destinations many new connections "
                    "go to, and whether the masquerade rules they meet have --random-fully (KP611)."
                ),
                fix=(
                    "conntrack -L -o extended | awk '{print $4, $7, $9}' | sort | uniq -c | sort -rn | head   # busiest destinations",
                    "iptables-save -t nat | grep -e MASQUERADE -e SNAT   # are they --random-fully?",
                ),
                evidence=evidence + [Evidence(entries.source, "no conntrack entry to port 53 (UDP or TCP)")],
                severity="warning",
                subject="node",
                data={"stats": {"insert_failed": failed}, "dns_flows": 0},
            )
            return
        yield new(
            f"conntrack insert_failed = {failed}: packets of the same new flow raced and some were dropped (the classic 5-second DNS delay)",
            explanation=(
                "insert_failed counts packets dropped because another packet of the same new flow created its conntrack "
                "entry first. With Services this is almost always UDP DNS: glibc sends the A and AAAA queries at once from "
                "one socket, both get DNATed to (possibly different) CoreDNS pods, and one loses the race. The client "
                "waits for its timeout (5 s) and retries."
            ),
            fix=(
                "Deploy NodeLocal DNSCache (https://kubernetes.io/docs/tasks/administer-cluster/nodelocaldns/)",
                "or in the pods' dnsConfig: options: [{name: single-request-reopen}]   # glibc; musl ignores it",
                "Use a kernel ≥ 5.0, which fixes most of these races in nf_conntrack",
            ),
            evidence=evidence + ([Evidence(entries.source, f"{dns} conntrack entries to port 53")] if dns else []),
            severity="warning",
            subject="node",
            data={"stats": {"insert_failed": failed}},
        )


@check(
    "KP503",
    "conntrack-pressure",
    "Connection tracking table near full or dropping",
    "warning",
    severities=("warning", "error"),
    symptom="Random new connections to Services time out under load; DNS lookups sometimes take 5 s.",
    why="""
        Every connection through a Service needs a conntrack entry, because kube-proxy's DNAT is undone on the reply
        from that entry. When the table is full (nf_conntrack_count reaches nf_conntrack_max), the kernel drops new
        connections ("nf_conntrack: table full, dropping packet"). insert_failed counts a different, famous failure:
        two UDP packets of one flow (typically the A and AAAA DNS queries sent together) race to create the same
        entry and one is dropped — the client waits 5 s and retries.
    """,
    fix="Raise the table size through kube-proxy (conntrack.maxPerCore / conntrack.min), find what opens so many connections; for insert_failed on DNS use NodeLocal DNSCache or 'options single-request-reopen'.",
    references=("https://kubernetes.io/docs/tasks/administer-cluster/nodelocaldns/",),
)
def conntrack_pressure(
    new,
    conntrack: ConntrackStats,
    entries: Optional[ConntrackEntries] = None,  # with the tracer: to tell the DNS race from SNAT collisions (KP611)
    tracers: Optional[Tracer] = None,
):
    full = _table_full(new, conntrack)
    if full is not None:
        yield full
    stats = conntrack.stats
    src = conntrack.source
    drops = {k: stats.get(k, 0) for k in ("drop", "early_drop") if stats.get(k, 0) > 0}
    if drops and full is None:
        yield new(
            f"conntrack has dropped packets ({', '.join(f'{k}={v}' for k, v in drops.items())}): the table was full at some point",
            fix=(
                "watch -n1 'conntrack -C; conntrack -S | grep -o \"drop=[0-9]*\" | sort | uniq -c'",
                "kubectl -n kube-system edit configmap kube-proxy   # raise conntrack.maxPerCore / conntrack.min, then restart kube-proxy",
            ),
            evidence=[Evidence(src, " ".join(f"{k}={v}" for k, v in drops.items()) + " (summed over CPUs)")],
            subject="node",
            data={"stats": drops},
        )
    yield from _insert_failed(new, conntrack, entries, tracers)
