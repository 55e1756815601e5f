"""Skip or silence, one rule (docs/architecture.md §5): silence is "checked, and fine"; a check that lacks the data or
the fact it compares is skipped with the reason — it never returns silently for lack of data."""

from __future__ import annotations

import json

from kpdiag.bundle.store import MANIFEST, Bundle
from kpdiag.checkapi import Skip, _REGISTRY, check, load_registry, run_checks
from kpdiag.state.node import NodeState
from tests.given import given


def test_no_data_no_verdict_over_the_whole_catalogue():
    """On a bundle with nothing but its manifest no node check may run: a silent one would claim it checked."""
    empty = Bundle.from_files("empty", {MANIFEST: json.dumps({"format": "kpdiag-bundle/1", "node": "n1"}).encode()})
    checks = [c for c in load_registry(plugins=False).checks if c.scope == "node"]
    _, runs = run_checks(NodeState(empty), checks)
    assert len(runs) == len(checks) >= 80
    ran = [(r.id, r.status, r.reason) for r in runs if r.status != "skipped" or not r.reason]
    assert not ran, f"checks that decided something without any data: {ran}"


def test_a_skip_after_a_finding_is_a_skip():
    @check("KPT81", "t-half", "yields, then cannot decide", "info", needs=("sysctl",), symptom="s", why="w", fix="f")
    def half(ctx, new):
        yield new("first port fine")
        raise Skip("the second port's endpoints are unreadable")

    try:
        findings, runs = run_checks(given().state(), [half.spec])
        assert not findings and (runs[0].status, runs[0].reason) == (
            "skipped",
            "the second port's endpoints are unreadable",
        )
    finally:
        _REGISTRY.pop("KPT81", None)


def test_kp603_without_a_cluster_cidr_skips_instead_of_passing():
    # neither kube-proxy's configuration nor its rules (no "! -s CIDR -j KUBE-MARK-MASQ") say what the pods are
    rules = given().state().bundle.read_text("node/iptables-save.txt")
    no_masq_rule = "\n".join(line for line in rules.splitlines() if "! -s 10.244.0.0/16" not in line) + "\n"
    reason = given(kube_proxy={"clusterCIDR": None}, iptables=no_masq_rule).skips("KP603")
    assert "no clusterCIDR" in reason
    given(kube_proxy={"clusterCIDR": "10.244.0.0/16"}).silent("KP603")  # it has the fact: it decides
