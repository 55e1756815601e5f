"""What the API says of a node and of kpdiag's pod on it: ready or not, picked by a label selector, and the pod
waiting, done or failed (and why, in the words of FAILURE_KINDS: kpdiag/fleet/aggregate.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import pods as P
from .aggregate import NodeResult

IMAGE_FAILURES = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONTAINER_FAILURES = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


@dataclass
class ClusterTargets:
    nodes: list[str]
    skipped: list[NodeResult] = field(default_factory=list)  # NotReady or unknown nodes, with the reason


def labels_match(selector: str, labels: dict) -> bool:
    """Equality/existence label selectors (``a=b,c!=d,e,!f``), re-checked locally."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def node_ready(node: dict) -> tuple[bool, str]:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return True, ""
            return (
                False,
                f"node is NotReady (Ready={c.get('status')}: {c.get('reason') or ''} {c.get('message') or ''})".strip(),
            )
    return True, ""  # no conditions reported: try anyway


def classify(pod: dict | None) -> tuple[str, str | None, str | None]:
    """("wait"|"done"|"fail", kind, reason) for a pod as the API shows it."""
    if pod is None:
        return "wait", None, None
    status = pod.get("status") or {}
    phase = status.get("phase")
    cstats = status.get("containerStatuses") or []
    state = (cstats[0].get("state") or {}) if cstats else {}
    if phase in ("Succeeded", "Failed"):
        term = state.get("terminated")
        if term is not None:
            if term.get("reason") == "OOMKilled":
                return "fail", "pod failed", f"OOMKilled: kpdiag exceeded the pod's memory limit ({P.MEMORY_LIMIT})"
            return "done", None, None
        reason, message = status.get("reason") or "", status.get("message") or ""
        if reason == "DeadlineExceeded":
            return "fail", "timeout", f"the kubelet stopped the pod at its deadline ({message})".strip()
        return "fail", "not admitted", f"the node did not run the pod: {reason or phase}: {message}".strip(" :")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return (
                "fail",
                "unschedulable",
                f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or ''}".strip(" :"),
            )
    waiting = state.get("waiting") or {}
    why = waiting.get("reason")
    if why in IMAGE_FAILURES:
        image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image")
        return "fail", "image pull", f"{why}: {waiting.get('message') or image}"
    if why in CONTAINER_FAILURES:
        return "fail", "pod failed", f"{why}: {waiting.get('message') or ''}".strip(" :")
    return "wait", None, None
