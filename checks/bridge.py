"""The CNI bridge: hairpin mode on the ports of pods that back Services (a pod reaching itself through its Service)."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import EndpointSlices, Services
from kpdiag.state.typed_node import Addresses, Sysctls
from kpdiag.state.typed_proxy import KubeProxyRules, Nft, ProxyMode, ServiceImplementer

from .shapes import links


def _bridges(links: list[dict]) -> dict[str, dict]:
    return {
        link["ifname"]: link
        for link in links
        if isinstance(link.get("ifname"), str) and (link.get("linkinfo") or {}).get("info_kind") == "bridge"
    }


def _subnets(link: dict) -> list:
    out = []
    for a in link.get("addr_info") or []:
        if a.get("family") == "inet" and a.get("local") and a.get("scope", "global") == "global":
            try:
                out.append(ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}").network)
            except ValueError:
                continue
    return out


def _endpoints(
    services: Services | None,
    slices: EndpointSlices,
    proxy: ProxyMode,
    nft: Nft | None,
    rules: KubeProxyRules | None,
) -> tuple[dict[str, str] | None, str]:
    """endpoint IP → the Service it backs, and where that is known (the API's EndpointSlices, else kube-proxy's rules)."""
    out: dict[str, str] = {}
    svcs = services.every if services is not None else None
    if svcs:
        for svc in svcs:
            for e in svc.endpoints:
                if e.ready and not svc.headless:
                    out.setdefault(e.ip, svc.key)
        return out, slices.source
    ruleset = nft.ruleset() if proxy.dataplane.services_in_nft and nft is not None else None
    if ruleset is not None:
        from kpdiag.dataplane.kube_nft import programmed_nft

        for sp in (programmed_nft(ruleset) or {}).values():
            for target in sp.endpoints:
                out.setdefault(target.rpartition(":")[0], sp.comment or sp.chain or "a Service")
        return out, nft.source
    if rules is None:
        return None, ""
    for p in rules.programmed.values():
        for target in p.endpoints:
            out.setdefault(target.rpartition(":")[0], p.name)
    return out, rules.ruleset.source


def _bridge_finding(new, name: str, br: dict, ports_known: list, endpoints: dict, ep_src: str, src: str, sysctls):
    """The finding for one bridge whose ports have hairpin off while pods on it back Services, or None."""
    if "PROMISC" in (br.get("flags") or []):
        return None  # promiscuous-bridge mode: the hairpin frame is delivered through the bridge device
    nets = _subnets(br)
    ports = [link for link in ports_known if link.get("master") == name]
    off = [p for p in ports if (p["linkinfo"].get("info_slave_data") or {}).get("hairpin") is False]
    if not nets or not off:
        return None
    backing = sorted(
        (ip, svc) for ip, svc in endpoints.items() if any(ipaddress.ip_address(ip) in n for n in nets if ":" not in ip)
    )
    if not backing:
        return None  # no pod on this bridge backs a Service: no pod can be sent back to itself
    names = [p["ifname"] for p in off]
    eps = ", ".join(f"{ip} ({svc})" for ip, svc in backing[:3]) + (" …" if len(backing) > 3 else "")
    loop = " ".join(names[:20])
    return new(
        f"hairpin mode is off on {len(off)} of {len(ports)} ports of bridge {name} ({', '.join(names[:4])}"
        f"{' …' if len(names) > 4 else ''}), and pods on {', '.join(map(str, nets))} back Services ({eps}): a pod "
        "connecting to its own Service is dropped whenever kube-proxy picks that pod",
        fix=(
            command(f"for p in {loop}; do ip link set $p type bridge_slave hairpin on; done   # the running pods, now"),
            command('grep -rn hairpinMode /etc/cni/net.d/   # the CNI\'s setting for new pods: "hairpinMode": true'),
            note(
                'flannel: cni-conf.json in the kube-flannel-cfg ConfigMap sets "hairpinMode": true; the bridge plugin: '
                "add it to its entry in the .conflist, then recreate the pods (kubectl rollout restart …)"
            ),
            command(f"for p in /sys/class/net/{name}/brif/*/hairpin_mode; do echo $p $(cat $p); done   # 1 = on"),
        ),
        evidence=[Evidence(src, f"{p['ifname']}: master {name}, hairpin off") for p in off[:3]]
        + [Evidence(src, f"{name}: bridge, {', '.join(str(n) for n in nets)}")]
        + [Evidence(ep_src, f"{ip}: endpoint of {svc}") for ip, svc in backing[:2]]
        + [e for e in (sysctls.evidence("net.bridge.bridge-nf-call-iptables") if sysctls else None,) if e],
        subject=name,
        data={
            "bridge": name,
            "ports_hairpin_off": names,
            "ports": len(ports),
            "endpoints_on_bridge": [ip for ip, _ in backing],
        },
    )


@check(
    "KP520",
    "bridge-hairpin-off",
    "Hairpin mode is off on the CNI bridge's pod ports",
    "warning",
    needs=("whole-rules", "whole-services"),  # gates: it judges every rule and every Service
    symptom="A pod that backs a Service hangs when it connects to that Service, about one connection in N (N endpoints) — "
    "the ones kube-proxy sends back to the same pod; every other client is fine.",
    why="""
        With br_netfilter (net.bridge.bridge-nf-call-iptables = 1, which kube-proxy needs on bridge CNIs) a pod's
        packet to a ClusterIP is DNATed while the bridge is still handling the frame. When kube-proxy picks the
        sending pod itself as the endpoint, the bridge must send the frame back out of the port it came in on, and
        a Linux bridge does that only for ports in hairpin mode (hairpin on: /sys/class/net/PORT/brport/hairpin_mode
        = 1). With hairpin off the frame is dropped silently. kubelet (hairpin-veth) or the CNI (the bridge plugin's
        and flannel's hairpinMode: true) turns it on for every pod port; a CNI configuration without it, or ports
        made by hand, leave it off. A bridge in promiscuous mode (kubelet's promiscuous-bridge) needs no hairpin.
    """,
    fix="Set hairpinMode: true in the CNI configuration (/etc/cni/net.d/*.conflist: the bridge plugin's or flannel's "
    "cni-conf.json) and recreate the pods; for the running pods, turn it on per port: "
    "ip link set <port> type bridge_slave hairpin on.",
)
def bridge_hairpin_off(
    new,
    addresses: Addresses,
    sysctls: Optional[Sysctls] = None,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
    slices: Optional[EndpointSlices] = None,
    implementer: Optional[ServiceImplementer] = None,
):
    impl = implementer.implementer
    if impl is not None and not impl.kube_proxy_in_charge:
        return  # a replacement (Cilium, Calico eBPF, …) translates Services before the bridge: no hairpin through it
    ifaces = links(list(addresses.links))
    bridges = _bridges(ifaces)
    if not bridges:
        return  # no Linux bridge on this node: hairpin mode does not apply (routed CNIs: Calico, Cilium, ptp)
    ports_known = [
        link
        for link in ifaces
        if link.get("master") in bridges and (link.get("linkinfo") or {}).get("info_slave_kind") == "bridge"
    ]
    if not ports_known and any(link.get("master") in bridges for link in ifaces):
        raise Skip(f"{addresses.source} has no bridge port details (recorded without ip -d)")
    nf = sysctls.value("net.bridge.bridge-nf-call-iptables") if sysctls is not None else None
    if nf is not None and nf.value.strip() == "0":
        return  # without br_netfilter the DNATed packet is routed by the host, not bridged back (KP502 warns of that)
    endpoints, ep_src = _endpoints(services, slices, proxy, nft, rules)
    if endpoints is None:
        raise Skip("which pods back Services is not known (neither the API's EndpointSlices nor kube-proxy's rules)")
    src = addresses.source
    for name, br in sorted(bridges.items()):
        finding = _bridge_finding(new, name, br, ports_known, endpoints, ep_src, src, sysctls)
        if finding is not None:
            yield finding
