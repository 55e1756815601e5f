"""iptables-mode health: backends, scale, FORWARD policy, rules left by other modes."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag import evidence as ev
from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import note
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_node import Manifest, Routes
from kpdiag.state.typed_proxy import IptablesBackends, KubeProxyConfig, KubeProxyRules, ProxyMode, Tracer


def _kube_chains(rs) -> list[str]:
    """table/chain of every KUBE-* chain of a ruleset (its chain index: no rule is compiled)."""
    return [f"{t}/{name}" for t, table in rs.tables.items() for name in table.chains if name.startswith("KUBE-")]


@check(
    "KP204",
    "iptables-backend-mix",
    "kube-proxy rules in both iptables backends",
    "error",
    symptom="Services work on some nodes and not others, or stop working after a kube-proxy restart; rules you see with iptables -L are not the ones that act.",
    why="""
        iptables has two kernel backends: the old xtables ("legacy") and nf_tables. Both are active at once, and a
        packet goes through the rules of *both*. When kube-proxy's image uses one backend and another tool (the
        host's iptables, the CNI, an older kube-proxy) uses the other, KUBE-* chains exist twice: stale rules in one
        backend keep DNATing to old pods or REJECT a Service that has endpoints in the other, and `iptables-save`
        shows only one half.
    """,
    fix="Make every component use one backend (update-alternatives --set iptables /usr/sbin/iptables-nft), then flush the KUBE-* chains of the other backend and restart kube-proxy.",
    references=("https://github.com/kubernetes/kubernetes/issues/71305",),
)
def backend_mix(new, backends: Optional[IptablesBackends] = None):
    legacy, nft = backends.legacy, backends.nft
    if legacy is None or nft is None:
        raise Skip(f"needs {sources.IPTABLES_LEGACY_SAVE} and {sources.IPTABLES_NFT_SAVE} (both backends' dumps)")
    kl, kn = _kube_chains(legacy), _kube_chains(nft)
    legacy_src, nft_src = legacy.source, nft.source
    if not kl or not kn:
        return
    yield new(
        f"KUBE-* chains in both backends: {len(kl)} in iptables-legacy, {len(kn)} in iptables-nft — packets traverse both sets",
        fix=(
            "iptables --version   # '(nf_tables)' or '(legacy)': what the host uses",
            "kubectl -n kube-system logs ds/kube-proxy | grep -i 'iptables.*mode\\|backend'   # what kube-proxy uses",
            "update-alternatives --set iptables /usr/sbin/iptables-nft && update-alternatives --set ip6tables /usr/sbin/ip6tables-nft",
            "for t in nat filter mangle; do iptables-legacy-save -t $t | grep -c KUBE-; done   # then flush the stale side: "
            "iptables-legacy -t nat -F && iptables-legacy -t nat -X (and filter, mangle) — only after kube-proxy runs on the other",
            "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<this node>",
        ),
        evidence=[
            Evidence(legacy_src, f"{len(kl)} KUBE-* chains, e.g. {', '.join(kl[:3])}"),
            Evidence(nft_src, f"{len(kn)} KUBE-* chains, e.g. {', '.join(kn[:3])}"),
        ],
        subject="node",
    )


RULES_WARN = 20000
SERVICES_WARN = 1000


@check(
    "KP205",
    "rule-scale",
    "iptables ruleset large enough to hurt",
    "warning",
    modes=("iptables",),
    needs=("whole-rules",),  # read nothing of: a partial bundle would undercount the rules
    advice_for="kube-proxy",
    symptom="Service changes take seconds to minutes to reach this node; kube-proxy's sync takes long; first packets of connections are slow; CPU spikes in kube-proxy and iptables-restore.",
    why="""
        In iptables mode every new connection walks the nat KUBE-SERVICES chain rule by rule until its ClusterIP
        matches — linear in the number of service ports — and every change rewrites the whole ruleset with
        iptables-restore. Beyond roughly 1,000 services / 20,000 rules both costs become visible. nftables mode (GA
        since v1.33) looks services up in a map in constant time and updates incrementally; IPVS uses hash tables
        but is deprecated from v1.35.
    """,
    fix="Plan a move to nftables mode (mode: nftables in the kube-proxy ConfigMap, kernel ≥ 5.13); meanwhile raise iptables.minSyncPeriod.",
    references=("https://kubernetes.io/blog/2025/02/28/nftables-kube-proxy/",),
)
def rule_scale(new, rules: KubeProxyRules, proxy: Optional[ProxyMode] = None):
    rs = rules.ruleset
    if proxy is not None and proxy.dataplane.known and proxy.dataplane is not dataplanes.get("iptables"):
        return
    total = rs.rule_count
    services = rs.chain("nat", "KUBE-SERVICES")
    walk = len(services) if services is not None else 0
    ports = len(rules.programmed)
    if total < RULES_WARN and walk < SERVICES_WARN:
        return
    yield new(
        f"{total} iptables rules, {ports} programmed service ports: a new connection to the last ClusterIP walks {walk} rules in nat KUBE-SERVICES",
        fix=(
            "kpdiag trace --bundle <bundle> --dst <ClusterIP> --dport <port> --src <client>   # 'rules walked' shows the cost per connection",
            "kubectl -n kube-system edit configmap kube-proxy   # mode: nftables (kernel ≥ 5.13, kube-proxy ≥ 1.31; GA in 1.33)",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            "meanwhile: iptables.minSyncPeriod: 10s in the same ConfigMap batches changes",
        ),
        evidence=[
            Evidence(rs.source, f"{total} rules over {len(rs.tables)} tables ({rs.line_count} lines)"),
            ev.chain(rs, "nat", "KUBE-SERVICES"),
        ],
        subject="node",
    )


def _sample_path(rules: KubeProxyRules, cfg: KubeProxyConfig | None, routes: Routes | None, fwd: Tracer):
    """A ClusterIP port with a remote endpoint and a pod source address, to trace pod → Service."""
    from kpdiag.state.kube_rules import cluster_cidr

    ports = rules.programmed
    # without the routes, the node's own addresses still tell what is local: as the tracer sees them
    routing = routes.routing if routes is not None else fwd.if_forwarding().routing
    cidr = cluster_cidr(ports)
    if cidr is None and cfg is not None and cfg.get("clusterCIDR"):
        cidr = str(cfg.get("clusterCIDR")).split(",")[0]
    if cidr is None:
        return None
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None
    for p in ports.values():
        if not p.cluster_ip or not p.port or not p.endpoints:
            continue
        ep_ip = p.endpoints[0].rsplit(":", 1)[0].strip("[]")
        try:
            from kpdiag.parse.addr import parse_ip

            if routing.is_local(*parse_ip(ep_ip)):
                continue
        except ValueError:
            continue
        src = str(net.network_address + 77)
        return p, src
    return None


@check(
    "KP207",
    "forward-drop",
    "FORWARD policy DROP blocks Service traffic",
    "error",
    symptom="Pods cannot reach Services whose endpoints are on other nodes; external clients may still work.",
    why="""
        After kube-proxy DNATs a Service packet to a pod on another node, the node *forwards* it, so it passes the
        filter FORWARD chain. kube-proxy's KUBE-FORWARD only accepts packets it marked for masquerade (0x4000) and
        established connections; pod-to-Service traffic is normally accepted by the CNI's own rules. When something
        (Docker, firewalld, a hardening script) sets the FORWARD policy to DROP and nothing accepts pod traffic, the
        first packet of every such connection is dropped.
    """,
    fix="Accept pod traffic in FORWARD (iptables -I FORWARD -s <clusterCIDR> -j ACCEPT; -d likewise) or fix the CNI/Docker setting that set the policy.",
)
def forward_drop(
    new,
    rules: KubeProxyRules,
    cfg: Optional[KubeProxyConfig] = None,
    routes: Optional[Routes] = None,
    tracer: Optional[Tracer] = None,
):
    rs = rules.ruleset
    fwd = rs.chain("filter", "FORWARD")
    if fwd is None or fwd.policy != "DROP":
        return
    sample = _sample_path(rules, cfg, routes, tracer)
    if sample is None:
        raise Skip(
            "FORWARD policy is DROP, but no ClusterIP with a remote endpoint and known cluster CIDR to test it with"
        )
    port, src = sample
    from kpdiag.trace.model import Packet

    # as if the node forwarded: with ip_forward = 0 as well (KP501) the policy is still what drops once that is fixed
    result = tracer.if_forwarding().trace(Packet(src, port.cluster_ip, port.proto or "tcp", port.port, origin="pod"))
    dropped = [
        p
        for p in result.paths
        if p.verdict == "drop" and p.steps and p.steps[-1].chain == "FORWARD" and p.steps[-1].rule is None
    ]
    if not dropped:
        return
    share = sum(p.probability for p in dropped)
    yield new(
        f"filter FORWARD policy DROP drops pod traffic to Services: traced {src} → {port.name} ({port.cluster_ip}:{port.port}) "
        f"— {share * 100:.0f}% of connections end at the policy",
        fix=(
            f"iptables -I FORWARD -s {port.cluster_cidr or '<clusterCIDR>'} -j ACCEPT && iptables -I FORWARD -d {port.cluster_cidr or '<clusterCIDR>'} -j ACCEPT",
            note(
                'find who set the policy: Docker sets FORWARD DROP when it starts ("iptables": false in /etc/docker/daemon.json, or remove Docker from Kubernetes nodes); '
                "firewalld: firewall-cmd --permanent --zone=trusted --add-source=<clusterCIDR>"
            ),
            "check your CNI's documentation for its FORWARD rules (flannel, Calico and others add them)",
        ),
        evidence=[
            ev.chain(rs, "filter", "FORWARD"),
            Evidence(
                rs.source, f"trace: {dropped[0].steps[-2].text if len(dropped[0].steps) > 1 else ''} … then policy DROP"
            ),
        ],
        subject=port.name,
    )


@check(
    "KP208",
    "leftover-rules",
    "Rules of another proxy mode left behind",
    "warning",
    advice_for="kube-proxy",
    symptom="Service traffic behaves as if an old configuration still applied: stale DNAT targets, REJECTs for working Services, traffic to the wrong endpoints after a mode switch.",
    why="""
        Switching kube-proxy's mode (iptables ↔ IPVS ↔ nftables, or away from the removed userspace mode) does not
        always remove the previous mode's rules. Those rules still act on packets: old KUBE-SVC chains DNAT to pods
        that no longer exist, IPVS virtual servers answer for ClusterIPs, or an old nftables table rejects traffic.
    """,
    fix="Run kube-proxy --cleanup once on the node (from the kube-proxy image), then restart kube-proxy.",
)
def leftover(new, rules: KubeProxyRules, manifest: Optional[Manifest] = None, proxy: Optional[ProxyMode] = None):
    mode, how = proxy.mode, proxy.how
    if mode is None or how not in ("kube-proxy's /proxyMode",) and not how.startswith("mode in "):
        raise Skip("the running proxy mode is unknown (no /proxyMode and no explicit mode in the configuration)")
    found = proxy.inferred
    other = {m: why for m, why in found.items() if m != mode}
    if not other:
        return
    rs = rules.ruleset
    evidence = [Evidence(rs.source if "iptables" in why else manifest.bundle, why) for why in other.values()]
    yield new(
        f"kube-proxy runs in {mode} mode ({how}), but {', '.join(other)} mode artefacts are still on the node: {'; '.join(other.values())}",
        fix=(
            "kubectl -n kube-system get ds kube-proxy -o jsonpath='{.spec.template.spec.containers[0].image}'   # the image to use",
            "on the node: <container runtime> run --rm --privileged --net=host -v /lib/modules:/lib/modules:ro <kube-proxy image> kube-proxy --cleanup",
            "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=<this node>",
        ),
        evidence=evidence,
        subject="node",
    )


DUPLICATE_MIN = 10  # kube-proxy never writes the same rule twice in a chain; ten copies are a bug, not a style


def duplicated_rules(rs) -> list[tuple[str, str, int, int]]:
    """(table, rule text, copies, first line) for each rule text found at least DUPLICATE_MIN times in one chain of a
    ruleset (its raw rule lines: nothing is compiled), most copies first."""
    from collections import Counter

    counts: Counter = Counter()
    first: dict = {}
    for table in rs.tables.values():
        for chain in table.chains.values():
            for lineno, line in zip(chain.linenos, chain.lines):
                key = (table.name, line)
                counts[key] += 1
                first.setdefault(key, lineno)
    dup = [(t, line, n, first[(t, line)]) for (t, line), n in counts.items() if n >= DUPLICATE_MIN]
    return sorted(dup, key=lambda d: (-d[2], d[3]))


@check(
    "KP209",
    "duplicated-rules",
    "The same rule many times in one chain",
    "warning",
    symptom="iptables-save grows by the same lines every few minutes; rule syncs and iptables commands get slower and "
    "slower; CPU in iptables, kubelet, k3s or the CNI; in the end every Service change takes seconds.",
    why="""
        A component that adds its rules with "iptables -C … || iptables -A …" adds them again whenever the check
        wrongly says they are missing — known with iptables-nft versions whose -C cannot match rules that use a
        comment or certain matches the way they were written (k3s and kubelet's own canary/firewall rules, CNI
        plugins). Each copy is harmless alone; thousands of them make every packet that reaches the chain walk the
        copies, and every iptables-restore (kube-proxy's sync) rewrite them.
    """,
    fix="Find the component that owns the rule (its comment or chain says), upgrade it or the iptables binary it uses, "
    "then delete the copies (iptables-save | uniq-by-chain | iptables-restore, or restart the owner after flushing its chain).",
)
def duplicated(new, rules: KubeProxyRules):
    for which in ("iptables-save", "ip6tables-save"):
        rs = rules.dump(which)
        if rs is None:
            continue
        dups = duplicated_rules(rs)
        if not dups:
            continue
        total = sum(n - 1 for _, _, n, _ in dups)
        table, line, n, lineno = dups[0]
        chain = line.split()[1]
        owner = (
            "k3s / kubelet"
            if "KUBE-FIREWALL" in line or "KUBE-KUBELET" in line
            else (
                "kube-router"
                if "KUBE-ROUTER" in line
                else "flannel"
                if "FLANNEL" in line
                else "Calico"
                if "cali-" in line
                else "the owner of that chain"
            )
        )
        yield new(
            f"{len(dups)} rule(s) repeated in {which.split('-')[0]}: the most copied one is in {table} {chain}, {n} times; "
            f"{total} redundant rules in all (added again and again by {owner})",
            fix=(
                f"{which} -t {table} | grep -c -- '{line[:60]}'   # watch it grow: run again in a minute",
                "k3s: upgrade k3s (its bundled iptables fixes the -C check) or start it with --prefer-bundled-bin; "
                "kubelet: upgrade; others: upgrade the component named in the rule",
                f"{which.split('-')[0]}-save -t {table} | awk '!(/^-A/ && seen[$0]++)' | {which.split('-')[0]}-restore -T {table}   # remove the copies "
                "(after the owner is fixed; kube-proxy rewrites its own chains on its next sync)",
            ),
            evidence=[Evidence(rs.source, f"{clip(line, 300)}  (×{n})", lineno)]
            + [Evidence(rs.source, f"{clip(d[1], 200)}  (×{d[2]})", d[3]) for d in dups[1:3]],
            subject="node",
        )
