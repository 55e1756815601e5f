"""Cilium's kube-proxy replacement: Services load-balanced by eBPF (the cilium_lb4_services*/cilium_lb6_services* maps)
and cilium_host, instead of kube-proxy's rules. Cilium also runs as a CNI beside kube-proxy: only its service maps or
cilium_host say that it implements Services."""

from __future__ import annotations

from kpdiag.dataplane.base import Dataplane, Host, dataplane


@dataplane
class Cilium(Dataplane):
    name = "cilium"
    label = "Cilium's kube-proxy replacement"
    kube_proxy = False
    order = 110
    tools = (
        "kubectl -n kube-system exec ds/cilium -- cilium-dbg service list   # the Services Cilium load-balances",
        "kubectl -n kube-system exec ds/cilium -- cilium-dbg status --verbose | grep -i -A3 KubeProxyReplacement",
    )

    def detect(self, host: Host) -> tuple[list[tuple[str, str]], bool]:
        seen = []
        links = sorted(n for n in host.links if n.startswith("cilium_"))
        if links:
            seen.append((host.addr_src, f"interfaces {', '.join(links[:4])}"))
        chains = sorted(c for c in host.chains if c.startswith("CILIUM_"))
        if chains:
            seen.append((host.ipt_src, f"iptables chains {', '.join(chains[:4])}"))
        lb = [m for m in host.maps if m.startswith(("cilium_lb4_services", "cilium_lb6_services"))]
        if lb:
            seen.append((host.maps_src, f"BPF maps {', '.join(lb[:3])}"))
        if "cilium-agent" in host.procs:
            seen.append((host.procs_src, f"process cilium-agent (pid {host.procs['cilium-agent']})"))
        return seen, bool(lb) or "cilium_host" in host.links
