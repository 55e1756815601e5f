"""Every fixture fires exactly what its scenario.json says; every check fires somewhere and stays silent somewhere."""

import json
import os

import pytest

from kpdiag.checkapi import load_registry
from kpdiag.fleet.aggregate import looks_like_report_dir
from kpdiag.state.typed import evident_by
from tests.conftest import FIXTURES
from tests.given import fixture_report


def _cluster_fixture(name) -> bool:
    return looks_like_report_dir(os.path.join(FIXTURES, name))


SCENARIOS = sorted(d for d in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, d, "scenario.json")))


def _data_present(name, spec) -> bool:
    if spec.scope == "cluster" or _cluster_fixture(name):  # cluster checks run on node reports, node checks on bundles
        return spec.scope == "cluster" and _cluster_fixture(name)

    def has(rel):  # "FILE#TEXT": the file exists and holds TEXT (a document of that schema)
        rel, _, marker = rel.partition("#")
        path = os.path.join(FIXTURES, name, rel)
        if not marker or not os.path.isfile(path):
            return os.path.exists(path)
        with open(path, encoding="utf-8", errors="replace") as fh:
            return marker in fh.read()

    if not spec.needs:
        return has("node/iptables-save.txt")  # checks that look at whatever node data there is
    # each input says which files show it was collected (state/inputs.py Input.files, a typed input's FILES)
    return all(any(has(str(rel)) for rel in evident_by(spec, n)) for n in spec.needs)


def _cni_judged(report, spec) -> bool:
    """A check about some CNIs (``cni=``) runs only on a node of one of them (the report's facts name the CNI)."""
    facts = report.facts.get("cni") or {}
    return not spec.cni or bool({facts.get("cni"), facts.get("routing")} & set(spec.cni))


def _scenario(name):
    with open(os.path.join(FIXTURES, name, "scenario.json")) as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", SCENARIOS)
def test_fixture_fires_what_it_says(name):
    expect = _scenario(name)["expect"]
    report = fixture_report(name)
    fired = {f.id for f in report.findings}
    assert fired == set(expect["fires"]), (name, [f.summary for f in report.findings])
    runs = {r.id: r for r in report.checks}
    assert not [r for r in report.checks if r.status == "error"], [
        r.reason for r in report.checks if r.status == "error"
    ]
    # every check whose data is in the fixture must run (and, unless it fires, stay silent)
    mode = report.facts.get("proxy_mode")
    not_a_node = any(f.data.get("not_a_node") for f in report.findings)  # KP709: the host is no Kubernetes node
    must_run = [
        c.id
        for c in load_registry().checks
        if c.id in runs
        and _data_present(name, c)
        and (not c.modes or mode in c.modes)
        and _cni_judged(report, c)
        and (c.any_host or not not_a_node)
    ]
    for c in load_registry().checks:  # on a host that is no node, every node check but any_host ones says so
        if not_a_node and c.scope == "node" and not c.any_host and c.id in runs:
            reason = runs[c.id].reason or ""
            assert runs[c.id].status == "skipped" and reason.startswith("this does not look like a Kubernetes node"), (
                name,
                runs[c.id],
            )
    for c in load_registry().checks:  # a check about other proxy modes says so, whatever data the bundle has
        if c.modes and mode and mode not in c.modes and c.id in runs and runs[c.id].status != "error":
            reason = runs[c.id].reason or ""  # or, first, that kube-proxy is not in charge (its rules are leftovers)
            assert runs[c.id].status == "skipped" and (
                f"runs in {mode} mode" in reason or reason.startswith("kube-proxy is not in charge")
            ), (name, runs[c.id])
    silent = expect.get("silent") or [c for c in must_run if c not in fired and c not in expect.get("may_skip", [])]
    for check_id in silent:
        assert runs[check_id].status == "ran" and runs[check_id].findings == 0, (name, runs[check_id])
    for f in report.findings:
        assert f.summary and f.explanation and f.fix, f
        assert f.evidence, f"{f.id} in {name} gives no evidence"
        for e in f.evidence:
            assert e.source and e.text


def given_cases() -> tuple[dict, dict]:
    """The given() cases in tests/checks (tests/given.py): ``.fires("KPnnn")`` and ``.silent("KPnnn")`` calls, which
    assert it — check id → the test functions that hold them."""
    import ast

    fires, silent = {}, {}
    here = os.path.dirname(os.path.abspath(__file__))
    for fname in sorted(os.listdir(here)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        with open(os.path.join(here, fname), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for fn in tree.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
                continue
            for n in ast.walk(fn):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("fires", "silent")
                    and n.args
                    and isinstance(n.args[0], ast.Constant)
                    and str(n.args[0].value).startswith("KP")
                ):
                    (fires if n.func.attr == "fires" else silent).setdefault(n.args[0].value, []).append(
                        f"{fname}::{fn.name}"
                    )
    return fires, silent


def test_every_check_fires_and_stays_silent_somewhere():
    """In a fixture, or in a given() case (tests/given.py) — the in-memory bundle of a small base plus what the case
    changes is as good a place to fire or stay silent as a recorded one."""
    fires, silent = given_cases()
    for name in SCENARIOS:
        report = fixture_report(name)
        for r in report.checks:
            if r.status == "ran":
                (fires if r.findings else silent).setdefault(r.id, []).append(name)
    for spec in load_registry().checks:
        assert spec.id in fires, f"{spec.id} {spec.slug} fires in no fixture"
        assert spec.id in silent, f"{spec.id} {spec.slug} is silent in no fixture"


def test_healthy_node_has_no_error_or_warning():
    report = fixture_report("healthy-iptables")
    assert report.counts()["error"] == 0 and report.counts()["warning"] == 0
    node_checks = {
        c.id
        for c in load_registry().checks
        if "services" not in c.needs
        and _data_present("healthy-iptables", c)
        and (not c.modes or "iptables" in c.modes)
        and _cni_judged(report, c)
    }
    assert len(node_checks) >= 20
    assert all(r.status == "ran" for r in report.checks if r.id in node_checks)
    assert report.facts["proxy_mode"] == "iptables" and report.facts["kube_proxy_version"] == "1.31"


@pytest.mark.parametrize("name", [n for n in SCENARIOS if "trace" in _scenario(n)])
def test_fixture_traces(name):
    from kpdiag.trace.model import Packet

    from kpdiag.commands.trace import setup_trace

    t = _scenario(name)["trace"]
    setup = setup_trace(bundle=os.path.join(FIXTURES, name))  # the mode kube-proxy runs in
    result = setup.tracer.trace(Packet(t["src"], t["dst"], t["proto"], t["dport"]))
    assert sorted(result.dnat_set()) == sorted(t["expect"]["dnat"])
    assert result.verdicts() == {t["expect"]["verdict"]}
    assert {p.masquerade for p in result.paths} == {t["expect"]["masquerade"]}


def test_every_needed_input_says_which_files_show_it():
    """The table above is derived: each input a check needs names the bundle files that show it was collected
    (declared sources; "FILE#TEXT" when the file must hold TEXT) — only a run-mode input (whole-rules, whole-services)
    names none."""
    from kpdiag.bundle import sources

    for spec in load_registry(plugins=False).checks:
        if spec.scope != "node":
            continue
        for n in spec.needs:
            files = evident_by(spec, n)
            assert files or n in ("whole-rules", "whole-services"), (spec.id, n)
            for rel in files:
                assert sources.declared(str(rel).partition("#")[0]), (spec.id, n, rel)
