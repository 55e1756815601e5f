"""Service ports without a name: kube-proxy's ServicePortName is plain ``ns/svc`` (":name" only when the name is set).

Its iptables comments say "shop/web cluster IP", its chains hash "shop/web" + protocol, and its nftables chains end in
"…/shop/web/tcp/" (the empty port name last). kpdiag reads, compares and generates them the same way; the fixtures
unnamed-ports-* were loaded into the real kernel (iptables-restore, nft -f) and recorded with iptables-save / nft -j.
"""

from __future__ import annotations

import os

from kpdiag.state import programmed
from kpdiag.bundle.store import Bundle
from kpdiag.state.cluster import Svc
from kpdiag.commands.focus import focus_report
from kpdiag.model import Report
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, _nft_hash, iptables_ruleset, port_proto_hash
from tests.conftest import FIXTURES


def test_chain_hashes_match_kube_proxys_own_test_vectors():
    # kube-proxy's iptables proxier tests: "ns1/svc1 cluster IP" → KUBE-SVC-AQI2S6QIMU7PVVRP (port without a name),
    # "ns1/svc1:p80" → KUBE-SVC-XPGD46QRK7WJZT7O; nftables: "ULMVA6XW-ns1/svc1/tcp/p80"
    assert port_proto_hash("ns1/svc1", "tcp") == "AQI2S6QIMU7PVVRP"
    assert port_proto_hash("ns1/svc1:p80", "tcp") == "XPGD46QRK7WJZT7O"
    assert _nft_hash("ns1/svc1/tcp/p80") == "ULMVA6XW"


def test_generator_writes_unnamed_ports_as_kube_proxy_does():
    text = iptables_ruleset([Service("ns1", "svc1", "172.30.0.41", [Port("", 80, 8080)], [Endpoint("10.180.0.1")])])
    assert '--comment "ns1/svc1 cluster IP"' in text and "-j KUBE-SVC-AQI2S6QIMU7PVVRP" in text
    assert "ns1/svc1:" not in text
    named = Service("ns1", "svc1", "172.30.0.41", [Port("p80", 80, 8080)])
    assert named.port_name(named.ports[0]) == "ns1/svc1:p80"


def test_api_name_for_kube_proxy():
    svc = Svc(
        "shop", "web", {"spec": {"ports": [{"port": 80}, {"name": "", "port": 81}, {"name": "http", "port": 82}]}}
    )
    assert [svc.kube_proxy_name(p) for p in svc.ports] == ["shop/web", "shop/web", "shop/web:http"]


def _table(name):
    return programmed.service_table(NodeState(Bundle.open(os.path.join(FIXTURES, name))))


def test_programmed_table_names_unnamed_ports_alike_in_both_modes():
    for fixture in ("unnamed-ports-iptables", "unnamed-ports-nftables"):
        table = _table(fixture)
        assert table["10.96.0.20:80/tcp"][0] == "shop/web", fixture
        assert table["10.96.0.60:8125/udp"][0] == "shop/stats", fixture
        assert table["10.96.0.10:53/udp"][0] == "kube-system/kube-dns:dns", fixture
        assert len(table["10.96.0.20:80/tcp"][1]) == 3
    # the two modes' tables agree entry for entry (names, endpoints)
    assert _table("unnamed-ports-iptables") == _table("unnamed-ports-nftables")


def test_focus_on_a_service_with_an_unnamed_port_traces_it():
    for fixture in ("unnamed-ports-iptables", "unnamed-ports-nftables"):
        state = NodeState(Bundle.open(os.path.join(FIXTURES, fixture)))
        report = focus_report(Report(subject="node", findings=(), checks=()), state, service="shop/stats")
        traces = report.extra.get("traces") or []
        assert traces and {t["target"] for t in traces} == {"shop/stats"}, (fixture, report.extra)
        assert all(p["dnat"] == "10.244.1.13:8125" for t in traces for p in t["paths"] if p.get("dnat")), traces
