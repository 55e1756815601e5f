"""kube-proxy itself: mode, health, log, sync time, local-traffic detection."""

from __future__ import annotations

import datetime
import re
from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_api import EndpointSlices, NodeObject, Services
from kpdiag.state.typed_node import Manifest
from kpdiag.state.typed_proxy import (
    KubeProxyConfig,
    KubeProxyHealthz,
    KubeProxyLog,
    KubeProxyMetrics,
    KubeProxyMode,
    KubeProxyRules,
    KubeProxySettings,
    Nft,
    ProxyMode,
)

_USING = re.compile(r"Using (iptables|ipvs|nftables|userspace|kernelspace) [Pp]rox(?:y|ier)")
_FALLBACK = re.compile(r"[Cc]an'?t use (?:the )?(ipvs|IPVS|nftables) [Pp]roxier(?:, trying (iptables) [Pp]roxier)?")


def _log_modes(log: KubeProxyLog | None):
    """(mode kube-proxy said it uses, line number, text) for each such log line, and fallback lines."""
    used, fallbacks = [], []
    for n, line in enumerate(log.lines if log is not None else (), 1):
        m = _USING.search(line)
        if m:
            used.append((m.group(1).lower(), n, line))
        f = _FALLBACK.search(line)
        if f:
            fallbacks.append((n, line))
    return used, fallbacks


@check(
    "KP701",
    "proxy-mode-mismatch",
    "kube-proxy runs in another mode than configured",
    "error",
    explains=("mode-checks",),
    advice_for="kube-proxy",
    symptom="You configured IPVS (or nftables) and tuned for it, yet the node behaves like iptables mode — or the reverse.",
    why="""
        kube-proxy reads its mode from the KubeProxyConfiguration (the kube-proxy ConfigMap). When that mode cannot
        work on the node — missing kernel modules, a too-old kernel or nft — older releases fall back to iptables mode
        with a single log line, and a ConfigMap edit only takes effect after the pods restart. The configured mode,
        the mode kube-proxy reports on /proxyMode, its log and the rules on the node must all agree.
    """,
    fix="Find why the configured mode could not start (KP301/KP401 and the log), fix it, and restart kube-proxy.",
)
def mode_mismatch(
    new,
    cfg: KubeProxyConfig,
    log: Optional[KubeProxyLog] = None,
    answer: Optional[KubeProxyMode] = None,
    manifest: Optional[Manifest] = None,
    proxy: Optional[ProxyMode] = None,
):
    configured = cfg.mode
    evidence = [cfg.evidence("mode")]
    disagree = []
    running = answer.running if answer is not None else None
    if running and running != configured:
        disagree.append(f"/proxyMode answers {running}")
        evidence.append(Evidence(answer.source, running, 1))
    used, fallbacks = _log_modes(log)
    if used and used[-1][0] != configured:
        mode, n, line = used[-1]
        disagree.append(f"the log says it uses {mode}")
        evidence.append(log.evidence(n, line))
    for n, line in fallbacks[-1:]:
        evidence.append(log.evidence(n, line))
        if not disagree:
            disagree.append("the log shows a fallback")
    inferred = proxy.inferred if proxy is not None else {}
    if inferred and configured not in inferred:
        disagree.append(f"the node has {' and '.join(inferred)} rules, none of {configured} mode")
        evidence.extend(Evidence(manifest.bundle, why) for why in inferred.values())
    if not disagree:
        return
    actual = running or (used[-1][0] if used else None) or next(iter(inferred), "unknown")
    yield new(
        f"configured mode is {configured}, but {'; '.join(disagree)}: kube-proxy is really running {actual} mode",
        fix=(
            'kubectl -n kube-system logs ds/kube-proxy | grep -iE "proxier|proxy mode|can\'t use"   # why it did not start as configured',
            "kpdiag node --preflight ipvs   # (or the KP301 / KP401 findings) what the node lacks for the configured mode",
            "kubectl -n kube-system get configmap kube-proxy -o yaml | grep -n 'mode:'   # what is configured",
            "kubectl -n kube-system rollout restart daemonset kube-proxy   # after fixing: a ConfigMap change needs a restart",
        ),
        evidence=[e for e in evidence if e],
        subject="node",
    )


@check(
    "KP702",
    "userspace-mode",
    "kube-proxy configured for the removed userspace mode",
    "error",
    explains=("KP701",),
    advice_for="kube-proxy",
    symptom="kube-proxy does not start on new releases (unknown proxy mode), or Services are slow and go through a userspace process on old ones.",
    why="""
        The userspace proxy mode — kube-proxy itself accepting every connection and copying bytes to a backend — was
        deprecated long ago and removed in Kubernetes v1.26. From v1.26 kube-proxy rejects mode: userspace; before,
        it was slow and lost client source addresses. Its iptables portal chains (KUBE-PORTALS-*) may also be left on
        the node.
    """,
    fix="Set mode: iptables (or nftables on kernel ≥ 5.13) in the kube-proxy ConfigMap and restart kube-proxy; run kube-proxy --cleanup to remove portal rules.",
)
def userspace(
    new,
    rules: Optional[KubeProxyRules] = None,
    cfg: Optional[KubeProxyConfig] = None,
    proxy: Optional[ProxyMode] = None,
):
    inferred = proxy.inferred if proxy is not None else {}
    if cfg is None and not inferred:
        raise Skip("needs the kube-proxy configuration or the node's iptables rules")
    evidence = []
    if cfg is not None and dataplanes.get(cfg.mode).removed:
        evidence.append(cfg.evidence("mode"))
    for mode, why in inferred.items():
        if dataplanes.get(mode).removed:
            evidence.append(Evidence(rules.ruleset.source, why))
    if not evidence:
        return
    yield new(
        "kube-proxy is set up for the userspace proxy mode, removed in Kubernetes v1.26",
        fix=(
            'kubectl -n kube-system edit configmap kube-proxy   # mode: "iptables"  (or "nftables" on kernel ≥ 5.13)',
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            "remove old portal rules: iptables -t nat -F KUBE-PORTALS-CONTAINER; iptables -t nat -F KUBE-PORTALS-HOST (or kube-proxy --cleanup)",
        ),
        evidence=evidence,
        subject="node",
    )


def _ts(text):
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return None


STALE_SECONDS = 120


@check(
    "KP703",
    "kube-proxy-unhealthy",
    "kube-proxy is unhealthy or has stopped syncing",
    "error",
    explains=("stale-rules", "KP113", "KP504", "KP529"),
    severities=("warning", "error"),
    advice_for="kube-proxy",
    symptom="New Services and endpoint changes do not reach this node; traffic goes to pods that are gone.",
    why="""
        kube-proxy reports on :10256/healthz when it last wrote the node's rules. If that is older than a couple of
        sync periods, or iptables-restore keeps failing, the node's rules are frozen at an old state: new Services
        are missing and removed pods still receive traffic. Load balancers that health-check NodePorts take the
        node out of rotation.
    """,
    fix="Read kube-proxy's log on this node for the failing sync (KP704 lists known causes) and restart it once fixed.",
)
def unhealthy(
    new,
    healthz: Optional[KubeProxyHealthz] = None,
    kp_metrics: Optional[KubeProxyMetrics] = None,
    manifest: Optional[Manifest] = None,
):
    hz = healthz.doc if healthz is not None else None
    metrics = kp_metrics.metrics if kp_metrics is not None else None
    if hz is None and metrics is None:
        raise Skip(f"needs kube-proxy's /healthz or /metrics ({sources.KP_HEALTHZ}, metrics.txt)")
    fix = (
        "kubectl -n kube-system logs --tail=200 $(kubectl -n kube-system get pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<node> -o name)",
        "curl -s http://127.0.0.1:10256/healthz; curl -s http://127.0.0.1:10249/metrics | grep -E 'sync_proxy_rules_(last|iptables_restore_failures)'",
        "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<node>   # after fixing the cause",
    )
    if hz is not None:
        src = healthz.source
        status = hz.get("kpdiag_http_status")
        last, now = _ts(hz.get("lastUpdated")), _ts(hz.get("currentTime"))
        if isinstance(status, int) and status >= 400:
            yield new(
                f"kube-proxy's /healthz answers HTTP {status}",
                fix=fix,
                evidence=[
                    Evidence(
                        src, f"HTTP {status} lastUpdated={hz.get('lastUpdated')} currentTime={hz.get('currentTime')}"
                    )
                ],
                subject="node",
            )
        elif last is not None and now is not None and now - last > STALE_SECONDS:
            yield new(
                f"kube-proxy last synced the rules {int(now - last)} s before /healthz was read (more than {STALE_SECONDS} s)",
                fix=fix,
                evidence=[Evidence(src, f"lastUpdated={hz.get('lastUpdated')} currentTime={hz.get('currentTime')}")],
                subject="node",
            )
    if metrics is not None:
        failures = metrics.get("kubeproxy_sync_proxy_rules_iptables_restore_failures_total")
        if failures:
            yield new(
                f"iptables-restore failed {int(failures)} times since kube-proxy started: some syncs did not apply",
                severity="warning",
                fix=fix,
                evidence=[
                    kp_metrics.evidence("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", int(failures))
                ],
                subject="node",
            )
        last = metrics.get("kubeproxy_sync_proxy_rules_last_timestamp_seconds")
        created = manifest.created if manifest is not None else None
        if last and created and created - last > 600 and hz is None:
            yield new(
                f"kube-proxy's last successful sync was {int(created - last)} s before this bundle was collected",
                fix=fix,
                evidence=[kp_metrics.evidence("kubeproxy_sync_proxy_rules_last_timestamp_seconds", last)],
                subject="node",
            )


# known log lines: (key, pattern, what it means, fix). A line counts for the FIRST pattern it matches: an
# iptables-restore that gave up waiting for the xtables lock ("exit status 4": iptables' RESOURCE_PROBLEM) also says
# "Failed to execute iptables-restore", but nothing rejected the ruleset — another program held the lock.
LOG_PATTERNS = [
    (
        "xtables-lock",
        re.compile(
            r"(Another app is currently holding the xtables lock|xtables lock|iptables-restore.*exit status 4\b)"
        ),
        "another program held the xtables lock (/run/xtables.lock), so kube-proxy's iptables-restore gave up waiting "
        "(exit status 4, a resource problem): the ruleset was not rejected, the sync was not applied and is retried",
        "find the other writer and make it stop holding the lock: fuser -v /run/xtables.lock (firewalld, a CNI plugin, "
        "a monitoring agent calling iptables in a loop); kube-proxy needs no change",
    ),
    (
        "restore-rejected",
        re.compile(r"(Failed to execute iptables-restore|iptables-restore.*failed|line \d+ failed)"),
        "iptables-restore rejected kube-proxy's ruleset (a rule the iptables binary or the kernel does not accept), "
        "so the sync did not apply",
        "check the iptables version/backend matches kube-proxy's (KP204), and kernel modules for the rules used (xt_comment, xt_statistic, xt_recent)",
    ),
    # current wording and older ones ("Failed to delete stale service IP %s connections", "Failed to delete %s endpoint connections")
    (
        "conntrack-cleanup",
        re.compile(
            r"(conntrack.*(operation not permitted|permission denied)|Failed to delete stale service (IP \S+ )?connections"
            r"|Failed to delete (\S+ )?endpoint connections|clearing conntrack entries)",
            re.I,
        ),
        "kube-proxy could not delete stale conntrack entries: UDP clients keep talking to removed endpoints (KP504) or past new ones (KP529)",
        "make sure the conntrack binary is in the kube-proxy image and the pod is privileged (NET_ADMIN)",
    ),
    (
        "sysctl",
        re.compile(r"(can't set sysctl|Failed to set sysctl|open /proc/sys/.*(read-only|permission denied))", re.I),
        "kube-proxy could not set a kernel setting it relies on (route_localnet, conntrack max, IPVS sysctls)",
        "run kube-proxy privileged, or set the sysctl on the node yourself (see KP505/KP503)",
    ),
    (
        "api-unreachable",
        re.compile(
            r"(Failed to retrieve node info|Failed to watch|Failed to list \*v1\.|couldn't get current server API group list|dial tcp .*: (connect: connection refused|i/o timeout))"
        ),
        "kube-proxy cannot reach the API server, so it does not learn about Service and endpoint changes",
        "check the kube-proxy kubeconfig's server address and the network path from the node to the API server",
    ),
    (
        "sync-failed",
        re.compile(r"(Sync failed|Failed to sync|syncProxyRules.*error)", re.I),
        "a rule sync failed",
        "read the lines around it for the cause; kube-proxy retries, but until it succeeds the node's rules are stale",
    ),
    (
        "bad-mode",
        re.compile(r"(unknown proxy mode|invalid proxy mode)", re.I),
        "kube-proxy rejected its configured mode",
        "set mode to iptables, ipvs or nftables in the kube-proxy ConfigMap",
    ),
]


OLD_LOG = 86400.0  # seconds: a log last written longer before the collection is said to be old


@check(
    "KP704",
    "kube-proxy-log-errors",
    "Known kube-proxy errors in its log",
    "warning",
    severities=("warning", "error"),
    # a sync that fails before its end never reaches IPVS mode's cleanup of superfluous addresses and virtual servers
    explains=("KP311",),
    advice_for="kube-proxy",
    symptom="Services are intermittently wrong on this node; kube-proxy restarts or lags behind.",
    why="""
        kube-proxy logs a handful of well-known errors when it cannot do its job: the iptables lock held by another
        program, iptables-restore rejecting a ruleset, no permission to clear conntrack, sysctls it cannot set, the API
        server out of reach. Each leaves the node's rules stale or incomplete in its own way, and each has its own fix:
        a lock held by another program (iptables-restore exit status 4, "Another app is currently holding the xtables
        lock") is that program's to release, while a rejected ruleset (exit status 1/2, "line N failed") is
        kube-proxy's or the iptables binary's — a line is counted once, for the first cause it shows. A rejected
        ruleset with no successful sync after it ("SyncProxyRules complete") is an error: kube-proxy is not syncing
        at all, so no Service change reaches this node's rules.
    """,
    fix="Follow the fix given for each error line below.",
)
def log_errors(new, log: KubeProxyLog):
    hits: dict[str, list] = {}
    last_sync = 0
    for n, line in log.entries():  # a multi-line klog value (err=<, lines, >) is one entry
        if "SyncProxyRules complete" in line:
            last_sync = n
        key = next((k for k, pattern, _, _ in LOG_PATTERNS if pattern.search(line)), None)
        if key is not None:
            hits.setdefault(key, []).append((n, line))
    for key, _, meaning, fix in LOG_PATTERNS:
        found = hits.get(key)
        if not found:
            continue
        shown = [found[0]] + ([found[-1]] if len(found) > 1 else [])
        stuck = key == "restore-rejected" and found[-1][0] > last_sync  # rejected, and no sync has worked since
        age = log.age_evidence()
        old = log.age is not None and log.age > OLD_LOG
        yield new(
            f"{len(found)} log line{'s' if len(found) > 1 else ''}: {meaning}"
            + (" — and no sync has succeeded since: kube-proxy is not updating this node's rules" if stuck else "")
            + (f" (the log was last written {log.written}: these lines may be long past)" if old else ""),
            fix=(fix,),
            evidence=[log.evidence(n, line) for n, line in shown] + ([age] if age is not None else []),
            severity="error" if stuck and not old else "warning",
            data={"cause": key, "lines": len(found), "syncing": not stuck}
            | ({"log_age_s": int(log.age)} if log.age is not None else {}),
        )


SLOW_WARN, SLOW_ERROR = 1.0, 10.0


@check(
    "KP705",
    "sync-slow",
    "kube-proxy's rule sync is slow",
    "warning",
    severities=("warning", "error"),
    advice_for="kube-proxy",
    symptom="New pods take seconds to start receiving Service traffic; deleted pods keep receiving it for a while.",
    why="""
        Every Service or endpoint change makes kube-proxy rewrite the node's rules. In iptables mode the cost grows
        with the whole ruleset (a full iptables-restore), so on big clusters one sync can take many seconds — during
        which endpoints are stale on this node. kube-proxy exports the time per sync as
        kubeproxy_sync_proxy_rules_duration_seconds.
    """,
    fix="Reduce the ruleset or move to nftables mode (incremental updates); raise minSyncPeriod to batch changes.",
)
def sync_slow(new, metrics: KubeProxyMetrics):
    m = metrics.metrics
    name = "kubeproxy_sync_proxy_rules_duration_seconds"
    mean = m.histogram_mean(name)
    if mean is None:
        raise Skip(f"{name} is not in the metrics")
    if mean < SLOW_WARN:
        return
    p90 = m.histogram_quantile(name, 0.9)
    yield new(
        f"kube-proxy needs {mean:.1f} s per rule sync on average"
        + (f" (90% of syncs ≤ {p90:g} s)" if p90 not in (None, float("inf")) else ""),
        severity="error" if mean >= SLOW_ERROR else "warning",
        fix=(
            "count the rules: iptables-save | wc -l   (KP205 shows the scale)",
            "kubectl -n kube-system edit configmap kube-proxy   # mode: nftables (kernel ≥ 5.13), or iptables.minSyncPeriod: 10s",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[
            metrics.evidence(f"{name}_sum", m.get(f"{name}_sum")),
            metrics.evidence(f"{name}_count", m.get(f"{name}_count")),
        ],
        subject="node",
    )


@check(
    "KP706",
    "no-cluster-cidr",
    "kube-proxy cannot tell pod traffic from outside traffic",
    "warning",
    advice_for="kube-proxy",
    symptom="Clients outside the cluster reach a ClusterIP (via a route) but get no answer; or pods see the node's IP instead of the client's.",
    why="""
        kube-proxy masquerades Service traffic that comes from *outside* the cluster, so that the reply returns
        through the same node. To know what is outside it needs local-traffic detection: by default the cluster
        CIDR (clusterCIDR); or detectLocalMode NodeCIDR / BridgeInterface / InterfaceNamePrefix. Without it, its
        KUBE-SVC chains have no "! -s <clusterCIDR> -j KUBE-MARK-MASQ" rule: off-cluster clients are not
        masqueraded and replies take another path (asymmetric routing, dropped by conntrack).
    """,
    fix="Set clusterCIDR (or another detectLocalMode) in the kube-proxy ConfigMap and restart kube-proxy.",
)
def no_cluster_cidr(
    new, cfg: Optional[KubeProxyConfig] = None, rules: Optional[KubeProxyRules] = None, nft: Optional[Nft] = None
):
    ports = None if rules is None else rules.programmed
    if cfg is None and ports is None:
        raise Skip("needs the kube-proxy configuration or its iptables rules")
    if cfg is not None:
        if cfg.get("iptables.masqueradeAll") is True:
            return
        mode = (cfg.get("detectLocalMode") or "ClusterCIDR") or "ClusterCIDR"
        needed = {
            "ClusterCIDR": "clusterCIDR",
            "NodeCIDR": None,
            "BridgeInterface": "detectLocal.bridgeInterface",
            "InterfaceNamePrefix": "detectLocal.interfaceNamePrefix",
        }.get(mode, "clusterCIDR")
        if needed is None or cfg.get(needed):
            return
        evidence = [cfg.evidence("detectLocalMode"), cfg.evidence(needed)]
    else:
        with_chain = [p for p in ports.values() if p.chain]
        if not with_chain or any(p.cluster_cidr for p in with_chain):
            return
        mode, needed = "ClusterCIDR", "clusterCIDR"
        evidence = []
    with_chain = [p for p in (ports or {}).values() if p.chain]
    if with_chain and any(p.cluster_cidr for p in with_chain):
        return  # the rules say detection works (e.g. clusterCIDR passed as a flag)
    from .clustercidr import nft_cluster_cidr

    if nft_cluster_cidr(nft):
        return  # so do kube-proxy's nftables service chains ("ip saddr != CIDR jump mark-for-masquerade")
    if with_chain:
        rs = rules.ruleset
        first = rs.chain("nat", with_chain[0].chain).rules
        evidence.append(
            Evidence(
                rs.source,
                f"{with_chain[0].chain} has no '! -s <clusterCIDR> -j KUBE-MARK-MASQ' rule",
                first[0].lineno if first else None,
            )
        )
    yield new(
        f"local-traffic detection ({mode}) has no {needed}: traffic from outside the cluster to ClusterIPs is not masqueraded",
        fix=(
            'kubectl -n kube-system edit configmap kube-proxy   # clusterCIDR: "<your pod CIDR, e.g. 10.244.0.0/16>"',
            "kubectl cluster-info dump | grep -m1 -- --cluster-cidr   # the pod CIDR the controller manager uses",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[e for e in evidence if e],
        subject="node",
    )


@check(
    "KP711",
    "hostname-override-mismatch",
    "kube-proxy's hostnameOverride is not this node's name",
    "error",
    severities=("error",),
    advice_for="kube-proxy",
    symptom="Services with externalTrafficPolicy: Local (NodePorts, LoadBalancers) or internalTrafficPolicy: Local "
    "time out through this node although their pods run on it; health checks of cloud load balancers mark the node "
    "down.",
    why="""
        kube-proxy knows which endpoints are local by comparing each endpoint's nodeName with its own node name: the
        hostnameOverride of its configuration (lower-cased), else the host name. When that name is not the Node's
        name, no endpoint is ever local: for externalTrafficPolicy: Local and internalTrafficPolicy: Local kube-proxy
        writes "has no local endpoints" DROP rules and its health-check port answers 503 — traffic for those Services
        is dropped on this node, on every node the same configuration reaches. A copied ConfigMap (one node's name
        for all) or a cloud's FQDN against a short host name are the usual causes.
    """,
    fix="Set hostnameOverride to the Node's name (or remove it: kubeadm's DaemonSet passes --hostname-override=$(NODE_NAME)) "
    "and restart kube-proxy.",
)
def hostname_override(
    new,
    kp: KubeProxySettings,
    slices: Optional[EndpointSlices] = None,
    manifest: Optional[Manifest] = None,
    node_object: Optional[NodeObject] = None,
    api: Optional[Services] = None,
):
    setting = kp["hostnameOverride"]  # the --hostname-override flag wins over the file's, as in kube-proxy
    if not setting.is_set:
        return  # kube-proxy uses the host name: nothing to compare
    raw = str(setting.value)
    override = raw.strip().lower()  # as kube-proxy reads it
    nodes = node_object.names()
    services = list(api.every) if api is not None else None
    on_nodes = {ep.node for svc in services or [] for ep in svc.endpoints if ep.node}
    if len(nodes) == 1:
        node, how = nodes[0], f"the Node object in {node_object.source}"
    elif override in nodes or override in on_nodes:
        return  # a node the API knows by that name
    elif manifest.node and manifest.node in on_nodes:
        node, how = manifest.node, "this node's name in the EndpointSlices' nodeName"
    else:
        raise Skip(
            f"needs this node's Node object ({sources.NODES}) or EndpointSlices naming it to compare hostnameOverride with"
        )
    if override == node.lower():
        return
    affected = sorted(svc.key for svc in services or [] if svc.etp_local or svc.itp_local)
    consequence = (
        f"{len(affected)} Service{'s' if len(affected) != 1 else ''} with a Local traffic policy "
        f"({', '.join(affected[:5])}{', …' if len(affected) > 5 else ''}) get no traffic through this node"
        if affected
        else "any Service with externalTrafficPolicy/internalTrafficPolicy: Local gets no traffic through this node"
        + (" (none exists now)" if services is not None else "")
    )
    evidence = [setting.evidence(), Evidence(node_object.source, f"metadata.name: {node}")]
    if how.startswith("this node's name"):
        evidence[1] = slices.evidence(f"endpoints with nodeName: {node}")
    evidence += [Evidence(api.source, f"{key}: a Local traffic policy") for key in affected[:3]]
    yield new(
        f"kube-proxy's hostnameOverride {raw.strip()!r} is not this node's name {node!r} (from {how}): kube-proxy "
        "finds no local endpoints, so it drops externalTrafficPolicy: Local and internalTrafficPolicy: Local traffic "
        f"here — {consequence}",
        fix=(
            f'kubectl -n kube-system edit configmap kube-proxy   # hostnameOverride: "{node}" — or remove it where each '
            "node's kube-proxy gets --hostname-override=$(NODE_NAME) from the DaemonSet",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            'kubectl get --raw /api/v1/nodes | grep -o \'"name":"[^"]*"\' | head   # the Node names kube-proxy must use',
        ),
        evidence=[e for e in evidence if e],
        subject="node",
        data={"hostname_override": raw.strip(), "node": node, "node_from": how, "services": affected},
    )
