"""The cluster DNS as the API shows it: the kube-dns Service's endpoints and the CoreDNS pods (KP130-KP132) —
whether they are ready, why they restart, and what their logs say (a forwarding loop). What the pod meets when it
asks (its resolv.conf, the queries) is in dns.py, whose readers of the collected data these checks share."""

from __future__ import annotations

import datetime
import re
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.manifests import apply_command
from kpdiag.state.typed_api import DnsLogs, DnsPods, DnsService
from kpdiag.state.typed_node import Manifest

from .dns import _cluster_ips, _dl, _dns_service, _g, _pod_ready, _ready_endpoints, _strs, _svc_key

RESTARTS_WARN = 3
RESTART_RECENT = datetime.timedelta(hours=24)  # a last restart longer ago than this before the collection is history
LOOP_RE = re.compile(r"plugin/loop: Loop \(([^)]{1,120})\) detected for zone \"([^\"]{0,255})\"")


def _when(value) -> datetime.datetime | None:
    """An API timestamp ("2026-12-03T08:59:00Z") as an aware datetime; None when absent or not one."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


# ------------------------------------------------------------------ API side


@check(
    "KP130",
    "dns-service-no-endpoints",
    "The cluster DNS Service has no ready endpoints",
    "error",
    explains=("KP138", "KP139", "KP108"),
    severities=("warning", "error"),
    symptom="Every name lookup in every pod times out or fails ('could not resolve host', 'i/o timeout', 'SERVFAIL').",
    why="""
        Pods send their DNS queries to the ClusterIP of the kube-dns Service in kube-system (kubelet writes it in their
        /etc/resolv.conf). kube-proxy forwards those packets to the ready endpoints of that Service — the CoreDNS pods.
        With no ready endpoint there is nothing to forward to: kube-proxy rejects the packets (ICMP port unreachable) and
        every lookup in the cluster fails. The pods may be crashing, not ready, not scheduled, or the Service's selector
        may not match them.
    """,
    fix="kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide; kubectl -n kube-system describe pods -l k8s-app=kube-dns; "
    "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
)
def dns_no_endpoints(new, service: DnsService):
    svc = _dns_service(service)
    if svc is None:
        yield new(
            "no cluster DNS Service found in kube-system (label k8s-app=kube-dns, or named kube-dns / coredns)",
            severity="warning",
            fix=(
                "kubectl -n kube-system get svc -o wide   # is the cluster DNS Service named otherwise?",
                "kubectl -n kube-system get deploy,pods -l k8s-app=kube-dns",
            ),
            evidence=[
                Evidence(
                    service.services.source, "no Service labelled k8s-app=kube-dns, none named kube-dns or coredns"
                )
            ],
            subject="kube-system/kube-dns",
        )
        return
    slices = service.endpointslices.items()
    if slices is None:
        raise Skip(f"the kube-dns EndpointSlices were not collected ({sources.DNS_ENDPOINTSLICES})")
    key = _svc_key(svc)
    ready = _ready_endpoints(slices)
    if ready:
        return
    listed = [
        (a, _g(e, "conditions", default={}), _g(e, "targetRef", "name"))
        for s in slices
        for e in _dl(s.get("endpoints"))
        for a in _strs(e.get("addresses"))
    ]
    serving = [a for a, cond, _ in listed if cond.get("serving") and cond.get("terminating")]
    ev = [
        Evidence(
            service.services.source,
            f"{key}: ClusterIP {', '.join(_cluster_ips(svc)) or 'none'}, selector {_g(svc, 'spec', 'selector')}",
        )
    ]
    ev += [
        Evidence(
            service.endpointslices.source,
            f"{a} ({pod or 'no pod'}): ready={cond.get('ready')} serving={cond.get('serving')} terminating={cond.get('terminating')}",
        )
        for a, cond, pod in listed[:8]
    ] or [Evidence(service.endpointslices.source, f"no endpoint in {len(slices)} EndpointSlice(s) of {key}")]
    fix = (
        "kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide",
        "kubectl -n kube-system describe pods -l k8s-app=kube-dns   # why not ready / not scheduled",
        "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
        f"kubectl -n kube-system get endpointslices -l kubernetes.io/service-name={_g(svc, 'metadata', 'name')} -o wide",
    )
    if serving:
        yield new(
            f"{key} has no ready endpoint; only terminating ones still serve ({', '.join(serving[:4])}): DNS works until they are gone",
            severity="warning",
            fix=fix,
            evidence=ev,
            subject=key,
        )
    else:
        yield new(
            f"{key} has no ready endpoint ({len(listed)} listed, none ready): every DNS lookup in the cluster fails",
            fix=fix,
            evidence=ev,
            subject=key,
        )


@check(
    "KP131",
    "coredns-unhealthy",
    "CoreDNS pods not ready or restarting",
    "error",
    explains=("KP130", "KP138", "KP139", "KP108"),
    severities=("warning", "error"),
    symptom="DNS lookups fail, or fail now and then; CoreDNS pods show CrashLoopBackOff, 0/1 READY or a growing RESTARTS count.",
    why="""
        CoreDNS (label k8s-app=kube-dns) answers the cluster's DNS. A pod that is not ready is taken out of the kube-dns
        endpoints; one that keeps restarting (a crash, OOMKilled under load, a failing liveness probe, a Corefile error,
        a forwarding loop) drops the queries in flight each time. With no ready pod, every lookup fails; with some, the
        cluster runs on fewer replicas than intended.
    """,
    fix="kubectl -n kube-system describe pod POD; kubectl -n kube-system logs POD --previous (the crash reason); raise memory limits if OOMKilled",
)
def coredns_unhealthy(
    new, dns_pods: DnsPods, service: Optional[DnsService] = None, manifest: Optional[Manifest] = None
):
    pods = dns_pods.pods.items()
    if not pods:
        if not (service.services.items() if service is not None else None):
            raise Skip(
                "no kube-dns Service and no pod labelled k8s-app=kube-dns in kube-system: this cluster's DNS is something "
                "kpdiag does not know, not necessarily absent"
            )
        yield new(
            "no CoreDNS pod (label k8s-app=kube-dns) in kube-system: nothing answers the cluster's DNS",
            fix=(
                "kubectl -n kube-system get deploy coredns -o wide",
                "kubectl -n kube-system describe deploy coredns",
                "kubectl -n kube-system get events --sort-by=.lastTimestamp | tail -20",
            ),
            evidence=[Evidence(dns_pods.pods.source, "0 pods labelled k8s-app=kube-dns")],
            subject="kube-system/coredns",
        )
        return
    any_ready = any(_pod_ready(p) for p in pods)
    created = _when(_g(manifest.doc if manifest is not None else {}, "created"))  # when the data was collected
    for pod in pods:
        found = _unhealthy_pod(new, dns_pods.pods.source, pod, any_ready, created)
        if found is not None:
            yield found


def _refused(what: str, verb: str, lost: str, errors: list[str]) -> str | None:
    """The reason when RBAC refused the read (403): kube-system's pod list and pods/log are opt-in."""
    if not any("403" in e for e in errors):
        return None
    return (
        f"{what} could not be read: {verb} in kube-system is not granted (403). It is opt-in "
        f"({apply_command('svc-kube-system')}) because RBAC cannot narrow it to CoreDNS: it also shows every "
        f"kube-system pod's environment and the API server's and etcd's logs. Without it {lost} is not known"
    )


def _unhealthy_pod(new, source: str, pod: dict, any_ready: bool, created: datetime.datetime | None):
    """The finding for one CoreDNS pod that is not ready, waiting, or restarted recently; None for a healthy one."""
    pname = _g(pod, "metadata", "name")
    name = f"{_g(pod, 'metadata', 'namespace', default='kube-system')}/{pname}"
    ready = _pod_ready(pod)
    statuses = _dl(_g(pod, "status", "containerStatuses"))
    restarts = sum(s["restartCount"] for s in statuses if isinstance(s.get("restartCount"), int))
    waiting = [str(w) for w in (_g(s, "state", "waiting", "reason") for s in statuses) if w]
    last = [str(r) for r in (_g(s, "lastState", "terminated", "reason") for s in statuses) if r]
    ended = [t for t in (_when(_g(s, "lastState", "terminated", "finishedAt")) for s in statuses) if t is not None]
    long_past = bool(created and ended and max(ended) < created - RESTART_RECENT)
    if ready and not waiting and (restarts < RESTARTS_WARN or long_past):
        return None  # ready, and its restarts are few or long past (restartCount never goes down)
    bits = ["not ready"] if not ready else []
    if waiting:
        bits.append(f"waiting: {', '.join(waiting)}")
    if restarts:
        bits.append(f"restarted {restarts} time(s)" + (f" (last exit: {', '.join(last)})" if last else ""))
    if not any_ready:
        tail = "no CoreDNS pod is ready: DNS is down"
    else:
        tail = (
            "the other CoreDNS pods answer meanwhile" if not ready else "DNS queries in flight are lost at each restart"
        )
    fix = [
        f"kubectl -n kube-system describe pod {pname}",
        f"kubectl -n kube-system logs {pname} --previous --tail=50   # why it stopped",
    ]
    if "OOMKilled" in last:
        fix.append(
            "kubectl -n kube-system set resources deploy/coredns --limits=memory=256Mi   # it was OOMKilled: raise the limit (size it to the cluster)"
        )
    if "CrashLoopBackOff" in waiting:
        fix.append(
            "kubectl -n kube-system get configmap coredns -o yaml   # a Corefile error or a forwarding loop (KP132) makes CoreDNS exit"
        )
    return new(
        f"CoreDNS pod {name}: {', '.join(bits)} — {tail}",
        severity="error" if not any_ready else "warning",
        fix=fix,
        evidence=_pod_evidence(source, pod, name, statuses),
        subject=name,
    )


def _pod_evidence(source: str, pod: dict, name: str, statuses: list[dict]) -> list[Evidence]:
    cond = next((c for c in _dl(_g(pod, "status", "conditions")) if c.get("type") == "Ready"), {})
    ev = [
        Evidence(
            source,
            f"{name}: phase {_g(pod, 'status', 'phase')}, Ready={cond.get('status')}"
            + (f" ({cond.get('reason')}: {cond.get('message')})" if cond.get("reason") else ""),
        )
    ]
    for s in statuses[:4]:
        state = list(_g(s, "state", default={}).keys()) if isinstance(s.get("state"), dict) else None
        reason = _g(s, "lastState", "terminated", "reason")
        ev.append(
            Evidence(
                source,
                f"{name} container {s.get('name')}: restartCount={s.get('restartCount')} state={state}"
                + (f" lastState.terminated.reason={reason}" if _g(s, "lastState", "terminated") else ""),
            )
        )
    return ev


@check(
    "KP132",
    "coredns-loop",
    "CoreDNS detected a forwarding loop",
    "error",
    explains=("KP131", "KP130", "KP138", "KP139", "KP108"),
    symptom="CoreDNS pods in CrashLoopBackOff; their log ends with 'plugin/loop: Loop (127.0.0.1:… -> :53) detected for zone \".\"'.",
    why="""
        CoreDNS forwards names outside the cluster to the upstream servers in its own /etc/resolv.conf ("forward .
        /etc/resolv.conf" in the Corefile). CoreDNS runs with dnsPolicy: Default, so that file is the node's resolv.conf
        as kubelet hands it over. On nodes with systemd-resolved the node's /etc/resolv.conf says "nameserver
        127.0.0.53" — but inside the CoreDNS pod 127.0.0.53 is the pod's own loopback, where CoreDNS itself listens:
        every forwarded query comes back to CoreDNS. The loop plugin sends a random HINFO query at start, sees it come
        back, and stops CoreDNS on purpose (otherwise it would forward in circles until it ran out of memory).
    """,
    fix="Give kubelet the real upstream list: resolvConf: /run/systemd/resolve/resolv.conf in the KubeletConfiguration (or "
    "--resolv-conf), restart kubelet, delete the CoreDNS pods; or forward to upstream IPs in the Corefile.",
)
def coredns_loop(new, dns_logs: DnsLogs):
    data = dns_logs.doc
    logs = _dl(_g(data, "logs"))
    texts = [e for e in logs if isinstance(e.get("text"), str)]
    if not texts:
        errors = [str(e.get("error")) for e in logs if e.get("error")]
        refused = _refused("CoreDNS's log", "get pods/log", "a forwarding loop in CoreDNS", errors)
        raise Skip(refused or f"no CoreDNS log could be read ({clip('; '.join(errors), 300) or 'none collected'})")
    hits = []
    for e in texts:
        for no, line in enumerate(e["text"].splitlines(), 1):
            m = LOOP_RE.search(line)
            if m:
                hits.append((e, no, line.strip(), m))
                break
    if not hits:
        return
    pods = sorted({f"{e.get('namespace')}/{e.get('pod')}" for e, *_ in hits})
    e, _, _, m = hits[0]
    ev = [
        Evidence(
            f"{dns_logs.source} ({h[0].get('namespace')}/{h[0].get('pod')}{', previous container' if h[0].get('previous') else ''}, log line)",
            clip(h[2], 300),
            h[1],
        )
        for h in hits[:4]
    ]
    yield new(
        f"CoreDNS forwards to itself: 'Loop ({m.group(1)}) detected for zone \"{m.group(2)}\"' in the log of {', '.join(pods)} — "
        "it exits on purpose and restarts",
        fix=(
            "grep -E '^nameserver' /etc/resolv.conf   # on a node: 127.0.0.53 means systemd-resolved's stub",
            "grep -E '^nameserver' /run/systemd/resolve/resolv.conf   # the real upstream servers",
            "# KubeletConfiguration (/var/lib/kubelet/config.yaml): resolvConf: /run/systemd/resolve/resolv.conf — then: sudo systemctl restart kubelet",
            "kubectl -n kube-system rollout restart deploy/coredns",
            "# or in the Corefile (kubectl -n kube-system edit configmap coredns): forward . <upstream IPs> instead of /etc/resolv.conf",
        ),
        evidence=ev,
        subject="kube-system/coredns",
    )
