"""Rollouts that drop requests: pods that exit as soon as they are told to while kube-proxy needs seconds to take them
out of the rules."""

from __future__ import annotations

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import EndpointSlices, Pods, Services
from kpdiag.state.typed_proxy import KubeProxyMetrics

from .shapes import d, lst

SLOW = 1.0  # seconds from an endpoint change to the node's rules before a pod without a preStop delay loses requests
METRICS = ("kubeproxy_network_programming_duration_seconds", "kubeproxy_sync_proxy_rules_duration_seconds")


def _latency(metrics: KubeProxyMetrics) -> tuple[float, str] | None:
    m = metrics.metrics
    for name in METRICS:
        mean = m.histogram_mean(name) if m is not None else None
        if mean is not None:
            return mean, name
    return None


def _has_prestop(pod: dict) -> bool:
    for c in lst(d(pod.get("spec")).get("containers")):
        if isinstance(c, dict) and d(c.get("lifecycle")).get("preStop"):
            return True
    return False


@check(
    "KP117",
    "rollout-no-prestop",
    "Pods leave Services faster than kube-proxy takes them out: requests fail during rollouts",
    "warning",
    symptom="Every rollout or scale-down of a Deployment brings a burst of connection refused / reset / 502 errors for a "
    "few seconds, although readiness probes and maxUnavailable are set right.",
    why="""
        When a pod is deleted two things start at once: the kubelet sends SIGTERM to its containers, and the
        EndpointSlice controller marks the endpoint terminating, which every node's kube-proxy turns into new rules
        on its next sync. Until a node has synced, it keeps sending new connections to the pod. A container that
        exits on SIGTERM right away is gone before many nodes stopped sending it traffic; those connections are
        refused or reset. A preStop hook that sleeps a few seconds (longer than kube-proxy's sync latency, shorter
        than terminationGracePeriodSeconds) keeps the pod serving until the rules have caught up. kube-proxy's own
        metrics say how long that takes on this node: network_programming_duration (endpoint change → rules) or
        sync_proxy_rules_duration.
    """,
    fix="Give the containers a preStop delay longer than kube-proxy's sync latency (lifecycle.preStop.sleep.seconds: 5 on "
    "Kubernetes ≥ 1.30, else exec sleep 5) and make the application drain on SIGTERM; shorten the sync (KP705).",
)
def rollout_no_prestop(new, services: Services, slices: EndpointSlices, pods: Pods, metrics: KubeProxyMetrics):
    lat = _latency(metrics)
    if lat is None:
        raise Skip(f"kube-proxy's metrics hold neither {METRICS[0]} nor {METRICS[1]}")
    latency, metric = lat
    if latency < SLOW:
        return  # the rules follow endpoint changes in well under a second: a pod exiting at once loses little
    by_key = {
        (d(p.get("metadata")).get("namespace"), d(p.get("metadata")).get("name")): p
        for p in pods.items
        if isinstance(p, dict) and isinstance(d(p.get("metadata")).get("name"), str)
    }
    cases = []
    for svc in services.every:
        if svc.headless:
            continue
        bare, terminating, grace = [], [], set()
        for e in svc.endpoints:
            pod = by_key.get((svc.namespace, e.pod))
            if pod is None or _has_prestop(pod):
                continue
            bare.append(e)
            g = d(pod.get("spec")).get("terminationGracePeriodSeconds", 30)
            grace.add(g if isinstance(g, int) else 30)
            if e.terminating:
                terminating.append(e)
        if bare:
            cases.append((svc, bare, terminating, grace))
    if not cases:
        return
    metrics_src, pods_src, eps_src = metrics.source, pods.source, slices.source
    for svc, bare, terminating, grace in cases:
        now = (
            f"; right now {len(terminating)} of its endpoints are terminating "
            f"({', '.join(f'{e.ip} ({e.pod})' for e in terminating[:3])})"
            if terminating
            else ""
        )
        delay = max(5, int(latency * 2 + 0.999))
        yield new(
            f"{svc.key}: {len(bare)} pod(s) behind it have no preStop delay while kube-proxy here needs {latency:.1f} s on "
            f"average to apply an endpoint change ({metric}): during a rollout they exit while this node still sends "
            f"them new connections{now}",
            fix=(
                note(
                    f"in the pods' containers: lifecycle: {{preStop: {{sleep: {{seconds: {delay}}}}}}}   # Kubernetes ≥ 1.30; "
                    f'older: preStop: {{exec: {{command: ["sleep", "{delay}"]}}}} (the image needs a sleep binary)'
                ),
                note(
                    f"keep terminationGracePeriodSeconds (now {', '.join(map(str, sorted(grace, key=str)))}) above the "
                    "preStop delay plus the time the application needs to drain"
                ),
                command(
                    f"kubectl -n {svc.namespace} get pods -o jsonpath='{{range .items[*]}}{{.metadata.name}} "
                    f'{{.spec.containers[*].lifecycle.preStop}}{{"\\n"}}{{end}}\''
                ),
            ),
            evidence=[Evidence(metrics_src, f"{metric}: mean {latency:.2f} s")]
            + [Evidence(pods_src, f"{svc.namespace}/{e.pod}: no lifecycle.preStop in any container") for e in bare[:3]]
            + [Evidence(eps_src, f"{e.ip} ({e.pod}): terminating, serving={e.serving}") for e in terminating[:3]],
            subject=svc.key,
            data={
                "service": svc.key,
                "latency_s": round(latency, 3),
                "metric": metric,
                "pods_without_prestop": [e.pod for e in bare],
                "terminating": [e.ip for e in terminating],
            },
        )
