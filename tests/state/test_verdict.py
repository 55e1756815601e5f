"""The verdict on a port explains failed connects through the ClusterIP by the endpoints that fail directly before it
blames a layer, and its findings of different blames (KP111/KP112 "works in part" or "the backend", KP113 "the Service
layer", KP114 "cannot tell") never fire together — over every combination of outcomes, on the real report path."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.commands.svc import service_report
from kpdiag.checks.observed import VERDICT_CHECKS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "fixtures", "svc-path-broken")  # shop/web: 10.96.0.20:80 → web-pod1, web-pod2 at 8080
EP = ("10.244.1.11:8080", "10.244.1.12:8080")
GROUPS = sorted(
    {frozenset(c for c, b in VERDICT_CHECKS.items() if b == blames) for blames in VERDICT_CHECKS.values()}, key=sorted
)


def _files() -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(FIXTURE):
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, FIXTURE)
            if rel != "scenario.json":
                out[rel] = open(path, "rb").read()
    return out


def _report(through: list[tuple[str, str | None]], direct: tuple[str, str], affinity: bool = False):
    """``through``: (result, endpoint reached or None) of each connect; ``direct``: each endpoint's own result."""
    results = [
        {
            "target": "10.96.0.20:80/tcp",
            "kind": "tcp-connect",
            "result": r,
            "from": None,
            "rtt_ms": None,
            "detail": {"seq": i + 1, "sport": 40000 + i, "reached": reached},
        }
        for i, (r, reached) in enumerate(through)
    ] + [
        {"target": f"{ep}/tcp", "kind": "tcp-connect", "result": r, "from": None, "rtt_ms": None}
        for ep, r in zip(EP, direct)
    ]
    doc = {
        "schema": "kpdiag.probes/v1",
        "source": "10.244.1.10",
        "raw": True,
        "raw_skipped_reason": None,
        "packets_sent": len(results),
        "results": results,
    }
    files = _files()
    files["probes/service.json"] = json.dumps(doc).encode()
    if affinity:
        services = json.loads(files["cluster/services.json"])
        for svc in services["items"]:
            svc["spec"]["sessionAffinity"] = "ClientIP"
        files["cluster/services.json"] = json.dumps(services).encode()
    report = service_report(Bundle.from_files("", files), "shop", "web")
    return report, {f.id for f in report.findings}


def _exclusive(ids: set[str]) -> bool:
    return sum(1 for g in GROUPS if ids & g) <= 1


OUTCOMES = ("connected", "refused", "timeout")


@pytest.mark.parametrize("direct", list(itertools.product(OUTCOMES, repeat=2)))
def test_verdict_findings_of_different_blames_never_fire_together(direct):
    series = [[(t[i % 3], None) for i in range(11)] for t in itertools.product(OUTCOMES, repeat=3)]
    for seq in series + [[(o, None)] for o in OUTCOMES]:  # 11 connects of every mix, and one (an older bundle)
        report, ids = _report(seq, direct)
        assert _exclusive(ids), (direct, seq, ids)
        status = report.extra["status"]
        assert status in ("works", "partial", "fails"), status
        if "KP113" in ids:
            assert "connected" in direct, (direct, seq)  # never blamed while no endpoint answers directly
        if status == "works":
            assert not ids & {"KP111", "KP112", "KP113", "KP114"}, ids


def test_one_dead_endpoint_of_two_explains_half_the_connects_failing():
    seq = [("refused" if i % 2 else "connected", None) for i in range(11)]
    report, ids = _report(seq, ("connected", "refused"))
    assert report.extra["status"] == "partial" and ids & {"KP111", "KP113"} == {"KP111"}, ids
    head = report.extra["verdict"][0]
    assert head.startswith("shop/web works in part: endpoint 10.244.1.12:8080 (web-pod2, node lab-node) refuses"), head
    assert head.endswith("— about 1 in 2 connections fail (KP111)"), head
    assert any(
        "11 connect(s) through 10.96.0.20:80/tcp from 11 source ports, 5 failed" in line
        for line in report.extra["verdict"]
    )


def test_more_failures_than_the_dead_endpoint_gives_blame_the_service_layer():
    """1 of 2 endpoints refuses, but all 11 connects fail: (1/2)^11 < 1e-3 — the Service layer fails too."""
    report, ids = _report([("refused", None)] * 11, ("connected", "refused"))
    assert ids & {"KP111", "KP112", "KP113"} == {"KP113"}, ids
    kp113 = next(f for f in report.findings if f.id == "KP113")
    assert "besides, 10.244.1.12:8080 (web-pod2, node lab-node): refused" in kp113.summary, kp113.summary
    assert report.extra["status"] == "fails"


def test_a_failure_of_another_kind_than_the_dead_endpoints_is_not_explained_by_them():
    """web-pod2 refuses; connects time out: no dead endpoint times out, so the timeouts are the Service layer's."""
    seq = [("timeout" if i % 2 else "connected", None) for i in range(11)]
    report, ids = _report(seq, ("connected", "refused"))
    assert ids & {"KP111", "KP113"} == {"KP113"} and report.extra["status"] == "partial", ids
    assert "the Service layer" in report.extra["verdict"][0], report.extra["verdict"][0]


def test_a_connect_seen_to_reach_an_endpoint_that_answers_directly_yet_failing_is_unexplained():
    seq = [("connected", EP[0])] * 5 + [("refused", EP[1])] * 5 + [("refused", EP[0])]
    report, ids = _report(seq, ("connected", "refused"))
    assert ids & {"KP111", "KP113"} == {"KP113"}, ids
    j = next(f for f in report.findings if f.id == "KP113").data["judgement"]
    assert (j["failed"], j["explained"], j["unexplained"], j["attributed"]) == (6, 5, 1, 11), j
    # every failure on the dead endpoint, seen by conntrack: works in part, and says which endpoints were reached
    report, ids = _report(seq[:10], ("connected", "refused"))
    assert ids & {"KP111", "KP113"} == {"KP111"} and report.extra["status"] == "partial", ids
    assert any(
        "reached (conntrack): 10.244.1.11:8080 ×5, 10.244.1.12:8080 ×5" in line for line in report.extra["verdict"]
    )


def test_session_affinity_makes_the_connects_one_choice():
    """sessionAffinity ClientIP: all 11 connects go to the one endpoint kube-proxy chose for this client — all refused
    is what web-pod2 refusing gives, not the Service layer."""
    report, ids = _report([("refused", None)] * 11, ("connected", "refused"), affinity=True)
    assert ids & {"KP111", "KP113"} == {"KP111"} and report.extra["status"] == "partial", ids
    assert any("sessionAffinity ClientIP" in line for line in report.extra["verdict"]), report.extra["verdict"]
    report, ids = _report([("refused", None)] * 11, ("connected", "refused"))  # without it: far too many failures
    assert ids & {"KP111", "KP113"} == {"KP113"}, ids
