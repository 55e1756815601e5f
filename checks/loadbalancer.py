"""A Service's outside addresses against what owns them: externalIPs that capture an address outside the cluster
(CVE-2020-8554, KP150), a LoadBalancer IP short-circuited on the nodes while the load balancer adds PROXY protocol or
terminates TLS (ipMode, KP151), and kube-proxy's /healthz (:10256) not served where load balancers check it (KP152)."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import NodeObjects, Services
from kpdiag.state.typed_node import Addresses
from kpdiag.state.typed_proxy import KubeProxyRules, KubeProxySettings, KubeProxyVersion

from .ipvs_leftovers import _lb_ips, _node_addresses, _norm

HEALTHZ_PORT = 10256


def _capture_rule(rules: KubeProxyRules | None, ip: str, what: str = "external IP") -> Evidence | None:
    """kube-proxy's iptables rule that sends traffic to ``ip`` (its ``what``: "external IP", "loadbalancer IP") into
    the Service (iptables mode), as evidence."""
    rs = rules.ruleset if rules is not None else None
    if rs is None:
        return None
    chain = rs.chain("nat", "KUBE-SERVICES")
    want = (f"-d {ip}/32 ", f"-d {ip}/128 ")
    for text in chain.lines if chain is not None else []:
        if any(w in text + " " for w in want) and what in text:
            return Evidence(rs.source, text)
    return None


@check(
    "KP150",
    "external-ip-capture",
    "A Service's externalIPs capture an address outside the cluster (CVE-2020-8554)",
    "warning",
    severities=("warning",),
    needs=("whole-services",),  # gate: another Service's LoadBalancer IP makes an externalIP the cluster's own
    symptom="Pods and nodes that connect to some outside host (a database, an API, a DNS server) reach a pod of the "
    "cluster instead, on every node, in every proxy mode.",
    why="""
        spec.externalIPs is any address the Service's author writes: kube-proxy then sends traffic to that address
        and the Service's ports to the Service's pods, on every node (iptables and nftables mode: a DNAT rule for the
        address; IPVS mode: the address bound on kube-ipvs0) — for packets from pods and from the nodes themselves. An
        address that belongs to a host outside the cluster is captured: the cluster's traffic to that host reaches
        whatever pods the Service selects. Anyone allowed to create or edit a Service can do this (CVE-2020-8554, a
        design issue with no patch: the API server accepts externalIPs by default). Addresses that are a node's, or a
        Service's own load balancer address, are the cluster's and not reported; an address routed to the nodes on
        purpose (a bare-metal VIP) looks the same as a captured one from here, so the finding is a warning.
    """,
    fix="Remove the externalIP unless it is routed to the nodes on purpose, and stop it from coming back: enable the "
    "DenyServiceExternalIPs admission plugin on the API server, or a ValidatingAdmissionPolicy that allows only "
    "known addresses.",
    references=("https://github.com/kubernetes/kubernetes/issues/97076",),
)
def external_ip_capture(
    new,
    services: Services,
    nodes: NodeObjects,
    addresses: Optional[Addresses] = None,
    rules: Optional[KubeProxyRules] = None,
):
    owned = _node_addresses(addresses, nodes)
    pool = {_norm(ip) for svc in services.every for ip in _lb_ips(svc)}
    for svc in services.focused:
        raw = [str(ip) for ip in svc.spec.get("externalIPs") or []]
        outside = [ip for ip in raw if _norm(ip) and _norm(ip) not in owned and _norm(ip) not in pool]
        if not outside:
            continue
        normed = [n for n in map(_norm, outside) if n]  # each of them (``outside`` keeps only the ones that parse)
        captured = [e for e in (_capture_rule(rules, n) for n in normed) if e is not None]
        yield new(
            f"{svc.key} lists externalIPs {', '.join(outside)}, address(es) of no node and no load balancer: every node "
            f"sends traffic to {outside[0]} on the Service's ports to its pods — a host outside the cluster with that "
            "address is cut off from the cluster's pods and nodes (CVE-2020-8554)",
            fix=(
                command(
                    f"kubectl -n {svc.namespace} patch service {svc.name} --type=json "
                    """-p '[{"op":"remove","path":"/spec/externalIPs"}]'"""
                ),
                note(
                    "keep it only if the address is routed to the nodes on purpose (a VIP of yours); then restrict "
                    "who may set externalIPs"
                ),
                note(
                    "prevent it: kube-apiserver --enable-admission-plugins=…,DenyServiceExternalIPs (refuses new "
                    "externalIPs), or a ValidatingAdmissionPolicy on services with the rule "
                    "!has(object.spec.externalIPs) || object.spec.externalIPs.all(ip, ip in [<allowed addresses>])"
                ),
            ),
            evidence=[services.evidence(svc, f"spec.externalIPs: {', '.join(raw)}")]
            + [Evidence(nodes.source, f"{len(nodes.objects)} Nodes: none has {', '.join(outside)}")]
            + captured[:2],
            subject=svc.key,
            data={"service": svc.key, "external_ips": raw, "outside": outside},
        )


# cloud load balancers' annotations that make them add a PROXY protocol header or terminate TLS before the pods:
# annotation → (what it does, whether a value turns it on). From the providers' cloud-controller documentation.
def _on(value: str) -> bool:
    return value.strip().lower() not in ("", "false", "0", "none", "no", "off")


LB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol": "PROXY protocol",
    "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": "TLS termination",
    "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "PROXY protocol",
    "service.beta.kubernetes.io/do-loadbalancer-certificate-id": "TLS termination",
    "service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol": "PROXY protocol",
    "load-balancer.hetzner.cloud/uses-proxyprotocol": "PROXY protocol",
    "load-balancer.hetzner.cloud/http-certificates": "TLS termination",
    "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v1": "PROXY protocol",
    "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2": "PROXY protocol",
    "service.beta.kubernetes.io/ovh-loadbalancer-proxy-protocol": "PROXY protocol",
    "service.beta.kubernetes.io/vultr-loadbalancer-proxy-protocol": "PROXY protocol",
    "kubernetes.civo.com/loadbalancer-enable-proxy-protocol": "PROXY protocol",
    "service.beta.kubernetes.io/oci-load-balancer-ssl-ports": "TLS termination",
}
# the providers' own way to publish a hostname instead of the IP (kube-proxy short-circuits only IPs)
HOSTNAME_ANNOTATIONS = {
    "do-": "service.beta.kubernetes.io/do-loadbalancer-hostname: <a name resolving to the LB>",
    "hetzner": "load-balancer.hetzner.cloud/hostname: <a name resolving to the LB>",
    "scw-": 'service.beta.kubernetes.io/scw-loadbalancer-use-hostname: "true"',
}
IPMODE_VERSION = (1, 30)  # LoadBalancerIPMode on by default (beta): kube-proxy honours ipMode: Proxy


@check(
    "KP151",
    "lb-ip-short-circuit",
    "A LoadBalancer IP short-circuited on the nodes while the load balancer adds PROXY protocol or TLS",
    "warning",
    severities=("warning",),
    symptom="Pods (and nodes) that connect to the Service's external load balancer address get connection resets, "
    "'broken header' or TLS errors, while clients outside the cluster work.",
    why="""
        kube-proxy takes traffic to a LoadBalancer Service's ingress IP straight to the Service's pods on the node
        (a DNAT rule, or in IPVS mode the IP on kube-ipvs0): a pod connecting to the load balancer's address never
        reaches the load balancer. When the load balancer adds a PROXY protocol header or terminates TLS, the
        backend expects that header or plain text, and gets the client's raw bytes instead. Since Kubernetes 1.30
        the cloud controller can set status.loadBalancer.ingress[].ipMode: Proxy, and kube-proxy then leaves that
        IP to the load balancer; ipMode VIP (or no ipMode, or an older kube-proxy) keeps the short-circuit.
    """,
    fix="Have the cloud controller set ipMode: Proxy (a recent cloud-controller-manager; kube-proxy ≥ 1.30), publish "
    "a hostname instead of the IP where the provider allows it, or let in-cluster clients use the Service's "
    "ClusterIP or DNS name.",
)
def lb_ip_short_circuit(
    new, services: Services, kp_version: Optional[KubeProxyVersion] = None, rules: Optional[KubeProxyRules] = None
):
    version = kp_version.version if kp_version is not None else None
    for svc in services.focused:
        if svc.type != "LoadBalancer":
            continue
        notes = (svc.raw.get("metadata") or {}).get("annotations") or {}
        adds = [(k, str(notes[k]), what) for k, what in LB_ANNOTATIONS.items() if k in notes and _on(str(notes[k]))]
        if not adds:
            continue
        ingress = ((svc.raw.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        for ing in ingress:
            if not isinstance(ing, dict) or not isinstance(ing.get("ip"), str):
                continue  # a hostname is not short-circuited
            mode = ing.get("ipMode")
            if mode == "Proxy" and (version is None or version >= IPMODE_VERSION):
                continue
            rule = _capture_rule(rules, _norm(ing["ip"]) or ing["ip"], "loadbalancer IP")
            yield _short_circuit(new, services, svc, ing["ip"], mode, adds, version, kp_version, rule)


def _short_circuit(new, services, svc, ip, mode, adds, version, kp_version, rule):
    what = " and ".join(sorted({a[2] for a in adds}))
    old = mode == "Proxy"  # set, but this kube-proxy predates it
    how = (
        f"ipMode Proxy, but kube-proxy {version[0]}.{version[1]} predates it"
        if old
        else f"ipMode {mode}"
        if mode
        else "no ipMode (VIP)"
    )
    hostname = next((v for k, v in HOSTNAME_ANNOTATIONS.items() if any(k in a[0] for a in adds)), None)
    fix = [
        note(
            "in-cluster clients: connect to the Service's ClusterIP or "
            f"{svc.name}.{svc.namespace}.svc (no {what} on that path), not to {ip}"
        ),
        note(
            "have the cloud controller publish ipMode: Proxy for this load balancer (needs kube-proxy ≥ 1.30 and a "
            "cloud-controller-manager that sets it)"
        ),
    ]
    if old:
        fix.append(note("upgrade kube-proxy to ≥ 1.30 (LoadBalancerIPMode) so that it honours ipMode: Proxy"))
    if hostname:
        fix.append(
            command(f"kubectl -n {svc.namespace} annotate service {svc.name} --overwrite {hostname.replace(': ', '=')}")
        )
    evidence = [services.evidence(svc, f"annotation {k}: {v}") for k, v, _ in adds[:2]]
    evidence.append(services.evidence(svc, f"status.loadBalancer.ingress: ip {ip}, {how}"))
    if old and kp_version is not None:
        evidence.append(Evidence(kp_version.source, f"kube-proxy v{version[0]}.{version[1]}"))
    if rule is not None:
        evidence.append(rule)  # the short-circuit itself, as kube-proxy wrote it
    return new(
        f"{svc.key}: its load balancer adds {what}, and {ip} has {how}: kube-proxy sends in-cluster traffic to {ip} "
        f"straight to the pods, which then get it without the {what} they expect",
        fix=tuple(fix),
        evidence=evidence,
        subject=svc.key,
        data={"service": svc.key, "ip": ip, "ip_mode": mode, "adds": [a[0] for a in adds]},
    )


def _split_bind(value: str) -> tuple[str, int] | None:
    """healthzBindAddress "HOST:PORT" (HOST may be empty or [v6]) → (host, port), or None when it does not parse."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _node_has(addresses: Addresses | None, host: str) -> bool | None:
    if addresses is None:
        return None
    ip = _norm(host)
    return any(_norm(a.get("local")) == ip for link in addresses.links for a in link.get("addr_info") or [])


@check(
    "KP152",
    "healthz-not-served-for-lb",
    "kube-proxy's /healthz (:10256) is not served where load balancers check it",
    "warning",
    severities=("warning",),
    advice_for="kube-proxy",
    needs=("whole-services",),  # gate: whether any LoadBalancer Service uses :10256 is a fact of every Service
    symptom="A cloud load balancer marks every node unhealthy and sends no traffic to a LoadBalancer Service with "
    "externalTrafficPolicy: Cluster, although its pods are ready.",
    why="""
        For a LoadBalancer Service with externalTrafficPolicy: Cluster, cloud load balancers check each node's
        kube-proxy at http://NODE:10256/healthz (kube-proxy's healthzBindAddress, 0.0.0.0:10256 by default);
        Local Services are checked on their healthCheckNodePort instead, which kube-proxy serves on the node's
        addresses whatever this setting says. A healthzBindAddress on loopback, on an address this node does not
        have, or on another port leaves the load balancer's check unanswered on every node. kpdiag cannot see the
        load balancer's own health-check settings: if it was pointed at another port on purpose, this is fine.
    """,
    fix="Set healthzBindAddress: 0.0.0.0:10256 (or [::]:10256) in kube-proxy's configuration and restart it — or "
    "point the load balancer's health check where kube-proxy serves /healthz.",
)
def healthz_not_served(new, services: Services, kp: KubeProxySettings, addresses: Optional[Addresses] = None):
    lbs = [s for s in services.every if s.type == "LoadBalancer" and not s.etp_local]
    if not lbs:
        return  # no load balancer checks :10256 here
    setting = kp["healthzBindAddress"]
    value = str(setting.value or "").strip()
    if not value:
        return  # empty: kube-proxy's default, 0.0.0.0:10256
    parsed = _split_bind(value)
    if parsed is None:
        raise Skip(f"healthzBindAddress {value!r} is not HOST:PORT")
    host, port = parsed
    wrong = []
    try:
        loopback = bool(host) and (host == "localhost" or ipaddress.ip_address(host).is_loopback)
        unspecified = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        raise Skip(f"healthzBindAddress host {host!r} is not an IP address") from None
    if loopback:
        wrong.append(f"it listens on {host} (loopback): no load balancer reaches it")
    elif not unspecified and _node_has(addresses, host) is False:
        wrong.append(f"{host} is no address of this node: kube-proxy cannot serve it here")
    if port != HEALTHZ_PORT:
        wrong.append(f"port {port}: load balancers' default health check asks :{HEALTHZ_PORT}")
    if not wrong:
        return
    names = ", ".join(s.key for s in lbs[:3]) + (f" and {len(lbs) - 3} more" if len(lbs) > 3 else "")
    yield new(
        f"kube-proxy's healthzBindAddress is {value}: {'; '.join(wrong)} — the health checks of {names} "
        "(LoadBalancer, externalTrafficPolicy Cluster) get no answer",
        fix=(
            command("kubectl -n kube-system edit configmap kube-proxy   # healthzBindAddress: 0.0.0.0:10256"),
            command("kubectl -n kube-system rollout restart daemonset kube-proxy"),
            command(f"curl -s http://<node address>:{HEALTHZ_PORT}/healthz   # from outside the node, afterwards"),
        ),
        evidence=[setting.evidence()]
        + [services.evidence(s, "type LoadBalancer, externalTrafficPolicy Cluster") for s in lbs[:2]],
        subject="node",
        data={"healthz_bind_address": value, "services": [s.key for s in lbs]},
    )
