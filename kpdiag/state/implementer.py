"""Who implements Services on this node: kube-proxy (standalone, or embedded in k3s/k0s), or a replacement (Cilium's
kube-proxy replacement, kube-router's service proxy, Calico's eBPF dataplane) — told from what the node shows:
interfaces, iptables chains, BPF maps, processes, kube-proxy's own endpoints and rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from kpdiag.bundle import sources

PROCESSES = sources.PROCESSES
BPF_MAPS = sources.BPF_MAPS

# checks that give kube-proxy advice: skipped, with the reason, where a replacement implements Services
KUBE_PROXY_CHECKS = frozenset(
    {
        "KP202",
        "KP203",
        "KP205",
        "KP208",
        "KP301",
        "KP302",
        "KP303",
        "KP304",
        "KP305",
        "KP306",
        "KP307",
        "KP308",
        "KP309",
        "KP310",
        "KP401",
        "KP402",
        "KP403",
        "KP404",
        "KP504",
        "KP505",
        "KP601",
        "KP701",
        "KP702",
        "KP703",
        "KP704",
        "KP705",
        "KP706",
    }
)

REPLACEMENTS = {
    "cilium": "Cilium's kube-proxy replacement",
    "kube-router": "kube-router's service proxy",
    "calico-ebpf": "Calico's eBPF dataplane",
}


@dataclass
class Implementer:
    name: str  # kube-proxy | k3s | k0s | cilium | kube-router | calico-ebpf | none | unknown
    label: str  # for people
    evidence: list = field(default_factory=list)  # (source, text)
    kube_proxy_in_charge: bool = True
    present: dict = field(default_factory=dict)  # replacement → evidence, even when kube-proxy is in charge
    absent: list = field(default_factory=list)  # (source, text): kube-proxy looked for and not found

    @property
    def skip_reason(self) -> str | None:
        if self.kube_proxy_in_charge:
            return None
        return (
            f"kube-proxy is not in charge of Services on this node ({self.label} implements them): no kube-proxy advice"
        )


def processes(bundle) -> dict[str, str]:
    """node/processes.txt: ``pid comm`` per line (only the processes kpdiag looks for, and pid 1) → {comm: pid}."""
    from kpdiag.parse.node import parse_processes

    return parse_processes(bundle.read_text(PROCESSES) or "")


def _errors(bundle) -> dict[str, str]:
    errs = bundle.manifest.get("errors") if isinstance(bundle.manifest, dict) else None
    return {str(e.get("source")): str(e.get("error")) for e in errs or [] if isinstance(e, dict)}


def detect(state) -> Implementer:
    b = state.bundle
    links = {str(link.get("ifname")): link for link in state.ip_addr or [] if isinstance(link, dict)}
    addr_src = b.display(sources.IP_ADDR)
    rs = state.iptables()
    chains = set()
    if rs is not None:
        for table in rs.tables.values():
            chains.update(table.chains)
    ipt_src = rs.source if rs is not None else b.display(sources.IPTABLES_SAVE)
    maps = [m.strip() for m in (b.read_text(BPF_MAPS) or "").splitlines() if m.strip()]
    procs = processes(b)
    present: dict[str, list] = {}

    def seen(who, src, text):
        present.setdefault(who, []).append((src, text))

    cil_links = sorted(n for n in links if n.startswith("cilium_"))
    if cil_links:
        seen("cilium", addr_src, f"interfaces {', '.join(cil_links[:4])}")
    cil_chains = sorted(c for c in chains if c.startswith("CILIUM_"))
    if cil_chains:
        seen("cilium", ipt_src, f"iptables chains {', '.join(cil_chains[:4])}")
    cil_lb = [m for m in maps if m.startswith(("cilium_lb4_services", "cilium_lb6_services"))]
    if cil_lb:
        seen("cilium", b.display(BPF_MAPS), f"BPF maps {', '.join(cil_lb[:3])}")
    if "cilium-agent" in procs:
        seen("cilium", b.display(PROCESSES), f"process cilium-agent (pid {procs['cilium-agent']})")
    kr = sorted(c for c in chains if c.startswith("KUBE-ROUTER-"))
    if kr:
        seen("kube-router", ipt_src, f"iptables chains {', '.join(kr[:3])}")
    for name in ("kube-bridge", "kube-dummy-if"):
        if name in links:
            seen("kube-router", addr_src, f"interface {name}")
    if "kube-router" in procs:
        seen("kube-router", b.display(PROCESSES), f"process kube-router (pid {procs['kube-router']})")
    cali_nat = [m for m in maps if m.startswith(("cali_v4_nat_fe", "cali_v6_nat_fe"))]
    bpfnat = [n for n in ("bpfnatin", "bpfnatout", "bpfin.cali", "bpfout.cali") if n in links]
    if cali_nat:
        seen("calico-ebpf", b.display(BPF_MAPS), f"BPF maps {', '.join(cali_nat[:3])}")
    if bpfnat:
        seen("calico-ebpf", addr_src, f"interfaces {', '.join(bpfnat)} (Calico's eBPF NAT devices)")
    # the service proxy parts, not just the CNI: Cilium/Calico also run alongside kube-proxy
    proxying = {
        "cilium": bool(cil_lb) or "cilium_host" in links,
        "kube-router": "kube-dummy-if" in links,
        "calico-ebpf": bool(cali_nat or bpfnat),
    }

    kp_rules = state.inferred_modes()
    kp_http = [rel for rel in (sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ) if b.exists(rel)]
    errs = _errors(b)
    kp_proc = "kube-proxy" in procs
    embedded = next((n for n in ("k3s-server", "k3s-agent", "k3s", "k0s") if n in procs), None)
    evidence = [(ipt_src if "iptables" in why else b.name, why) for why in kp_rules.values()]
    evidence += [(b.display(rel), "answered") for rel in kp_http]
    if kp_proc:
        evidence.append((b.display(PROCESSES), f"process kube-proxy (pid {procs['kube-proxy']})"))

    replacement = next((r for r in ("cilium", "kube-router", "calico-ebpf") if r in present and proxying[r]), None)
    if replacement and not kp_rules and not kp_http and not kp_proc:
        return Implementer(replacement, REPLACEMENTS[replacement], present[replacement], False, present)
    if kp_rules or kp_http or kp_proc:
        if embedded and not kp_proc:
            label = f"kube-proxy embedded in {embedded.split('-')[0]}"
            return Implementer(
                embedded.split("-")[0],
                label,
                evidence + [(b.display(PROCESSES), f"process {embedded} (pid {procs[embedded]})")],
                True,
                present,
            )
        return Implementer("kube-proxy", "kube-proxy", evidence, True, present)
    absent = [(src, err) for src, err in errs.items() if src.startswith("node/kube-proxy/")]
    if replacement:
        return Implementer(replacement, REPLACEMENTS[replacement], present[replacement], False, present, absent)
    return Implementer("none", "nothing that kpdiag recognises", [], True, present, absent)
