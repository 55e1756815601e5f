"""What a drop or reject means when kube-proxy's own rule did it: one line for the trace, naming the check."""

from __future__ import annotations

import re

from .model import Path

_COMMENT = re.compile(r'--comment "?(?P<name>[^"]+?) has no (?P<local>local )?endpoints"?')
_NFT = {  # kube-proxy's nftables chains: (chain, verdict) → what it means
    (
        "service-endpoints-check",
        "reject",
    ): "kube-proxy rejects it: the Service has no ready endpoint anywhere (KP101/KP102)",
    (
        "service-endpoints-check",
        "drop",
    ): "kube-proxy drops it: the Service's traffic policy is Local and none of its ready endpoints is on "
    "this node (internalTrafficPolicy for a ClusterIP: KP106; externalTrafficPolicy for an external IP: KP105)",
    (
        "nodeport-endpoints-check",
        "reject",
    ): "kube-proxy rejects it: the NodePort's Service has no ready endpoint anywhere (KP101/KP102)",
    (
        "nodeport-endpoints-check",
        "drop",
    ): "kube-proxy drops it: externalTrafficPolicy: Local and no ready endpoint on this node (KP105)",
    ("cluster-ips-check", "reject"): "kube-proxy rejects it: a ClusterIP on a port its Service does not define",
    ("cluster-ips-check", "drop"): "kube-proxy drops it: an address in the service CIDR that no Service has",
}


def verdict_note(path: Path) -> str | None:
    """Why kube-proxy dropped or rejected this path, when its last rule is one of kube-proxy's; else None."""
    if path.verdict not in ("drop", "reject"):
        return None
    last = next((s for s in reversed(path.steps) if s.rule is not None), None)
    if last is None:
        return None
    m = _COMMENT.search(last.text)
    if m:
        name = m.group("name")
        if not m.group("local"):
            return f"kube-proxy {path.verdict}s it: {name} has no ready endpoint anywhere (KP101/KP102)"
        if last.chain == "KUBE-EXTERNAL-SERVICES":
            return (
                f"kube-proxy drops it: {name} has externalTrafficPolicy: Local and no ready endpoint on this node; "
                "external traffic to this node is dropped by design (KP105)"
            )
        return (
            f"kube-proxy drops it: {name} has internalTrafficPolicy: Local and no ready endpoint on this node; "
            "ClusterIP traffic from this node and its pods is dropped by design (KP106)"
        )
    if last.table.endswith("kube-proxy"):
        return _NFT.get((last.chain, path.verdict))
    return None
