"""`kpdiag node --service` (what each cluster pod runs with --service) traces in the mode kube-proxy runs in."""

import os

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.fleet.aggregate import NodeResult, node_row
from kpdiag.commands.focus import focus_report
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES

WEB = ["10.244.1.11:8080", "10.244.1.12:8080", "10.244.2.13:8080"]


def _focus(fixture, **kw):
    state = NodeState(Bundle.open(os.path.join(FIXTURES, fixture)))
    return focus_report(analyze_state(state), state, **kw)


@pytest.mark.parametrize("fixture", ["healthy-iptables", "healthy-nftables"])
def test_service_focus_traces_each_port_in_the_running_mode(fixture):
    report = _focus(fixture, service="shop/web")
    traces = report.extra["traces"]
    assert [(t["target"], t["packet"]["from"]) for t in traces] == [
        ("shop/web:http", "pod"),
        ("shop/web:http", "external"),
    ]
    for t in traces:  # the lab's three shop/web pods, one path each
        assert len({p["dnat"] for p in t["paths"]}) == 3 and all(p["dnat"].startswith("10.244.") for p in t["paths"])
    row = node_row(NodeResult("n", report=report.to_dict()))
    assert row["service"] == "pod accept→3 ep, external accept→3 ep"


def test_ipvs_focus_names_ports_from_the_api_service():
    """IPVS keeps no Service names: the API's Service (in the bundle) says which virtual servers are its ports."""
    report = _focus("ipvs-healthy", service="shop/web")
    assert not report.extra.get("notes")
    assert [(t["target"], t["packet"]["from"]) for t in report.extra["traces"]] == [
        ("shop/web:http", "pod"),
        ("shop/web:http", "external"),
    ]
    assert {p["dnat"] for t in report.extra["traces"] for p in t["paths"]} == set(WEB)


def test_ipvs_focus_without_the_api_says_names_are_unknown_and_traces_the_clusterip():
    root = os.path.join(FIXTURES, "ipvs-healthy")
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if not rel.startswith("cluster/") and rel != "scenario.json":
                files[rel] = open(os.path.join(dirpath, n), "rb").read()
    state = NodeState(Bundle.from_files("n", files))
    report = focus_report(analyze_state(state), state, service="shop/web", trace_to="10.96.0.20:80")
    assert any("IPVS keeps no Service names" in n for n in report.extra["notes"])
    assert {p["dnat"] for t in report.extra["traces"] for p in t["paths"]} == set(WEB)
