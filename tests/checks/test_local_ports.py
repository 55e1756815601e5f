"""KP511: the node's ephemeral ports (ip_local_port_range) overlap the NodePort range without
ip_local_reserved_ports covering it. The kernel's side: tests/lab/test_local_ports_oracle.py."""

from __future__ import annotations

from tests import k8sobjects as k8s
from tests.given import given

WIDE = "net.ipv4.ip_local_port_range = 1024\t65535"


def _apiserver(flag: str) -> dict:
    pod = k8s.pod("kube-system", "kube-apiserver-cp1", "10.0.0.5", {"component": "kube-apiserver"})
    pod["spec"]["containers"] = [{"name": "kube-apiserver", "command": ["kube-apiserver", flag]}]
    return pod


def test_a_wide_range_without_reservation_fires_with_the_default_nodeport_range_said():
    (f,) = given(sysctl=WIDE).fires("KP511")
    assert "1024-65535 overlaps the NodePort range 30000-32767 (Kubernetes' default:" in f.summary
    assert "leaves 2768 of those ports free" in f.summary
    assert f.fix[0].startswith("sudo sysctl -w net.ipv4.ip_local_reserved_ports=30000-32767")
    assert f.data["overlap"] == [30000, 32767] and f.data["unreserved"] == 2768


def test_the_apiserver_flag_gives_the_range():
    (f,) = given(
        sysctl="net.ipv4.ip_local_port_range = 10000\t60999",
        pods=[_apiserver("--service-node-port-range=20000-22767")],
    ).fires("KP511")
    assert "NodePort range 20000-22767 (kube-apiserver's --service-node-port-range=20000-22767)" in f.summary
    assert any("--service-node-port-range=20000-22767" in e.text for e in f.evidence)
    given(
        sysctl="net.ipv4.ip_local_port_range = 32768\t60999", pods=[_apiserver("--service-node-port-range=40000-41000")]
    ).fires("KP511")


def test_reserved_or_apart_is_silent():
    given(sysctl=WIDE + "\nnet.ipv4.ip_local_reserved_ports = 10250,30000-32767").silent("KP511")
    given(sysctl="net.ipv4.ip_local_port_range = 32768\t60999").silent("KP511")  # the kernel's default
    (f,) = given(sysctl=WIDE + "\nnet.ipv4.ip_local_reserved_ports = 30000-31999").fires("KP511")
    assert "leaves 768 of those ports free" in f.summary
    assert "net.ipv4.ip_local_reserved_ports=30000-31999,30000-32767" in f.fix[0]


def test_unreadable_values_and_missing_ones_skip():
    assert "do not read as ports" in given(sysctl="net.ipv4.ip_local_port_range = wide").skips("KP511")
    assert "not in the collected sysctls" in given().skips("KP511")
