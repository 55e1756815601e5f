"""Calico's eBPF dataplane: Service NAT in BPF maps (cali_v4_nat_fe*) and its bpfnat devices, instead of kube-proxy."""

from __future__ import annotations

from kpdiag.dataplane.base import Dataplane, Host, dataplane


@dataplane
class CalicoEbpf(Dataplane):
    name = "calico-ebpf"
    label = "Calico's eBPF dataplane"
    kube_proxy = False
    order = 130
    tools = (
        "kubectl -n calico-system exec ds/calico-node -- calico-node -bpf nat dump   # Calico's Service NAT maps",
        "kubectl get felixconfiguration default -o yaml | grep -i bpf",
    )

    def detect(self, host: Host) -> tuple[list[tuple[str, str]], bool]:
        seen = []
        nat = [m for m in host.maps if m.startswith(("cali_v4_nat_fe", "cali_v6_nat_fe"))]
        devices = [n for n in ("bpfnatin", "bpfnatout", "bpfin.cali", "bpfout.cali") if n in host.links]
        if nat:
            seen.append((host.maps_src, f"BPF maps {', '.join(nat[:3])}"))
        if devices:
            seen.append((host.addr_src, f"interfaces {', '.join(devices)} (Calico's eBPF NAT devices)"))
        return seen, bool(nat or devices)
