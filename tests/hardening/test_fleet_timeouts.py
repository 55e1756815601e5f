"""`kpdiag cluster --timeout` is a hard bound, and a node cannot spoof or break the cluster report.

A real HTTP server speaking the Kubernetes API (tests/apiserver.py, with a kubelet that runs the pods) and the real
kubernetes client: a log read that never answers or trickles bytes, an API that hangs (everything, /version, creates,
deletes), 429 with Retry-After, deletes that fail, a report claiming another node's name, malformed reports. Every
run must end within 2× --timeout, and its JSON must be valid against kpdiag's own report schema."""

from __future__ import annotations

import copy
import json
import os
import time

import pytest
from kubernetes.client.api import core_v1_api  # noqa: F401  # loaded once here: the bound is on waiting, not on importing

from kpdiag.cli import main
from kpdiag.commands.pipeline import analyze_bundle
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES
from tests.schemas import validator

NS = "kpdiag"
SCHEMA = validator("cluster-report.schema.json")
REPORT = analyze_bundle(os.path.join(FIXTURES, "healthy-iptables")).to_dict()
TEXT = json.dumps(REPORT)


def _nodes(n):
    return [k8s.node(f"node-{i:03d}", ip=f"192.168.0.{i + 1}", ready=True) for i in range(n)]


def _run(capsys, api, tmp_path, *args):
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(["cluster", "--kubeconfig", api.kubeconfig(tmp_path), "--poll", "0.05", *args])
    took = time.monotonic() - t0
    out, err = capsys.readouterr()
    return rc, out, err, took


def _report(out: str, err: str = "") -> dict:
    assert out.startswith("{"), f"no JSON report; stderr: {err[-2000:]}"
    doc = json.loads(out)
    SCHEMA.validate(doc)  # whatever the nodes sent, the cluster report is kpdiag's own format
    return doc


def _failures(doc: dict) -> dict:
    return {f["node"]: f for f in doc["extra"]["failures"]}


def test_hanging_log_read_ends_at_the_deadline(capsys, tmp_path):
    """The log endpoint accepts the request and never answers: the node fails as a timeout at --timeout (the read
    had a fixed 120 s timeout, tried 4 times by urllib3 and 3 times by kpdiag: more than 900 s)."""
    kubelet = {"node-000": {"log": TEXT, "log_hang": 600}, "node-001": {"log": TEXT}}
    with ApiServer(_nodes(2), kubelet=kubelet) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4")
        live = api.live_pods(NS)
    doc = _report(out, err)
    fail = _failures(doc)["node-000"]
    assert fail["kind"] == "timeout" and "reading the log" in fail["reason"], fail
    assert doc["facts"]["nodes_diagnosed"] == 1
    assert live == []
    assert took < 8, f"--timeout 4 took {took:.1f} s"


def test_trickling_log_read_ends_at_the_deadline(capsys, tmp_path):
    """The log answers at once, then one byte every 0.2 s: no socket read ever times out, the deadline still holds."""
    kubelet = {"node-000": {"log": TEXT, "log_trickle": 0.2}}
    with ApiServer(_nodes(1), kubelet=kubelet) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4")
        live = api.live_pods(NS)
    fail = _failures(_report(out, err))["node-000"]
    assert fail["kind"] == "timeout" and "bytes read" in fail["reason"], fail
    assert live == [] and took < 8, took


def test_an_api_that_never_answers(capsys, tmp_path):
    with ApiServer(_nodes(2), kubelet={}, hang={"*": 600}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4")
        node_lists = api.count("GET", "/api/v1/nodes")
    assert rc == 3 and out == ""
    assert err.count("\n") == 1 and "list nodes" in err and "Traceback" not in err, err
    assert node_lists == 1  # one attempt in the setup's time, not urllib3's 4 behind kpdiag's back
    assert took < 8, took


def test_hanging_version_and_services_do_not_stretch_the_run(capsys, tmp_path):
    kubelet = {"node-000": {"log": TEXT}, "node-001": {"log": TEXT}}
    with ApiServer(_nodes(2), kubelet=kubelet, hang={"GET /version": 600, "GET /api/v1/services": 600}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4")
    doc = _report(out, err)
    assert doc["facts"]["nodes_diagnosed"] == 2
    assert "get /version" in err and "list services" in err
    assert took < 8, took


def test_hanging_create_is_a_timeout(capsys, tmp_path):
    with ApiServer(
        _nodes(2), kubelet={"node-000": {"log": TEXT}, "node-001": {"log": TEXT}}, hang={"POST pods": 600}
    ) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4")
    fails = _failures(_report(out, err))
    assert {f["kind"] for f in fails.values()} == {"timeout"} and all(
        "creating pod" in f["reason"] for f in fails.values()
    )
    assert took < 8, took


def test_hanging_deletes_are_bounded_and_the_pods_are_named(capsys, tmp_path):
    kubelet = {"node-000": {"log": TEXT}, "node-001": {"log": TEXT}}
    # the pods' deletes and their owner's (the run's ConfigMap, whose deletion would have the garbage collector
    # remove them) hang
    with ApiServer(_nodes(2), kubelet=kubelet, hang={"DELETE /api/v1/namespaces/kpdiag/": 600}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "4", "--fail-on", "never")
        live = api.live_pods(NS)
    doc = _report(out, err)
    assert doc["facts"]["nodes_diagnosed"] == 2
    assert sorted(doc["extra"]["leftover_pods"]) == sorted(f"{NS}/{p}" for p in live) and len(live) == 2
    assert rc == 1  # pods left behind fail the run whatever --fail-on says
    assert "kpdiag cluster --cleanup" in err
    assert took < 8, took


def test_failing_deletes_exit_non_zero_and_list_the_pods(capsys, tmp_path):
    kubelet = {"node-000": {"log": TEXT}, "node-001": {"log": TEXT}}
    with ApiServer(_nodes(2), kubelet=kubelet, fail={"DELETE /api/v1/namespaces/kpdiag/": 500}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "20", "--fail-on", "never")
        live = api.live_pods(NS)
        deletes = api.count("DELETE")
    doc = _report(out, err)
    assert rc == 1
    assert sorted(doc["extra"]["leftover_pods"]) == sorted(f"{NS}/{p}" for p in live) and len(live) == 2
    assert {p["source"] for p in doc["problems"]} >= {f"pod {NS}/{p}" for p in live}
    assert "could not delete" in err and "500" in err
    assert deletes >= 4  # retried (a 500 is transient), within the cleanup's share of the time
    assert took < 40, took


def test_429_retry_after_is_honoured(capsys, tmp_path):
    """The first node list and the first create get 429 with Retry-After: the client waits that long, then goes on."""
    kubelet = {"node-000": {"log": TEXT}}
    with ApiServer(_nodes(1), kubelet=kubelet, throttle={"GET /api/v1/nodes": (1, 2), "POST pods": (1, 1)}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "20")
        times = list(api.times)
    doc = _report(out, err)
    assert doc["facts"]["nodes_diagnosed"] == 1, doc["extra"]["failures"]
    lists = [t for t, m, p in times if m == "GET" and p == "/api/v1/nodes"]
    posts = [t for t, m, p in times if m == "POST" and p.endswith("/pods")]
    assert len(lists) == 2 and 2.0 <= lists[1] - lists[0] < 4, lists
    assert len(posts) == 2 and 1.0 <= posts[1] - posts[0] < 3, posts


def test_a_retry_after_beyond_the_deadline_is_the_reason(capsys, tmp_path):
    with ApiServer(_nodes(1), kubelet={}, throttle={"GET /api/v1/nodes": (10, 3600)}) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "--timeout", "30")
        lists = api.count("GET", "/api/v1/nodes")
    assert rc == 3 and "429" in err and "retry after 3600 s" in err and err.count("\n") == 1, err
    assert lists == 1 and took < 5, took  # nobody waits an hour, and nobody hammers the server


def test_a_report_claiming_another_node_is_rejected(capsys, tmp_path):
    spoof = copy.deepcopy(REPORT)
    spoof["facts"]["node"] = "node-001"  # node-000's pod says it is node-001
    own_hostname = copy.deepcopy(REPORT)
    own_hostname["facts"]["node"] = "ip-10-0-0-2.internal"  # a host name that is not a node name: fine
    kubelet = {"node-000": {"log": json.dumps(spoof)}, "node-001": {"log": json.dumps(own_hostname)}}
    with ApiServer(_nodes(2), kubelet=kubelet) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "20")
    doc = _report(out, err)
    fail = _failures(doc)["node-000"]
    assert fail["kind"] == "bad report" and "'node-001'" in fail["reason"] and "'node-000'" in fail["reason"], fail
    assert [r["node"] for r in doc["extra"]["nodes"] if r["status"] == "ok"] == ["node-001"]


MALFORMED = [
    (lambda d: d.update(extra=5), '"extra" is a number, not an object'),
    (lambda d: d.update(facts=[]), '"facts" is a list, not an object'),
    (lambda d: d.pop("findings"), '"findings" is missing'),
    (lambda d: d["summary"].update(error="3"), '"summary.error" is a string, not a count'),
    (lambda d: d["findings"].append({**d["findings"][0], "id": "KP6\x1b[2J"}), "findings[1].id is not a check id"),
    (
        lambda d: d["findings"].append({**d["findings"][0], "slug": "No Such Slug"}),
        "findings[1].slug is not a check slug",
    ),
    (
        lambda d: d["findings"].append({**d["findings"][0], "evidence": [{"source": "x", "text": "y", "line": 0}]}),
        "findings[1].evidence[0].line is not a line number",
    ),
    (lambda d: d["findings"].append({**d["findings"][0], "fix": []}), "findings[1].fix is empty"),
]


@pytest.mark.parametrize("break_it,named", MALFORMED, ids=[m[1].split(" is")[0] for m in MALFORMED])
def test_a_malformed_report_is_named_as_such(capsys, tmp_path, break_it, named):
    bad = copy.deepcopy(REPORT)
    assert bad["findings"], "the healthy-iptables fixture has a finding to copy"
    break_it(bad)
    kubelet = {"node-000": {"log": json.dumps(bad)}, "node-001": {"log": TEXT}}
    with ApiServer(_nodes(2), kubelet=kubelet) as api:
        rc, out, err, took = _run(capsys, api, tmp_path, "-o", "json", "--timeout", "20")
    doc = _report(out, err)
    fail = _failures(doc)["node-000"]
    assert fail["kind"] == "bad report" and "malformed node report" in fail["reason"] and named in fail["reason"], fail
    assert doc["facts"]["nodes_diagnosed"] == 1


def test_the_client_never_retries_behind_kpdiags_back(tmp_path):
    """retries = 0 reaches urllib3: it is set on the Configuration before the ApiClient builds its pool."""
    from kubernetes import client

    from kpdiag.collect.kubeconfig import api_client

    with ApiServer(_nodes(1), hang={"GET /api/v1/nodes": 30}) as api:
        cli, why = api_client(api.kubeconfig(tmp_path), None)
        retries = cli.rest_client.pool_manager.connection_pool_kw.get("retries")
        assert why is None and (retries == 0 or getattr(retries, "total", None) == 0), retries
        t0 = time.monotonic()
        with pytest.raises(Exception) as exc:
            client.CoreV1Api(cli).list_node(_request_timeout=(1, 1))
        took = time.monotonic() - t0
        time.sleep(0.3)
        calls = api.count("GET", "/api/v1/nodes")
    assert "timed out" in str(exc.value).lower()
    assert calls == 1 and took < 3, (calls, took)  # urllib3's default Retry(3) made this 4 calls and 4 s
