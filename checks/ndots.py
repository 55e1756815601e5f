"""ndots amplification: names outside the cluster asked through every search domain first (from kpdiag's DNS probe)."""

from __future__ import annotations

import statistics

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import DnsLookups

CLUSTER_SEARCH = 3  # what kubelet writes for ClusterFirst: <ns>.svc.<domain>, svc.<domain>, <domain>
WARN_MS = 500.0  # estimated time one external lookup spends on NXDOMAIN answers before it is a warning
EXAMPLE = "api.example.com"  # two dots: below the default ndots:5, like almost every external name


@check(
    "KP141",
    "dns-ndots-amplification",
    "External names are asked through every search domain first (ndots)",
    "info",
    severities=("info", "warning"),
    symptom="Every lookup of an external name (an API, a database host, a cloud endpoint) from pods is slow or adds load "
    "to CoreDNS: several NXDOMAIN answers per lookup, and with IPv4 and IPv6 twice as many; latency adds up on every "
    "new connection.",
    why="""
        A name with fewer dots than ndots (5 in a ClusterFirst pod) is first tried with each search domain appended,
        and only then as it is: api.example.com (two dots) costs one NXDOMAIN query per search domain, per address
        family (A and AAAA), before the real answer — 6 queries for the 3 cluster domains, more when the node adds
        its own search domains (cloud DNS suffixes, corporate domains). Each of those is a round trip to CoreDNS,
        and the ones for the node's domains are forwarded upstream. kpdiag's DNS probe saw the search list and how
        long CoreDNS takes to say NXDOMAIN. The cluster's own three domains are the normal cost of ClusterFirst and
        are not reported; search domains the node adds on top of them are.
    """,
    fix="Write external names with a trailing dot (api.example.com.) — asked as is, once — or lower ndots for the pod "
    "(spec.dnsConfig.options: [{name: ndots, value: '2'}]), or keep the node's search domains out of pods.",
)
def ndots_amplification(new, lookups: DnsLookups):
    from .dns import _doc, _rc, _rc_ev

    doc = _doc(lookups, need_queries=False)
    rc = _rc(doc)
    if not rc.get("entries"):
        raise Skip("the pod's resolv.conf was not read by the DNS probe")
    search, ndots = rc["search"], rc["ndots"]
    if ndots < 3 or not search:
        return  # an external name (usually two dots or more) is asked as it is first
    queries = [q for q in doc.get("queries") or [] if isinstance(q, dict)]
    nx = [
        q["duration_ms"]
        for q in queries
        if q.get("result") == "nxdomain" and isinstance(q.get("duration_ms"), (int, float))
    ]
    wasted = len(search) * 2  # A and AAAA for each search domain, before the name itself
    median = statistics.median(nx) if nx else None
    cost = wasted * median if median is not None else None
    extra = search[CLUSTER_SEARCH:] if len(search) > CLUSTER_SEARCH else []
    if not extra:
        return  # the cluster's own three domains: the usual case, answered by CoreDNS itself
    src = lookups.source
    cands = [f"{EXAMPLE}.{s}" for s in search]
    timing = (
        f"; CoreDNS took {median:.1f} ms per NXDOMAIN here (median of {len(nx)}), about {cost:.0f} ms per lookup"
        if cost is not None
        else ""
    )
    yield new(
        f"with ndots:{ndots} and {len(search)} search domains"
        + (f" ({len(extra)} added by the node: {', '.join(extra[:3])})" if extra else "")
        + f", an external name such as {EXAMPLE} is asked {wasted} times (A and AAAA in each search domain) before it "
        f"is asked as it is{timing}",
        severity="warning" if cost is not None and cost >= WARN_MS else "info",
        fix=(
            note(f"in the application's configuration: {EXAMPLE}. (a trailing dot: asked once, as it is)"),
            note(
                'or in the pod spec: dnsConfig: {options: [{name: ndots, value: "2"}]}   # names with 2+ dots are '
                "asked as they are first; short Service names still work through the search list"
            ),
        )
        + (
            (
                note(
                    f"the node adds {', '.join(extra[:3])} to every pod's search list (kubelet copies the node's "
                    "resolv.conf search domains): drop them there, or set the pods' dnsConfig.searches"
                ),
            )
            if extra
            else ()
        ),
        evidence=_rc_ev(lookups, rc, "search")
        + [e for e in _rc_ev(lookups, rc, "options") if "ndots" in e.text]
        + [
            Evidence(
                src, f"{EXAMPLE} is asked as: {', '.join(cands[:4])}{' …' if len(cands) > 4 else ''}, then {EXAMPLE}"
            )
        ]
        + (
            [Evidence(src, f"{len(nx)} NXDOMAIN answers measured, median {median:.1f} ms")]
            if median is not None
            else []
        ),
        subject="dns",
        data={
            "ndots": ndots,
            "search": search,
            "node_search_domains": extra,
            "queries_before_answer": wasted,
            "nxdomain_median_ms": median,
            "estimated_cost_ms": None if cost is None else round(cost, 1),
        },
    )
