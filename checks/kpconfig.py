"""kube-proxy's effective configuration (its file or ConfigMap, its flags, its log) judged against the node."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.state.typed import Addresses, KubeProxySettings, Services

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
    "nodeport-addresses-match-nothing",
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
