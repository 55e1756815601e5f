"""`kpdiag svc`'s verdict names the checks that declare their part in it (``@check(..., verdict=…)``,
kpdiag/rootcause.py VERDICT_ROLES): a new check that declares a part changes the verdict with no edit to
kpdiag/commands/svc.py, which keeps no check id of its own."""

from __future__ import annotations

import ast
import json
import os

import pytest

import kpdiag.commands.svc as svc_module
from kpdiag.bundle.store import Bundle
from kpdiag.checkapi import _REGISTRY, check
from kpdiag.commands.svc import service_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "fixtures", "svc-path-broken")  # shop/web: 10.96.0.20:80 → 10.244.1.11/12 at 8080


def _silent_service_report():
    """shop/web whose ClusterIP and both endpoints time out (11 connects through the Service, one to each endpoint)."""
    files = {}
    for dirpath, _, names in os.walk(FIXTURE):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), FIXTURE)
            if rel != "scenario.json":
                with open(os.path.join(dirpath, n), "rb") as fh:
                    files[rel] = fh.read()
    through = [("10.96.0.20:80", {"seq": i + 1, "sport": 40000 + i, "reached": None}) for i in range(11)]
    results = [
        {"target": f"{t}/tcp", "kind": "tcp-connect", "result": "timeout", "from": None, "rtt_ms": None, "detail": d}
        for t, d in through
    ] + [
        {"target": f"{ep}/tcp", "kind": "tcp-connect", "result": "timeout", "from": None, "rtt_ms": None}
        for ep in ("10.244.1.11:8080", "10.244.1.12:8080")
    ]
    files["probes/service.json"] = json.dumps(
        {
            "schema": "kpdiag.probes/v1",
            "source": "10.244.1.10",
            "raw": True,
            "raw_skipped_reason": None,
            "packets_sent": len(results),
            "results": results,
        }
    ).encode()
    return service_report(Bundle.from_files("", files), "shop", "web")


@pytest.fixture
def cni_policy_check():
    """A CNI's own policy check (as a plugin would add one) that declares it plays "policy-drop" in the verdict."""

    @check(
        "KP986",
        "t-cni-policy-drop",
        "A CNI policy drops the flow",
        "error",
        verdict=("policy-drop",),
        symptom="s",
        why="w",
        fix="f",
    )
    def cni_policy(ctx, new):
        yield new(
            "CiliumNetworkPolicy shop/deny-all drops 10.244.1.10 → shop/web; the flow is denied", subject="shop/web"
        )

    yield
    _REGISTRY.pop("KP986", None)


def test_the_verdict_names_the_checks_that_declare_their_part():
    report = _silent_service_report()
    assert report.extra["status"] == "fails"
    assert report.extra["verdict"][0] == "shop/web does NOT work: its endpoints do not answer (KP112)"


def test_a_check_declaring_policy_drop_becomes_the_verdicts_cause(cni_policy_check):
    report = _silent_service_report()
    assert "KP986" in {f.id for f in report.findings}
    assert report.extra["status"] == "fails"
    head, lines = report.extra["verdict"][0], report.extra["verdict"]
    assert head == "shop/web does NOT work: a NetworkPolicy drops it: CiliumNetworkPolicy shop/deny-all drops " + (
        "10.244.1.10 → shop/web (KP986)"
    ), head
    assert any("a NetworkPolicy blocks it: CiliumNetworkPolicy shop/deny-all" in line for line in lines), lines


def test_an_unknown_verdict_part_is_refused_at_declaration():
    with pytest.raises(ValueError, match="verdict must be among"):
        check("KP985", "t-bad-part", "t", "error", verdict=("the-backend",), symptom="s", why="w", fix="f")
    assert "KP985" not in _REGISTRY


def test_the_svc_command_keeps_no_check_id_of_its_own():
    """No string in kpdiag/commands/svc.py's code names a check (its docstrings may, as examples)."""
    tree = ast.parse(open(svc_module.__file__, encoding="utf-8").read())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    named = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and any(f"KP{n}" in node.value for n in range(100, 1000))
    ]
    assert named == [], named
