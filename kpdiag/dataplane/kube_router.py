"""kube-router's service proxy: IPVS virtual servers on its kube-dummy-if interface, instead of kube-proxy."""

from __future__ import annotations

from kpdiag.dataplane.base import Dataplane, Host, dataplane


@dataplane
class KubeRouter(Dataplane):
    name = "kube-router"
    label = "kube-router's service proxy"
    kube_proxy = False
    order = 120
    tools = (
        "ipvsadm -Ln   # kube-router's virtual servers (on kube-dummy-if)",
        "kubectl -n kube-system logs ds/kube-router | grep -i service",
    )

    def detect(self, host: Host) -> tuple[list[tuple[str, str]], bool]:
        seen = []
        chains = sorted(c for c in host.chains if c.startswith("KUBE-ROUTER-"))
        if chains:
            seen.append((host.ipt_src, f"iptables chains {', '.join(chains[:3])}"))
        for name in ("kube-bridge", "kube-dummy-if"):
            if name in host.links:
                seen.append((host.addr_src, f"interface {name}"))
        if "kube-router" in host.procs:
            seen.append((host.procs_src, f"process kube-router (pid {host.procs['kube-router']})"))
        return seen, "kube-dummy-if" in host.links  # the service proxy's interface, not just the CNI
