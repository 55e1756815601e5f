"""A pod's DNS policy against how it runs: a hostNetwork pod with dnsPolicy ClusterFirst gets the node's resolv.conf
(KP142)."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from kpdiag.checkapi import check
from kpdiag.fixcmd import note
from kpdiag.state.typed_api import Pods
from kpdiag.state.typed_node import Manifest

# a cluster DNS name in a container's command, args or environment: NAME.NAMESPACE.svc[.DOMAIN]
_CLUSTER_NAME = re.compile(
    r"\b[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc(\.[a-z0-9.-]*[a-z0-9])?\b"
)


def _named(pod: dict) -> list[str]:
    """The cluster DNS names its containers' command, args and environment values hold."""
    found: list[str] = []
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if not isinstance(c, dict):
            continue
        texts = [*(c.get("command") or []), *(c.get("args") or [])]
        texts += [e.get("value") for e in c.get("env") or [] if isinstance(e, dict)]
        for text in texts:
            if isinstance(text, str):
                found += [m.group(0) for m in _CLUSTER_NAME.finditer(text) if m.group(0) not in found]
    return found


def _client(manifest: Manifest | None) -> tuple[str, str] | None:
    """The pod kpdiag asked from (kpdiag.json 'client'), or None."""
    c = manifest.doc.get("client") if manifest is not None else None
    if isinstance(c, dict) and c.get("namespace") and c.get("pod"):
        return str(c["namespace"]), str(c["pod"])
    return None


@check(
    "KP142",
    "hostnet-pod-cluster-first",
    "A hostNetwork pod with dnsPolicy ClusterFirst resolves with the node's resolv.conf",
    "warning",
    explains=("KP133", "KP135", "KP138", "KP139"),
    symptom="A hostNetwork pod (an agent, an ingress controller, a debug pod) cannot resolve Service names "
    "('could not resolve host: NAME.NAMESPACE.svc'), while ordinary pods on the same node can.",
    why="""
        kubelet writes a pod's resolv.conf from its dnsPolicy. ClusterFirst (the default) gives the cluster DNS and
        the cluster's search list — except in a hostNetwork pod, which kubelet gives the node's own resolv.conf (its
        nameservers, its search domains), as dnsPolicy Default does: Service names are asked of the node's resolver,
        which knows nothing of the cluster domain. A hostNetwork pod that must resolve Service names needs dnsPolicy
        ClusterFirstWithHostNet.
    """,
    fix="Set dnsPolicy: ClusterFirstWithHostNet in the pod template of a hostNetwork workload that resolves cluster names.",
)
def hostnet_cluster_first(new, pods: Pods, manifest: Optional[Manifest] = None):
    client = _client(manifest)
    for pod in pods.items:
        if not isinstance(pod, dict):
            continue
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("hostNetwork") is not True or spec.get("dnsPolicy", "ClusterFirst") not in ("ClusterFirst", None):
            continue
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        names = _named(pod)
        asking = client == (ns, name)
        if not names and not asking:
            continue  # it names no cluster DNS name: the node's resolver may be all it needs (kube-proxy, CNI agents)
        owner = next((o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)), {})
        why = (
            "it is the pod kpdiag asked from"
            if asking and not names
            else f"it names {', '.join(names[:3])}{' …' if len(names) > 3 else ''}"
        )
        yield new(
            f"{ns}/{name} runs with hostNetwork: true and dnsPolicy {spec.get('dnsPolicy') or 'ClusterFirst (the default)'}: "
            f"kubelet gives it the node's resolv.conf, so cluster names do not resolve there ({why})",
            fix=(
                _policy_fix(ns, name, owner),
                f"kubectl -n {shlex.quote(ns)} exec {shlex.quote(name)} -- cat /etc/resolv.conf   # today: the node's nameservers and search domains",
            ),
            evidence=[
                pods.evidence(
                    f"{ns}/{name}: hostNetwork: true, dnsPolicy: {spec.get('dnsPolicy') or '(unset: ClusterFirst)'}"
                ),
                *(pods.evidence(f"{ns}/{name}: names {n}") for n in names[:2]),
            ],
            subject=f"{ns}/{name}",
            data={"pod": f"{ns}/{name}", "dns_policy": spec.get("dnsPolicy"), "cluster_names": names, "client": asking},
        )


def _policy_fix(ns: str, name: str, owner: dict):
    """The step that sets ClusterFirstWithHostNet where it lasts: the pod's DaemonSet or StatefulSet (a patch), its
    ReplicaSet's Deployment, or the pod's own spec (recreated)."""
    kind, owner_name = str(owner.get("kind") or ""), str(owner.get("name") or "")
    if kind in ("DaemonSet", "StatefulSet") and owner_name:
        patch = '{"spec":{"template":{"spec":{"dnsPolicy":"ClusterFirstWithHostNet"}}}}'
        return f"kubectl -n {shlex.quote(ns)} patch {kind.lower()} {shlex.quote(owner_name)} --type merge -p '{patch}'"
    if kind == "ReplicaSet" and owner_name:
        return note(
            f"set dnsPolicy: ClusterFirstWithHostNet in the pod template of the Deployment that owns ReplicaSet {ns}/{owner_name}"
        )
    return note(
        f"set dnsPolicy: ClusterFirstWithHostNet in the spec of {ns}/{name} (a pod's spec cannot be changed: recreate it)"
    )
