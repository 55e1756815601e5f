"""Synthetic kube-proxy state, faithful to the rules kube-proxy writes (for labs, fixtures, benchmarks).

:func:`iptables_ruleset` renders services the way kube-proxy's iptables proxier does (v1.28+
layout: KUBE-SERVICES → KUBE-SVC/KUBE-EXT/KUBE-SVL → KUBE-SEP; KUBE-NODEPORTS last;
KUBE-MARK-MASQ / KUBE-POSTROUTING; filter REJECT/DROP for services without (local)
endpoints), in the canonical form ``iptables-save`` prints, or in kube-proxy's own
restore form.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from dataclasses import dataclass, field

from kpdiag.parse.addr import hostport


def port_proto_hash(service_port_name: str, protocol: str, endpoint: str = "") -> str:
    """First 16 characters of base32(sha256(name + protocol [+ endpoint])), as kube-proxy names chains."""
    digest = hashlib.sha256((service_port_name + protocol + endpoint).encode()).digest()
    return base64.b32encode(digest).decode()[:16]


@dataclass
class Port:
    name: str
    port: int
    target_port: int
    protocol: str = "tcp"
    node_port: int | None = None


@dataclass
class Endpoint:
    ip: str
    local: bool = False  # on this node (ETP/ITP=Local)
    ready: bool = True


@dataclass
class Service:
    namespace: str
    name: str
    cluster_ip: str
    ports: list[Port]
    endpoints: list[Endpoint] = field(default_factory=list)
    external_ips: list[str] = field(default_factory=list)
    lb_ips: list[str] = field(default_factory=list)
    etp_local: bool = False
    affinity_seconds: int | None = None
    itp_local: bool = False  # internalTrafficPolicy: Local (ClusterIP traffic only to endpoints on this node)

    def uses_cluster_chain(self, has_external: bool) -> bool:
        """kube-proxy's UsesClusterEndpoints: the KUBE-SVC / service- chain exists (with any external address it is
        needed even under externalTrafficPolicy: Local, for the short-circuit of pod and node traffic)."""
        return not self.itp_local or has_external

    def uses_local_chain(self, has_external: bool) -> bool:
        """kube-proxy's UsesLocalEndpoints: the KUBE-SVL / local- chain exists (when there are local endpoints)."""
        return self.itp_local or (self.etp_local and has_external)

    def port_name(self, port: Port) -> str:
        """kube-proxy's ServicePortName: ns/svc:portname, plain ns/svc when the port has no name."""
        return f"{self.namespace}/{self.name}:{port.name}" if port.name else f"{self.namespace}/{self.name}"


def _host(ip: str) -> str:
    return f"{ip}/128" if ":" in ip else f"{ip}/32"


def _saved_probability(p: float) -> str:
    """How iptables-save prints a probability (the kernel keeps it as a 31-bit fraction)."""
    value = round(p * 0x80000000)
    return f"{value / 0x80000000:.11f}"


def iptables_ruleset(
    services: list[Service],
    cluster_cidr: str | None = "10.244.0.0/16",
    canonical: bool = True,
    nodeport_ips: list[str] | None = None,
) -> str:
    """Render ``services`` as a kube-proxy iptables ruleset (``iptables-save`` text).

    ``cluster_cidr=None`` renders what kube-proxy writes without local-traffic detection: no
    ``! -s CIDR -j KUBE-MARK-MASQ`` rule in the KUBE-SVC chains. ``nodeport_ips``: the node addresses that fall in
    nodePortAddresses — kube-proxy then jumps to KUBE-NODEPORTS with ``-d IP`` for each (none: no jump at all)
    instead of ``-m addrtype --dst-type LOCAL``.
    """
    f_chains = [
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FIREWALL",
        "KUBE-FORWARD",
        "KUBE-KUBELET-CANARY",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-CANARY",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SERVICES",
    ]
    f_rules: list[str] = [
        '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
        '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        "-A INPUT -j KUBE-FIREWALL",
        '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        "-A OUTPUT -j KUBE-FIREWALL",
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    ]
    v6 = any(":" in svc.cluster_ip for svc in services)  # ip6tables-restore input (kube-proxy's IPv6 proxier)
    reject = "icmp6-port-unreachable" if v6 else "icmp-port-unreachable"
    if not v6:  # route_localnet protection: IPv4 only
        f_rules.append(
            '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP'
        )
    n_chains = [
        "KUBE-KUBELET-CANARY",
        "KUBE-MARK-MASQ",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-PROXY-CANARY",
        "KUBE-SERVICES",
    ]
    n_head = [
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    ]
    svc_rules: list[str] = []
    nodeport_rules: list[str] = []
    chain_rules: list[str] = []
    for svc in services:
        for port in svc.ports:
            spn = svc.port_name(port)
            proto = port.protocol
            h = port_proto_hash(spn, proto)
            svc_chain, ext_chain, svl_chain = f"KUBE-SVC-{h}", f"KUBE-EXT-{h}", f"KUBE-SVL-{h}"
            ready = [e for e in svc.endpoints if e.ready]
            local_ready = [e for e in ready if e.local]
            has_external = bool(port.node_port or svc.external_ips or svc.lb_ips)
            c = f'-m comment --comment "{spn} cluster IP"'
            if not ready:
                f_rules.append(
                    f'-A KUBE-SERVICES -d {_host(svc.cluster_ip)} -p {proto} -m comment --comment "{spn} has no endpoints" -m {proto} --dport {port.port} -j REJECT --reject-with {reject}'
                )
                for ip in svc.external_ips + svc.lb_ips:
                    f_rules.append(
                        f'-A KUBE-EXTERNAL-SERVICES -d {_host(ip)} -p {proto} -m comment --comment "{spn} has no endpoints" -m {proto} --dport {port.port} -j REJECT --reject-with {reject}'
                    )
                if port.node_port:
                    f_rules.append(
                        f'-A KUBE-EXTERNAL-SERVICES -p {proto} -m comment --comment "{spn} has no endpoints" -m addrtype --dst-type LOCAL -m {proto} --dport {port.node_port} -j REJECT --reject-with {reject}'
                    )
                continue
            # internalTrafficPolicy: Local sends ClusterIP traffic to KUBE-SVL (this node's endpoints), or DROPs it
            # in the filter table when this node has none ("has no local endpoints")
            internal_chain = svl_chain if svc.itp_local else svc_chain
            has_internal = bool(local_ready) or not svc.itp_local
            uses_cluster = svc.uses_cluster_chain(has_external)
            uses_local = bool(local_ready) and svc.uses_local_chain(has_external)
            if has_internal:
                svc_rules.append(
                    f"-A KUBE-SERVICES -d {_host(svc.cluster_ip)} -p {proto} {c} -m {proto} --dport {port.port} -j {internal_chain}"
                )
            else:
                f_rules.append(
                    f'-A KUBE-SERVICES -d {_host(svc.cluster_ip)} -p {proto} -m comment --comment "{spn} has no local endpoints" -m {proto} --dport {port.port} -j DROP'
                )
            if has_external:
                n_chains.append(ext_chain)
                for ip in svc.external_ips:
                    svc_rules.append(
                        f'-A KUBE-SERVICES -d {_host(ip)} -p {proto} -m comment --comment "{spn} external IP" -m {proto} --dport {port.port} -j {ext_chain}'
                    )
                for ip in svc.lb_ips:
                    svc_rules.append(
                        f'-A KUBE-SERVICES -d {_host(ip)} -p {proto} -m comment --comment "{spn} loadbalancer IP" -m {proto} --dport {port.port} -j {ext_chain}'
                    )
                if port.node_port:
                    nodeport_rules.append(
                        f'-A KUBE-NODEPORTS -p {proto} -m comment --comment "{spn}" -m {proto} --dport {port.node_port} -j {ext_chain}'
                    )
                if svc.etp_local:
                    if cluster_cidr:
                        chain_rules.append(
                            f'-A {ext_chain} -s {cluster_cidr} -m comment --comment "pod traffic for {spn} external destinations" -j {svc_chain}'
                        )
                    chain_rules.append(
                        f'-A {ext_chain} -m comment --comment "masquerade LOCAL traffic for {spn} external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ'
                    )
                    chain_rules.append(
                        f'-A {ext_chain} -m comment --comment "route LOCAL traffic for {spn} external destinations" -m addrtype --src-type LOCAL -j {svc_chain}'
                    )
                    if local_ready:
                        chain_rules.append(f"-A {ext_chain} -j {svl_chain}")
                    else:
                        for ip in svc.external_ips + svc.lb_ips:
                            f_rules.append(
                                f'-A KUBE-EXTERNAL-SERVICES -d {_host(ip)} -p {proto} -m comment --comment "{spn} has no local endpoints" -m {proto} --dport {port.port} -j DROP'
                            )
                        if port.node_port:
                            f_rules.append(
                                f'-A KUBE-EXTERNAL-SERVICES -p {proto} -m comment --comment "{spn} has no local endpoints" -m addrtype --dst-type LOCAL -m {proto} --dport {port.node_port} -j DROP'
                            )
                else:
                    chain_rules.append(
                        f'-A {ext_chain} -m comment --comment "masquerade traffic for {spn} external destinations" -j KUBE-MARK-MASQ'
                    )
                    chain_rules.append(f"-A {ext_chain} -j {svc_chain}")
            if has_internal and cluster_cidr:
                chain_rules.append(
                    f"-A {internal_chain} ! -s {cluster_cidr} -d {_host(svc.cluster_ip)} -p {proto} {c} -m {proto} --dport {port.port} -j KUBE-MARK-MASQ"
                )
            if uses_cluster:
                n_chains.append(svc_chain)
                chain_rules.extend(_endpoint_rules(svc, port, svc_chain, ready, n_chains))
            if uses_local:
                n_chains.append(svl_chain)
                chain_rules.extend(
                    _endpoint_rules(svc, port, svl_chain, local_ready, None if uses_cluster else n_chains)
                )
    last = '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"'
    nodeports_last = (
        [f"{last} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"]
        if nodeport_ips is None
        else [f"{last} -d {ip}/{128 if ':' in ip else 32} -j KUBE-NODEPORTS" for ip in nodeport_ips]
    )
    n_rules = n_head + nodeport_rules + chain_rules + svc_rules + nodeports_last
    out = [
        "# Generated by tests.synth",
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
    ]
    out += [f":{c} - [0:0]" for c in f_chains]
    out += _order(f_rules, f_chains, ("INPUT", "FORWARD", "OUTPUT")) if canonical else f_rules
    out += [
        "COMMIT",
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
    ]
    n_chains_sorted = sorted(set(n_chains)) if canonical else list(dict.fromkeys(n_chains))
    out += [f":{c} - [0:0]" for c in n_chains_sorted]
    out += _order(n_rules, n_chains_sorted, ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")) if canonical else n_rules
    out.append("COMMIT")
    return "\n".join(out) + "\n"


def _endpoint_rules(svc: Service, port: Port, chain: str, endpoints: list[Endpoint], declare: list | None) -> list[str]:
    spn = svc.port_name(port)
    proto = port.protocol
    mask = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff" if ":" in svc.cluster_ip else "255.255.255.255"
    rules: list[str] = []
    seps = []
    for ep in endpoints:
        dest = hostport(ep.ip, port.target_port)
        sep = f"KUBE-SEP-{port_proto_hash(spn, proto, dest)}"
        seps.append((sep, dest, ep))
    if svc.affinity_seconds:
        for sep, dest, _ in seps:
            rules.append(
                f'-A {chain} -m comment --comment "{spn} -> {dest}" -m recent --rcheck --seconds {svc.affinity_seconds} --reap --name {sep} --mask {mask} --rsource -j {sep}'
            )
    n = len(seps)
    for i, (sep, dest, _) in enumerate(seps):
        if i < n - 1:
            rules.append(
                f'-A {chain} -m comment --comment "{spn} -> {dest}" -m statistic --mode random --probability {_saved_probability(1.0 / (n - i))} -j {sep}'
            )
        else:
            rules.append(f'-A {chain} -m comment --comment "{spn} -> {dest}" -j {sep}')
    if declare is not None:
        for sep, dest, ep in seps:
            declare.append(sep)
            rules.append(f'-A {sep} -s {_host(ep.ip)} -m comment --comment "{spn}" -j KUBE-MARK-MASQ')
            if svc.affinity_seconds:
                rules.append(
                    f'-A {sep} -p {proto} -m comment --comment "{spn}" -m recent --set --name {sep} --mask {mask} --rsource -m {proto} -j DNAT --to-destination {dest}'
                )
            else:
                rules.append(
                    f'-A {sep} -p {proto} -m comment --comment "{spn}" -m {proto} -j DNAT --to-destination {dest}'
                )
    return rules


def _order(rules: list[str], chains: list[str], builtins: tuple[str, ...]) -> list[str]:
    """iptables-save order: built-in chains first, then user chains by name; rule order kept per chain."""
    by_chain: dict[str, list[str]] = {}
    for r in rules:
        by_chain.setdefault(r.split(" ", 2)[1], []).append(r)
    out = []
    for name in list(builtins) + sorted(set(chains)):
        out.extend(by_chain.pop(name, []))
    for rest in by_chain.values():
        out.extend(rest)
    return out


def many_services(
    count: int,
    endpoints: int = 5,
    *,
    service_cidr: str = "10.96.0.0/12",
    pod_cidr: str = "10.244.0.0/16",
    no_endpoint_every: int = 50,
    nodeport_every: int = 10,
    local_every: int = 20,
    affinity_every: int = 25,
) -> list[Service]:
    """A big, varied set of services: most ClusterIP, some NodePort, ETP=Local, affinity, no endpoints."""
    svc_base = int(ipaddress.ip_network(service_cidr).network_address) + 10
    pod_base = int(ipaddress.ip_network(pod_cidr).network_address) + 2
    services = []
    pod = 0
    nodeport = 30000
    for i in range(count):
        cip = str(ipaddress.IPv4Address(svc_base + i))
        has_np = nodeport_every and i % nodeport_every == 1
        port = Port("http", 80, 8080, "tcp", node_port=nodeport if has_np else None)
        if has_np:
            nodeport = nodeport + 1 if nodeport < 32767 else 30000
        eps = []
        if not (no_endpoint_every and i % no_endpoint_every == 7):
            for k in range(endpoints):
                eps.append(Endpoint(str(ipaddress.IPv4Address(pod_base + pod)), local=(k == 0)))
                pod += 1
        services.append(
            Service(
                namespace=f"ns{i % 100}",
                name=f"svc{i}",
                cluster_ip=cip,
                ports=[port],
                endpoints=eps,
                etp_local=bool(has_np and local_every and i % local_every == 1),
                affinity_seconds=10800 if affinity_every and i % affinity_every == 3 else None,
            )
        )
    return services


def _nft_hash(text: str) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:8]


def nft_ruleset(
    services: list[Service],
    cluster_cidr: str = "10.244.0.0/16",
    service_cidr: str = "10.96.0.0/12",
    node_ips: tuple[str, ...] = ("192.168.50.1",),
) -> str:
    """Render ``services`` as kube-proxy's nftables transaction (``nft -f`` input), in the layout of its
    TestOverallNFTablesRules: chain names hash8(ns/svc/proto/port)-ns/svc/proto/port; vmaps keyed by
    ``ip daddr . meta l4proto . th dport``; ``numgen random mod N`` over endpoint chains.
    internalTrafficPolicy/externalTrafficPolicy Local use the local-… chain over this node's endpoints, as
    kube-proxy does; no local endpoint for ClusterIP traffic is a ``drop`` in no-endpoint-services."""
    v6 = any(":" in svc.cluster_ip for svc in services)  # kube-proxy's IPv6 proxier: table ip6 kube-proxy
    fam = "ip6" if v6 else "ip"
    addr_t = "ipv6_addr" if v6 else "ipv4_addr"
    t = f"{fam} kube-proxy"
    head = [
        f'add table {t} {{ comment "rules for kube-proxy" ; }}',
        f'add set {t} cluster-ips {{ type {addr_t} ; comment "Active ClusterIPs" ; }}',
        f'add set {t} nodeport-ips {{ type {addr_t} ; comment "IPs that accept NodePort traffic" ; }}',
        f"add map {t} firewall-ips {{ type {addr_t} . inet_proto . inet_service : verdict ; }}",
        f"add map {t} no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; }}",
        f"add map {t} no-endpoint-services {{ type {addr_t} . inet_proto . inet_service : verdict ; }}",
        f"add map {t} service-ips {{ type {addr_t} . inet_proto . inet_service : verdict ; }}",
        f"add map {t} service-nodeports {{ type inet_proto . inet_service : verdict ; }}",
    ]
    chains = [
        "cluster-ips-check",
        "firewall-check",
        "mark-for-masquerade",
        "masquerading",
        "nodeport-endpoints-check",
        "reject-chain",
        "services",
        "service-endpoints-check",
    ]
    base = [
        ("filter-prerouting-pre-dnat", "filter hook prerouting priority -110"),
        ("filter-output-pre-dnat", "filter hook output priority -110"),
        ("filter-forward", "filter hook forward priority 0"),
        ("filter-input", "filter hook input priority 0"),
        ("filter-output", "filter hook output priority 0"),
        ("nat-output", "nat hook output priority -100"),
        ("nat-postrouting", "nat hook postrouting priority 100"),
        ("nat-prerouting", "nat hook prerouting priority -100"),
    ]
    rules = [
        f'add rule {t} cluster-ips-check {fam} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
        f'add rule {t} cluster-ips-check {fam} daddr {{ {service_cidr} }} drop comment "Drop traffic to unallocated ClusterIPs"',
        f"add rule {t} filter-prerouting-pre-dnat ct state new jump firewall-check",
        f"add rule {t} filter-forward ct state new jump service-endpoints-check",
        f"add rule {t} filter-forward ct state new jump cluster-ips-check",
        f"add rule {t} filter-input ct state new jump nodeport-endpoints-check",
        f"add rule {t} filter-input ct state new jump service-endpoints-check",
        f"add rule {t} filter-output ct state new jump service-endpoints-check",
        f"add rule {t} filter-output-pre-dnat ct state new jump firewall-check",
        f"add rule {t} filter-output ct state new jump cluster-ips-check",
        f"add rule {t} firewall-check {fam} daddr . meta l4proto . th dport vmap @firewall-ips",
        f"add rule {t} mark-for-masquerade mark set mark or 0x4000",
        f"add rule {t} masquerading mark and 0x4000 == 0 return",
        f"add rule {t} masquerading mark set mark xor 0x4000",
        f"add rule {t} masquerading masquerade fully-random",
        f"add rule {t} nat-output jump services",
        f"add rule {t} nat-postrouting jump masquerading",
        f"add rule {t} nat-prerouting jump services",
        f"add rule {t} nodeport-endpoints-check {fam} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
        f"add rule {t} reject-chain reject",
        f"add rule {t} services {fam} daddr . meta l4proto . th dport vmap @service-ips",
        f"add rule {t} services {fam} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        f"add rule {t} service-endpoints-check {fam} daddr . meta l4proto . th dport vmap @no-endpoint-services",
    ]
    sets: list[str] = []
    elements = [f"add element {t} nodeport-ips {{ {ip} }}" for ip in node_ips]
    for svc in services:
        for port in svc.ports:
            proto = port.protocol
            base_name = f"{svc.namespace}/{svc.name}/{proto}/{port.name}"
            svc_chain = f"service-{_nft_hash(base_name)}-{base_name}"
            local_chain = f"local-{_nft_hash(base_name)}-{base_name}"
            ext_chain = f"external-{_nft_hash(base_name)}-{base_name}"
            ready = [e for e in svc.endpoints if e.ready]
            local_ready = [e for e in ready if e.local]
            has_external = bool(port.node_port or svc.external_ips or svc.lb_ips)
            elements.append(f"add element {t} cluster-ips {{ {svc.cluster_ip} }}")
            if not ready:
                elements.append(
                    f'add element {t} no-endpoint-services {{ {svc.cluster_ip} . {proto} . {port.port} comment "{svc.port_name(port)}" : goto reject-chain }}'
                )
                if port.node_port:
                    elements.append(
                        f'add element {t} no-endpoint-nodeports {{ {proto} . {port.node_port} comment "{svc.port_name(port)}" : goto reject-chain }}'
                    )
                continue
            internal_chain = local_chain if svc.itp_local else svc_chain
            has_internal = bool(local_ready) or not svc.itp_local
            uses_cluster = svc.uses_cluster_chain(has_external)
            uses_local = bool(local_ready) and svc.uses_local_chain(has_external)
            if has_internal:
                elements.append(
                    f"add element {t} service-ips {{ {svc.cluster_ip} . {proto} . {port.port} : goto {internal_chain} }}"
                )
            else:  # internalTrafficPolicy: Local and no endpoint on this node
                elements.append(
                    f'add element {t} no-endpoint-services {{ {svc.cluster_ip} . {proto} . {port.port} comment "{svc.port_name(port)}" : drop }}'
                )
            reachable = ready if uses_cluster else local_ready
            eps = {}
            for e in reachable:
                ep_name = (
                    f"{base_name}__{e.ip.replace(':', '.')}/{port.target_port}"  # kube-proxy: IPv6 colons become dots
                )
                ep_chain = f"endpoint-{_nft_hash(ep_name)}-{ep_name}"
                eps[e.ip] = (ep_chain, ep_name)
                chains.append(ep_chain)
                rules.append(f"add rule {t} {ep_chain} {fam} saddr {e.ip} jump mark-for-masquerade")
                if svc.affinity_seconds:
                    aff = f"affinity-{_nft_hash(ep_name)}-{ep_name}"
                    sets.append(
                        f"add set {t} {aff} {{ type {addr_t} ; flags dynamic,timeout ; timeout {svc.affinity_seconds}s ; }}"
                    )
                    rules.append(f"add rule {t} {ep_chain} update @{aff} {{ {fam} saddr }}")
                rules.append(f"add rule {t} {ep_chain} meta l4proto {proto} dnat to {hostport(e.ip, port.target_port)}")
            if has_internal:
                rules.append(
                    f"add rule {t} {internal_chain} {fam} daddr {svc.cluster_ip} {proto} dport {port.port} {fam} saddr != {cluster_cidr} jump mark-for-masquerade"
                )
            for chain, members, used in ((svc_chain, ready, uses_cluster), (local_chain, local_ready, uses_local)):
                if not used:
                    continue
                chains.append(chain)
                if svc.affinity_seconds:
                    for e in members:
                        ep_chain, ep_name = eps[e.ip]
                        rules.append(
                            f"add rule {t} {chain} {fam} saddr @affinity-{_nft_hash(ep_name)}-{ep_name} goto {ep_chain}"
                        )
                vmap = ", ".join(f"{i} : goto {eps[e.ip][0]}" for i, e in enumerate(members))
                rules.append(f"add rule {t} {chain} numgen random mod {len(members)} vmap {{ {vmap} }}")
            if has_external:
                chains.append(ext_chain)
                if port.node_port:
                    elements.append(
                        f"add element {t} service-nodeports {{ {proto} . {port.node_port} : goto {ext_chain} }}"
                    )
                if svc.etp_local:
                    rules.append(
                        f'add rule {t} {ext_chain} {fam} saddr {cluster_cidr} goto {svc_chain} comment "short-circuit pod traffic"'
                    )
                    rules.append(
                        f'add rule {t} {ext_chain} fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"'
                    )
                    rules.append(
                        f'add rule {t} {ext_chain} fib saddr type local goto {svc_chain} comment "short-circuit local traffic"'
                    )
                    if local_ready:
                        rules.append(f"add rule {t} {ext_chain} goto {local_chain}")
                    elif port.node_port:
                        elements.append(
                            f'add element {t} no-endpoint-nodeports {{ {proto} . {port.node_port} comment "{svc.port_name(port)}" : drop }}'
                        )
                else:
                    rules.append(f"add rule {t} {ext_chain} jump mark-for-masquerade")
                    rules.append(f"add rule {t} {ext_chain} goto {svc_chain}")
    decl = [f"add chain {t} {name}" for name in chains] + [
        f"add chain {t} {name} {{ type {spec} ; }}" for name, spec in base
    ]
    return "\n".join(head + sets + decl + rules + elements) + "\n"


def ipvs_files(
    services: list[Service],
    cluster_cidr: str = "10.244.0.0/16",
    node_ip: str = "192.168.50.1",
    gateway: str = "192.168.50.254",
    ipvs_filter: bool = True,
    weights: dict | None = None,
    active: dict | None = None,
    scheduler: str = "rr",
    node_addrs: tuple = (),
) -> dict[str, str]:
    """What a kube-proxy IPVS-mode node shows: iptables-save, ipset save, ipvsadm -Sn / -Ln, ip -j addr/route.

    ``weights``/``active``: {endpoint ip: weight / active connections} (weight 0 = terminating).
    ``node_addrs``: more interfaces of the node, (ifname, ip, prefixlen, kind) — e.g. cni0 and flannel.1, whose
    addresses lie in the pod CIDR: kube-proxy makes a NodePort virtual server on every node address, as it does here.
    ``ipvs_filter``: newer kube-proxy's KUBE-IPVS-FILTER (rejects non-Service ports of bound IPs)."""
    weights, active = weights or {}, active or {}
    nat = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        ":KUBE-LOAD-BALANCER - [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-NODE-PORT - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SERVICES - [0:0]",
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ',
        '-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE',
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
        f'-A KUBE-SERVICES ! -s {cluster_cidr} -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ',
        "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
        "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
        "COMMIT",
    ]
    filt = [
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":KUBE-FIREWALL - [0:0]",
        ":KUBE-FORWARD - [0:0]",
        ":KUBE-NODE-PORT - [0:0]",
        ":KUBE-PROXY-FIREWALL - [0:0]",
        ":KUBE-SOURCE-RANGES-FIREWALL - [0:0]",
    ]
    if ipvs_filter:
        filt += [
            ":KUBE-IPVS-FILTER - [0:0]",
            ":KUBE-IPVS-OUT-FILTER - [0:0]",
            '-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER',
        ]
    filt += [
        '-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL',
        '-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT',
        '-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL',
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
    ]
    if ipvs_filter:
        filt += ['-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER']
    filt += [
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    ]
    if ipvs_filter:
        filt += [
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN",
            "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable",
        ]
    filt.append("COMMIT")
    sets = {
        "KUBE-CLUSTER-IP": "hash:ip,port",
        "KUBE-IPVS-IPS": "hash:ip",
        "KUBE-LOOP-BACK": "hash:ip,port,ip",
        "KUBE-NODE-PORT-TCP": "bitmap:port",
        "KUBE-LOAD-BALANCER": "hash:ip,port",
        "KUBE-EXTERNAL-IP": "hash:ip,port",
        "KUBE-HEALTH-CHECK-NODE-PORT": "bitmap:port",
    }
    members: dict[str, list[str]] = {k: [] for k in sets}
    save, listing = (
        [],
        [
            "IP Virtual Server version 1.2.1 (size=4096)",
            "Prot LocalAddress:Port Scheduler Flags",
            "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
        ],
    )
    bound = []
    for svc in services:
        bound.append(svc.cluster_ip)
        members["KUBE-IPVS-IPS"].append(svc.cluster_ip)
        for port in svc.ports:
            proto = port.protocol
            members["KUBE-CLUSTER-IP"].append(f"{svc.cluster_ip},{proto}:{port.port}")
            flag = {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}[proto]
            persist = f" -p {svc.affinity_seconds}" if svc.affinity_seconds else ""
            save.append(f"-A {flag} {svc.cluster_ip}:{port.port} -s {scheduler}{persist}")
            listing.append(
                f"{proto.upper():<4} {svc.cluster_ip}:{port.port} {scheduler}"
                + (f" persistent {svc.affinity_seconds}" if svc.affinity_seconds else "")
            )
            if port.node_port:
                members["KUBE-NODE-PORT-TCP"].append(str(port.node_port))
                for ip in [node_ip] + [a[1] for a in node_addrs]:
                    save.append(f"-A {flag} {ip}:{port.node_port} -s {scheduler}")
            # LoadBalancer ingress IPs and externalIPs: bound on kube-ipvs0, a virtual server each, in their ipsets
            extern = [(ip, "KUBE-LOAD-BALANCER") for ip in svc.lb_ips] + [
                (ip, "KUBE-EXTERNAL-IP") for ip in svc.external_ips
            ]
            for ip, ipset_name in extern:
                if ip not in bound:
                    bound.append(ip)
                    members["KUBE-IPVS-IPS"].append(ip)
                members[ipset_name].append(f"{ip},{proto}:{port.port}")
                save.append(f"-A {flag} {ip}:{port.port} -s {scheduler}")
            for e in svc.endpoints:
                if not e.ready:
                    continue
                w = weights.get(e.ip, 1)
                if (
                    e.local or not svc.itp_local
                ):  # internalTrafficPolicy: Local: the ClusterIP's real servers are this node's
                    save.append(f"-a {flag} {svc.cluster_ip}:{port.port} -r {e.ip}:{port.target_port} -m -w {w}")
                    listing.append(f"  -> {e.ip}:{port.target_port:<22} Masq    {w:<6} {active.get(e.ip, 0):<10} 0")
                members["KUBE-LOOP-BACK"].append(f"{e.ip},{proto}:{port.target_port},{e.ip}")
                if port.node_port:
                    for ip in [node_ip] + [a[1] for a in node_addrs]:
                        save.append(f"-a {flag} {ip}:{port.node_port} -r {e.ip}:{port.target_port} -m -w {w}")
                for ip, _ in extern:
                    save.append(f"-a {flag} {ip}:{port.port} -r {e.ip}:{port.target_port} -m -w {w}")
    ipset = []
    for name, kind in sets.items():
        extra = " range 30000-32767" if kind.startswith("bitmap") else " family inet hashsize 1024 maxelem 65536"
        ipset.append(f"create {name} {kind}{extra}")
        ipset.extend(f"add {name} {m}" for m in members[name])
    addrs = [
        {
            "ifindex": 1,
            "ifname": "lo",
            "mtu": 65536,
            "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
        },
        {
            "ifindex": 2,
            "ifname": "eth0",
            "mtu": 1500,
            "addr_info": [{"family": "inet", "local": node_ip, "prefixlen": 24}],
        },
        {
            "ifindex": 3,
            "ifname": "kube-ipvs0",
            "mtu": 1500,
            "linkinfo": {"info_kind": "dummy"},
            "addr_info": [{"family": "inet", "local": ip, "prefixlen": 32} for ip in bound],
        },
    ] + [
        {
            "ifindex": 4 + i,
            "ifname": ifname,
            "mtu": 1450,
            "linkinfo": {"info_kind": kind},
            "addr_info": [{"family": "inet", "local": ip, "prefixlen": plen}],
        }
        for i, (ifname, ip, plen, kind) in enumerate(node_addrs)
    ]
    net = node_ip.rsplit(".", 1)[0]
    routes = [
        {"dst": "default", "gateway": gateway, "dev": "eth0"},
        {"dst": f"{net}.0/24", "dev": "eth0", "prefsrc": node_ip},
        {"dst": "10.244.0.0/16", "gateway": f"{net}.2", "dev": "eth0"},
    ]
    routes += [{"type": "local", "dst": ip, "dev": "kube-ipvs0", "table": "local"} for ip in bound]
    import json

    return {
        "node/iptables-save.txt": "# Generated by iptables-save v1.8.9 (nf_tables)\n" + "\n".join(filt + nat) + "\n",
        "node/ipset.txt": "\n".join(ipset) + "\n",
        "node/ipvsadm.txt": "\n".join(save) + "\n",
        "node/ipvsadm-list.txt": "\n".join(listing) + "\n",
        "node/ip-addr.json": json.dumps(addrs, indent=1) + "\n",
        "node/ip-route.json": json.dumps(routes, indent=1) + "\n",
    }
