"""Cluster-wide checks (KP8xx): they look at the reports of many nodes (``kpdiag cluster``, ``kpdiag analyze DIR``)."""

from __future__ import annotations

import re
from collections import Counter

from kpdiag.checkapi import Skip, check
from kpdiag.manifests import apply_command
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.state.typed_fleet import NodeReports, ProgrammedTables

MAX_NAMES = 8  # nodes or service ports named in one summary


def _names(items, total: int | None = None) -> str:
    items = list(items)
    total = len(items) if total is None else total
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f" and {total - MAX_NAMES} more" if total > MAX_NAMES else "")


def _need_nodes(reports: NodeReports, n: int = 2):
    if len(reports.ok) < n:
        raise Skip(f"needs the reports of at least {n} nodes ({len(reports.ok)} diagnosed)")


@check(
    "KP801",
    "modes-differ",
    "kube-proxy runs in different modes on different nodes",
    "warning",
    scope="cluster",
    symptom="A Service behaves differently depending on the node the client runs on (ping answered here, not there; "
    "session affinity or timeouts differ); a mode change was rolled out to only some nodes.",
    why="""
        Every node's kube-proxy translates the traffic that leaves from that node, in the mode it runs in. Nodes in
        different modes mean different rules, different behaviour (ICMP, conntrack, hairpin, scale) and usually one
        of two accidents: a ConfigMap change that only restarted kube-proxy pods get, or nodes that could not run the
        configured mode and fell back (IPVS modules missing → iptables; see KP701 and KP301 on those nodes).
    """,
    fix="Make every node run the configured mode: check the outliers' KP701/KP301 findings, then restart kube-proxy there.",
)
def modes_differ(new, reports: NodeReports):
    _need_nodes(reports)
    modes = {r.node: (reports.fact(r, "proxy_mode"), reports.fact(r, "proxy_mode_source")) for r in reports.ok}
    counts = Counter(m for m, _ in modes.values() if m)
    if len(counts) < 2:
        return
    majority = counts.most_common(1)[0][0]
    outliers = sorted(n for n, (m, _) in modes.items() if m and m != majority)
    spread = ", ".join(f"{m} on {c} node{'s' if c != 1 else ''}" for m, c in counts.most_common())
    yield new(
        f"kube-proxy modes differ across nodes: {spread}; not {majority}: {_names(outliers)}",
        fix=(
            "kubectl -n kube-system get configmap kube-proxy -o jsonpath='{.data.config\\.conf}' | grep -i mode",
            f"kpdiag cluster --nodes {','.join(outliers[:3])}   # their KP701 / KP301 findings say why",
            "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<node>   # restart it there",
        ),
        evidence=[
            Evidence(f"node {n}", f"proxy mode {modes[n][0]} (from {modes[n][1]})") for n in outliers[:MAX_NAMES]
        ],
        subject="cluster",
    )


def _port_names(programmed: ProgrammedTables) -> dict[str, str]:
    names: dict[str, str] = {}
    for _, _, table in programmed.groups:
        for key, (name, _, _) in table.items():
            if name and key not in names:
                names[key] = name
    return names


def _label(key: str, names: dict[str, str]) -> str:
    return f"{names[key]} {key}" if names.get(key) else key


def _groups(programmed: ProgrammedTables):
    total = programmed.nodes
    if total < 2:
        raise Skip(f"needs the programmed services of at least 2 nodes ({total} reported them)")
    return programmed.groups, total


def _who(nodes: list[str]) -> str:
    return nodes[0] if len(nodes) == 1 else f"{_names(sorted(nodes))} (identical rules)"


@check(
    "KP802",
    "service-partially-programmed",
    "A Service is programmed on some nodes only",
    "error",
    scope="cluster",
    symptom="A Service works from most nodes but not from a few (or the other way round); new Services never work on some nodes.",
    why="""
        kube-proxy on every node should program the same ClusterIPs. A node that lacks service ports most nodes have
        is not keeping up: its kube-proxy is stuck, crash-looping, cannot reach the API server, or fails its syncs.
        A node that still has ports no other node has keeps rules of deleted Services. A Service created or deleted
        while kpdiag ran can show up here once: run again before acting.
    """,
    fix="Look at kube-proxy on the named nodes: is it running, what does its log say (KP703/KP704 on that node)?",
)
def partially_programmed(new, programmed: ProgrammedTables):
    groups, total = _groups(programmed)
    local = programmed.local_keys
    presence: Counter = Counter()
    for _, nodes, table in groups:
        for key in table:
            if key not in local:  # endpoints per node by design; IPVS and old reports cannot tell them apart
                presence[key] += len(nodes)
    majority = {k for k, c in presence.items() if c * 2 > total}
    names = _port_names(programmed)
    for _, nodes, table in groups:
        missing = sorted(majority.difference(table))
        extra = sorted(k for k in table if k not in majority and k not in local)
        if not missing and not extra:
            continue
        bits = []
        if missing:
            bits.append(
                f"lacks {len(missing)} of the {len(majority)} service ports most nodes programmed: "
                + _names([_label(k, names) for k in missing])
            )
        if extra:
            bits.append(
                f"has {len(extra)} that at most half of the nodes have: "
                + _names([f"{_label(k, names)} (on {presence[k]} of {total})" for k in extra])
            )
        first = sorted(nodes)[0]
        yield new(
            f"{_who(nodes)} {'; '.join(bits)}",
            fix=(
                f"kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide --field-selector spec.nodeName={first}",
                "kubectl -n kube-system logs <that node's kube-proxy pod> --tail=100",
                f"kpdiag cluster --nodes {first}   # that node's own findings (KP703, KP704, KP705)",
            ),
            evidence=[Evidence(f"node {first}", f"missing {_label(k, names)}") for k in missing[:MAX_NAMES]]
            + [
                Evidence(
                    f"node {first}", f"only here and on {presence[k] - len(nodes)} other node(s): {_label(k, names)}"
                )
                for k in extra[:MAX_NAMES]
            ],
            subject=first,
        )


@check(
    "KP803",
    "endpoints-disagree",
    "Nodes send a Service's traffic to different endpoints",
    "error",
    scope="cluster",
    symptom="Some requests to a Service go to pods that are gone (timeouts, connection refused) depending on the client's node.",
    why="""
        For a ClusterIP every node should spread traffic over the same ready endpoints (those in the Service's
        EndpointSlices). A node with another set is out of date: its kube-proxy missed EndpointSlice updates (stuck,
        disconnected from the API server, or slow syncs). The exception is internalTrafficPolicy: Local, where
        each node uses only its own endpoints by design; those Services are left out (known from the API, or from
        the rules in iptables and nftables mode: KUBE-SVL / local-… chains).
    """,
    fix="Restart kube-proxy on the named nodes after reading its log; compare with 'kubectl get endpointslices'.",
)
def endpoints_disagree(new, reports: NodeReports, programmed: ProgrammedTables):
    groups, total = _groups(programmed)
    local = programmed.local_keys
    zone_of = {r.node: reports.fact(r, "zone") for r in reports.ok}
    zoned = sum(1 for z in zone_of.values() if z) >= 2 and len({z for z in zone_of.values() if z}) >= 2

    # with topology-aware routing, nodes of different zones program different endpoints by design: nodes are compared
    # with the nodes of their own zone when the reports say their zones
    def zone(n: str) -> str:
        return (zone_of.get(n) or "") if zoned else ""

    votes: dict[tuple[str, str], Counter] = {}
    for _, nodes, table in groups:
        for key, (_, h, n) in table.items():
            if key in local:
                continue
            for node in nodes:
                votes.setdefault((key, zone(node)), Counter())[(h, n)] += 1
    best = {k: c.most_common(1)[0] for k, c in votes.items() if len(c) > 1}
    if not best:
        return
    names = _port_names(programmed)
    caveat = (
        ""
        if programmed.policy_known
        else " (unless a Service has internalTrafficPolicy: Local: the API was not read and IPVS rules do not show it)"
    )
    if not zoned:
        caveat += " (node zones unknown: with topology-aware routing, nodes of different zones differ by design)"
    for _, nodes, table in groups:
        by_zone: dict[str, list[str]] = {}
        for node in nodes:
            by_zone.setdefault(zone(node), []).append(node)
        for z, zone_nodes in sorted(by_zone.items()):
            differ = []
            for (key, kz), ((h, n), votes_for) in best.items():
                if kz != z:
                    continue
                mine = table.get(key)
                if mine is not None and (mine[1], mine[2]) != (h, n):
                    differ.append((key, mine[2], n, votes_for))
            if not differ:
                continue
            differ.sort()
            first = sorted(zone_nodes)[0]
            yield new(
                f"{_who(zone_nodes)} sends {len(differ)} service port(s) to other endpoints than most nodes"
                + (f" of zone {z}" if z else "")
                + f"{caveat}: "
                + _names([f"{_label(k, names)} ({_differ(mine, n, v)})" for k, mine, n, v in differ]),
                fix=(
                    f"kubectl get endpointslices -A -l kubernetes.io/service-name={names.get(differ[0][0], 'NAME').split('/')[-1].split(':')[0]}",
                    f"kpdiag cluster --nodes {first} --service {names[differ[0][0]].split(':')[0] if names.get(differ[0][0]) else 'NS/NAME'}",
                    "kubectl -n kube-system delete pod <that node's kube-proxy pod>   # after reading its log",
                ),
                evidence=[
                    Evidence(f"node {first}", f"{_label(k, names)}: {_differ(mine, n, v)}")
                    for k, mine, n, v in differ[:MAX_NAMES]
                ],
                subject=first,
            )


def _differ(mine: int, n: int, voters: int) -> str:
    if mine == n:
        return f"another set of {mine} endpoint(s) than the {n} on {voters} node(s)"
    return f"{mine} endpoint(s) here, {n} on {voters} node(s)"


def _minor(text) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", str(text or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


@check(
    "KP804",
    "version-skew",
    "kube-proxy versions differ, or are too far from the API server",
    "warning",
    severities=("warning", "error"),
    scope="cluster",
    symptom="Behaviour differs between nodes after an upgrade; features (traffic policies, nftables fixes) work on some nodes only.",
    why="""
        During an upgrade nodes run different kube-proxy versions for a while; a skew that stays means the upgrade
        stopped half-way. The version skew policy allows kube-proxy to be up to three minor versions older than the
        API server (two before v1.28) and never newer: outside that, kube-proxy may not understand the API objects
        it programs.
    """,
    fix="Finish the upgrade: kube-proxy (DaemonSet image or node packages) at the control plane's minor version.",
    references=("https://kubernetes.io/releases/version-skew-policy/#kube-proxy",),
)
def version_skew(new, reports: NodeReports):
    versions = {r.node: _minor(reports.fact(r, "kube_proxy_version")) for r in reports.ok}
    known = {n: v for n, v in versions.items() if v}
    if not known:
        raise Skip("no node report says its kube-proxy version (kube-proxy's /metrics)")
    counts = Counter(known.values())
    api = _minor(reports.api_version)
    if api:
        allowed = 3 if api >= (1, 28) else 2
        for v, c in sorted(counts.items()):
            nodes = sorted(n for n, x in known.items() if x == v)
            if v > api or api[1] - v[1] > allowed:
                how = "newer than" if v > api else f"more than {allowed} minor versions older than"
                yield new(
                    f"kube-proxy {v[0]}.{v[1]} on {c} node(s) ({_names(nodes)}) is {how} the API server ({reports.api_version}): outside the version skew policy",
                    severity="error",
                    fix=(f"upgrade kube-proxy on {_names(nodes)} to {api[0]}.{api[1]}",),
                    evidence=[Evidence(f"node {n}", f"kube-proxy {v[0]}.{v[1]}") for n in nodes[:MAX_NAMES]]
                    + [Evidence("API server", f"/version {reports.api_version}")],
                    subject="cluster",
                )
    if len(counts) > 1:
        newest = max(counts)
        behind = sorted(n for n, v in known.items() if v != newest)
        spread = ", ".join(f"{v[0]}.{v[1]} on {c}" for v, c in sorted(counts.items(), reverse=True))
        yield new(
            f"kube-proxy versions differ across nodes: {spread}; behind {newest[0]}.{newest[1]}: {_names(behind)}",
            fix=(
                "kubectl -n kube-system get daemonset kube-proxy -o jsonpath='{.spec.template.spec.containers[0].image}'",
                "kubectl get nodes -o custom-columns=NAME:.metadata.name,PROXY:.status.nodeInfo.kubeProxyVersion",
                "finish the node upgrade (or the kube-proxy DaemonSet rollout) on the nodes named",
            ),
            evidence=[Evidence(f"node {n}", f"kube-proxy {known[n][0]}.{known[n][1]}") for n in behind[:MAX_NAMES]],
            subject="cluster",
        )


@check(
    "KP805",
    "common-finding",
    "The same finding on most nodes",
    "warning",
    severities=("info", "warning", "error"),
    scope="cluster",
    symptom="Hundreds of identical findings, one per node.",
    why="""
        A finding that most nodes share comes from something they share: the node image, the kube-proxy ConfigMap,
        a DaemonSet, the cluster's network setup. It is reported once, with the count, one node's details and the
        fix — fix the common cause, not each node.
    """,
    fix="Fix the shared cause (image, ConfigMap, provisioning), then run kpdiag cluster again.",
)
def common_finding(new, reports: NodeReports):
    _need_nodes(reports, 3)
    threshold = reports.common_threshold
    for cid, hits in sorted(reports.findings_by_check.items()):
        nodes = sorted({n for n, _ in hits})
        if len(nodes) < threshold:
            continue
        sample_node, sample = hits[0]
        sev = max(
            (f.get("severity", "info") for _, f in hits), key=lambda s: {"info": 1, "warning": 2, "error": 3}.get(s, 0)
        )
        clean = sorted(r.node for r in reports.ok if r.node not in set(nodes))
        yield new(
            f"{cid} {sample.get('slug', '')} on {len(nodes)} of {len(reports.ok)} nodes"
            + (f" (not on {_names(clean)})" if clean else " (every node)")
            + f" — on {sample_node}: {sample.get('summary', '')}",
            severity=sev,
            explanation=str(sample.get("explanation") or "") or None,
            fix=tuple(str(x) for x in sample.get("fix") or ()) or (f"kpdiag explain {cid}",),
            evidence=[Evidence(f"node {n}", clip(f.get("summary", ""), 300)) for n, f in hits[:5]]
            + [
                Evidence(
                    str(e.get("source")),
                    str(e.get("text")),
                    line if isinstance(line := e.get("line"), int) and line > 0 else None,
                )
                for e in (sample.get("evidence") or [])[:3]
                if isinstance(e, dict)
            ],
            subject=cid,
        )


@check(
    "KP806",
    "nodes-not-diagnosed",
    "Some nodes could not be diagnosed",
    "warning",
    severities=("warning", "error"),
    scope="cluster",
    symptom="The cluster report covers fewer nodes than the cluster has.",
    why="""
        kpdiag runs one short-lived pod per node. A node is missing from the report when that pod could not be
        created (RBAC, PodSecurity admission, quota), was not admitted or never started on the node (node down,
        out of pods), could not pull its image, did not finish in time, or printed something that is not a report.
        Everything that could be diagnosed is still in the report. When half the nodes or more are missing, this
        is an error: the cluster picture is not representative.
    """,
    fix="Act on the reason given per node, then run kpdiag cluster --nodes <those nodes> again.",
)
def not_diagnosed(new, reports: NodeReports):
    failed = [r for r in reports.results if not r.ok]
    if not failed:
        return
    kinds: dict[str, list] = {}
    for r in failed:
        kinds.setdefault(r.kind or "failed", []).append(r)
    parts = [f"{kind} ({len(rs)}): {_names(sorted(r.node for r in rs))}" for kind, rs in sorted(kinds.items())]
    hints = {
        "timeout": "kpdiag cluster --nodes <nodes> --timeout 1200   # a node with 10,000+ Services takes minutes to dump",
        "image pull": "kpdiag cluster --image <a registry the nodes can pull from>/kpdiag:<version>",
        "api error": f"kubectl auth can-i create pods -n kpdiag   # kpdiag's grants: {apply_command('cluster')}",
        "not admitted": "kubectl describe node <node>   # capacity, pressure, taints",
        "unschedulable": "kubectl get node <node>   # does it still exist, is it Ready?",
        "not json": "kubectl -n kpdiag logs <pod>   # rerun with --keep-pods to read the pod's own output",
    }
    yield new(
        f"{len(failed)} of {len(reports.results)} nodes not diagnosed — " + "; ".join(parts),
        severity="error"
        if len(failed) * 2 >= len(reports.results)
        else None,  # half the cluster unseen is not a warning
        fix=tuple(hints[k] for k in sorted(kinds) if k in hints) or ("kpdiag cluster --nodes <nodes>",),
        evidence=[Evidence(f"node {r.node}", r.failure or "failed") for r in failed[:20]],
        subject="cluster",
    )
