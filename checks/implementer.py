"""What implements Services on this node, and kube-proxy missing where nothing else does."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_api import Pods
from kpdiag.state.typed_node import Addresses, Manifest, NodeProcesses, Partial
from kpdiag.state.typed_proxy import (
    HealthzAnswered,
    KubeProxyRules,
    MetricsAnswered,
    Nft,
    ProxyMode,
    ProxyModeAnswered,
    ServiceImplementer,
)

HTTP_SOURCES = (sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ)


BLIND = "no interfaces, iptables or nftables rules were readable: what implements Services cannot be told"


def _who(addresses, implementer, rules, nft):
    """Who implements Services here (state/service_proxy.py), or Skip when nothing of the node's network state was
    readable."""
    if addresses is None and rules is None and nft is None:
        raise Skip(BLIND)
    return implementer.implementer


@check(
    "KP708",
    "service-proxy-replacement",
    "Services are implemented by a kube-proxy replacement here",
    "info",
    absent=("kube-proxy",),
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
def replacement(
    new,
    addresses: Optional[Addresses] = None,
    implementer: Optional[ServiceImplementer] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
):
    impl = _who(addresses, implementer, rules, nft)
    if impl is None or impl.kube_proxy_in_charge:
        return
    tools = dataplanes.get(impl.name).tools  # its own view of Services
    yield new(
        f"Services on this node are implemented by {impl.label}, not kube-proxy: kube-proxy's checks are skipped"
        + (" (kube-proxy's rules left on the node are leftovers: KP710)" if impl.leftovers else ""),
        fix=tools,
        evidence=[Evidence(src, text) for src, text in impl.evidence[:4]],
        subject="node",
        data=impl.data(),
    )


@check(
    "KP707",
    "kube-proxy-absent",
    "kube-proxy is not running, and nothing replaces it",
    "error",
    explains=("stale-rules", "KP113", "KP504", "KP529"),
    absent=("kube-proxy",),
    severities=("error",),
    symptom="New Services and endpoint changes never reach this node; if its rules were never written, no ClusterIP works "
    "from here at all.",
    why="""
        Unless a network plugin replaces it, kube-proxy on every node turns Services into rules. Here no kube-proxy
        process runs, its metrics (:10249) and health (:10256) endpoints do not answer, and no replacement is
        recognised. Whatever rules are left stay as they were when it stopped: new Services are missing, removed
        endpoints still get traffic. Typical causes: the DaemonSet was deleted or does not tolerate this node's
        taints, the static pod manifest was removed, or the pod crash-loops. When the API's view of this node's
        kube-proxy pod is in the bundle (the pods the API listed), a pod in CrashLoopBackOff is named as such, with its
        restarts and how its last run ended — OOMKilled at its memory limit has another fix (a higher limit) than a
        missing DaemonSet. The finding's data says which: kube_proxy is "absent" or "crash-looping".
    """,
    fix="kubectl -n kube-system get ds kube-proxy; kubectl -n kube-system get pods -o wide | grep kube-proxy — make it run "
    "on this node (tolerations, nodeSelector, crash log) or install the replacement your CNI expects.",
)
def absent(
    new,
    addresses: Optional[Addresses] = None,
    implementer: Optional[ServiceImplementer] = None,
    rules: Optional[KubeProxyRules] = None,
    healthz: Optional[HealthzAnswered] = None,
    metrics: Optional[MetricsAnswered] = None,
    mode: Optional[ProxyModeAnswered] = None,
    manifest: Optional[Manifest] = None,
    nft: Optional[Nft] = None,
    pods: Optional[Pods] = None,
    processes: Optional[NodeProcesses] = None,
    proxy: Optional[ProxyMode] = None,
    partial: Optional[Partial] = None,
):
    impl = _who(addresses, implementer, rules, nft)
    if impl is None or not impl.kube_proxy_in_charge or impl.name in ("k3s", "k0s", "kubelite"):
        return
    procs = processes.pids if processes is not None else None
    left = _left(rules, proxy, partial, manifest)
    if impl.kube_proxy == "crash-looping":
        yield from _crash_looping(new, impl, procs, pods, processes, left)
        return
    answers = (mode, metrics, healthz)  # in the order of HTTP_SOURCES
    if any(a.present for a in answers):
        return  # kube-proxy answered (its own socket: the collector verified it)
    errs = {
        str(e.get("source")): e for e in (manifest.doc.get("errors") or []) if isinstance(e, dict) and e.get("source")
    }
    failed = [a for a in answers if a.rel in errs]
    if len(failed) < len(HTTP_SOURCES):
        raise Skip(
            "the bundle does not say whether kube-proxy's :10249/:10256 answered (not collected by kpdiag node/collect)"
        )
    if procs is None:
        raise Skip(f"the node's processes were not listed ({sources.PROCESSES}): a kube-proxy cannot be ruled out")
    if "1" not in procs.values() or any(
        p in procs for p in ("kube-proxy", "k3s", "k3s-server", "k3s-agent", "k0s", "kubelite")
    ):
        return  # the host's processes are not visible (no hostPID), or kube-proxy / an embedding runs
    what = left
    unverified = [a for a in failed if errs[a.rel].get("unverified")]
    answered = (
        "something that is not kube-proxy answers on its ports (unverified, not used)"
        if unverified
        else ":10249 and :10256 do not answer"
    )
    pod = impl.pod
    pod_text = f"; its {pod.describe()}" if pod is not None else ""
    yield new(
        f"kube-proxy is not running on this node (no process; {answered}{pod_text}) and no replacement is recognised: {what}",
        fix=(
            "kubectl -n kube-system get ds kube-proxy -o wide   # DESIRED vs this node",
            "kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide --field-selector spec.nodeName=<this node>",
            "kubectl describe node <this node> | grep -i taint   # a taint the DaemonSet does not tolerate?",
            "ls /etc/kubernetes/manifests/   # a static-pod kube-proxy whose manifest was removed?",
        ),
        evidence=[Evidence(a.source, clip(errs[a.rel].get("error"), 200)) for a in (unverified or failed)[:2]]
        + [
            Evidence(
                processes.source,
                f"no kube-proxy, k3s or k0s among {len(procs)} processes looked for (pid 1: {next(c for c, p in procs.items() if p == '1')})",
            )
        ]
        + ([Evidence(pods.source, pod.describe())] if pod is not None else []),
        subject="node",
        data=impl.data() | {"kube_proxy": "absent", "unverified_answers": [a.rel for a in unverified]},
    )


def _left(rules: KubeProxyRules | None, proxy: ProxyMode, partial: Partial, manifest: Manifest | None = None) -> str:
    """What kube-proxy's absence leaves: its rules, frozen, or none at all — or unknown, when the rules could not be
    collected (no CAP_NET_ADMIN: iptables-save is refused)."""
    ports = len(rules.programmed) if rules is not None else 0
    dumped = rules is not None and rules.ruleset is not None  # node/iptables-save.txt was read
    part = partial.partial
    # a partial bundle holds one Service's rules: its count is not the node's
    counted = f"{ports} service ports" if not part else f"{ports} service ports of {part.get('service')}"
    rules = proxy.inferred
    if rules:
        return (
            f"its {next(iter(rules))}-mode rules ({counted}) are still in place and nothing updates them"
            if ports
            else f"what it left ({'; '.join(rules.values())}) is not updated any more"
        )
    errors = manifest.doc.get("errors") if manifest is not None else None
    unread = [
        f"{e.get('source')}: {clip(e.get('error'), 120)}"
        for e in errors or []
        if isinstance(e, dict) and e.get("source") == sources.IPTABLES_SAVE
    ]
    if unread and not dumped:  # no kube-proxy rules in what was read, and iptables-save was not
        return f"whether it left Service rules is not known: they could not be read ({'; '.join(unread)})"
    return "no Service rules exist: ClusterIPs and NodePorts do not work on this node"


def _crash_looping(new, impl, procs, pods: Pods, processes: NodeProcesses | None, left: str):
    """KP707's crash-loop case: the API shows kube-proxy's pod restarting — it is there, and it keeps dying."""
    pod = impl.pod
    if pod.oom_killed:
        cause = "it runs out of memory" + (
            f" — its limit {pod.memory_limit} is too small for this cluster" if pod.memory_limit else ""
        )
        fix = (
            f"kubectl -n {pod.namespace} get pod {pod.name} -o jsonpath='{{.spec.containers[0].resources}}'   # the limit it is killed at",
            "kubectl -n kube-system set resources daemonset kube-proxy -c kube-proxy --limits=memory=<about twice its peak>"
            "   # kube-proxy's memory grows with the number of Services and endpoints",
            f"kubectl -n {pod.namespace} get pod {pod.name} -w   # RESTARTS stops growing once it fits",
        )
    else:
        cause = "its container keeps exiting" + (
            f" ({pod.last_reason}" + (f", exit code {pod.last_exit_code})" if pod.last_exit_code is not None else ")")
            if pod.last_reason
            else ""
        )
        fix = (
            f"kubectl -n {pod.namespace} logs {pod.name} -c kube-proxy --previous   # why the last run ended",
            f"kubectl -n {pod.namespace} describe pod {pod.name}   # events: probes, OOM, image, mounts",
            "kubectl -n kube-system rollout restart daemonset kube-proxy   # after fixing the cause",
        )
    evidence = [Evidence(pods.source, pod.describe())]
    if procs is not None and "kube-proxy" not in procs and "1" in procs.values():
        evidence.append(Evidence(processes.source, "no kube-proxy process when the node was collected"))
    yield new(
        f"kube-proxy is crash-looping on this node, not absent ({pod.describe()}): {cause}; between restarts " + left,
        fix=fix,
        evidence=evidence,
        subject="node",
        data=impl.data(),
    )


@check(
    "KP709",
    "not-a-kubernetes-node",
    "This host does not look like a Kubernetes node",
    "warning",
    severities=("warning",),
    any_host=True,
    symptom="kpdiag node was run on a host that is not part of the cluster (a laptop, a bastion, the wrong VM, a "
    "container without hostNetwork/hostPID) and would otherwise report its ordinary settings as faults.",
    why="""
        A Kubernetes node runs a kubelet (alone, or inside k3s/k0s), has kube-proxy or a replacement implementing
        Services, a network plugin's interfaces (cni0, flannel.1, cali*, cilium_* …) and KUBE-* rules. When the host's
        processes, interfaces and rules were all readable and none of these is there, the host is not a node: IPv4
        forwarding off or no kube-proxy is normal for it, and advice to change its sysctls or restart kube-proxy would
        change a machine that is none of Kubernetes' business. Every other node check is skipped with that reason and
        kpdiag exits 3 (could not diagnose).
    """,
    fix="Run kpdiag node on a node of the cluster: kubectl debug node/NAME -it --profile=sysadmin --image=… -- kpdiag node.",
)
def not_a_node(
    new,
    processes: NodeProcesses,
    addresses: Optional[Addresses] = None,
    implementer: Optional[ServiceImplementer] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
):
    procs = processes.pids
    if not procs or "1" not in procs.values():
        raise Skip("the host's processes are not visible (no pid 1: run with hostPID): a kubelet cannot be ruled out")
    impl = implementer.implementer
    if impl is None or impl.not_a_node is None:
        return
    yield new(
        "this host does not look like a Kubernetes node: none of " + "; ".join(impl.not_a_node) + " — nothing is "
        "diagnosed or recommended for it",
        fix=(
            note("run kpdiag on a node of the cluster instead (this host needs no change):"),
            "kubectl debug node/<node> -it --profile=sysadmin --image=<kpdiag image> -- kpdiag node",
        ),
        evidence=[
            Evidence(
                processes.source,
                f"no kubelet, kube-proxy, k3s or k0s among the processes (pid 1: {next(c for c, p in procs.items() if p == '1')})",
            ),
            Evidence(addresses.source, "no network plugin interface"),  # read: it is not a node only when it was
            Evidence(
                rules.ruleset.source if rules is not None else str(sources.IPTABLES_SAVE),  # (nftables only: named so)
                "no KUBE-* chain, no kube-proxy nftables table",
            ),
        ],
        subject="node",
        data={"not_a_node": True, "looked_for": list(impl.not_a_node)},
    )


@check(
    "KP710",
    "kube-proxy-leftover-rules",
    "kube-proxy's rules are left behind where a replacement implements Services",
    "warning",
    needs=("whole-rules",),
    severities=("warning",),
    symptom="Cilium (or kube-router, Calico eBPF) implements Services, yet the node still has KUBE-SERVICES/KUBE-SVC-* "
    "rules or a kube-proxy nftables table; some traffic behaves as it did before the migration.",
    why="""
        When a kube-proxy replacement is installed, kube-proxy's DaemonSet is removed but the rules it wrote stay until
        someone removes them (kube-proxy --cleanup, or a reboot). Nothing updates them any more: they still DNAT
        ClusterIPs to the endpoints of the day kube-proxy stopped — packets the replacement does not take (host
        traffic before its socket hook, a NodePort from outside when its BPF program is not on that device) meet
        these stale rules. They are leftovers, not a kube-proxy to restart.
    """,
    fix="Remove kube-proxy's leftover rules on each node (as the replacement's install guide says), never restart kube-proxy.",
)
def leftovers(
    new,
    addresses: Optional[Addresses] = None,
    implementer: Optional[ServiceImplementer] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
):
    impl = _who(addresses, implementer, rules, nft)
    if impl is None or impl.kube_proxy != "replaced" or not impl.leftovers:
        return
    programmed = len(rules.programmed) if rules is not None else 0
    evidence = []
    rs = rules.ruleset if rules is not None else None
    if rs is not None and "KUBE-SERVICES" in rs.chain_names("nat"):
        first = rs.chain("nat", "KUBE-SERVICES").rules
        evidence.append(
            Evidence(rs.source, f"-N KUBE-SERVICES ({len(first)} rules)", first[0].lineno if first else None)
        )
    where = rs.source if rs is not None else str(sources.IPTABLES_SAVE)  # nftables leftovers are named with it too
    evidence += [Evidence(where, why) for why in impl.leftovers.values()]
    yield new(
        f"{impl.label} implements Services here, and kube-proxy's {' and '.join(sorted(impl.leftovers))}-mode rules "
        f"are leftovers ({programmed} service ports, frozen when kube-proxy stopped): remove them; do not restart "
        "kube-proxy",
        fix=(
            note("on this node, as root (the replacement keeps working; only kube-proxy's own rules are removed):"),
            "iptables-save | grep -v KUBE | iptables-restore   # kube-proxy's iptables chains and jumps (also ip6tables-save | grep -v KUBE | ip6tables-restore)",
            "nft delete table ip kube-proxy; nft delete table ip6 kube-proxy   # an nftables-mode kube-proxy's tables, if any",
            "kubectl -n kube-system get ds kube-proxy   # must not exist (NotFound): a kube-proxy that comes back rewrites them",
        ),
        evidence=evidence,
        subject="node",
        data=impl.data(),
    )


@check(
    "KP712",
    "two-service-dataplanes",
    "Calico's eBPF dataplane and kube-proxy both translate Services on this node",
    "warning",
    symptom="Service connections fail or reset now and then, more after every kube-proxy sync or Felix restart; "
    "NodePorts and externalTrafficPolicy behave differently from node to node.",
    why="""
        Calico's eBPF dataplane implements Services itself (its bpfnatin/bpfnatout devices and cali_v4_nat_* maps)
        and expects kube-proxy to be gone: its install guide disables the kube-proxy DaemonSet on the nodes. When
        kube-proxy still runs beside it, both translate the same ClusterIPs: Felix removes kube-proxy's iptables rules
        (BPFKubeProxyIptablesCleanupEnabled) and kube-proxy writes them back at its next sync, so packets meet one
        translation or the other depending on the moment, and connections set up by one are broken by the other.
        A warning, not an error: on managed clusters where kube-proxy must stay, Calico's guide keeps both with
        bpfKubeProxyIptablesCleanupEnabled: false — the bundle cannot show that setting.
        (Cilium beside kube-proxy, without its kube-proxy replacement, is a supported shape and is not judged here.)
    """,
    fix="Keep kube-proxy off the nodes that run Calico's eBPF dataplane: kubectl patch ds -n kube-system kube-proxy -p "
    '\'{"spec":{"template":{"spec":{"nodeSelector":{"non-calico":"true"}}}}}\' (Calico\'s guide), then '
    "let Felix clean up kube-proxy's rules. Where kube-proxy cannot be removed (a managed cluster), Calico's guide "
    "sets bpfKubeProxyIptablesCleanupEnabled: false so the two stop undoing each other.",
)
def two_service_dataplanes(
    new,
    addresses: Optional[Addresses] = None,
    implementer: Optional[ServiceImplementer] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
):
    impl = _who(addresses, implementer, rules, nft)
    if impl is None or impl.kube_proxy != "running" or "calico-ebpf" not in impl.present:
        return
    calico = impl.present["calico-ebpf"]
    yield new(
        "Calico's eBPF dataplane implements Services here and kube-proxy runs too: both translate the same "
        "ClusterIPs, and Felix and kube-proxy keep undoing each other's rules",
        fix=(
            command(
                "kubectl patch ds -n kube-system kube-proxy -p "
                '\'{"spec":{"template":{"spec":{"nodeSelector":{"non-calico":"true"}}}}}\'   # no kube-proxy '
                "on Calico eBPF nodes"
            ),
            command("kubectl get felixconfiguration default -o jsonpath='{.spec.bpfKubeProxyIptablesCleanupEnabled}'"),
        ),
        evidence=[Evidence(src, text) for src, text in list(calico)[:2]]
        + [Evidence(src, text) for src, text in impl.evidence[:2]],
        subject="node",
        data=impl.data(),
    )
