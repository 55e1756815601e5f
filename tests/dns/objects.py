"""Cluster DNS objects in the API's JSON shape (kube-system/kube-dns, its EndpointSlice, CoreDNS pods), for the DNS tests."""

from __future__ import annotations

from tests import k8sobjects as k8s

LOOP_LINE = (
    '[FATAL] plugin/loop: Loop (127.0.0.1:44359 -> :53) detected for zone ".", see https://coredns.io/plugins/loop#troubleshooting. '
    'Query: "HINFO 4547991504243258144.3688648895315093531."'
)


def kube_dns_service(ip: str = "10.96.0.10") -> dict:
    svc = k8s.service(
        "kube-system",
        "kube-dns",
        ip,
        [k8s.port(53, 53, "dns", "UDP"), k8s.port(53, 53, "dns-tcp", "TCP")],
        {"k8s-app": "kube-dns"},
    )
    svc["metadata"]["labels"] = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    return svc


def kube_dns_slice(endpoints: list[tuple[str, bool, str]]) -> dict:
    """endpoints: [(ip, ready, pod)]."""
    return k8s.endpointslice(
        "kube-system",
        "kube-dns",
        [(ip, ready, "lab-node", pod) for ip, ready, pod in endpoints],
        [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")],
        name="kube-dns-x1",
    )


def coredns_pod(
    name: str, ip: str, ready: bool = True, restarts: int = 0, waiting: str | None = None, last: str | None = None
) -> dict:
    pod = k8s.pod(
        "kube-system",
        name,
        ip,
        {"k8s-app": "kube-dns"},
        node="lab-node",
        ports=[{"name": "dns", "containerPort": 53, "protocol": "UDP"}],
        ready=ready,
    )
    pod["spec"]["containers"][0]["name"] = "coredns"
    state = (
        {"waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}}
        if waiting
        else {"running": {"startedAt": "2026-12-03T08:00:00Z"}}
    )
    cs = {"name": "coredns", "ready": ready, "restartCount": restarts, "state": state}
    if last:
        cs["lastState"] = {
            "terminated": {
                "reason": last,
                "exitCode": 1 if last == "Error" else 137,
                "finishedAt": "2026-12-03T08:59:00Z",
            }
        }
    pod["status"]["containerStatuses"] = [cs]
    return pod
