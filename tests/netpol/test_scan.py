"""Big List files are searched, not parsed whole (kpdiag.commands.policy.ListScan): the answers must be the same as
from a parsed file, whatever the JSON layout (kubectl's indent and key order, compact, items before metadata)."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.commands import policy as policy_cmd
from kpdiag.commands import listscan
from kpdiag.commands.listscan import ListScan
from tests.netpol.test_truth_tables import ALL, SHAPES
from tests.netpol.world import ask, policy, write_bundle


@pytest.fixture
def scan_everything(monkeypatch):
    monkeypatch.setattr(listscan, "LAZY_BYTES", 0)  # every List file is searched


PICKED = (
    "a-from-namespace-y-and-pod-c",
    "deny-ingress-x-and-egress-y",
    "a-from-ipblock-y-except-y-b",
    "a-egress-to-pod-b-everywhere",
    "a-named-port-80-on-81",
)


@pytest.mark.parametrize("name", PICKED)
def test_search_answers_like_the_parser(tmp_path, monkeypatch, name):
    policies, port, reach = next(s for s in SHAPES if s.id == name).values
    bundle = write_bundle(tmp_path, policies)
    monkeypatch.setattr(listscan, "LAZY_BYTES", 0)
    wrong = [(s, d) for s in ALL for d in ALL if ask(bundle, s, d, port)["allowed"] != reach.m[(s, d)]]
    assert not wrong


def _relayout(path, how):
    for name in os.listdir(os.path.join(path, "cluster")):
        full = os.path.join(path, "cluster", name)
        doc = json.load(open(full))
        if how == "compact":
            text = json.dumps(doc, separators=(",", ":"))
        else:  # kubectl: keys sorted (items before metadata), 4-space indent
            text = json.dumps(doc, indent=4, sort_keys=True)
        open(full, "w").write(text)


@pytest.mark.parametrize("how", ["compact", "kubectl"])
def test_layouts(tmp_path, scan_everything, how):
    pols = [
        policy(
            "x",
            "a-from-y-c",
            {
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {"matchLabels": {"ns": "y"}},
                                "podSelector": {"matchLabels": {"pod": "c"}},
                            }
                        ]
                    }
                ],
            },
        )
    ]
    bundle = write_bundle(
        tmp_path,
        pols,
        extra={
            "cluster/networkpolicies.json": json.dumps(
                {"apiVersion": "v1", "kind": "List", "metadata": {"namespaces": ["x", "y"]}, "items": pols}
            )
        },
    )
    _relayout(bundle, how)
    assert ask(bundle, "y/c", "x/a", "80")["allowed"] and not ask(bundle, "y/b", "x/a", "80")["allowed"]
    assert ask(bundle, "10.244.2.12", "x/a", "80")["from"].startswith("y/c")  # found by its IP
    from kpdiag.bundle.store import Bundle

    src = policy_cmd.FlowSource(Bundle.open(bundle))
    assert src.covered == {"x", "y"}  # the List's own metadata, before or after the items
    from tests.netpol.world import run_cli

    code, _, err = run_cli("policy", "--bundle", bundle, "--from", "z/a", "--to", "x/a", "--port", "80")
    assert code == 3 and "namespace z were not collected" in err


def test_bad_policy_named_with_its_line(tmp_path, scan_everything):
    bad = policy("x", "bad-cidr", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "300.0.0.0/8"}}]}]})
    good = policy("x", "deny-a", {"podSelector": {"matchLabels": {"pod": "a"}}})
    bundle = write_bundle(tmp_path, [good, bad])
    doc = ask(bundle, "x/b", "x/a", "80")
    assert not doc["allowed"] and doc["ingress"]["policies"] == ["x/deny-a"]
    text = open(os.path.join(bundle, "cluster", "networkpolicies.json")).read().splitlines()
    line = next(i for i, t in enumerate(text, 1) if '"name": "bad-cidr"' in t)
    probs = [p for p in doc["problems"] if "bad-cidr" in p]
    assert len(probs) == 1 and "invalid CIDR '300.0.0.0/8'" in probs[0]
    start = int(probs[0].split("(line ")[1].split(")")[0])
    assert start < line <= start + 5  # the line of the item's opening brace


def test_strings_that_look_like_fields_are_not_items():
    items = [
        {
            "metadata": {
                "name": "a",
                "namespace": "x",
                "annotations": {"note": '{"metadata": {"name": "b", "namespace": "x"}}'},
            }
        },
        {"metadata": {"name": "b", "namespace": "y"}},
    ]
    raw = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1).encode()
    scan = ListScan(raw)
    assert [o["metadata"]["name"] for _, o in scan.where("namespace", "x")] == ["a"]
    assert [o["metadata"]["namespace"] for _, o in scan.where("name", "b")] == ["y"]
    assert scan.where("name", "c") == []


def test_truncated_file_is_not_searched(tmp_path, scan_everything):
    bundle = write_bundle(tmp_path, [policy("x", "deny", {"podSelector": {}})])
    full = os.path.join(bundle, "cluster", "networkpolicies.json")
    text = open(full).read()
    open(full, "w").write(text[: len(text) // 2])
    from tests.netpol.world import run_cli

    code, _, err = run_cli("policy", "--bundle", bundle, "--from", "y/a", "--to", "x/a", "--port", "80")
    assert code == 3 and "networkpolicies.json" in err
