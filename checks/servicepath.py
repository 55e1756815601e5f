"""The path of a Service's traffic through kube-proxy's rules (2xx): ICMP to ClusterIPs, the rules on the node vs the
API, hairpin. Its conntrack entries are checks/conntrack.py's (KP504), its routes checks/routing.py's (KP602)."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag.checkapi import Skip, check
from kpdiag.parse.addr import hostport
from kpdiag.model import Evidence
from kpdiag.state.typed_api import EndpointSlices, Focus, NodeObject, Probes, Services
from kpdiag.state.typed_node import Manifest
from kpdiag.state.typed_proxy import KubeProxyRules, KubeProxyVersion, ProxyMode

from .service import in_focus
from kpdiag.bundle import sources

from . import dataplane


def _tcp_summary(probes: Probes, svc, ip: str | None = None) -> str:
    """What the port probes to ``ip`` (default: the first ClusterIP) found, in a few words."""
    bits = []
    for target in [ip] if ip else svc.cluster_ips[:1]:
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").lower()
            rs = [
                r
                for r in probes.probe_results("tcp-connect" if proto == "tcp" else "udp")
                if r.get("target") == f"{hostport(target, port.get('port'))}/{proto}"
            ]
            bad = [r for r in rs if r["result"] not in ("connected", "syn-ack", "udp-reply")]
            if rs:
                some = f" in {len(bad)} of {len(rs)} connects" if bad and len(rs) > 1 else ""
                bits.append(
                    f"{proto.upper()} {port.get('port')} {'gets ' + bad[0]['result'] + some if bad else 'works'}"
                )
    return "; ".join(bits)


def _service_cidr_guess(ip: str) -> str:
    """The service CIDR around a ClusterIP, as a guess with the place to read the real one: kubeadm's default
    /12 for IPv4, /112 for IPv6 (kube-apiserver allows at most /108 there)."""
    import ipaddress

    net = ipaddress.ip_network(f"{ip}/{112 if ':' in ip else 12}", strict=False)
    return f"{net} (your service CIDR; see kube-apiserver --service-cluster-ip-range)"


@check(
    "KP201",
    "icmp-to-cluster-ip",
    "ping to a ClusterIP does not work — by design",
    "info",
    severities=("info", "warning"),
    verdict=("ping",),
    symptom="ping <ClusterIP> prints 'Time to live exceeded' (or nothing at all), and people conclude the Service is down.",
    why="""
        In iptables and nftables mode a ClusterIP exists only as rules: kube-proxy DNATs TCP, UDP and SCTP packets to
        the Service's own ports, and nothing else. An ICMP echo matches no rule, so the node routes it like any packet
        to an unknown address — to its default gateway. If that gateway routes the service CIDR back to the nodes,
        the packet ping-pongs between node and gateway until its TTL runs out and the gateway (or the node) answers
        "Time to live exceeded". In nftables mode, ClusterIPs on ports the Service does not define are rejected and
        unallocated service IPs are dropped. In IPVS mode the ClusterIPs are bound on kube-ipvs0, so older releases
        answer ping locally; newer ones reject non-Service ports (KUBE-IPVS-FILTER). None of this says anything about
        whether the Service works: test its TCP/UDP port.
    """,
    fix="Test Services with their port (kpdiag svc, nc -vz, curl), never with ping; stop the loop with a blackhole route for the service CIDR on the gateway.",
    references=("https://kubernetes.io/docs/reference/networking/virtual-ips/",),
)
def icmp_cluster_ip(
    new,
    services: Services,
    probes: Probes,
    focus: Optional[Focus] = None,
    rules: Optional[KubeProxyRules] = None,
    version: Optional[KubeProxyVersion] = None,
    proxy: Optional[ProxyMode] = None,
):
    echoes = probes.probe_results("icmp-echo")
    if not echoes or all(r.get("result") == "skipped" for r in echoes):
        raise Skip(
            "no ICMP probe was sent: " + next((r.get("detail", {}).get("reason", "") for r in echoes), "no probes")
        )
    for svc in in_focus(services, focus):
        for ip in svc.cluster_ips:
            echo = next(
                (r for r in echoes if r.get("target") == f"{ip}/icmp" and r.get("detail", {}).get("ttl", 64) == 64),
                None,
            )
            if echo is None or echo["result"] == "skipped":
                continue
            finding = _icmp_finding(new, probes, svc, ip, echo, rules, version, proxy)
            if finding is not None:
                yield finding


def _icmp_finding(new, probes: Probes, svc, ip: str, echo: dict, rules, version, proxy):
    """The finding for what one ping to ``ip`` got back, or None when that answer is what the mode gives."""
    mode, dp = proxy.mode, proxy.dataplane
    works = _tcp_summary(probes, svc, ip)
    ev = [
        Evidence(
            sources.PROBES_SERVICE,
            f"ping {ip}: {echo['result']}" + (f" from {echo['from']}" if echo.get("from") else ""),
        )
    ]
    if echo["result"] == "time-exceeded":
        walk = next((r for r in probes.probe_results("ttl-walk") if r.get("target") == f"{ip}/icmp"), None)
        return _icmp_loops(new, svc, ip, echo, walk, ev, works)
    if echo["result"] == "timeout":
        if dp.cluster_ips_bound:
            return None
        return new(
            f"ping {ip} ({svc.key}) gets no answer — expected in {mode or 'iptables/nftables'} mode: a ClusterIP only answers on its Service ports."
            + (f" {works} through the Service." if works else ""),
            fix=_port_fix(svc, ip),
            evidence=ev,
            subject=f"{svc.key} {ip}",
        )
    if echo["result"] in ("port-unreachable", "admin-prohibited") and dp.cluster_ips_bound:
        return _icmp_ipvs_rejects(new, svc, ip, echo, rules, version, ev, works)
    if echo["result"] == "echo-reply" and not dp.cluster_ips_bound:
        return new(
            f"ping {ip} ({svc.key}) is answered by {echo.get('from')}: something other than kube-proxy owns this address in {mode or 'this'} mode",
            severity="warning",
            fix=(
                f"ip -o addr | grep -w {ip}   # on the nodes: who has the address?",
                "kpdiag trace --dst <ClusterIP> --proto icmp … on a node",
            ),
            evidence=ev,
            subject=f"{svc.key} {ip}",
        )
    return None


def _port_fix(svc, ip: str) -> tuple[str, str]:
    """Test the Service's real ports instead of ping."""
    return (
        f"kpdiag svc {svc.name} -n {svc.namespace}   # tests the real ports",
        f"nc -vz {ip} {svc.ports[0].get('port') if svc.ports else '<port>'}",
    )


def _icmp_loops(new, svc, ip: str, echo: dict, walk: dict | None, ev: list, works: str):
    """ping got 'Time to live exceeded': the packet was routed to the gateway and back (with the TTL walk, where)."""
    cidr = _service_cidr_guess(ip)
    route = "ip -6 route" if ":" in ip else "ip route"
    router = echo.get("from")
    loop = (walk or {}).get("detail", {}).get("loop_between")
    if walk:
        hops = ", ".join(f"ttl {h['ttl']}: {h['from'] or '*'}" for h in walk["detail"]["hops"])
        ev.append(
            Evidence(
                sources.PROBES_SERVICE,
                f"TTL walk to {ip}: {hops}" + (f" — loops between {' and '.join(loop)}" if loop else ""),
            )
        )
    return new(
        f"ping {ip} ({svc.key}) gets 'Time to live exceeded' from {router}"
        + (f": the packet loops between {' and '.join(loop)}" if loop else "")
        + ". That is expected — only the Service's ports are translated, ICMP is routed to the gateway and back."
        + (f" {works} through the Service." if works else ""),
        severity="warning",
        fix=(
            f"test the Service with its port instead: kpdiag svc {svc.name} -n {svc.namespace}   (or nc -vz {ip} {svc.ports[0].get('port') if svc.ports else '<port>'})",
            f"stop the loop on the router {router}: {route} add blackhole {cidr}   (or 'unreachable' to answer at once)",
            f"or on every node: {route} add unreachable <service CIDR>   # the node then refuses untranslated traffic itself",
            "never use ping as a Service health check; use a TCP/HTTP probe on the Service port",
        ),
        evidence=ev,
        subject=f"{svc.key} {ip}",
    )


def _icmp_ipvs_rejects(new, svc, ip: str, echo: dict, rules, version, ev: list, works: str):
    """ping was rejected in IPVS mode: KUBE-IPVS-FILTER rejects what the Service's ports do not take."""
    rs = rules.ruleset if rules is not None else None
    filt = rs is not None and rs.chain("filter", "KUBE-IPVS-FILTER") is not None
    return new(
        f"ping {ip} ({svc.key}) is rejected ({echo['result']}"
        + (f" from {echo.get('from')}" if echo.get("from") else "")
        + "): in IPVS mode the ClusterIP is bound on kube-ipvs0 and kube-proxy's KUBE-IPVS-FILTER"
        + (
            f" (kube-proxy v{version.version[0]}.{version.version[1]})"
            if version is not None and version.version
            else ""
        )
        + " rejects traffic to ports the Service does not define — ICMP included. Older releases, without that chain, answered ping here."
        + (f" {works} through the Service." if works else ""),
        fix=_port_fix(svc, ip),
        evidence=ev
        + (
            [
                Evidence(
                    rs.source,
                    ":KUBE-IPVS-FILTER (rejects new connections to bound IPs outside the Service ports)",
                    rs.chain("filter", "KUBE-IPVS-FILTER").lineno,
                )
            ]
            if filt
            else []
        ),
        subject=f"{svc.key} {ip}",
    )


@check(
    "KP202",
    "service-not-programmed",
    "Service in the API, but not in this node's rules",
    "error",
    shows=("stale-rules",),
    modes=("iptables",),
    advice_for="kube-proxy",
    symptom="The Service works from some nodes and not from this one; new Services never work here.",
    why="""
        kube-proxy on every node watches Services and EndpointSlices and writes the matching rules. If a Service
        port with ready endpoints has no KUBE-SERVICES rule on this node, this node's kube-proxy is not doing its job:
        it is not running, cannot reach the API server, is stuck on a failing sync, or runs in another mode than
        the rules you are looking at.
    """,
    fix="Check kube-proxy on this node: is it running, what does its log say (KP703, KP704), which mode (KP701)?",
)
def not_programmed(
    new,
    services: Services,
    slices: EndpointSlices,
    rules: KubeProxyRules,
    focus: Optional[Focus] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.missing(new, dataplanes.get("iptables"), rules, services, proxy, focus)


@check(
    "KP203",
    "stale-endpoints",
    "Node sends traffic to other endpoints than the API lists",
    "error",
    shows=("stale-rules",),
    modes=("iptables",),
    advice_for="kube-proxy",
    symptom="Some connections to the Service fail or reach old pods; the failure rate matches the share of stale endpoints.",
    why="""
        The node's DNAT targets (the KUBE-SEP chains of the Service) should be exactly its ready endpoints (with
        internalTrafficPolicy: Local, the ready endpoints on this node, in KUBE-SVL). When they
        differ, this node's kube-proxy has a stale view: it still sends a share of the connections to pods that are
        gone (timeouts, refused) or not yet to new ones. Usually its syncs are failing or it lost its API watch.
    """,
    fix="Find why kube-proxy's sync is stale (KP703/KP704, its log) and restart it on this node.",
)
def stale(
    new,
    services: Services,
    slices: EndpointSlices,
    rules: KubeProxyRules,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    node: Optional[NodeObject] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.mismatch(
        new, dataplanes.get("iptables"), rules, services, slices, proxy, focus, node, manifest
    )


@check(
    "KP206",
    "hairpin",
    "A pod cannot reach itself through its own Service",
    "warning",
    verdict=("hairpin",),
    symptom="From inside a pod, its own Service times out — but only when the connection lands on that same pod.",
    why="""
        When a pod connects to its Service and kube-proxy picks that same pod as the endpoint, the packet must go out
        of the pod and come straight back in ("hairpin"). kube-proxy masquerades such traffic (KUBE-SEP: -s <pod IP>
        -j KUBE-MARK-MASQ) so the reply returns through the node, and on bridge networks the pod's bridge port needs
        hairpin mode (kubelet --hairpin-mode=hairpin-veth or promiscuous-bridge) to send the frame back where it came
        from. Without it, a share of connections — 1/N with N endpoints — hangs.
    """,
    fix="Set kubelet's hairpinMode (hairpin-veth / promiscuous-bridge) or the CNI's hairpin option; check the masquerade rule exists.",
)
def hairpin(
    new,
    services: Services,
    probes: Probes,
    slices: Optional[EndpointSlices] = None,
    focus: Optional[Focus] = None,
):
    src = probes.doc.get("source")
    if not src:
        raise Skip("the probe's source address is unknown")
    for svc in in_focus(services, focus):
        mine = [e for e in svc.endpoints if e.ip == src]
        if not mine:
            continue
        for ip in svc.cluster_ips[:1]:
            for port in svc.ports:
                series = [
                    r
                    for r in probes.probe_results("tcp-connect")
                    if r.get("target") == f"{hostport(ip, port.get('port'))}/tcp"
                ]
                via = next((r for r in series if r.get("result") not in ("connected", "skipped")), None)
                if via is None:
                    continue  # every connect through the ClusterIP answered (none landed on this pod, or it hairpins)
                n = len([e for e in svc.endpoints if e.ready]) or 1
                yield new(
                    f"this pod ({src}) is an endpoint of {svc.key}, and connecting to its ClusterIP {ip}:{port.get('port')} gets {via['result']}: "
                    f"the hairpin case (~1 in {n} connections lands on this pod)",
                    fix=(
                        "grep -i hairpin /var/lib/kubelet/config.yaml   # hairpinMode: hairpin-veth",
                        "for p in /sys/class/net/*/brport/hairpin_mode; do echo $p $(cat $p); done   # on the node: 1 = on",
                        "iptables-save -t nat | grep -- '-s " + src + "/32'   # the KUBE-SEP masquerade rule",
                    ),
                    evidence=[
                        Evidence(sources.PROBES_SERVICE, f"source {src}; TCP connect {via['target']}: {via['result']}"),
                        slices.evidence(f"{src} is an endpoint of {svc.key}"),
                    ],
                    subject=svc.key,
                )
