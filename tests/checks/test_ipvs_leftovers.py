"""KP311 (kube-ipvs0 addresses and IPVS virtual servers of no Service) and KP312 (a node's own address bound on
kube-ipvs0 as an externalIP or LoadBalancer IP), on the written IPVS node of fixtures/ipvs-healthy. The fixtures
ipvs-stale-address and ipvs-node-address-bound show them in a whole node's report."""

from __future__ import annotations

import json

from tests.given import base_files, given

BASE = "ipvs-healthy"
RESTORE_FAILED = (
    'E1203 00:09:40.120004       1 proxier.go:1521] "Failed to execute iptables-restore" '
    'err="exit status 2: iptables-restore v1.8.9 (nf_tables): line 41 failed"\n'
)


def _addrs(extra_ipvs0=(), eth0=None):
    links = json.loads(base_files(BASE)["node/ip-addr.json"])
    for link in links:
        if link["ifname"] == "kube-ipvs0":
            link["addr_info"] += [{"family": "inet", "local": ip, "prefixlen": 32} for ip in extra_ipvs0]
    return links


def _ipvsadm(*lines):
    return base_files(BASE)["node/ipvsadm.txt"].decode() + "".join(line + "\n" for line in lines)


def _services(mutate):
    doc = json.loads(base_files(BASE)["cluster/services.json"])
    for svc in doc["items"]:
        mutate(svc)
    return doc


def _log(extra=""):
    return base_files(BASE)["node/kube-proxy/log.txt"].decode() + extra


OLD_VS = ("-A -t 192.168.50.201:80 -s rr", "-a -t 192.168.50.201:80 -r 10.244.1.11:8080 -m -w 1")


def test_an_old_external_address_and_its_virtual_server_fire_with_the_log_line_that_says_why():
    files = {
        "node/ip-addr.json": _addrs(["192.168.50.201"]),
        "node/ipvsadm.txt": _ipvsadm(*OLD_VS),
        "node/kube-proxy/log.txt": _log(RESTORE_FAILED),
    }
    (f,) = given(base=BASE, files=files).fires("KP311")
    assert f.data["addresses"] == ["192.168.50.201"] and f.data["virtual_servers"] == ["TCP 192.168.50.201:80"]
    assert "failed cleanup/sync line" in f.summary and f.severity == "warning"
    assert "ip addr del 192.168.50.201/32 dev kube-ipvs0" in f.fix
    assert "ipvsadm -D -t 192.168.50.201:80" in f.fix
    assert any("Failed to execute iptables-restore" in e.text for e in f.evidence)


def test_a_virtual_server_alone_and_a_clean_log_say_kube_proxy_is_not_cleaning():
    (f,) = given(base=BASE, files={"node/ipvsadm.txt": _ipvsadm("-A -u 10.96.0.99:53 -s rr")}).fires("KP311")
    assert f.data == {"addresses": [], "virtual_servers": ["UDP 10.96.0.99:53"], "log_lines": 0}
    assert "ipvsadm -D -u 10.96.0.99:53" in f.fix and "no failed cleanup or sync" in f.summary


def test_every_service_address_and_port_is_wanted():
    # the same address as an externalIP of shop/web: bound and served as kube-proxy does, nothing stale
    def ext(svc):
        if svc["metadata"]["name"] == "web":
            svc["spec"]["externalIPs"] = ["192.168.50.201"]

    files = {
        "node/ip-addr.json": _addrs(["192.168.50.201"]),
        "node/ipvsadm.txt": _ipvsadm(*OLD_VS),
        "cluster/services.json": _services(ext),
    }
    given(base=BASE, files=files).silent("KP311")
    given(base=BASE).silent("KP311")


def test_addresses_in_exclude_cidrs_are_not_kube_proxys():
    files = {"node/ip-addr.json": _addrs(["192.168.50.201"]), "node/ipvsadm.txt": _ipvsadm(*OLD_VS)}
    given(base=BASE, files=files).fires("KP311")
    config = base_files(BASE)["node/kube-proxy/config.yaml"].decode()
    files["node/kube-proxy/config.yaml"] = config.replace("ipvs:\n", "ipvs:\n  excludeCIDRs:\n  - 192.168.50.200/29\n")
    given(base=BASE, files=files).silent("KP311")


def test_without_the_services_or_in_another_mode_it_skips():
    assert given(base=BASE, drop=("cluster/services.json",)).skips("KP311")
    assert "iptables" in given().skips("KP311")


def _web_external(ip, lb=False):
    def mutate(svc):
        if svc["metadata"]["name"] == "web":
            if lb:
                svc["spec"]["type"] = "LoadBalancer"
                svc["status"] = {"loadBalancer": {"ingress": [{"ip": ip}]}}
            else:
                svc["spec"]["externalIPs"] = [ip]

    return _services(mutate)


def test_the_nodes_own_address_as_an_external_ip_bound_on_kube_ipvs0_is_an_error():
    files = {"node/ip-addr.json": _addrs(["192.168.50.1"]), "cluster/services.json": _web_external("192.168.50.1")}
    (f,) = given(base=BASE, files=files).fires("KP312")
    assert f.severity == "error" and f.data["owner"] == "this node's address on eth0"
    assert "KUBE-IPVS-FILTER refuses new connections" in f.summary
    assert f.fix[0].startswith("kubectl -n shop patch service web --type=json") and "/spec/externalIPs/0" in f.fix[0]


def test_another_nodes_internal_ip_as_a_load_balancer_ip_fires_from_the_node_list():
    other = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-b"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.50.2"}]},
    }
    files = {
        "node/ip-addr.json": _addrs(["192.168.50.2"]),
        "cluster/services.json": _web_external("192.168.50.2", True),
    }
    (f,) = given(base=BASE, files=files, nodes=[other]).fires("KP312")
    assert f.data["owner"] == "node node-b's InternalIP" and f.data["kind"] == "LoadBalancer IP"
    # the same address on no node: an ordinary LoadBalancer IP (KP307's subject, not KP312's)
    given(base=BASE, files=files).silent("KP312")


def test_kp312_silent_on_a_healthy_ipvs_node_and_skipped_in_iptables_mode():
    given(base=BASE).silent("KP312")
    assert given().skips("KP312")


def test_a_vip_held_on_the_nodes_interface_is_not_the_nodes_own_address():
    """kube-vip (ARP mode) adds a LoadBalancer IP to the leader's interface as a /32: that VIP on kube-ipvs0 too is
    what IPVS mode does with any LoadBalancer IP, not a node's address taken."""
    links = _addrs(["192.168.50.200"])
    for link in links:
        if link["ifname"] == "eth0":
            link["addr_info"].append({"family": "inet", "local": "192.168.50.200", "prefixlen": 32})
    files = {"node/ip-addr.json": links, "cluster/services.json": _web_external("192.168.50.200", True)}
    given(base=BASE, files=files).silent("KP312")
    vip_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "ipvs-node"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.50.200"}]},
    }
    given(base=BASE, files=files, nodes=[vip_node]).fires("KP312")  # unless the API says it is a Node's
