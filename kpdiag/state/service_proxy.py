"""Who implements Services on this node: kube-proxy (standalone, or embedded in k3s/k0s), or a replacement (Cilium's
kube-proxy replacement, kube-router's service proxy, Calico's eBPF dataplane) — told from what the node shows:
interfaces, iptables chains, BPF maps, processes, kube-proxy's own endpoints and rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import dataclass, field
from kpdiag import dataplane as dataplanes
from kpdiag.bundle import sources
from kpdiag.dataplane import Host

if TYPE_CHECKING:
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

PROCESSES = sources.PROCESSES
BPF_MAPS = sources.BPF_MAPS


@dataclass
class KubeProxyPod:
    """This node's kube-proxy pod as the API last saw it (cluster/pods.json): is it crash-looping, and why."""

    namespace: str
    name: str
    phase: str | None = None
    waiting: str | None = None  # state.waiting.reason (CrashLoopBackOff, ImagePullBackOff …)
    running: bool = False
    restarts: int = 0
    last_reason: str | None = None  # lastState.terminated.reason (OOMKilled, Error …)
    last_exit_code: int | None = None
    last_finished: str | None = None
    memory_limit: str | None = None

    @property
    def crash_looping(self) -> bool:
        return self.waiting == "CrashLoopBackOff" or (
            self.restarts >= CRASH_RESTARTS and self.last_reason is not None and not self.running
        )

    @property
    def oom_killed(self) -> bool:
        return self.last_reason == "OOMKilled"

    def describe(self) -> str:
        bits = [self.waiting or ("running" if self.running else (self.phase or "not running"))]
        bits.append(f"{self.restarts} restart{'s' if self.restarts != 1 else ''}")
        if self.last_reason:
            last = f"last exit: {self.last_reason}"
            if self.last_exit_code is not None:
                last += f" (exit code {self.last_exit_code})"
            if self.oom_killed and self.memory_limit:
                last += f" at its memory limit {self.memory_limit}"
            bits.append(last)
        return f"pod {self.namespace}/{self.name}: {', '.join(bits)}"

    def data(self) -> dict[str, Any]:
        return {
            "pod": f"{self.namespace}/{self.name}",
            "phase": self.phase,
            "waiting": self.waiting,
            "restarts": self.restarts,
            "last_termination": self.last_reason,
            "last_exit_code": self.last_exit_code,
            "memory_limit": self.memory_limit,
        }


CRASH_RESTARTS = 3  # restarts with a last termination and no running container: a crash loop between back-offs


@dataclass
class Implementer:
    name: str  # kube-proxy | k3s | k0s | cilium | kube-router | calico-ebpf | none | not-a-node
    label: str  # for people
    evidence: list[Any] = field(default_factory=list)  # (source, text)
    kube_proxy_in_charge: bool = True
    present: dict[str, Any] = field(default_factory=dict)  # replacement → evidence, even when kube-proxy is in charge
    absent: list[Any] = field(default_factory=list)  # (source, text): kube-proxy looked for and not found
    # what kpdiag believes about kube-proxy itself: running (process or a verified answer), embedded (k3s/k0s),
    # absent (looked for: no process, no answer), crash-looping (its pod says so), replaced (a replacement
    # implements Services), unknown (the host's processes are not visible and nothing answered)
    kube_proxy: str = "unknown"
    pod: KubeProxyPod | None = None  # its pod on this node, from the API, when the bundle has it
    leftovers: dict[str, Any] = field(
        default_factory=dict
    )  # replaced: kube-proxy's rules left behind (mode → evidence)
    not_a_node: list[Any] | None = (
        None  # what was looked for, none found: this host does not look like a Kubernetes node
    )

    @property
    def skip_reason(self) -> str | None:
        if self.not_a_node is not None:
            return not_a_node_reason(self.not_a_node)
        if self.kube_proxy_in_charge:
            return None
        return (
            f"kube-proxy is not in charge of Services on this node ({self.label} implements them): no kube-proxy advice"
        )

    def data(self) -> dict[str, Any]:
        """The case as data (KP707, KP708, KP710 carry it): who implements Services and what kube-proxy is doing."""
        out: dict[str, Any] = {"implementer": self.name, "kube_proxy": self.kube_proxy}
        if self.pod is not None:
            out["kube_proxy_pod"] = self.pod.data()
        if self.leftovers:
            out["leftover_rules"] = sorted(self.leftovers)
        return out


def not_a_node_reason(looked_for: list[Any]) -> str:
    return "this does not look like a Kubernetes node (none of: " + "; ".join(looked_for) + ")"


def processes(bundle: Bundle) -> dict[str, str]:
    """node/processes.txt: ``pid comm`` per line (only the processes kpdiag looks for, and pid 1) → {comm: pid}."""
    from kpdiag.parse.node import parse_processes

    return parse_processes(bundle.read_text(PROCESSES) or "")


def _errors(bundle: Bundle) -> dict[str, str]:
    errs = bundle.manifest.get("errors") if isinstance(bundle.manifest, dict) else None
    return {str(e.get("source")): str(e.get("error")) for e in errs or [] if isinstance(e, dict)}


def _is_kube_proxy_pod(pod: dict[str, Any]) -> bool:
    md = pod.get("metadata") or {}
    labels = md.get("labels") or {}
    if md.get("namespace") not in (None, "kube-system"):
        return False
    if labels.get("k8s-app") == "kube-proxy" or labels.get("component") == "kube-proxy":
        return True
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(md.get("name") or "").startswith("kube-proxy") and any(
        isinstance(c, dict) and c.get("name") == "kube-proxy" for c in containers
    )


def kube_proxy_pod(state: NodeState) -> KubeProxyPod | None:
    """This node's kube-proxy pod from cluster/pods.json (spec.nodeName = this node), read into what matters: its
    container's waiting reason, restarts, last termination and memory limit. None when the bundle has no such pod."""
    try:
        pods = state.cluster.pods()
        node = state.cluster.node_name()
    except Exception:  # a malformed pods.json is a recorded problem of that source
        return None
    if not pods or not node:
        return None
    for pod in pods:
        if isinstance(pod, dict) and (pod.get("spec") or {}).get("nodeName") == node and _is_kube_proxy_pod(pod):
            return _pod_view(pod)
    return None


def _pod_view(pod: dict[str, Any]) -> KubeProxyPod:
    """A kube-proxy pod object read into what matters (its container named kube-proxy, else its first)."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    main = next((c for c in containers if c.get("name") == "kube-proxy"), containers[0] if containers else {})
    cs = next(
        (c for c in status.get("containerStatuses") or [] if isinstance(c, dict) and c.get("name") == main.get("name")),
        {},
    )
    state_now, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated") or {}
    limits = (main.get("resources") or {}).get("limits") or {}
    restarts = cs.get("restartCount")
    code = last.get("exitCode")
    return KubeProxyPod(
        namespace=str(md.get("namespace") or "kube-system"),
        name=str(md.get("name") or "?"),
        phase=status.get("phase") if isinstance(status.get("phase"), str) else None,
        waiting=((state_now.get("waiting") or {}).get("reason") or None),
        running="running" in state_now,
        restarts=restarts if isinstance(restarts, int) else 0,
        last_reason=last.get("reason") if isinstance(last.get("reason"), str) else None,
        last_exit_code=code if isinstance(code, int) else None,
        last_finished=last.get("finishedAt") if isinstance(last.get("finishedAt"), str) else None,
        memory_limit=str(limits["memory"]) if limits.get("memory") is not None else None,
    )


# interfaces only a Kubernetes network plugin makes (docker0, br-*, veth* and podman's cni-podman* are not signs)
CNI_INTERFACE_PREFIXES = (
    "cni0",
    "cbr0",
    "flannel.",
    "flannel-wg",
    "cali",
    "vxlan.calico",
    "vxlan-v6.calico",
    "cilium_",
    "lxc",
    "weave",
    "vethwe",
    "kube-bridge",
    "kube-dummy-if",
    "kube-ipvs0",
    "antrea-",
    "ovn-k8s-",
    "nodelocaldns",
    "eni",
    "gke",
    "azv",
)


def kubernetes_signs(
    state: NodeState, links: dict[str, Any], chains: set[str], procs: dict[str, Any], present: dict[str, Any]
) -> tuple[list[Any], list[str]] | None:
    """(signs found, what was looked for) — None when the bundle cannot tell (the host's processes, interfaces or
    rules were not readable): a host is called "not a Kubernetes node" only when all of them were read."""
    looked = [
        "a kubelet, kube-proxy, k3s, k0s or kubelite process",
        "kube-proxy answering on :10249/:10256",
        f"a network plugin's interfaces ({', '.join(p.rstrip('._-') + '*' for p in CNI_INTERFACE_PREFIXES[:6])} …)",
        "KUBE-* iptables chains or a kube-proxy nftables table",
        "a kube-proxy replacement (Cilium, kube-router, Calico eBPF)",
        "this node in the API's Node objects",
    ]
    b = state.bundle
    if isinstance(b.manifest, dict) and b.manifest.get("service"):
        return None  # a kpdiag svc bundle: the Service is diagnosed wherever kpdiag ran
    if state.preflight:
        return None  # --preflight asks whether this host can run a mode: often a node to be, not one yet
    if "1" not in procs.values() or state.ip_addr is None or (state.iptables() is None and state.nft_text is None):
        return None
    if (b.exists(sources.IPTABLES_SAVE) and state.iptables() is None) or (
        b.exists(sources.NFT_RULESET) and state.nft_text is None
    ):
        return None  # rules there but unreadable (a byte that is not UTF-8 in a comment): KUBE-* cannot be ruled out
    found = []
    for name in ("kubelet", "kube-proxy", "k3s", "k3s-server", "k3s-agent", "k0s", "kubelite"):
        if name in procs:
            found.append(f"process {name} (pid {procs[name]})")
    found += [
        f"{rel} answered" for rel in (sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ) if b.exists(rel)
    ]
    cni = sorted(n for n in links if n.startswith(CNI_INTERFACE_PREFIXES) and not n.startswith("cni-podman"))
    if cni:
        found.append(f"interfaces {', '.join(cni[:3])}")
    kube = sorted(c for c in chains if c.startswith("KUBE-"))
    if kube:
        found.append(f"iptables chains {', '.join(kube[:3])}")
    if state.nft_kube_proxy_table:
        found.append("nftables table kube-proxy")
    if present:
        found.append(", ".join(sorted(present)))
    if b.exists(sources.NODES):
        found.append(f"{sources.NODES} from the API")
    return found, looked


def _host(state: NodeState) -> Host:
    """What the node shows that replacements are recognised by: interfaces, iptables chains, BPF maps, processes."""
    b = state.bundle
    links = {str(link.get("ifname")): link for link in state.ip_addr or [] if isinstance(link, dict)}
    rs = state.iptables()
    chains: set[str] = set()
    if rs is not None:
        for table in rs.tables.values():
            chains.update(table.chains)
    ipt_src = rs.source if rs is not None else b.display(sources.IPTABLES_SAVE)
    maps = [m.strip() for m in (b.read_text(BPF_MAPS) or "").splitlines() if m.strip()]
    return Host(
        links,
        chains,
        maps,
        processes(b),
        b.display(sources.IP_ADDR),
        ipt_src,
        b.display(BPF_MAPS),
        b.display(PROCESSES),
    )


def _kube_proxy_evidence(b: Bundle, host: Host, kp_rules: dict[str, str], kp_http: list[Any]) -> list[tuple[str, str]]:
    """What shows kube-proxy at work: its rules, its HTTP answers, its process."""
    evidence = [(host.ipt_src if "iptables" in why else b.name, why) for why in kp_rules.values()]
    evidence += [(b.display(rel), "answered") for rel in kp_http]
    if "kube-proxy" in host.procs:
        evidence.append((b.display(PROCESSES), f"process kube-proxy (pid {host.procs['kube-proxy']})"))
    return evidence


def detect(state: NodeState) -> Implementer:
    b = state.bundle
    host = _host(state)
    procs = host.procs  # comm → pid
    # each replacement's signs, and whether they are its service proxy (not just the CNI: Cilium and Calico also run
    # alongside kube-proxy)
    present: dict[str, list[tuple[str, str]]] = {}
    proxying = {}
    for dp in dataplanes.replacements():
        found, proxying[dp.name] = dp.detect(host)
        for src, text in found:
            present.setdefault(dp.name, []).append((src, text))

    signs = kubernetes_signs(state, host.links, host.chains, procs, present)
    if signs is not None and not signs[0]:
        return Implementer(
            "not-a-node",
            "nothing of Kubernetes",
            [],
            False,
            present,
            kube_proxy="absent",
            not_a_node=signs[1],
        )

    kp_rules = state.inferred_modes()
    # only what kube-proxy itself said: an answer from a socket that is not kube-proxy's is not in the bundle (the
    # collector records it as unverified in the manifest)
    kp_http = [rel for rel in (sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ) if b.exists(rel)]
    procs_visible = "1" in procs.values()
    embedded = next((n for n in ("k3s-server", "k3s-agent", "k3s", "k0s", "kubelite") if n in procs), None)
    pod = kube_proxy_pod(state)
    absent = [(src, err) for src, err in _errors(b).items() if src.startswith("node/kube-proxy/")]

    replacement = next((d.name for d in dataplanes.replacements() if d.name in present and proxying[d.name]), None)
    kp_alive = bool(kp_http or "kube-proxy" in procs or embedded)
    if replacement and not kp_alive and (not kp_rules or procs_visible):
        # the replacement first: kube-proxy's rules without a kube-proxy to write them are what it left behind
        return Implementer(
            replacement,
            dataplanes.get(replacement).label,
            present[replacement],
            False,
            present,
            absent,
            kube_proxy="replaced",
            pod=pod,
            leftovers=kp_rules,
        )
    if not (kp_rules or kp_alive):
        return Implementer(
            "none",
            "nothing that kpdiag recognises",
            [],
            True,
            present,
            absent,
            kube_proxy=_status(False, procs_visible, pod),
            pod=pod,
        )
    evidence = _kube_proxy_evidence(b, host, kp_rules, kp_http)
    if embedded and "kube-proxy" not in procs:
        return Implementer(
            embedded.split("-")[0],
            f"kube-proxy embedded in {embedded.split('-')[0]}",
            evidence + [(b.display(PROCESSES), f"process {embedded} (pid {procs[embedded]})")],
            True,
            present,
            kube_proxy="embedded",
            pod=pod,
        )
    return Implementer(
        "kube-proxy",
        "kube-proxy",
        evidence,
        True,
        present,
        absent,
        kube_proxy=_status(kp_alive, procs_visible, pod),
        pod=pod,
    )


def _status(alive: bool, procs_visible: bool, pod: KubeProxyPod | None) -> str:
    if pod is not None and pod.crash_looping:
        return "crash-looping"  # also while a short-lived run happens to be up when collected
    if alive:
        return "running"
    return "absent" if procs_visible else "unknown"
