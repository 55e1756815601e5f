"""The view a check's inputs are read through (kpdiag/state/inputs.py), at run time: it opens the declared inputs
only, a read of any other is an internal error of that check, and a check's result is checked as it is declared.
The static side (what each typed input's ``build`` may read) is tests/packaging/test_check_inputs.py."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle
from kpdiag.checkapi import check, load_registry, run_checks
from kpdiag.state import inputs as broker
from kpdiag.state.node import NodeState
from kpdiag.state.typed_node import Sysctls


def test_an_undeclared_read_is_an_error_of_that_check(tmp_path):
    """At run time the view opens only the declared inputs; a check that reads another one — even if it swallows
    the exception — ends as an internal error naming the input, and the other checks run."""

    b = Bundle.from_files(
        "mem", {sources.SYSCTL: b"net.ipv4.ip_forward = 1\n", sources.IP_ROUTE: b"[]", sources.IP_ADDR: b"[]"}
    )
    state = NodeState(b)

    @check("KPT91", "t-sneaky", "reads routes undeclared", "info", needs=("sysctl",), symptom="s", why="w", fix="f")
    def sneaky(ctx, new):
        try:
            ctx.ip_route  # noqa: B018 - the read under test
        except Exception:
            pass
        yield new(f"forwarding {ctx.sysctl['net.ipv4.ip_forward'].value}")

    @check(
        "KPT92",
        "t-honest",
        "declares routes",
        "info",
        needs=("sysctl",),
        uses=("routes",),
        symptom="s",
        why="w",
        fix="f",
    )
    def honest(ctx, new):
        yield new(f"{len(ctx.ip_route)} routes, forwarding {ctx.sysctl['net.ipv4.ip_forward'].value}")

    @check("KPT93", "t-source", "reads a source undeclared", "info", symptom="s", why="w", fix="f")
    def by_source(ctx, new):
        ctx.source(sources.IP_ROUTE)
        yield new("never")

    @check("KPT94", "t-cluster", "reads the API undeclared", "info", uses=("services",), symptom="s", why="w", fix="f")
    def by_cluster(ctx, new):
        ctx.cluster.pods()
        yield new("never")

    try:
        findings, runs = run_checks(state, [sneaky.spec, honest.spec, by_source.spec, by_cluster.spec])
        by_id = {r.id: r for r in runs}
        assert by_id["KPT91"].status == "error" and "read ip_route" in by_id["KPT91"].reason
        assert "sysctl" in by_id["KPT91"].reason  # names what it did declare
        assert by_id["KPT92"].status == "ran" and [f.summary for f in findings] == ["0 routes, forwarding 1"]
        assert by_id["KPT93"].status == "error" and f"the source {sources.IP_ROUTE}" in by_id["KPT93"].reason
        assert by_id["KPT94"].status == "error" and "cluster.pods" in by_id["KPT94"].reason
    finally:
        from kpdiag import checkapi

        for cid in ("KPT91", "KPT92", "KPT93", "KPT94"):
            checkapi._REGISTRY.pop(cid, None)


def test_a_finding_whose_data_is_not_json_is_an_error_of_that_check():
    """A finding's data is JSON values only: a check that puts an object there (a typed input, say) ends as an
    internal error naming why, and the report of the other checks can still be written."""

    state = NodeState(Bundle.from_files("mem", {sources.SYSCTL: b"net.ipv4.ip_forward = 1\n"}))

    @check("KPT97", "t-object", "puts an object in its data", "info", symptom="s", why="w", fix="f")
    def leaks(new, sysctls: Sysctls):
        yield new("leaks", data={"sysctls": sysctls})

    @check("KPT98", "t-plain", "plain data", "info", symptom="s", why="w", fix="f")
    def plain(new, sysctls: Sysctls):
        yield new("plain", data={"forwarding": sysctls.get("net.ipv4.ip_forward")})

    try:
        findings, runs = run_checks(state, [leaks.spec, plain.spec])
        by_id = {r.id: r for r in runs}
        assert by_id["KPT97"].status == "error" and "not JSON" in by_id["KPT97"].reason, by_id["KPT97"]
        assert by_id["KPT98"].status == "ran" and [f.data for f in findings] == [{"forwarding": "1"}]
        json.dumps([f.data for f in findings])
    finally:
        from kpdiag import checkapi

        for cid in ("KPT97", "KPT98"):
            checkapi._REGISTRY.pop(cid, None)


def test_declarations_are_checked_when_the_check_is_declared():
    with pytest.raises(ValueError, match="unknown input 'iptable'"):
        check("KPT95", "t-typo", "t", "info", needs=("iptable",), symptom="s", why="w", fix="f")
    with pytest.raises(ValueError, match="both needed and used"):
        check("KPT96", "t-twice", "t", "info", needs=("sysctl",), uses=("sysctl",), symptom="s", why="w", fix="f")
    with pytest.raises(ValueError, match="unknown input 'sysctl'"):  # cluster checks have the cluster inputs
        check("KPT97", "t-scope", "t", "info", uses=("sysctl",), scope="cluster", symptom="s", why="w", fix="f")


def test_run_mode_is_an_input():
    """focus and preflight are read only by the checks that declare them (the view has no other way in)."""
    registry = load_registry(plugins=False)
    declaring = {spec.id for spec in registry.checks if {"focus", "preflight"} & set(spec.inputs)}
    assert "KP202" in declaring and "KP301" in declaring


def test_a_new_source_is_an_input_by_its_path(tmp_path):
    """Adding a bundle source touches the catalogue, its collector and its parser only: a check can declare the source
    itself (its path) as an input, read it with ctx.source, and is skipped naming it (and how it is collected) when the
    bundle lacks it."""

    assert set(broker.SOURCE_INPUTS) == set(sources.CATALOGUE)

    @check(
        "KPT98", "t-by-path", "reads node/ip-rule.json", "info", needs=(sources.IP_RULE,), symptom="s", why="w", fix="f"
    )
    def by_path(ctx, new):
        yield new(f"{len(ctx.source(sources.IP_RULE))} rules")

    rules = b'[{"priority": 0, "src": "all", "table": "local"}, {"priority": 32766, "src": "all", "table": "main"}]'
    try:
        with_file = NodeState(Bundle.from_files("a", {sources.IP_RULE: rules}))
        findings, runs = run_checks(with_file, [by_path.spec])
        assert runs[0].status == "ran" and [f.summary for f in findings] == ["2 rules"]
        _, runs = run_checks(NodeState(Bundle.from_files("b", {sources.SYSCTL: b"x = 1\n"})), [by_path.spec])
        assert runs[0].status == "skipped"
        assert (
            runs[0].reason
            == f"needs {sources.IP_RULE} ({sources.IP_RULE.collected_by}), which is missing or unreadable"
        )
    finally:
        from kpdiag import checkapi

        checkapi._REGISTRY.pop("KPT98", None)


def test_the_view_cannot_be_copied_or_pickled_and_hides_nothing_behind_defaults():

    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

    view = broker.Inputs(NodeState(Bundle.from_files("x", {sources.SYSCTL: b"a = 1\n"})), "KPX", ("sysctl",))
    for attempt in (lambda: copy.copy(view), lambda: pickle.dumps(view)):
        with pytest.raises(TypeError, match="not to be copied or pickled"):
            attempt()
    with pytest.raises(broker.UndeclaredInput):  # getattr(ctx, "x", None) must not turn an undeclared read into None
        getattr(view, "ip_route", None)
    assert view.sysctl["a"].value == "1"


def test_a_source_kept_for_later_is_one_of_the_view_and_read_through_it():
    """``ctx.file(X)`` (what a typed input keeps to read on first use) refuses a source its input does not open, and
    each later read goes through the view: a read after the run is still the check's, and it cannot be rebound."""
    state = NodeState(Bundle.from_files("x", {sources.SYSCTL: b"a = 1\n", sources.IP_ROUTE: b"[]"}))
    view = broker.Inputs(state, "KPX", ("sysctl",))
    with pytest.raises(broker.UndeclaredInput, match="the source node/ip-route.json"):
        view.file(sources.IP_ROUTE)
    f = view.file(sources.SYSCTL)
    assert f.has() and f.text() == "a = 1\n" and f.display == state.display(sources.SYSCTL)
    f.problem("a planted problem")
    assert any("a planted problem" in str(p) for p in view.problems_with(sources.SYSCTL))
    with pytest.raises(AttributeError, match="read-only"):
        f.rel = sources.IP_ROUTE
    assert view.violations == [
        "KPX read the source node/ip-route.json, which none of its inputs (sysctl) grants: "
        "declare the input that provides it"
    ]
