"""What this node's kube-proxy programmed, in a form that is the same in every proxy mode and cheap to compare
across hundreds of nodes.

Each service port is keyed by ``ClusterIP:port/proto`` (the same in iptables, nftables and IPVS mode) and
carries kube-proxy's name for it (when the rules say) and its endpoints. A node report carries this table as
one compact text (``key<TAB>name<TAB>hash<TAB>count[<TAB>L]`` per line, sorted) and its digest: nodes with the
same digest programmed exactly the same, so the fleet aggregation only has to look inside the tables that differ.

``L`` marks internalTrafficPolicy: Local, which the rules show in iptables mode (KUBE-SVL, or a DROP "has no local
endpoints") and nftables mode (a local-… chain, or ``drop`` in no-endpoint-services): such a port's endpoints are
this node's own and differ between nodes by design. IPVS rules do not show it (``policy`` is false there).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from kpdiag.state.node import NodeState

FORMAT = "kpdiag.programmed/v1"


def _ep_hash(endpoints: Iterable[str]) -> str:
    if not endpoints:
        return "-"
    return hashlib.sha1(",".join(sorted(endpoints)).encode()).hexdigest()[:10]


Entry = tuple[str, tuple[str, ...], bool]  # (name, endpoints, local policy)


def service_table(state: NodeState) -> dict[str, Entry] | None:
    """``{"10.96.0.10:53/udp": ("kube-system/kube-dns:dns", ("10.244.1.20:53", …), False)}`` for the mode kube-proxy
    runs in, or None when this node's rules for that mode are not readable."""
    return state.dataplane.service_table(state)  # each mode reads its own rules (kpdiag/dataplane/)


def encode(table: dict[str, Entry], mode: str | None) -> dict[str, Any]:
    from kpdiag.dataplane import get

    lines = [
        f"{key}\t{name}\t{_ep_hash(eps)}\t{len(eps)}" + ("\tL" if local else "")
        for key, (name, eps, local) in sorted(table.items())
    ]
    text = "\n".join(lines)
    return {
        "format": FORMAT,
        "mode": mode,
        "count": len(lines),
        "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
        "policy": get(mode).shows_local_policy,
        "entries": text,
    }


def decode(doc: dict[str, Any], local: set[str] | None = None) -> dict[str, tuple[str, str, int]]:
    """``entries`` text → {key: (name, endpoint hash, endpoint count)}; keys marked internalTrafficPolicy: Local are
    added to ``local`` when given; malformed lines are skipped."""
    out = {}
    for line in str(doc.get("entries") or "").split("\n"):
        parts = line.split("\t")
        if len(parts) in (4, 5) and parts[3].isdigit():
            out[parts[0]] = (parts[1], parts[2], int(parts[3]))
            if local is not None and len(parts) == 5 and parts[4] == "L":
                local.add(parts[0])
    return out


def summary(state: NodeState) -> dict[str, Any] | None:
    table = service_table(state)
    if table is None:
        return None
    return encode(table, state.proxy_mode[0])
