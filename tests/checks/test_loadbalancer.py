"""KP150 (externalIPs capturing an outside address, CVE-2020-8554), KP151 (a LoadBalancer IP short-circuited while the
load balancer adds PROXY protocol or TLS: ipMode) and KP152 (kube-proxy's /healthz not served where load balancers
check it), on the Services of fixtures/ipvs-healthy. The kernel side of KP150 and KP151 (every node DNATs the address
to the Service's pods, so the outside host or the load balancer never sees the packet) is
tests/lab/test_lb_capture_oracle.py."""

from __future__ import annotations

import json

from tests.given import base_files, given

BASE = "ipvs-healthy"


def _node(name, ip, kind="InternalIP"):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": [{"type": kind, "address": ip}, {"type": "Hostname", "address": name}]},
    }


NODES = [_node("ipvs-node", "192.168.50.1"), _node("node-b", "192.168.50.2")]


def _services(web=None, extra=()):
    doc = json.loads(base_files(BASE)["cluster/services.json"])
    for svc in doc["items"]:
        if svc["metadata"]["name"] == "web" and web:
            web(svc)
    doc["items"] += list(extra)
    return doc


def _ext(*ips):
    return lambda svc: svc["spec"].update(externalIPs=list(ips))


def test_an_external_ip_of_no_node_fires_with_the_cve_and_the_admission_fix():
    (f,) = given(base=BASE, nodes=NODES, files={"cluster/services.json": _services(_ext("203.0.113.10"))}).fires(
        "KP150"
    )
    assert f.data == {"service": "shop/web", "external_ips": ["203.0.113.10"], "outside": ["203.0.113.10"]}
    assert "CVE-2020-8554" in f.summary and f.severity == "warning"
    assert (
        """kubectl -n shop patch service web --type=json -p '[{"op":"remove","path":"/spec/externalIPs"}]'""" in f.fix
    )
    assert any("DenyServiceExternalIPs" in s for s in f.fix) and any("ValidatingAdmissionPolicy" in s for s in f.fix)


def test_node_addresses_and_load_balancer_addresses_are_the_clusters_own():
    given(base=BASE, nodes=NODES, files={"cluster/services.json": _services(_ext("192.168.50.2"))}).silent("KP150")
    lb = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "shop", "name": "front"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.40", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.168.50.200"}]}},
    }
    svcs = _services(_ext("192.168.50.200"), [lb])
    given(base=BASE, nodes=NODES, files={"cluster/services.json": svcs}).silent("KP150")
    given(base=BASE, nodes=NODES).silent("KP150")


def test_kp150_skips_without_the_nodes():
    assert "nodes.json" in given(base=BASE, files={"cluster/services.json": _services(_ext("203.0.113.10"))}).skips(
        "KP150"
    )


def _lb(annotations, ingress, etp=None, name="front"):
    spec = {"type": "LoadBalancer", "clusterIP": "10.96.0.40", "ports": [{"port": 443, "protocol": "TCP"}]}
    if etp:
        spec["externalTrafficPolicy"] = etp
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "shop", "name": name, "annotations": annotations},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": ingress}},
    }


PROXY = {"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}


def test_proxy_protocol_with_ipmode_vip_or_none_fires():
    for ingress, how in (
        ([{"ip": "203.0.113.50"}], "no ipMode (VIP)"),
        ([{"ip": "203.0.113.50", "ipMode": "VIP"}], "ipMode VIP"),
    ):
        svcs = _services(extra=[_lb(PROXY, ingress)])
        (f,) = given(base=BASE, files={"cluster/services.json": svcs}).fires("KP151")
        assert how in f.summary and "PROXY protocol" in f.summary and f.data["ip"] == "203.0.113.50"
        assert any("do-loadbalancer-hostname" in s for s in f.fix)
        assert any("front.shop.svc" in s for s in f.fix)


def test_ipmode_proxy_needs_a_kube_proxy_that_knows_it():
    svcs = _services(extra=[_lb(PROXY, [{"ip": "203.0.113.50", "ipMode": "Proxy"}])])
    given(base=BASE, files={"cluster/services.json": svcs}).silent("KP151")  # kube-proxy v1.31
    old = (
        base_files(BASE)["node/kube-proxy/metrics.txt"]
        .decode()
        .replace("v1.31.4", "v1.28.2")
        .replace('minor="31"', 'minor="28"')
    )
    (f,) = given(base=BASE, files={"cluster/services.json": svcs, "node/kube-proxy/metrics.txt": old}).fires("KP151")
    assert "predates it" in f.summary


def test_no_proxy_protocol_or_a_hostname_is_not_short_circuited():
    given(base=BASE, files={"cluster/services.json": _services(extra=[_lb({}, [{"ip": "203.0.113.50"}])])}).silent(
        "KP151"
    )
    off = {"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "false"}
    given(base=BASE, files={"cluster/services.json": _services(extra=[_lb(off, [{"ip": "203.0.113.50"}])])}).silent(
        "KP151"
    )
    host = [{"hostname": "lb.example.com"}]
    given(base=BASE, files={"cluster/services.json": _services(extra=[_lb(PROXY, host)])}).silent("KP151")


def _config(value):
    text = base_files(BASE)["node/kube-proxy/config.yaml"].decode()
    return text.replace("healthzBindAddress: 0.0.0.0:10256", f"healthzBindAddress: {value}")


def test_healthz_on_loopback_or_another_port_with_a_cluster_lb_fires():
    svcs = _services(extra=[_lb({}, [{"ip": "203.0.113.50"}])])
    (f,) = given(
        base=BASE, files={"cluster/services.json": svcs, "node/kube-proxy/config.yaml": _config("127.0.0.1:10256")}
    ).fires("KP152")
    assert "loopback" in f.summary and f.data["services"] == ["shop/front"]
    assert f.evidence[0].text == "healthzBindAddress: 127.0.0.1:10256"
    (f,) = given(
        base=BASE, files={"cluster/services.json": svcs, "node/kube-proxy/config.yaml": _config("0.0.0.0:10300")}
    ).fires("KP152")
    assert "port 10300" in f.summary
    (f,) = given(
        base=BASE, files={"cluster/services.json": svcs, "node/kube-proxy/config.yaml": _config("10.9.9.9:10256")}
    ).fires("KP152")
    assert "no address of this node" in f.summary


def test_healthz_silent_where_no_lb_checks_it_or_it_is_served():
    svcs = _services(extra=[_lb({}, [{"ip": "203.0.113.50"}])])
    given(base=BASE, files={"cluster/services.json": svcs}).silent("KP152")
    given(
        base=BASE, files={"cluster/services.json": svcs, "node/kube-proxy/config.yaml": _config("192.168.50.1:10256")}
    ).silent("KP152")
    local = _services(extra=[_lb({}, [{"ip": "203.0.113.50"}], etp="Local")])
    given(
        base=BASE, files={"cluster/services.json": local, "node/kube-proxy/config.yaml": _config("127.0.0.1:10256")}
    ).silent("KP152")
    given(base=BASE, files={"node/kube-proxy/config.yaml": _config("127.0.0.1:10256")}).silent("KP152")


def test_kp509_traces_the_default_healthz_port_when_the_configuration_leaves_it_empty():
    """kubeadm writes healthzBindAddress: "" — kube-proxy then serves 0.0.0.0:10256, and a host firewall that drops it
    fails every load balancer's health check (KP509 traced the port only when it was written out)."""
    for value in (None, "", "0.0.0.0:10256"):
        (f,) = given(base="firewall-drops-nodeports", kube_proxy={"healthzBindAddress": value}).fires("KP509")
        assert "10256/tcp (kube-proxy's /healthz" in f.summary, value
    (f,) = given(base="firewall-drops-nodeports", kube_proxy={"healthzBindAddress": "127.0.0.1:10256"}).fires("KP509")
    assert "10256" not in f.summary  # loopback only: not reachable from outside at all (KP152's case)


def test_kp150_and_kp151_cite_the_rule_that_takes_the_address():
    from tests.conftest import FIXTURES
    from kpdiag.commands.pipeline import analyze_bundle
    import os

    report = analyze_bundle(os.path.join(FIXTURES, "lb-proxy-protocol-short-circuit"))
    (f,) = [f for f in report.findings if f.id == "KP151"]
    assert any(
        e.source == "node/iptables-save.txt" and "-d 192.168.50.200/32" in e.text and "loadbalancer IP" in e.text
        for e in f.evidence
    )
    report = analyze_bundle(os.path.join(FIXTURES, "external-ip-captured"))
    (f,) = [f for f in report.findings if f.id == "KP150"]
    assert any("-d 192.168.50.2/32" in e.text and "external IP" in e.text for e in f.evidence)
