"""kube-proxy's userspace mode (removed in Kubernetes v1.26): KUBE-PORTALS-* chains redirect to kube-proxy itself.
kpdiag recognises it (KP702 says to leave it); it has no table or tracer of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpdiag.dataplane.base import Dataplane, dataplane

if TYPE_CHECKING:
    from kpdiag.state.node import NodeState


@dataplane
class Userspace(Dataplane):
    name = "userspace"
    label = "kube-proxy (userspace mode)"
    order = 20
    precedence = 1
    services_live = "its portal rules are"
    removed = "v1.26"

    def signs(self, state: NodeState) -> str | None:
        rs = state.iptables()
        if rs is not None and any(n in ("KUBE-PORTALS-CONTAINER", "KUBE-PORTALS-HOST") for n in rs.chain_names("nat")):
            return "iptables chains KUBE-PORTALS-CONTAINER/KUBE-PORTALS-HOST"
        return None
