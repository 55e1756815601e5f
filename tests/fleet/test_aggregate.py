"""Aggregating node reports: cross-node findings, failures that do not lose the others, analyze DIR."""

from __future__ import annotations

import copy
import json
import os


from kpdiag.state import programmed
from kpdiag.bundle.store import Bundle
from kpdiag.cli import main
from kpdiag.commands.diagnose import analyze_state
from kpdiag.fleet.aggregate import NodeResult, aggregate, write_report_dir
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES
from tests.schemas import validator

SCHEMA = validator("cluster-report.schema.json")


def _report(fixture: str, node: str, table_edit=None, version: str | None = None) -> dict:
    state = NodeState(Bundle.open(os.path.join(FIXTURES, fixture)))
    rep = analyze_state(state).to_dict()
    if table_edit is not None:
        table = programmed.service_table(state)
        table_edit(table)
        rep["extra"]["programmed"] = programmed.encode(table, state.proxy_mode[0])
    if version:
        rep["facts"]["kube_proxy_version"] = version
    rep["facts"]["node"] = node
    return rep


BASE = {name: _report(name, "x") for name in ("healthy-iptables", "healthy-nftables", "ipvs-healthy")}


def _node(name, fixture="healthy-iptables", **kw):
    rep = copy.deepcopy(BASE[fixture]) if not kw else _report(fixture, name, **kw)
    rep["facts"]["node"] = name
    return NodeResult(name, report=rep)


def _ids(report):
    return [f.id for f in report.findings]


def test_identical_nodes_are_silent_and_the_report_is_valid():
    rep = aggregate([_node(f"n{i}", "healthy-nftables") for i in range(5)], api_version="v1.31.4", local_itp=set())
    assert [i for i in _ids(rep) if i.startswith("KP8")] == []
    assert {c.id: c.status for c in rep.checks} == {
        "KP801": "ran",
        "KP802": "ran",
        "KP803": "ran",
        "KP804": "ran",
        "KP805": "ran",
        "KP806": "ran",
    }
    SCHEMA.validate(rep.to_dict())


def test_mixed_modes_fire_kp801_naming_the_outliers():
    nodes = [_node(f"n{i}") for i in range(4)] + [
        _node("odd-nft", "healthy-nftables"),
        _node("odd-ipvs", "ipvs-healthy"),
    ]
    rep = aggregate(nodes)
    kp801 = [f for f in rep.findings if f.id == "KP801"]
    assert len(kp801) == 1
    assert (
        "iptables on 4 nodes" in kp801[0].summary and "odd-ipvs" in kp801[0].summary and "odd-nft" in kp801[0].summary
    )
    assert rep.facts["proxy_modes"] == {"iptables": 4, "nftables": 1, "ipvs": 1}


def test_iptables_and_nftables_nodes_with_the_same_services_agree():
    """The programmed table is keyed by ClusterIP:port/proto in every mode: no KP802/KP803 across modes."""
    rep = aggregate([_node("a"), _node("b"), _node("c", "healthy-nftables")])
    assert "KP802" not in _ids(rep) and "KP803" not in _ids(rep)


def test_one_failing_node_does_not_lose_the_others():
    nodes = [
        _node("a"),
        _node("b"),
        NodeResult("c", failure="timed out after 600 s (pod Running)", kind="timeout"),
        _node("d"),
    ]
    rep = aggregate(nodes)
    rows = {r["node"]: r for r in rep.extra["nodes"]}
    assert [rows[n]["status"] for n in "abd"] == ["ok", "ok", "ok"] and rows["c"]["status"].startswith(
        "failed: timed out"
    )
    assert rep.facts["nodes_diagnosed"] == 3 and rep.readable
    kp806 = next(f for f in rep.findings if f.id == "KP806")
    assert kp806.severity.value == "warning" and "timeout (1): c" in kp806.summary
    assert {"source": "node c", "error": "timed out after 600 s (pod Running)"} in rep.problems


def test_lagging_node_and_stale_endpoints_are_named():
    def drop_web(t):
        t.pop("10.96.0.20:80/tcp")

    def stale_dns(t):
        t["10.96.0.10:53/udp"] = (t["10.96.0.10:53/udp"][0], ("10.244.9.9:53",), False)

    rep = aggregate(
        [_node("a"), _node("b"), _node("c"), _node("lag", table_edit=drop_web), _node("stale", table_edit=stale_dns)]
    )
    kp802 = [f for f in rep.findings if f.id == "KP802"]
    kp803 = [f for f in rep.findings if f.id == "KP803"]
    assert [f.subject for f in kp802] == ["lag"] and "shop/web:http 10.96.0.20:80/tcp" in kp802[0].summary
    assert [f.subject for f in kp803] == ["stale"]
    assert "kube-system/kube-dns:dns 10.96.0.10:53/udp (1 endpoint(s) here, 2 on 4 node(s))" in kp803[0].summary
    # internalTrafficPolicy: Local (known from the API): endpoints differ per node by design
    rep2 = aggregate([_node("a"), _node("b"), _node("stale", table_edit=stale_dns)], local_itp={"10.96.0.10:53/udp"})
    assert "KP803" not in _ids(rep2)
    # … and a Local Service that iptables nodes do not list as a ClusterIP chain is not "missing" there either
    rep3 = aggregate(
        [_node("a", table_edit=drop_web), _node("b", table_edit=drop_web), _node("nft", "healthy-nftables")],
        local_itp={"10.96.0.20:80/tcp"},
    )
    assert "KP802" not in _ids(rep3)
    assert "KP802" in _ids(
        aggregate([_node("a", table_edit=drop_web), _node("b", table_edit=drop_web), _node("nft", "healthy-nftables")])
    )


def test_version_skew_across_nodes_and_against_the_api_server():
    nodes = [_node("a"), _node("b"), _node("old", version="1.27")]
    rep = aggregate(nodes, api_version="v1.31.4")
    kp804 = [f for f in rep.findings if f.id == "KP804"]
    assert {f.severity.value for f in kp804} == {"error", "warning"}
    assert any("more than 3 minor versions older" in f.summary and "old" in f.summary for f in kp804)
    newer = aggregate([_node("a"), _node("b")], api_version="v1.30.2")
    assert any(
        f.severity.value == "error" and "newer than the API server" in f.summary
        for f in newer.findings
        if f.id == "KP804"
    )


def test_a_finding_on_most_nodes_is_reported_once():
    nodes = [_node(f"n{i}") for i in range(10)] + [_node("nft", "healthy-nftables")]
    rep = aggregate(nodes)
    assert "KP601" not in _ids(rep)  # 10 of 11 nodes: not 10 findings …
    kp805 = [f for f in rep.findings if f.id == "KP805"]
    assert len(kp805) == 1 and kp805[0].subject == "KP601" and "on 10 of 11 nodes (not on nft)" in kp805[0].summary
    few = aggregate(
        [_node("a"), _node("b", "healthy-nftables"), _node("c", "healthy-nftables"), _node("d", "healthy-nftables")]
    )
    kp601 = [f for f in few.findings if f.id == "KP601"]
    assert len(kp601) == 1 and kp601[0].summary.startswith("a: ")  # … but a finding on one node keeps its node name


def test_analyze_a_directory_of_node_reports(tmp_path, capsys):
    results = [
        _node("a"),
        _node("b"),
        _node("c", "healthy-nftables"),
        NodeResult("d", failure="ImagePullBackOff: x", kind="image pull"),
    ]
    write_report_dir(str(tmp_path), results, {"api_version": "v1.31.4", "local_itp": []}, force=True)  # tmp_path exists
    (tmp_path / "e.json").write_text('{"truncated": ')
    (tmp_path / "f.json").write_text('{"schema": "something/else"}')
    cluster_report = aggregate([_node("x"), _node("y", "healthy-nftables")]).to_dict()  # a cluster report is not a node
    (tmp_path / "g.json").write_text(json.dumps(cluster_report))
    rc = main(["analyze", str(tmp_path), "-o", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    SCHEMA.validate(doc)
    failures = {f["node"]: f["reason"] for f in doc["extra"]["failures"]}
    assert failures["d"] == "ImagePullBackOff: x"
    assert failures["e"].startswith(f"{tmp_path}/e.json: not JSON")
    assert "not a kpdiag node report" in failures["f"]
    assert "a kpdiag 'cluster' report, not a node report" in failures["g"]
    assert doc["facts"]["nodes_diagnosed"] == 3 and "KP801" in {f["id"] for f in doc["findings"]}
    assert "Traceback" not in err and rc == 1


def test_analyze_one_node_report_file(tmp_path, capsys):
    """`kpdiag node -o json > r.json` (a pod log's stray lines around it too), then `kpdiag analyze r.json` elsewhere."""
    rep = copy.deepcopy(BASE["healthy-iptables"])
    rep["facts"]["node"] = "worker-7"
    (tmp_path / "r.json").write_text("kpdiag: collecting…\n" + json.dumps(rep) + "\n")
    rc = main(["analyze", str(tmp_path / "r.json"), "-o", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    SCHEMA.validate(doc)
    assert doc["facts"]["nodes_diagnosed"] == 1 and [r["node"] for r in doc["extra"]["nodes"]] == ["worker-7"]
    assert [f["id"] for f in doc["findings"]] == [f["id"] for f in rep["findings"]]  # the node's own findings, named
    assert rc == 0 and "Traceback" not in err
    (tmp_path / "bad.json").write_text('{"schema": "something/else"}')
    rc = main(["analyze", str(tmp_path / "bad.json")])
    out, err = capsys.readouterr()
    assert rc == 3 and "not a kpdiag node report" in err and err.count("\n") == 1 and out == ""  # one error line


def test_text_report_of_a_big_cluster_lists_the_nodes_that_stand_out():
    from kpdiag.render.report import report_to_text

    nodes = [_node(f"n{i:03d}", "healthy-nftables") for i in range(60)] + [
        _node("odd", "ipvs-healthy"),
        NodeResult("gone", failure="x", kind="timeout"),
    ]
    rep = aggregate(nodes)
    text = report_to_text(rep)
    assert "odd " in text and "gone " in text and "n000 " not in text
    assert "… and 60 more node(s) like the majority" in text
    assert "n059 " in report_to_text(rep, verbose=True)


def test_a_finding_not_of_the_schema_is_left_out_and_said():
    """A node report edited by hand or from another tool: a finding whose severity or id is not of the schema is left
    out of the cluster report — and a problem line says so, naming the node (it was dropped without a word)."""
    bad = _report("ip-forward-off", "node-b")
    assert bad["findings"], "the fixture has findings"
    bad["findings"][0]["severity"] = "catastrophic"
    bad["findings"].append({"id": "not-an-id", "severity": "error"})
    report = aggregate([NodeResult("node-a", _report("healthy-iptables", "node-a")), NodeResult("node-b", bad)])
    said = [p for p in report.problems if p["source"] == "node node-b"]
    assert said and said[0]["error"].startswith("2 findings of its report left out: not of the report's schema"), said
    assert not [p for p in report.problems if p["source"] == "node node-a"]
