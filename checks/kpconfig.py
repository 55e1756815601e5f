"""kube-proxy's effective configuration (its file or ConfigMap, its flags, its log) judged against the node."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag import evidence as ev
from kpdiag.state.typed_api import NetworkPolicies, NodePodCIDRs, Services
from kpdiag.state.typed_node import Addresses
from kpdiag.state.typed_proxy import KubeProxyRules, KubeProxySettings, KubeProxyVersion

SKIP_LINKS = ("kube-ipvs0",)  # IPVS mode's Service addresses: not the node's (kube-proxy leaves them out too)


def node_addresses(addresses: Addresses) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, str]]:
    """(address, interface) of every address of the node's interfaces (``ip -j addr``), kube-ipvs0 left out."""
    out = []
    for link in addresses.links:
        if not isinstance(link, dict) or link.get("ifname") in SKIP_LINKS:
            continue
        for info in link.get("addr_info") or []:
            try:
                out.append((ipaddress.ip_address(str(info.get("local"))), str(link.get("ifname"))))
            except ValueError:
                continue
    return out


def _nodeport_services(api: Services | None) -> list[str] | None:
    if api is None:
        return None
    return sorted(s.key for s in api.every if s.type in ("NodePort", "LoadBalancer"))


@check(
    "KP720",
    "nodeport-addresses-no-match",
    "kube-proxy's nodePortAddresses match no address of the node",
    "error",
    severities=("warning", "error"),
    advice_for="kube-proxy",
    symptom="NodePort (and LoadBalancer) Services answer on other nodes but not on this one; connections to "
    "<node IP>:<nodePort> time out or are refused here.",
    why="""
        kube-proxy accepts NodePort connections only on the node addresses that fall in nodePortAddresses
        (--nodeport-addresses): a list of CIDRs, or the word "primary" (the node's primary IPs as kube-proxy
        detected them from its Node object or bindAddress). Unset, it accepts them on every local address. Per IP
        family, when the list has CIDRs of that family and none contains an address of the node — a CIDR copied
        from another subnet, a node renumbered, a typo — kube-proxy programs NodePorts on no address at all of
        that family: its KUBE-NODEPORTS jump (iptables) or nodeport-ips set (nftables) never matches, and load
        balancers that send to NodePorts see this node as dead. With "primary", a kube-proxy that could not find
        the node's IP ("Can't determine this node's IP, assuming loopback" in its log) serves NodePorts on the
        loopback address only.
    """,
    fix='Set nodePortAddresses to CIDRs that contain this node\'s addresses (or "primary" with a correct Node '
    "address, or remove it), and restart kube-proxy.",
)
def nodeport_addresses(new, kp: KubeProxySettings, addresses: Addresses, api: Optional[Services] = None):
    setting = kp["nodePortAddresses"]
    if not setting.value:
        return  # unset: NodePorts on every local address (kube-proxy's default)
    addrs = node_addresses(addresses)
    if not addrs:
        raise Skip(f"{addresses.source} lists no address of the node to compare nodePortAddresses with")
    services = _nodeport_services(api)
    severity = "warning" if services == [] else "error"
    affected = (
        f" — {len(services)} NodePort/LoadBalancer Service{'s' if len(services) != 1 else ''} "
        f"({', '.join(services[:4])}{', …' if len(services) > 4 else ''}) cannot be reached through this node"
        if services
        else ""
    )
    if "primary" in setting.value:
        yield from _primary(new, kp, setting, addrs, severity, affected)
        return
    nets, bad = [], []
    for text in setting.value:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            bad.append(text)
    for family in (4, 6):
        mine = [n for n in nets if n.version == family]
        have = [(a, dev) for a, dev in addrs if a.version == family]
        reachable = [a for a, _ in have if not (a.is_link_local or a.is_loopback)]
        if not mine or not reachable or any(a in n for a, _ in have for n in mine):
            continue  # no CIDR of that family, no address clients could use, or one that matches
        shown = ", ".join(f"{a} ({dev})" for a, dev in have[:6]) or f"no IPv{family} address"
        yield new(
            f"nodePortAddresses {', '.join(str(n) for n in mine)} contain{'s' if len(mine) == 1 else ''} no IPv{family} "
            f"address of this node ({shown}): kube-proxy serves IPv{family} NodePorts on no address here{affected}",
            severity=severity,
            fix=(
                "ip -br addr   # the node's addresses: nodePortAddresses must contain the one(s) clients use",
                'kubectl -n kube-system edit configmap kube-proxy   # nodePortAddresses: ["<the node subnet>"] or '
                '["primary"] (or --nodeport-addresses where kube-proxy runs from flags)',
                "kubectl -n kube-system rollout restart daemonset kube-proxy",
            ),
            evidence=[setting.evidence(), Evidence(addresses.source, f"IPv{family} addresses: {shown}")],
            subject="node",
            data={
                "family": family,
                "node_port_addresses": [str(n) for n in mine],
                "invalid": bad,
                "node_addresses": [str(a) for a, _ in have],
                "services": services or [],
            },
        )


def _primary(new, kp, setting, addrs, severity, affected):
    """nodePortAddresses: primary — the node IPs kube-proxy detected, as its log states them."""
    loopback = kp.last("node-ip-loopback")
    if loopback is not None:
        yield new(
            'nodePortAddresses is "primary" but kube-proxy could not determine this node\'s IP and assumed loopback: '
            f"NodePorts are served on 127.0.0.1 only{affected}",
            severity=severity,
            fix=(
                "kubectl get node <node> -o jsonpath='{.status.addresses}'   # kube-proxy takes the node IP from here",
                "set the kubelet's --node-ip (or kube-proxy's bindAddress to this node's IP) and restart kube-proxy",
            ),
            evidence=[setting.evidence(), kp.log_evidence(loopback)],
            subject="node",
            data={"node_port_addresses": list(setting.value), "node_ips": []},
        )
        return
    detected = kp.last("node-ips")
    if detected is None:
        raise Skip('nodePortAddresses is "primary" and kube-proxy\'s log does not say which node IPs it detected')
    ips = [ip.strip(' "') for ip in detected.values[0].split(",") if ip.strip(' "')]
    own = {str(a) for a, _ in addrs}
    missing = [ip for ip in ips if ip not in own]
    if not ips or len(missing) < len(ips):
        return
    yield new(
        f'nodePortAddresses is "primary" and kube-proxy took {", ".join(missing)} for this node\'s IP, an address '
        f"no interface of this node has: NodePorts are served on no address here{affected}",
        severity=severity,
        fix=(
            "kubectl get node <node> -o jsonpath='{.status.addresses}'   # the InternalIP must be this node's",
            "set the kubelet's --node-ip to an address of this node, then restart kube-proxy",
        ),
        evidence=[setting.evidence(), kp.log_evidence(detected)],
        subject="node",
        data={"node_port_addresses": list(setting.value), "node_ips": ips},
    )


@check(
    "KP721",
    "detect-local-iface-missing",
    "kube-proxy tells pod traffic by an interface this node does not have",
    "error",
    severities=("error",),
    advice_for="kube-proxy",
    symptom="Every pod's connection to a ClusterIP arrives at the backend from the node's address (NetworkPolicies "
    "that allow pods by selector deny it, logs show node IPs); pods cannot reach externalTrafficPolicy: Local "
    "LoadBalancer or external IPs on nodes without an endpoint.",
    why="""
        With detectLocalMode BridgeInterface kube-proxy takes a packet for pod traffic when it arrives on the bridge
        named by detectLocal.bridgeInterface (--pod-bridge-interface); with InterfaceNamePrefix, when it arrives on
        an interface whose name starts with detectLocal.interfaceNamePrefix (--pod-interface-name-prefix). It writes
        that as "! -i <bridge>" / "! -i <prefix>+" in front of KUBE-MARK-MASQ. When no interface of the node has that
        name or prefix — the CNI names its bridge or veths otherwise (cni0, cbr0, cali*, lxc*, veth*), a ConfigMap
        copied from a cluster with another CNI — no packet ever matches: every pod is "outside", its Service traffic is
        masqueraded to the node's address, and the short-circuit that lets pods reach externalTrafficPolicy: Local
        load-balancer and external IPs on any node is lost.
    """,
    fix="Set detectLocal.bridgeInterface / interfaceNamePrefix to this CNI's bridge or pod-interface prefix (or use "
    "detectLocalMode ClusterCIDR with clusterCIDR), and restart kube-proxy.",
)
def detect_local_interface(new, kp: KubeProxySettings, addresses: Addresses):
    mode = kp["detectLocalMode"]
    field = {"BridgeInterface": "detectLocal.bridgeInterface", "InterfaceNamePrefix": "detectLocal.interfaceNamePrefix"}
    if mode.value not in field:
        return  # ClusterCIDR / NodeCIDR: judged by the pod CIDRs (KP613, KP706)
    setting = kp[field[mode.value]]
    name = setting.value
    if not name:
        return  # the mode without its name: kube-proxy detects nothing (KP706 says it)
    links = [str(link.get("ifname")) for link in addresses.links if isinstance(link, dict) and link.get("ifname")]
    if not links:
        raise Skip(f"{addresses.source} lists no interface to compare {setting.name} with")
    if mode.value == "BridgeInterface":
        matches = [n for n in links if n == name]
        what, rule = f"no interface named {name}", f"! -i {name}"
    else:
        matches = [n for n in links if n.startswith(name)]
        what, rule = f"no interface whose name starts with {name!r}", f"! -i {name}+"
    if matches:
        return
    bridges = [
        str(link.get("ifname"))
        for link in addresses.links
        if isinstance(link, dict) and (link.get("linkinfo") or {}).get("info_kind") == "bridge"
    ]
    shown = ", ".join(links[:10]) + (" …" if len(links) > 10 else "")
    yield new(
        f"detectLocalMode is {mode.value} with {setting.name} {name!r}, but this node has {what} ({shown}): kube-proxy's "
        f"'{rule} -j KUBE-MARK-MASQ' matches every packet — every pod's Service traffic is masqueraded to the node "
        "address and pods lose the short-circuit to Local load-balancer IPs",
        fix=(
            "ip -br link   # the CNI's bridge (cni0, cbr0 …) or its pod interfaces' common prefix (cali, lxc, veth …)",
            f"kubectl -n kube-system edit configmap kube-proxy   # detectLocal: {{{setting.name.split('.')[1]}: "
            f'"{bridges[0] if bridges else "<the CNI bridge or prefix>"}"}} (or --pod-bridge-interface / '
            "--pod-interface-name-prefix where kube-proxy runs from flags)",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[mode.evidence(), setting.evidence(), Evidence(addresses.source, f"interfaces: {shown}")],
        subject="node",
        data={"detect_local_mode": mode.value, "name": name, "interfaces": links, "bridges": bridges},
    )


def _pod_selecting_policies(policies) -> list[str]:
    """ns/name of the NetworkPolicies whose ingress admits peers by podSelector or namespaceSelector."""
    from kpdiag.bundle.store import list_items

    doc = policies.source(sources.NETWORKPOLICIES) if policies is not None and policies.collected else None
    out = []
    for p in (list_items(doc) if isinstance(doc, dict) else None) or []:
        if not isinstance(p, dict):
            continue
        peers = [
            peer
            for rule in ((p.get("spec") or {}).get("ingress") or [])
            if isinstance(rule, dict)
            for peer in rule.get("from") or []
            if isinstance(peer, dict)
        ]
        if any("podSelector" in peer or "namespaceSelector" in peer for peer in peers):
            meta = p.get("metadata") or {}
            out.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(out)


@check(
    "KP722",
    "masquerade-all",
    "kube-proxy masquerades all Service traffic (masqueradeAll)",
    "info",
    severities=("info", "warning"),
    advice_for="kube-proxy",
    symptom="Backends see the node's address instead of the calling pod's; NetworkPolicies that admit clients by "
    "pod or namespace selector block them through a Service (or, where the CNI admits the node, admit everyone).",
    why="""
        With masqueradeAll (iptables.masqueradeAll, nftables.masqueradeAll in nftables mode, --masquerade-all)
        kube-proxy marks every packet sent to a ClusterIP for masquerade, not only those from outside the cluster.
        The endpoint then receives the connection from the node's address (the address of the interface the packet
        leaves by: the bridge's for a pod on this node, the node IP for one elsewhere), never from the client pod.
        NetworkPolicy is enforced at the endpoint, after that SNAT: a podSelector or namespaceSelector peer
        cannot match a node address, so a policy that admits some pods denies them when they call through the
        Service (and a CNI that always admits traffic from the node lets every pod in instead); an ipBlock for
        pod CIDRs never matches either. Source-address logging, rate limits and sessionAffinity by client all see
        one client per node. Some CNIs need it (traffic that would otherwise return asymmetrically); most do not.
    """,
    fix="If the CNI does not require it, set masqueradeAll: false (with clusterCIDR or another detectLocalMode so "
    "outside traffic is still masqueraded) and restart kube-proxy.",
)
def masquerade_all(new, kp: KubeProxySettings, policies: Optional[NetworkPolicies] = None):
    setting = kp["masqueradeAll"]
    if setting.value is not True:
        return
    selecting = _pod_selecting_policies(policies)
    hurt = (
        f"; {len(selecting)} NetworkPolicies admit clients by pod or namespace selector "
        f"({', '.join(selecting[:4])}{', …' if len(selecting) > 4 else ''}), which cannot match the node address "
        "their pods now see"
        if selecting
        else ""
    )
    yield new(
        "kube-proxy masquerades every connection to a ClusterIP (masqueradeAll: true): endpoints see this node's "
        f"address, not the client pod's{hurt}",
        severity="warning" if selecting else "info",
        fix=(
            "kubectl -n kube-system edit configmap kube-proxy   # iptables.masqueradeAll: false (nftables mode: "
            "nftables.masqueradeAll), keeping clusterCIDR set — unless the CNI's documentation requires it",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[setting.evidence()]
        + [
            Evidence(policies.display(sources.NETWORKPOLICIES), f"{p}: ingress from podSelector/namespaceSelector")
            for p in selecting[:3]
        ],
        subject="node",
        data={"masquerade_all": True, "setting": setting.name, "origin": setting.origin, "policies": selecting},
    )


_CAUSES = {
    "iptables": (
        "kube-proxy found no usable ip{v}tables for {fam} (the binary missing from its image, or the kernel lacks "
        "ip{v}_tables / ip{v}table_nat)",
        "kubectl -n kube-system exec ds/kube-proxy -- ip{v}tables-save -t nat | head -3   # must work inside kube-proxy",
    ),
    "kernel": (
        "the kernel has {fam} disabled (no /proc/net/if_inet6: ipv6.disable=1 on the kernel command line)",
        "cat /proc/cmdline   # remove ipv6.disable=1 (or give the node an IPv6 stack) and reboot",
    ),
    "secondary": (
        "kube-proxy found the secondary family {fam} unsupported (no usable ip{v}tables)",
        "kubectl -n kube-system exec ds/kube-proxy -- ip{v}tables-save -t nat | head -3   # must work inside kube-proxy",
    ),
}


def _dual_stack_signs(nodes, api) -> list[Evidence]:
    """Evidence that the cluster is dual-stack: a Node with pod CIDRs of both families, a Service with ClusterIPs of
    both families."""
    out = []
    for n in nodes.nodes if nodes is not None else ():
        if {c.version for c in n.cidrs} == {4, 6}:
            out.append(nodes.evidence(n))
            break
    for svc in api.every if api is not None else ():
        ips = svc.cluster_ips
        if {ipaddress.ip_address(ip).version for ip in ips if _is_ip(ip)} == {4, 6}:
            out.append(api.evidence(svc, f"clusterIPs {', '.join(ips)}"))
            break
    return out


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@check(
    "KP723",
    "single-stack-on-dual-stack",
    "kube-proxy runs single-stack in a dual-stack cluster",
    "error",
    severities=("error",),
    advice_for="kube-proxy",
    symptom="IPv6 (or IPv4) ClusterIPs and NodePorts of dual-stack Services time out from this node and its pods, "
    "while the other family works.",
    why="""
        kube-proxy runs dual-stack whenever its backend supports both IP families on the node, whatever its
        configuration says, and logs "kube-proxy running in dual-stack mode". When it cannot use one family it logs
        why — "No iptables support for family" (no usable ip6tables: the binary missing from its image, the
        ip6_tables / ip6table_nat modules missing), "No kernel support for family" (IPv6 disabled in the kernel) —
        and runs single-stack ("kube-proxy running in single-stack mode"). In a dual-stack cluster (Nodes with pod
        CIDRs of both families, Services with a ClusterIP of each) this node then programs no rule at all for the
        other family: its ClusterIPs, NodePorts and load-balancer IPs of that family go nowhere from here.
    """,
    fix="Remove the cause kube-proxy's log gives (ip6tables in its image and the kernel modules, IPv6 enabled in "
    "the kernel), then restart kube-proxy and check its log says dual-stack.",
)
def single_stack(new, kp: KubeProxySettings, nodes: NodePodCIDRs, api: Optional[Services] = None):
    signs = _dual_stack_signs(nodes, api)
    if not signs:
        return  # a single-stack cluster: one family is all kube-proxy needs
    stack, causes = kp.last("stack"), kp.facts("family-unsupported")
    if stack is not None and stack.values[0] == "dual":
        return
    if stack is None and not causes:
        raise Skip('kube-proxy\'s log does not say whether it runs single- or dual-stack (no "running in" line)')
    primary = stack.values[1] if stack is not None else ("IPv6" if causes[-1].values[1] == "IPv4" else "IPv4")
    missing = "IPv6" if primary == "IPv4" else "IPv4"
    cause = next((c for c in reversed(causes) if c.values[1] == missing), None)
    v = "6" if missing == "IPv6" else ""
    if cause is not None:
        why, step = (t.format(fam=missing, v=v) for t in _CAUSES.get(cause.values[0], _CAUSES["iptables"]))
        because = f"because {why}"
    else:
        because = "its log does not say why (an older kube-proxy, or the start of the log was cut)"
        step = f"kubectl -n kube-system logs ds/kube-proxy | grep -iE 'family|stack'   # why it could not use {missing}"
    yield new(
        f"kube-proxy runs single-stack ({primary} only) while the cluster is dual-stack, {because}: this node programs "
        f"no {missing} ClusterIP, NodePort or load-balancer rule",
        fix=(step, "kubectl -n kube-system rollout restart daemonset kube-proxy   # then its log must say dual-stack"),
        evidence=[kp.log_evidence(f) for f in ([stack] if stack else []) + ([cause] if cause else [])] + signs,
        subject="node",
        data={"primary": primary, "missing": missing, "cause": cause.values[0] if cause else None},
    )


# kube-proxy's own nat chains (its rules may jump to KUBE-MARK-* by design); every other chain is another component's
_OWN = (
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-SEP-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-XLB-",
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL",
    "KUBE-POSTROUTING",
    "KUBE-MARK-",
)
_MARKS = {"KUBE-MARK-MASQ": "masquerade", "KUBE-MARK-DROP": "drop"}


def _mark_of(chain) -> str | None:
    """The mark a KUBE-MARK-* chain sets (its -j MARK rule's value, e.g. 0x4000/0x4000), None when it sets none."""
    for r in chain.rules:
        if r.target == "MARK":
            opt = r.target_opt("--set-xmark") or r.target_opt("--set-mark") or r.target_opt("--or-mark")
            if opt is not None:
                return opt.value
    return None


def _acted_on(rs, kind: str, mark: str) -> bool:
    """Whether some rule completes what the mark asks for: a nat chain that MASQUERADEs and tests the mark, or a
    filter rule that DROPs packets with it."""
    value = mark.split("/")[0]
    if kind == "masquerade":
        for name in rs.chain_names("nat"):
            rules = rs.chain("nat", name).rules
            if any(r.target in ("MASQUERADE", "SNAT") for r in rules) and any(value in r.text for r in rules):
                return True
        return False
    for name in rs.chain_names("filter"):
        if any(r.target == "DROP" and value in r.text for r in rs.chain("filter", name).rules):
            return True
    return False


@check(
    "KP724",
    "kube-mark-chain-orphaned",
    "Another component jumps to KUBE-MARK-MASQ / KUBE-MARK-DROP, and nothing acts on that mark",
    "warning",
    severities=("warning",),
    symptom="hostPort hairpin or localhost traffic (CNI portmap with externalSetMarkChain) is not masqueraded and "
    "times out; packets a CNI or script meant to drop through KUBE-MARK-DROP are delivered.",
    why="""
        KUBE-MARK-MASQ and KUBE-MARK-DROP only set a packet mark (0x4000, 0x8000); the masquerade or drop is done
        later by a rule that tests the mark — kube-proxy's KUBE-POSTROUTING MASQUERADE, kubelet's KUBE-FIREWALL
        DROP. They were never an API, yet CNI plugins and scripts jump to them (the portmap plugin's
        externalSetMarkChain: KUBE-MARK-MASQ). What creates them changed: kube-proxy stopped using KUBE-MARK-DROP
        in v1.25 (KEP-3178); kubelet stopped creating KUBE-MARK-DROP, KUBE-MARK-MASQ and the KUBE-FIREWALL mark-drop
        rule in v1.28 (IPTablesOwnershipCleanup, on by default since v1.27); kube-proxy still creates KUBE-MARK-MASQ
        and KUBE-POSTROUTING in iptables and IPVS mode, and never in nftables mode (its nftables table marks and
        masquerades on its own, and at start it removes its old iptables chains: a chain still referenced is only
        emptied). So on a current node another component's jump can land in a chain that is empty, or that sets a
        mark no rule acts on any more: the masquerade or the drop it relied on silently does not happen.
    """,
    fix="Make the component do its own marking and masquerading (portmap: drop externalSetMarkChain so it uses "
    "its own CNI-HOSTPORT-SETMARK chain), or keep kube-proxy in iptables mode while it depends on KUBE-MARK-MASQ.",
)
def kube_mark_orphaned(
    new, rules: KubeProxyRules, kp: Optional[KubeProxySettings] = None, version: Optional[KubeProxyVersion] = None
):
    rs = rules.ruleset
    refs: dict[str, list] = {}
    for name in rs.chain_names("nat"):
        if name.startswith(_OWN):
            continue
        for r in rs.chain("nat", name).rules:
            if r.target in _MARKS:
                refs.setdefault(r.target, []).append(r)
    for target, users in sorted(refs.items()):
        kind = _MARKS[target]
        chain = rs.chain("nat", target)
        mark = _mark_of(chain) if chain is not None else None
        if mark is not None and _acted_on(rs, kind, mark):
            continue
        whose = sorted({r.chain for r in users})
        what = (
            f"{target} is empty: the jump sets no mark"
            if mark is None
            else f"{target} sets mark {mark}, but no rule {'masquerades' if kind == 'masquerade' else 'drops'} "
            "packets with it"
        )
        running = (
            f"kube-proxy {'v%d.%d' % version.version} in {kp.value('mode')} mode"
            if version is not None and kp is not None
            else f"kube-proxy in {kp.value('mode')} mode"
            if kp is not None
            else "this node's kube-proxy and kubelet"
        )
        yield new(
            f"{len(users)} rule{'s' if len(users) != 1 else ''} of {', '.join(whose[:4])} jump to {target}, but {what} "
            f"(with {running} nothing creates it for others any more): the {kind} they rely on does not happen",
            fix=(
                f"iptables-save -t nat | grep -n -- '-j {target}'   # who jumps there",
                'portmap: remove "externalSetMarkChain" from the CNI configuration (/etc/cni/net.d/*.conflist) so '
                "it marks and masquerades with its own chains; other components: upgrade them or have them do so",
            ),
            evidence=[ev.rule(r) for r in users[:3]]
            + ([ev.chain(rs, "nat", target)] if chain is not None else [])
            + ([kp["mode"].evidence()] if kp is not None else []),
            subject="node",
            data={"chain": target, "mark": mark, "referenced_by": whose, "rules": len(users)},
        )
