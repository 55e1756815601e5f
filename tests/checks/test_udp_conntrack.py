"""KP504 (UDP entries still DNATed to a gone endpoint: ClusterIP, NodePort, externalIP, load-balancer IP) and KP529
(UDP flows made while the Service had no endpoints, never translated). The kernel's side:
tests/lab/test_udp_conntrack_oracle.py."""

from __future__ import annotations

from tests import k8sobjects as k8s
from tests.given import given

CT = "node/conntrack.txt"


def _syslog(type_="NodePort", endpoints=("10.244.1.13",), **spec):
    """shop/syslog: UDP 514 → 5140, NodePort 30514, its endpoints."""
    svc = k8s.service(
        "shop",
        "syslog",
        "10.96.0.60",
        [k8s.port(514, 5140, "syslog", "UDP", node_port=30514 if type_ != "ClusterIP" else None)],
        {"app": "syslog"},
        type_=type_,
        **spec,
    )
    sl = k8s.endpointslice(
        "shop",
        "syslog",
        [(ip, True, "lab-node", f"syslog-{i}") for i, ip in enumerate(endpoints)],
        [("syslog", 5140, "UDP")],
    )
    return svc, sl


def _entry(dst, dport, reply_src, reply_sport, src="192.168.50.2", sport=40514, reply_dst=None, unreplied=True):
    flag = "[UNREPLIED] " if unreplied else ""
    return (
        f"udp      17 29 src={src} dst={dst} sport={sport} dport={dport} {flag}src={reply_src} "
        f"dst={reply_dst or src} sport={reply_sport} dport={sport} mark=0 use=1\n"
    )


def _given(svc, sl, text):
    return given(services=[svc], endpointslices=[sl], files={CT: text})


def test_a_nodeport_entry_to_a_gone_endpoint_fires_with_the_exact_delete():
    svc, sl = _syslog()
    # the client's flow to the node's address 192.168.50.1:30514 still DNATed to 10.244.1.12 (pod2, gone)
    (f,) = _given(svc, sl, _entry("192.168.50.1", 30514, "10.244.1.12", 5140, reply_dst="192.168.50.1")).fires("KP504")
    assert "NodePort 192.168.50.1:30514" in f.summary and "10.244.1.12" in f.summary
    assert f.fix[0] == "conntrack -D -p udp --orig-port-dst 30514 --reply-src 10.244.1.12"
    assert "src=192.168.50.2 dst=192.168.50.1 sport=40514 dport=30514" in f.evidence[0].text
    assert f.data["destinations"] == [{"kind": "NodePort", "address": "192.168.50.1", "port": 30514}]
    assert f.data["stale_endpoints"] == ["10.244.1.12"]


def test_a_load_balancer_and_external_ip_entry_fire_with_their_address():
    svc, sl = _syslog("LoadBalancer", externalIPs=["203.0.113.9"])
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}
    text = _entry("198.51.100.7", 514, "10.244.1.12", 5140) + _entry("203.0.113.9", 514, "10.244.1.11", 5140, sport=3)
    (f,) = _given(svc, sl, text).fires("KP504")
    assert "conntrack -D -p udp --orig-dst 198.51.100.7 --orig-port-dst 514 --reply-src 10.244.1.12" in f.fix
    assert "conntrack -D -p udp --orig-dst 203.0.113.9 --orig-port-dst 514 --reply-src 10.244.1.11" in f.fix
    assert {d["kind"] for d in f.data["destinations"]} == {"LoadBalancer IP", "externalIP"}


def test_the_clusterip_case_still_fires():
    svc, sl = _syslog("ClusterIP")
    (f,) = _given(svc, sl, _entry("10.96.0.60", 514, "10.244.1.77", 5140, src="10.244.1.10")).fires("KP504")
    assert f.fix[0] == "conntrack -D -p udp --orig-dst 10.96.0.60 --orig-port-dst 514 --reply-src 10.244.1.77"


def test_entries_to_the_current_endpoint_or_another_port_are_silent():
    svc, sl = _syslog()
    text = (
        _entry("192.168.50.1", 30514, "10.244.1.13", 5140)  # the current endpoint
        + _entry("192.168.50.1", 30515, "10.244.1.12", 5140)  # not this Service's NodePort
        + _entry("192.168.50.77", 30514, "10.244.1.12", 5140)  # not an address of this node
        + _entry("10.96.0.60", 514, "10.96.0.60", 514)  # never translated: KP529's, not KP504's
    )
    _given(svc, sl, text).silent("KP504")


def test_a_flow_made_before_the_endpoints_fires_kp529():
    svc, sl = _syslog()
    text = _entry("10.96.0.60", 514, "10.96.0.60", 514, src="10.244.1.10") + _entry(
        "192.168.50.1", 30514, "192.168.50.1", 30514
    )
    (f,) = _given(svc, sl, text).fires("KP529")
    assert f.severity == "error"
    assert "conntrack -D -p udp --orig-dst 10.96.0.60 --orig-port-dst 514 --reply-src 10.96.0.60" in f.fix
    assert "conntrack -D -p udp --orig-dst 192.168.50.1 --orig-port-dst 30514 --reply-src 192.168.50.1" in f.fix
    assert f.data["clients"] == ["10.244.1.10:40514", "192.168.50.2:40514"]
    assert f.data["endpoints"] == ["10.244.1.13"]
    _given(svc, sl, text).silent("KP504")


def test_kp529_is_silent_while_there_is_no_endpoint_and_for_translated_flows():
    svc, sl = _syslog(endpoints=())
    _given(svc, sl, _entry("10.96.0.60", 514, "10.96.0.60", 514)).silent("KP529")
    svc, sl = _syslog()
    _given(svc, sl, _entry("10.96.0.60", 514, "10.244.1.13", 5140)).silent("KP529")


def test_kp529_leaves_a_host_network_endpoint_on_the_node_address_alone():
    svc, sl = _syslog(endpoints=("192.168.50.1",))
    svc["spec"]["ports"][0]["targetPort"] = 30514
    sl["ports"][0]["port"] = 30514
    _given(svc, sl, _entry("192.168.50.1", 30514, "192.168.50.1", 30514)).silent("KP529")


def test_both_skip_without_the_conntrack_entries():
    svc, sl = _syslog()
    assert "conntrack" in given(services=[svc], endpointslices=[sl]).skips("KP529")
    assert "conntrack" in given(services=[svc], endpointslices=[sl]).skips("KP504")


def test_kp529_judges_nodeport_flows_only_where_kube_proxy_takes_nodeports():
    svc, sl = _syslog()
    loopback = _entry("127.0.0.1", 30514, "127.0.0.1", 30514, src="127.0.0.1")
    _given(svc, sl, loopback).silent("KP529")  # localhost NodePorts: iptables mode only
    outside = _entry("192.168.50.1", 30514, "192.168.50.1", 30514)
    g = given(
        services=[svc], endpointslices=[sl], files={CT: outside}, kube_proxy={"nodePortAddresses": ["10.99.0.0/16"]}
    )
    g.silent("KP529")  # 192.168.50.1 is not in nodePortAddresses: kube-proxy never took NodePorts there
    given(
        services=[svc], endpointslices=[sl], files={CT: outside}, kube_proxy={"nodePortAddresses": ["192.168.50.0/24"]}
    ).fires("KP529")
