"""The pod `kpdiag cluster` runs on each node: what `kubectl debug node/NAME` would start, made read-only and
short-lived, and labelled so that it can always be found and removed."""

from __future__ import annotations

from typing import Any

import hashlib
import re
import secrets

from .. import DEFAULT_IMAGE, __version__  # the image: kpdiag/__init__.py

# What `kpdiag node` needs in the node pod — no more (docs/privileges.md explains each, and what is lost without it;
# tests/lab/test_image.py runs the image with exactly these and compares with a run outside any container):
#   NET_ADMIN   dump netfilter (iptables-save over nf_tables, nft -j list ruleset), ipset, IPVS and conntrack netlink
#   NET_RAW     iptables-legacy-save reads the legacy tables through a raw socket
#   SYS_PTRACE  which process is the real kube-proxy: its /proc/PID/exe and network namespace, and its --config file
#               through /proc/PID/root. kube-proxy runs with more capabilities than this pod, and the kernel asks for
#               SYS_PTRACE to look into such a process. No other source gives the process's identity; the
#               configuration alone is also in the kube-proxy ConfigMap (kpdiag svc reads it through the API).
# Not SYS_CHROOT: the host's root is not mounted (it holds /etc/kubernetes/pki and the kubelet's credentials), so the
# image's own tools run, not the host's through chroot.
NODE_CAPABILITIES = ("NET_ADMIN", "NET_RAW", "SYS_PTRACE")
HOST_MOUNT = "/host"  # the host paths below appear under it, as --host-root expects
CPU_LIMIT = "1"  # a 10,000-Service node's rules parse in about a core-minute; never more than one core of the node
MEMORY_LIMIT = "1Gi"
DEFAULT_NAMESPACE = "kpdiag"
# The node pods' service account (deploy/rbac-cluster.yaml): read-only list of Services and EndpointSlices, get of
# Nodes — so that `kpdiag node` in the pod compares every Service with the node's rules. Nothing else: no Secrets,
# no pods, no writes. Without it (`kpdiag cluster --no-node-api`, or not applied) the pods run with no token.
NODE_SERVICE_ACCOUNT = "kpdiag-node"
CONTAINER = "kpdiag"

LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_RUN = "kpdiag.io/run"
ANNOTATION_NODE = "kpdiag.io/node"
OWNER_PREFIX = "kpdiag-run-"  # the run's ConfigMap, owner of its pods (kpdiag/fleet/runner.py)


def owner_name(run_id: str) -> str:
    return f"{OWNER_PREFIX}{run_id}"


def host_mounts() -> tuple[list[dict], list[dict]]:
    """(volumeMounts, volumes): each host path the node collector reads and the pod may see
    (kpdiag.collect.node.HOST_PATHS), read-only, at /host/PATH; a hostPath of type Directory, so a missing one is an
    error the pod shows instead of a directory the runtime would create on the host."""
    from ..collect.node import HOST_PATHS

    mounts, volumes = [], []
    for i, hp in enumerate(p for p in HOST_PATHS if p.pod):
        name = f"host-{i}-" + re.sub(r"[^a-z0-9]+", "-", hp.path.lower()).strip("-")
        mounts.append({"name": name[:63].rstrip("-"), "mountPath": f"{HOST_MOUNT}/{hp.path}", "readOnly": True})
        volumes.append({"name": name[:63].rstrip("-"), "hostPath": {"path": f"/{hp.path}", "type": "Directory"}})
    return mounts, volumes


def new_run_id() -> str:
    return secrets.token_hex(4)


def pod_name(run_id: str, node: str) -> str:
    """``kpdiag-<run>-<node>``, a valid DNS subdomain; long node names are shortened with a hash."""
    base = re.sub(r"[^a-z0-9.-]", "-", node.lower()).strip(".-") or "node"
    name = f"kpdiag-{run_id}-{base}"
    if len(name) > 63:  # keep it a DNS label too (shown in kubectl, used as hostname)
        name = f"kpdiag-{run_id}-{base[:30].rstrip('.-')}-{hashlib.sha1(node.encode()).hexdigest()[:8]}"
    return name


def pull_policy(image: str) -> str:
    """``IfNotPresent`` for an image pinned by digest; ``Never`` otherwise: a tag is only used as loaded on the node."""
    return "IfNotPresent" if "@sha256:" in image else "Never"


def node_command(service: str | None = None) -> list[str]:
    cmd = ["kpdiag", "node", "-o", "json", "--quiet", "--fail-on", "never", "--host-root", HOST_MOUNT]
    if service:
        cmd += ["--service", service]
    return cmd


def node_pod(
    node: str,
    run_id: str,
    *,
    image: str = DEFAULT_IMAGE,
    namespace: str = DEFAULT_NAMESPACE,
    timeout: int = 600,
    service: str | None = None,
    service_account: str | None = NODE_SERVICE_ACCOUNT,
    owner: dict | None = None,
) -> dict:
    """The pod manifest (a plain dict, as the API takes it) for one node; with ``service_account`` its token is
    mounted (read-only API access for the rules-versus-API checks), else the pod has no token at all; with ``owner``
    (the run's ConfigMap: apiVersion, kind, name, uid) the pod is deleted by the garbage collector with it."""
    mounts, volumes = host_mounts()
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(run_id, node),
            "namespace": namespace,
            "labels": {LABEL_MANAGED: "kpdiag", LABEL_NAME: "kpdiag", LABEL_RUN: run_id},
            "annotations": {ANNOTATION_NODE: node, "kpdiag.io/version": __version__},
        },
        "spec": {
            "nodeName": node,  # pinned: no scheduler, no affinity to get wrong
            "hostNetwork": True,  # the node's interfaces, routes, netfilter and conntrack
            "hostPID": True,  # kube-proxy's process and log files as the node sees them
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],  # every taint: control-plane, NoExecute, not-ready …
            "automountServiceAccountToken": False,  # set below when the node pods read the API
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            # the kubelet stops it at the client's own per-node deadline, even if the client was killed (SIGKILL:
            # nothing else can run then); every other end of the run deletes the pod, or its owner, at once
            "activeDeadlineSeconds": max(1, int(timeout)),
            "containers": [
                {
                    "name": CONTAINER,
                    "image": image,
                    "imagePullPolicy": pull_policy(image),
                    "command": node_command(service),
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "securityContext": {
                        # not privileged: the capabilities above and nothing else; no privilege escalation; uid 0
                        # because the added capabilities are given to root only (no ambient capabilities in pods);
                        # the container runtime's default seccomp filter (no mount, unshare, kexec, bpf …)
                        "privileged": False,
                        "seccompProfile": {"type": "RuntimeDefault"},
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": list(NODE_CAPABILITIES)},
                        "runAsUser": 0,
                        "runAsNonRoot": False,
                        "readOnlyRootFilesystem": True,
                    },
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"cpu": CPU_LIMIT, "memory": MEMORY_LIMIT},
                    },
                    "volumeMounts": mounts + [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": volumes + [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
        },
    }
    if owner:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["name"], "uid": owner["uid"]}
        ]
    if service_account:
        pod["spec"]["serviceAccountName"] = service_account
        pod["spec"]["automountServiceAccountToken"] = True
    return pod
