"""What implements Services on this node, and kube-proxy missing where nothing else does."""

from __future__ import annotations

from kpdiag.rootcause import STALE_RULES as STALE
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.bundle import sources

HTTP_SOURCES = (sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ)


def _blind(ctx) -> bool:
    """Nothing of the node's network state is readable: who implements Services cannot be told."""
    return ctx.ip_addr is None and ctx.iptables() is None and ctx.nft_text is None


@check(
    "KP708",
    "service-proxy-replacement",
    "Services are implemented by a kube-proxy replacement here",
    "info",
    absent=("kube-proxy",),
    uses=("addresses", "implementer", "iptables", "nft"),
    symptom="kube-proxy is not running on this node, or its DaemonSet does not exist, yet Services work (or not) — "
    "kube-proxy advice does not apply.",
    why="""
        Some network plugins implement Services themselves and replace kube-proxy: Cilium's kube-proxy replacement
        (eBPF programs and cilium_lb4_* maps instead of iptables rules), kube-router's service proxy (IPVS over its
        kube-dummy-if interface) and Calico's eBPF dataplane (its cali_v4_nat_* maps and bpfnat devices). There,
        Service traffic never meets KUBE-* rules: kube-proxy's checks are skipped, and the place to look is the
        plugin's own tooling.
    """,
    fix="Use the plugin's own view of Services: cilium-dbg service list / cilium-dbg bpf lb list; kube-router: ipvsadm -Ln; "
    "Calico: calico-node -bpf nat dump.",
)
def replacement(ctx, new):
    if _blind(ctx):
        raise Skip("no interfaces, iptables or nftables rules were readable: what implements Services cannot be told")
    impl = ctx.service_implementer
    if impl is None or impl.kube_proxy_in_charge:
        return
    tools = {
        "cilium": (
            "kubectl -n kube-system exec ds/cilium -- cilium-dbg service list   # the Services Cilium load-balances",
            "kubectl -n kube-system exec ds/cilium -- cilium-dbg status --verbose | grep -i -A3 KubeProxyReplacement",
        ),
        "kube-router": (
            "ipvsadm -Ln   # kube-router's virtual servers (on kube-dummy-if)",
            "kubectl -n kube-system logs ds/kube-router | grep -i service",
        ),
        "calico-ebpf": (
            "kubectl -n calico-system exec ds/calico-node -- calico-node -bpf nat dump   # Calico's Service NAT maps",
            "kubectl get felixconfiguration default -o yaml | grep -i bpf",
        ),
    }
    yield new(
        f"Services on this node are implemented by {impl.label}, not kube-proxy: kube-proxy's checks are skipped",
        fix=tools.get(impl.name, ()),
        evidence=[Evidence(src, text) for src, text in impl.evidence[:4]],
        subject="node",
    )


@check(
    "KP707",
    "kube-proxy-absent",
    "kube-proxy is not running, and nothing replaces it",
    "error",
    explains=STALE + ("KP113", "KP504"),
    absent=("kube-proxy",),
    uses=(
        "addresses",
        "implementer",
        "iptables",
        "kube-proxy-healthz",
        "kube-proxy-metrics",
        "kube-proxy-mode",
        "manifest",
        "nft",
        "processes",
        "proxy-mode",
    ),
    symptom="New Services and endpoint changes never reach this node; if its rules were never written, no ClusterIP works "
    "from here at all.",
    why="""
        Unless a network plugin replaces it, kube-proxy on every node turns Services into rules. Here no kube-proxy
        process runs, its metrics (:10249) and health (:10256) endpoints do not answer, and no replacement is
        recognised. Whatever rules are left stay as they were when it stopped: new Services are missing, removed
        endpoints still get traffic. Typical causes: the DaemonSet was deleted or does not tolerate this node's
        taints, the static pod manifest was removed, or the pod crash-loops (see its log).
    """,
    fix="kubectl -n kube-system get ds kube-proxy; kubectl -n kube-system get pods -o wide | grep kube-proxy — make it run "
    "on this node (tolerations, nodeSelector, crash log) or install the replacement your CNI expects.",
)
def absent(ctx, new):
    if _blind(ctx):
        raise Skip("no interfaces, iptables or nftables rules were readable: what implements Services cannot be told")
    impl = ctx.service_implementer
    if impl is None or not impl.kube_proxy_in_charge or impl.name in ("k3s", "k0s"):
        return
    if any(ctx.has(rel) for rel in HTTP_SOURCES):
        return  # kube-proxy answered
    errs = {
        str(e.get("source")): str(e.get("error")) for e in (ctx.manifest.get("errors") or []) if isinstance(e, dict)
    }
    failed = [rel for rel in HTTP_SOURCES if rel in errs]
    if len(failed) < len(HTTP_SOURCES):
        raise Skip(
            "the bundle does not say whether kube-proxy's :10249/:10256 answered (not collected by kpdiag node/collect)"
        )
    procs = ctx.source(sources.PROCESSES)
    if procs is None:
        raise Skip(f"the node's processes were not listed ({sources.PROCESSES}): a kube-proxy cannot be ruled out")
    if "1" not in procs.values() or any(p in procs for p in ("kube-proxy", "k3s", "k3s-server", "k3s-agent", "k0s")):
        return  # the host's processes are not visible (no hostPID), or kube-proxy / an embedding runs
    ports = len(ctx.programmed() or {}) if ctx.iptables() is not None else 0
    rules = ctx.inferred_modes()
    if rules:
        what = (
            f"its {next(iter(rules))}-mode rules ({ports} service ports) are still in place and nothing updates them"
            if ports
            else f"what it left ({'; '.join(rules.values())}) is not updated any more"
        )
    else:
        what = "no Service rules exist: ClusterIPs and NodePorts do not work on this node"
    yield new(
        f"kube-proxy is not running on this node (no process; :10249 and :10256 do not answer) and no replacement is recognised: {what}",
        fix=(
            "kubectl -n kube-system get ds kube-proxy -o wide   # DESIRED vs this node",
            "kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide --field-selector spec.nodeName=<this node>",
            "kubectl describe node <this node> | grep -i taint   # a taint the DaemonSet does not tolerate?",
            "ls /etc/kubernetes/manifests/   # a static-pod kube-proxy whose manifest was removed?",
        ),
        evidence=[Evidence(ctx.display(rel), errs[rel][:200]) for rel in failed[:2]]
        + [
            Evidence(
                ctx.display(sources.PROCESSES),
                f"no kube-proxy, k3s or k0s among {len(procs)} processes looked for (pid 1: {next(c for c, p in procs.items() if p == '1')})",
            )
        ],
        subject="node",
    )
