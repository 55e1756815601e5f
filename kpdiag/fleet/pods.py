"""The pod `kpdiag cluster` runs on each node: what `kubectl debug node/NAME` would start, made read-only and
short-lived, and labelled so that it can always be found and removed."""

from __future__ import annotations

import hashlib
import re
import secrets

from .. import __version__

# The image deploy/build-image.sh builds and `kind load` / `ctr images import` put on the nodes. The default is
# never pulled (imagePullPolicy Never): no registry namespace, whoever owns it, can put its own privileged pod on
# every node. An --image pinned by digest (NAME@sha256:…, dist/kpdiag-image.ref) may be pulled.
IMAGE_REPO = "kpdiag"
DEFAULT_IMAGE = f"{IMAGE_REPO}:{__version__}"

# What `kpdiag node` needs in the node pod — no more (deploy/node-pod-privileges.md explains each; the lab test
# tests/lab/test_image.py runs the image with exactly these and compares with a run outside any container):
#   NET_ADMIN   dump netfilter (iptables-save over nf_tables, nft -j list ruleset), ipset, IPVS and conntrack netlink
#   NET_RAW     iptables-legacy-save reads the legacy tables through a raw socket
#   SYS_CHROOT  run the host's own iptables/nft/ipvsadm/conntrack in the read-only host root (chroot /host)
#   SYS_PTRACE  read kube-proxy's /proc/PID/exe and its files through /proc/PID/root: kube-proxy runs with more
#               capabilities than this pod, and the kernel asks for SYS_PTRACE to look into such a process
NODE_CAPABILITIES = ("NET_ADMIN", "NET_RAW", "SYS_CHROOT", "SYS_PTRACE")
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
    cmd = ["kpdiag", "node", "-o", "json", "--quiet", "--fail-on", "never", "--host-root", "/host"]
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
) -> dict:
    """The pod manifest (a plain dict, as the API takes it) for one node; with ``service_account`` its token is
    mounted (read-only API access for the rules-versus-API checks), else the pod has no token at all."""
    pod = {
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
            # the kubelet kills it even if the client that started it disappears
            "activeDeadlineSeconds": int(timeout) + 60,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": image,
                    "imagePullPolicy": pull_policy(image),
                    "command": node_command(service),
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "securityContext": {
                        # not privileged: the capabilities above and nothing else; no privilege escalation; uid 0
                        # because the added capabilities are given to root only (no ambient capabilities in pods)
                        "privileged": False,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": list(NODE_CAPABILITIES)},
                        "runAsUser": 0,
                        "runAsNonRoot": False,
                        "readOnlyRootFilesystem": True,
                    },
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
                    "volumeMounts": [
                        {"name": "host-root", "mountPath": "/host", "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            ],
        },
    }
    if service_account:
        pod["spec"]["serviceAccountName"] = service_account
        pod["spec"]["automountServiceAccountToken"] = True
    return pod
