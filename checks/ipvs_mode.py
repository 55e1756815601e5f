"""IPVS mode as kube-proxy programs it: virtual servers against the API, bound addresses, terminating real servers,
sysctls, ipsets, deprecation. The kernel side (modules, idle timeouts) is checks/ipvs_kernel.py's."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag import evidence as ev
from kpdiag.fixcmd import persist_sysctls, set_sysctls
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence

from kpdiag.bundle import sources
from kpdiag.state.typed_api import EndpointSlices, Focus, NodeObject, Services
from kpdiag.state.typed_node import Addresses, Kernel, Manifest, ModulesOnDisk, Preflight, Routes, Sysctls
from kpdiag.state.typed_proxy import (
    Ipsets,
    Ipvs,
    IpvsConnections,
    KubeProxyConfig,
    KubeProxyRules,
    KubeProxyVersion,
    ProxyMode,
)

from . import dataplane


def _ipvs_mode(preflight: str | None, dp) -> bool:
    """Whether IPVS mode is the question: --preflight asks about it (``preflight``), or kube-proxy runs it (``dp``, the
    dataplane class of the running mode)."""
    if _preflight(preflight):
        return True
    if not dp.known:
        raise Skip("kube-proxy's mode is unknown (no /proxyMode, configuration or rules)")
    return dp.services_in_ipvs


def _ipvs_table(ipvs: Ipvs, preflight: Preflight, proxy: ProxyMode):
    """IPVS's virtual servers, or Skip when they are not where this node's Services live (kube-proxy runs another
    mode, or its mode is unknown; --preflight ipvs: whatever runs now)."""
    why = dataplanes.get("ipvs").ports_skip(proxy.dataplane, preflight.mode, ipvs)
    if why:
        raise Skip(why)
    return ipvs.services


def _preflight(preflight: str | None) -> bool:
    """--preflight asks whether this host can run IPVS mode."""
    return dataplanes.get(preflight).services_in_ipvs


@check(
    "KP302",
    "ipvs-service-missing",
    "Service port without an IPVS virtual server",
    "error",
    shows=("stale-rules",),
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="Connections to the ClusterIP are refused or time out on this node; other nodes work.",
    why="""
        In IPVS mode kube-proxy creates one IPVS virtual server per ClusterIP:port and binds the ClusterIP on the
        kube-ipvs0 interface. A Service port without a virtual server is not load-balanced on this node: packets to it
        are delivered to the node itself (and refused there, or rejected by KUBE-IPVS-FILTER).
    """,
    fix="Check kube-proxy on this node (its log: IPVS errors, ipset errors) and restart it.",
)
def service_missing(
    new,
    services: Services,
    slices: EndpointSlices,
    ipvs: Ipvs,
    focus: Optional[Focus] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.missing(new, dataplanes.get("ipvs"), ipvs, services, proxy, focus, preflight)


@check(
    "KP303",
    "ipvs-realservers-mismatch",
    "IPVS real servers differ from the ready endpoints",
    "error",
    shows=("stale-rules",),
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="A share of connections fails or reaches old pods on this node.",
    why="""
        Each IPVS virtual server's real servers should be exactly the Service's ready endpoints (with
        internalTrafficPolicy: Local, those on this node; terminating ones stay
        with weight 0 until their connections end). Extra real servers with weight > 0 receive new connections for
        pods that are gone; missing ones never get traffic from this node. kube-proxy's view here is stale.
    """,
    fix="Find why kube-proxy on this node is stale (log, /healthz) and restart it.",
)
def realservers(
    new,
    services: Services,
    slices: EndpointSlices,
    ipvs: Ipvs,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    node: Optional[NodeObject] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.mismatch(
        new, dataplanes.get("ipvs"), ipvs, services, slices, proxy, focus, node, manifest, preflight
    )


@check(
    "KP304",
    "ipvs-ip-not-bound",
    "ClusterIP not bound on kube-ipvs0",
    "error",
    shows=("stale-rules",),
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="Connections to some ClusterIPs time out on this node although their IPVS virtual servers exist.",
    why="""
        IPVS only sees packets delivered to the node itself. kube-proxy makes that happen by adding every ClusterIP
        as an address on the dummy interface kube-ipvs0. A virtual server whose address is not bound there never
        gets packets: they are routed away like any unknown address (or loop via the gateway).
    """,
    fix="Restart kube-proxy on this node; check that kube-ipvs0 exists (ip addr show kube-ipvs0).",
)
def not_bound(
    new,
    addresses: Addresses,
    ipvs: Ipvs,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
    routes: Optional[Routes] = None,
):
    services = _ipvs_table(ipvs, preflight, proxy)
    if routes is not None:
        routing = routes.routing
    else:  # the node's own addresses are local without the routes too
        from kpdiag.trace.routing import routing_from_ip_json

        routing = routing_from_ip_json(list(addresses.links), None)
    bound = set()
    have_iface = False
    for link in addresses.links:
        if link.get("ifname") == "kube-ipvs0":
            have_iface = True
            bound |= {a.get("local") for a in link.get("addr_info") or []}
    missing = sorted(
        {
            vs.addr
            for vs in services.values()
            if vs.addr and vs.addr not in bound and not routing.is_local(*_ip(vs.addr))
        }
    )
    if not missing:
        return
    yield new(
        (
            f"{len(missing)} IPVS virtual server address(es) are not on kube-ipvs0"
            if have_iface
            else "there is no kube-ipvs0 interface"
        )
        + f": {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''} never reach IPVS",
        fix=(
            "ip addr show kube-ipvs0",
            "kubectl -n kube-system delete pod <kube-proxy pod on this node>   # it re-binds every ClusterIP",
        ),
        evidence=[
            Evidence(
                addresses.source,
                f"kube-ipvs0: {len(bound)} addresses" if have_iface else "no interface kube-ipvs0",
            ),
            Evidence(ipvs.source, f"virtual servers for {', '.join(missing[:3])}"),
        ],
        subject="node",
    )


def _ip(addr):
    from kpdiag.parse.addr import parse_ip

    return parse_ip(addr)


@check(
    "KP305",
    "ipvs-graceful-termination",
    "Terminating real servers still carry connections",
    "info",
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="After a rollout, some clients keep talking to old pods for a while.",
    why="""
        When an endpoint goes away, kube-proxy sets its IPVS real server's weight to 0 instead of deleting it, so
        established connections can finish (graceful termination). Weight 0 takes no new connections. Long-lived
        connections (gRPC, websockets, keep-alive) can keep old pods busy for a long time; with
        net.ipv4.vs.expire_nodest_conn = 1 they are cut when the real server is finally removed. IPVS's own
        connection table (/proc/net/ip_vs_conn) shows connections still held to real servers that are gone:
        with expire_nodest_conn = 0 their clients wait on a pod that no longer exists until the entry times out.
    """,
    fix="Nothing to fix if expected; shorten connection lifetimes (keep-alive limits) or drain clients if old pods must go.",
)
def graceful(
    new,
    ipvs: Ipvs,
    conn: Optional[IpvsConnections] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
    sysctls: Optional[Sysctls] = None,
):
    services = _ipvs_table(ipvs, preflight, proxy)
    conns = conn.doc if conn is not None else None
    listed = ipvs.listing is not None
    if not listed and conns is None:
        raise Skip(
            f"connection counts need {sources.IPVSADM_LIST} (ipvsadm -Ln) or {sources.IPVS_CONN} (/proc/net/ip_vs_conn)"
        )
    for vs in services.values():
        for r in vs.reals:
            if listed and r.weight == 0 and (r.active or 0) > 0:
                yield new(
                    f"{vs.name}: real server {r.target} has weight 0 (terminating) and still {r.active} active connection(s)",
                    fix=(
                        f"ipvsadm -Lnc | grep {r.addr}   # the connections",
                        "sysctl net.ipv4.vs.expire_nodest_conn   # 1: cut when the server is removed",
                    ),
                    evidence=[
                        Evidence(
                            ipvs.listing,
                            f"-> {r.target} weight 0 active {r.active}",
                            r.line,
                        )
                    ],
                    subject=vs.name,
                )
    if conns is None:
        return
    # connections IPVS still holds to a real server that is in its virtual service no more
    gone: dict[tuple, dict[str, int]] = {}
    for e in conns["entries"]:
        try:
            vs = services.get((e["proto"], e["vaddr"], int(e["vport"])))
            target, state, count = f"{e['daddr']}:{int(e['dport'])}", str(e["state"]), int(e["count"])
        except (KeyError, TypeError, ValueError):
            continue
        if vs is not None and target not in {r.target for r in vs.reals}:
            states = gone.setdefault((vs.name, target), {})
            states[state] = states.get(state, 0) + count
    if not gone:
        return
    expire = sysctls.value("net.ipv4.vs.expire_nodest_conn") if sysctls is not None else None
    partial = (
        f" (only the first {conns.get('connections_read')} connections were counted)" if conns.get("truncated") else ""
    )
    for (name, target), states in sorted(gone.items()):
        total = sum(states.values())
        by_state = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        why_kept = (
            "net.ipv4.vs.expire_nodest_conn = 0 keeps them until their timeout: clients wait on a pod that is gone"
            if expire is not None and expire.value.strip() == "0"
            else "with expire_nodest_conn = 1 each is dropped at its next packet"
        )
        evidence = [Evidence(conn.source, f"{name} -> {target}: {by_state}")]
        fix = [f"ipvsadm -Lnc | grep {target.rsplit(':', 1)[0]}   # the connections"]
        if expire is not None:
            evidence.append(sysctls.evidence("net.ipv4.vs.expire_nodest_conn"))
            if expire.value.strip() == "0":
                fix.append(
                    "sysctl -w net.ipv4.vs.expire_nodest_conn=1   # what kube-proxy sets; persist in /etc/sysctl.d/"
                )
        yield new(
            f"{name}: IPVS still holds {total} connection(s) to {target}, which is no real server of it any more ({why_kept}){partial}",
            fix=tuple(fix),
            evidence=evidence,
            subject=name,
        )


IPVS_SYSCTLS = {
    "net.ipv4.vs.conntrack": (
        "1",
        "IPVS must keep conntrack entries for kube-proxy's masquerade (KUBE-POSTROUTING) and NodePorts",
    ),
    "net.ipv4.vs.expire_nodest_conn": (
        "1",
        "connections to removed real servers must expire, or clients hang on gone pods",
    ),
    "net.ipv4.vs.expire_quiescent_template": (
        "1",
        "persistence templates of weight-0 servers must expire (session affinity)",
    ),
}


@check(
    "KP306",
    "ipvs-sysctls",
    "IPVS sysctls wrong for kube-proxy",
    "warning",
    modes=("ipvs",),
    advice_for="kube-proxy",
    preflight=("ipvs",),
    symptom="Intermittent timeouts or 1-second delays on new connections; clients stuck on removed pods; masquerade not applied.",
    why="""
        kube-proxy's IPVS mode relies on net.ipv4.vs.conntrack=1, expire_nodest_conn=1 and
        expire_quiescent_template=1, and on net.ipv4.vs.conn_reuse_mode: on kernels before 5.9, conn_reuse_mode=1
        caused a 1-second delay for reused source ports, so kube-proxy set it to 0; from 5.9 the kernel fixed it
        and 1 is right. A value changed by hand or by another tool breaks those.
    """,
    fix="Set the values kube-proxy expects (sysctl -w …) and persist them in /etc/sysctl.d/.",
)
def ipvs_sysctls(
    new, sysctls: Sysctls, kernel: Kernel, preflight: Optional[Preflight] = None, proxy: Optional[ProxyMode] = None
):
    if not _ipvs_mode(preflight.mode, proxy.dataplane):
        return
    wrong = []
    for key, (want, why) in IPVS_SYSCTLS.items():
        v = sysctls.value(key)
        if v is not None and v.value.strip() != want:
            wrong.append((key, v, want, why))
    v = sysctls.value("net.ipv4.vs.conn_reuse_mode")
    want_reuse = "1" if kernel.version >= (5, 9, 0) else "0"
    if v is not None and v.value.strip() != want_reuse:
        wrong.append(
            (
                "net.ipv4.vs.conn_reuse_mode",
                v,
                want_reuse,
                "on kernel ≥ 5.9 reuse must stay on"
                if want_reuse == "1"
                else "on kernel < 5.9 reuse causes 1 s delays",
            )
        )
    if not wrong and sysctls.value("net.ipv4.vs.conntrack") is None:
        raise Skip("no net.ipv4.vs.* sysctls collected (ip_vs not loaded?)")
    for key, v, want, why in wrong:
        yield new(
            f"{key} = {v.value}, kube-proxy needs {want}: {why}",
            fix=(
                set_sysctls({key: want}),
                persist_sysctls({key: want}, "ipvs-" + key.rsplit(".", 1)[-1].replace("_", "-")),
            ),
            evidence=[sysctls.evidence(key)],
            subject="node",
            data={**sysctls.data({key: want}), "why": why},
        )


@check(
    "KP307",
    "ipvs-strict-arp",
    "strictARP off in IPVS mode",
    "warning",
    modes=("ipvs",),
    # read nothing of: a partial bundle holds kube-ipvs0's addresses and the virtual servers of one Service only (the
    # LoadBalancer IPs of the others, left out, would pass unseen)
    needs=("whole-rules",),
    advice_for="kube-proxy",
    symptom="With MetalLB (L2) or another ARP-based load balancer, the LoadBalancer IP flaps or answers from the wrong node.",
    why="""
        In IPVS mode every node binds every Service address on kube-ipvs0 — LoadBalancer IPs included — and by default
        answers ARP for them on any interface. An L2 load balancer (MetalLB in L2 mode, kube-vip) relies on only one
        node answering. ipvs.strictARP: true makes kube-proxy set arp_ignore=1 / arp_announce=2 so that nodes stop
        answering ARP for kube-ipvs0 addresses.
    """,
    fix="Set ipvs.strictARP: true in the kube-proxy ConfigMap and restart kube-proxy (needed for MetalLB L2 in IPVS mode).",
    references=("https://metallb.universe.tf/installation/#preparation",),
)
def strict_arp(
    new,
    cfg: KubeProxyConfig,
    sysctls: Sysctls,
    addresses: Optional[Addresses] = None,
    ipsets: Optional[Ipsets] = None,
    ipvs: Optional[Ipvs] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
):
    if not _ipvs_mode(preflight.mode, proxy.dataplane) or cfg.get("ipvs.strictARP") is True:
        return
    ignore = sysctls.value("net.ipv4.conf.all.arp_ignore")
    if ignore is not None and ignore.value.strip() in ("1", "2"):
        return  # ARP is already restricted on the node
    lb = _lb_addresses(addresses, ipsets, ipvs, services)
    if not lb:
        return  # no LoadBalancer IP or externalIP on kube-ipvs0 / in IPVS: nothing an L2 load balancer announces here
    shown = sorted(lb)[:5]
    yield new(
        f"kube-proxy runs IPVS with strictARP: false and {len(lb)} LoadBalancer/external IP(s) ({', '.join(shown)}) are bound on "
        "kube-ipvs0 of every node — every node answers ARP for them (a problem with L2 load balancers such as MetalLB L2)",
        fix=(
            "kubectl -n kube-system get configmap kube-proxy -o yaml | sed -e 's/strictARP: false/strictARP: true/' | kubectl apply -f - -n kube-system",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[e for e in (cfg.evidence("ipvs.strictARP"), sysctls.evidence("net.ipv4.conf.all.arp_ignore")) if e]
        + [Evidence(src, f"{ip}: {why}") for ip, (src, why) in sorted(lb.items())[:5]],
        subject="node",
        data={"strict_arp": cfg.get("ipvs.strictARP"), "addresses": sorted(lb)},
    )


def _lb_addresses(addresses, ipsets, ipvs, services) -> dict[str, tuple[str, str]]:
    """LoadBalancer ingress IPs and externalIPs this node holds in IPVS mode → (source, how it is known): members of
    kube-proxy's KUBE-LOAD-BALANCER / KUBE-EXTERNAL-IP ipsets, or the API's LoadBalancer IPs, that are bound on
    kube-ipvs0 or are IPVS virtual servers."""
    candidates: dict[str, str] = {}
    for name in ("KUBE-LOAD-BALANCER", "KUBE-EXTERNAL-IP"):
        s = ((ipsets.sets if ipsets is not None else None) or {}).get(name)
        for raw in getattr(s, "raw_entries", None) or []:
            candidates.setdefault(str(raw).split(",", 1)[0].strip(), f"in ipset {name}")
    for svc in services.every if services is not None else ():
        for ing in ((svc.raw.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            if isinstance(ing, dict) and ing.get("ip"):
                candidates.setdefault(ing["ip"], f"LoadBalancer IP of {svc.key}")
        for ip in svc.spec.get("externalIPs") or []:
            candidates.setdefault(str(ip), f"externalIP of {svc.key}")
    bound = None
    for link in addresses.links if addresses is not None else []:
        if link.get("ifname") == "kube-ipvs0":
            bound = {a.get("local") for a in link.get("addr_info") or []}
    vips = {str(k[1]) for k in (ipvs.services if ipvs is not None else {})}
    out = {}
    for ip, why in candidates.items():
        if bound is not None and ip in bound:
            out[ip] = (addresses.source, f"bound on kube-ipvs0 ({why})")
        elif ip in vips:
            out[ip] = (ipvs.source, f"IPVS virtual server ({why})")
    return out


@check(
    "KP308",
    "ipvs-ipset",
    "kube-proxy's ipsets missing in IPVS mode",
    "error",
    modes=("ipvs",),
    advice_for="kube-proxy",
    preflight=("ipvs",),
    symptom="In IPVS mode, masquerading and NodePorts misbehave; kube-proxy logs ipset errors.",
    why="""
        In IPVS mode kube-proxy keeps its iptables rules constant and puts the addresses in ipsets: KUBE-CLUSTER-IP
        (ClusterIP,proto:port), KUBE-LOOP-BACK (hairpin), KUBE-NODE-PORT-*… When the ipset tool or the ip_set kernel
        module is missing, those sets do not exist and the rules that reference them do not match (or cannot even
        be loaded).
    """,
    fix="Install ipset (apt-get/dnf install ipset), load ip_set (modprobe ip_set), restart kube-proxy.",
)
def ipvs_ipset(
    new,
    rules: KubeProxyRules,
    ipsets: Optional[Ipsets] = None,
    modules: Optional[ModulesOnDisk] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    if not _ipvs_mode(preflight.mode, proxy.dataplane):
        return
    sets = ipsets.sets
    if sets is not None and "KUBE-CLUSTER-IP" in sets:
        return
    if _preflight(preflight.mode):
        if sets is not None:
            # before the switch kube-proxy has made no set yet: what the node needs is ipset working, and it answered
            return
        available = modules.available
        not_loaded = any("not loaded" in p.error for p in ipsets.problems)
        if not_loaded and available is not None and "ip_set" in available:
            return  # ip_set is on disk: the first ipset command (kube-proxy's) loads it
    why = (
        f"{sources.IPSET} has no KUBE-CLUSTER-IP set"
        if sets is not None
        else "no ipsets could be read (ipset save failed or ip_set is not loaded)"
    )
    rs = rules.ruleset
    refs = [r for r in (rs.iter_rules() if rs else []) if "--match-set" in r.text][:2]
    who = "IPVS mode (preflight) needs ipset, but" if _preflight(preflight.mode) else "kube-proxy runs IPVS mode but"
    yield new(
        f"{who} {why}: the KUBE-* set rules cannot match",
        fix=(
            "ipset list -n",
            "sudo apt-get install -y ipset   # or: sudo dnf install -y ipset",
            "modprobe ip_set",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
        ),
        evidence=[Evidence(ipsets.source, why)] + [ev.rule(r) for r in refs],
        subject="node",
    )


@check(
    "KP309",
    "ipvs-deprecated",
    "IPVS mode is deprecated on this release",
    "warning",
    modes=("ipvs",),
    advice_for="kube-proxy",
    preflight=("ipvs",),
    symptom="None yet — but IPVS mode gets no new features and will be removed.",
    why="""
        kube-proxy's IPVS mode is deprecated from Kubernetes v1.35. nftables mode (GA since v1.33) gives the same
        scalability — map lookups instead of linear chains, incremental updates — and is where new work happens.
    """,
    fix="Plan the move to nftables mode: kernel ≥ 5.13, mode: nftables in the kube-proxy ConfigMap, restart, then clean IPVS leftovers.",
    references=("https://kubernetes.io/docs/reference/networking/virtual-ips/#proxy-mode-nftables",),
)
def deprecated(
    new,
    cfg: Optional[KubeProxyConfig] = None,
    kp_version: Optional[KubeProxyVersion] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    if not _ipvs_mode(preflight.mode, proxy.dataplane):
        return
    version = kp_version.version if kp_version is not None else None
    if version is None:
        raise Skip(f"kube-proxy's version is unknown (metrics or {sources.VERSION})")
    if version < (1, 35):
        return
    yield new(
        f"kube-proxy {version[0]}.{version[1]} runs the IPVS mode, deprecated since v1.35: plan nftables mode",
        fix=(
            "kpdiag node --preflight nftables   # is this node ready (kernel ≥ 5.13)?",
            "kubectl -n kube-system edit configmap kube-proxy   # mode: nftables",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            "afterwards: ipvsadm -C; ip link del kube-ipvs0   # remove IPVS leftovers (KP208)",
        ),
        evidence=[e for e in (cfg.evidence("mode") if cfg is not None else None,) if e]
        + [Evidence(kp_version.source, f"kube-proxy v{version[0]}.{version[1]}")],
        subject="node",
    )
