"""Every check receives exactly the inputs it declares (kpdiag/state/inputs.py) — shown two ways.

Statically: every check, node and cluster, takes typed inputs (kpdiag/state/typed.py) and receives plain values, so
what still receives a view of the state is read — each typed input's ``build`` (from a view opening its one input,
of NodeState or of FleetState), with the helpers it hands the view to; every member it touches (``ctx.iptables()``,
``ctx.cluster.pods()``, ``ctx.source(sources.CONNTRACK)``) must be granted by its input. This covers the paths no
fixture takes.

At run time: a check reading an undeclared input is an internal error of that check, even when it swallows the
exception (``test_an_undeclared_read_is_an_error_of_that_check``); every fixture runs every check through that view
(tests/checks/test_fixtures.py fails on any check error).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import types

import pytest

from kpdiag.state import inputs as broker
from kpdiag.bundle import sources
from kpdiag.checkapi import check, load_registry, run_checks
from kpdiag.state.typed import Sysctls

NAMES = {"__class__", "__name__", "__qualname__", "__doc__"}  # dunders that only name things (an exception's class)
SOURCE_METHODS = {"source", "has", "source_text", "display", "problem", "problems_with"}
OWN = SOURCE_METHODS | {"cluster", "check_id", "declared", "violations"}


class Reads:
    """What a function reads of the inputs passed to it as ``param`` (followed into the helpers it passes them to)."""

    def __init__(self):
        self.memo: dict = {}
        self.trees: dict = {}

    def _tree(self, module):
        if module.__name__ not in self.trees:
            self.trees[module.__name__] = ast.parse(inspect.getsource(module))
        return self.trees[module.__name__]

    def _def(self, fn):
        module = sys.modules[fn.__module__]
        owner, _, name = fn.__qualname__.rpartition(".")  # a typed input's build is a method of its class
        body = self._tree(module).body
        if owner:
            body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == owner), [])
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return module, node
        return module, None

    @staticmethod
    def _ours(obj) -> bool:
        return (
            isinstance(obj, types.FunctionType)
            and obj.__module__.startswith("kpdiag")
            and obj.__module__ not in ("kpdiag.state.node", "kpdiag.state.inputs", "kpdiag.checkapi")
            and "." not in obj.__qualname__
        )

    def _resolve(self, module, expr):
        obj = (
            module.__dict__.get(expr.id) if isinstance(expr, ast.Name) else None
        )  # a helper the module defines or imports
        return obj if self._ours(obj) else None

    @staticmethod
    def _const(module, expr):
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            base = module.__dict__.get(expr.value.id)
            value = getattr(base, expr.attr, None) if isinstance(base, types.ModuleType) else None
            return value if isinstance(value, str) else None
        if isinstance(expr, ast.Name):
            value = module.__dict__.get(expr.id)
            return value if isinstance(value, str) else None
        return None

    def _values(self, module, expr, bound, fnode) -> list[str]:
        """Every string ``expr`` can be: a constant, ``sources.X``, a module-level string, a helper's parameter given
        such a value, a local name looped over a module-level tuple of them (``for rel in POLICY_FILES``)."""
        if isinstance(expr, ast.Name) and expr.id in dict(bound):  # a helper's parameter given constants
            return list(dict(bound)[expr.id])
        one = self._const(module, expr)
        if one is not None:
            return [one]
        out = []
        for n in ast.walk(fnode) if isinstance(expr, ast.Name) else ():  # a local looped over a module-level tuple
            if (
                isinstance(n, (ast.For, ast.comprehension))
                and isinstance(n.target, ast.Name)
                and n.target.id == expr.id
            ):
                value = module.__dict__.get(n.iter.id) if isinstance(n.iter, ast.Name) else None
                if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
                    out += value
        return out

    def of(self, fn, param: str = "ctx", bound: frozenset = frozenset()) -> set[str]:
        """``bound``: the helper's other parameters that the caller gave a constant (``_items(ctx, sources.PODS)``)."""
        key = (fn, param, bound)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = out = set()
        module, node = self._def(fn)
        if node is None:
            return out
        accounted: set[int] = set()  # the uses of ``param`` the analysis follows; any other use is a blind spot

        def blind(n, why: str) -> None:
            out.add(f"?{why}: {ast.unparse(n)[:80]} ({module.__name__}:{n.lineno})")

        for n in ast.walk(node):
            if (
                isinstance(n, ast.Attribute)
                and n.attr.startswith("__")
                and n.attr.endswith("__")
                and n.attr not in NAMES
            ):
                blind(n, "Python's internals (a bound method's __self__ is the whole state)")
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == param:
                accounted.add(id(n.value))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == param:
                out.add(n.attr)
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Attribute)
                and n.value.attr == "cluster"
                and isinstance(n.value.value, ast.Name)
                and n.value.value.id == param
            ):
                out.add(f"cluster.{n.attr}")
            if isinstance(n, ast.Call):
                f = n.func
                if (
                    isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Name)
                    and f.value.id == param
                    and f.attr in SOURCE_METHODS
                    and n.args
                ):
                    found = self._values(module, n.args[0], bound, node)
                    for src in found:
                        out.add(f"src:{src}")
                    if not found:
                        blind(n, "a source it cannot name")
                callee = self._resolve(module, f)
                passes = [
                    a for a in [*n.args, *(kw.value for kw in n.keywords)] if isinstance(a, ast.Name) and a.id == param
                ]
                if passes and callee is not None:
                    accounted.update(id(a) for a in passes)
                if callee is not None:
                    params = list(inspect.signature(callee).parameters)
                    given = [(params[i], a) for i, a in enumerate(n.args) if i < len(params)]
                    given += [(kw.arg, kw.value) for kw in n.keywords if kw.arg]
                    consts = frozenset(
                        (name, tuple(v)) for name, a in given if (v := self._values(module, a, bound, node))
                    )
                    for name, a in given:
                        if isinstance(a, ast.Name) and a.id == param:
                            out |= self.of(callee, name, consts)
        for n in ast.walk(node):  # the inputs handed somewhere the analysis cannot follow: aliased, stored, returned …
            if isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Load) and id(n) not in accounted:
                blind(n, "its inputs go where the analysis cannot follow")
        return out


def _granted(spec) -> tuple[set[str], set[str]]:
    known = broker.catalogue(spec.scope)
    grants, srcs = set(), set()
    for name in spec.inputs:
        grants.update(known[name].grants)
        srcs.update(known[name].sources)
    return grants, srcs


def _undeclared(spec, reads: set[str]) -> list[str]:
    grants, srcs = _granted(spec)
    bad = []
    for r in sorted(reads):
        if r.startswith("?"):
            bad.append(f"cannot tell what it reads — {r[1:]}")
        elif r.startswith("src:"):
            if r[4:] not in srcs:
                bad.append(f"the source {r[4:]}")
        elif r.startswith("cluster."):
            if r not in grants:
                bad.append(r)
        elif r not in OWN and r not in grants:
            bad.append(r)
    return bad


def test_typed_inputs_read_their_one_input():
    """A check with typed parameters (kpdiag/state/typed.py) gets plain values: what it can read is what each type's
    ``build`` reads — from a view opening the type's one input of its scope's catalogue (NodeState's for a node check,
    FleetState's for a cluster check), which is all this needs to show."""
    from kpdiag.state import typed

    reads = Reads()
    kinds = [
        t for t in vars(typed).values() if isinstance(t, type) and issubclass(t, typed.Typed) and t is not typed.Typed
    ]
    assert {t.SCOPE for t in kinds} == {"node", "cluster"}
    for t in kinds:
        assert t.INPUT in broker.catalogue(t.SCOPE), (t.__name__, t.SCOPE, t.INPUT)
        fake = type("Spec", (), {"scope": t.SCOPE, "inputs": (t.INPUT,)})()
        got = reads.of(t.build.__func__, "ctx")
        assert got and not _undeclared(fake, got), (t.__name__, got)
    # every named cluster input is read through a type (the cluster checks have no other way in)
    assert set(broker.CLUSTER_INPUTS) <= {t.INPUT for t in kinds if t.SCOPE == "cluster"}
    for spec in load_registry(plugins=False).checks:
        for name, t, optional in spec.params:  # the signature is the declaration: T a need, Optional[T] a use
            assert t.SCOPE == spec.scope, (spec.id, name)
            assert t.INPUT in (spec.uses if optional else spec.needs), (spec.id, name)


def test_one_mechanism_per_check():
    """A check takes typed inputs or ``ctx``, never both: a typed check declares its inputs by its signature, and a
    ``needs=``/``uses=`` string only for an input it reads nothing of (a gate: whole-rules, whole-services, the run mode); its
    parameters are typed inputs (``new`` aside), so it cannot reach the state. Every built-in check, node or cluster,
    is typed: the ones docs/architecture.md names."""
    registry = load_registry(plugins=False)
    assert [spec.id for spec in registry.checks if not spec.params] == [], "a check takes ctx: give it typed inputs"
    assert {spec.scope for spec in registry.checks} == {"node", "cluster"}
    typed_checks = [spec for spec in registry.checks if spec.params]
    for spec in typed_checks:
        params = list(inspect.signature(spec.fn).parameters)
        assert "ctx" not in params and params[0] == "new", (spec.id, params)
        from_signature = {t.INPUT for _, t, _ in spec.params}
        gates = {name for name in spec.inputs if name not in from_signature}
        known = broker.catalogue(spec.scope)
        assert all(
            not known[g].grants and not known[g].sources or g in ("whole-rules", "whole-services") for g in gates
        ), (spec.id, gates)
    import re

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "architecture.md"), encoding="utf-8") as fh:
        said = re.search(r"These take typed\s+inputs:\s+(.*?), and every new check should", fh.read(), re.S)
    listed = set()
    for a, b in re.findall(r"KP(\d+)(?:–KP(\d+))?", said.group(1)):
        listed.update(f"KP{n}" for n in range(int(a), int(b or a) + 1))
    assert listed == {spec.id for spec in typed_checks} == {spec.id for spec in registry.checks}, listed ^ {
        s.id for s in registry.checks
    }


def test_the_analysis_sees_reads_through_helpers_and_lambdas():
    """The analysis is not vacuous: it sees reads in a lambda a typed input keeps for later, through a helper given the
    source as an argument, of the API view, and of the fleet's (FleetState) view."""
    from kpdiag.state import typed

    reads = Reads()
    # lambdas kept for a dump read on first use: lambda which: ctx.iptables(which), lambda which: ctx.programmed(which)
    assert {"iptables", "programmed"} <= reads.of(typed.KubeProxyRules.build.__func__)
    # a helper given the source as an argument: _as_read(cls, ctx, sources.CONNTRACK) → ctx.source(rel)
    assert "src:" + sources.CONNTRACK in reads.of(typed.ConntrackEntries.build.__func__)
    assert "src:" + sources.DNS_SERVICE in reads.of(typed.DnsService.build.__func__)
    # whether a file exists, not whether it parses: ctx.has(sources.KP_HEALTHZ)
    assert "src:" + sources.KP_HEALTHZ in reads.of(typed.HealthzAnswered.build.__func__)
    assert {"cluster.node_name", "cluster.node_zone"} <= reads.of(typed.NodeObject.build.__func__)
    assert {"programmed_groups", "local_keys", "policy_known"} <= reads.of(typed.ProgrammedTables.build.__func__)
    assert {"results", "fact", "node_findings_by_check"} <= reads.of(typed.NodeReports.build.__func__)
    # an undeclared read is reported
    fake = type("Spec", (), {"scope": "node", "inputs": ("sysctl",)})()
    assert _undeclared(fake, {"sysctl", "ip_route", "src:" + sources.SYSCTL, "src:" + sources.IP_ROUTE}) == [
        "ip_route",
        f"the source {sources.IP_ROUTE}",
    ]


def test_an_undeclared_read_is_an_error_of_that_check(tmp_path):
    """At run time the view opens only the declared inputs; a check that reads another one — even if it swallows
    the exception — ends as an internal error naming the input, and the other checks run."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

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
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

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


def test_every_input_is_used_and_every_source_it_opens_is_declared():
    registry = load_registry(plugins=False)
    used = {name for spec in registry.checks for name in spec.inputs}
    for scope in ("node", "cluster"):
        for name, inp in broker.catalogue(scope).items():
            if name in broker.SOURCE_INPUTS:
                continue  # a source as an input of its own: there for the next check, used or not
            assert name in used, f"input {name} is declared but no check uses it"
            for src in inp.sources:
                assert src == "kpdiag.json" or sources.declared(src), f"input {name} opens {src}, not in the catalogue"


def test_run_mode_is_an_input():
    """focus and preflight are read only by the checks that declare them (the view has no other way in)."""
    registry = load_registry(plugins=False)
    declaring = {spec.id for spec in registry.checks if {"focus", "preflight"} & set(spec.inputs)}
    assert "KP202" in declaring and "KP301" in declaring


def test_a_new_source_is_an_input_by_its_path(tmp_path):
    """Adding a bundle source touches the catalogue, its collector and its parser only: a check can declare the source
    itself (its path) as an input, read it with ctx.source, and is skipped naming it (and how it is collected) when the
    bundle lacks it."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

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


BLIND = """
from kpdiag.bundle import sources

def _helper(ctx, rel):
    return ctx.source(rel)

def loop_into_helper(ctx):
    for rel in [x for x in ("a", "b")]:
        _helper(ctx, rel + "")

def by_subscript(ctx):
    return ctx.source({"a": sources.IP_ROUTE}["a"])

def aliased(ctx):
    s = ctx
    return s.ip_route

def via_lambda(ctx):
    f = lambda c: c.ip_route
    return f(ctx)

def by_getattr(ctx):
    return getattr(ctx, "ip_" + "route")

def by_fstring(ctx):
    return ctx.source(f"node/{'ip-route'}.json")

def via_self(ctx):
    return ctx.sysctl_value.__self__.ip_route

def fine(ctx):
    return ctx.sysctl.get("x"), ctx.source(sources.SYSCTL)
"""


def test_what_the_analysis_cannot_follow_is_a_failure_not_a_pass(tmp_path):
    """A read the analysis cannot name (a computed source, the inputs aliased, handed to a lambda, getattr of a
    computed name) is reported as such — the test fails on it instead of passing it by."""
    import importlib.util

    path = tmp_path / "kpdiag_blind_probe.py"
    path.write_text(BLIND)
    spec = importlib.util.spec_from_file_location("kpdiag_blind_probe", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kpdiag_blind_probe"] = mod
    try:
        spec.loader.exec_module(mod)
        reads = Reads()
        fake = type("Spec", (), {"scope": "node", "inputs": ("sysctl",)})()
        for name in (
            "loop_into_helper",
            "by_subscript",
            "aliased",
            "via_lambda",
            "by_getattr",
            "by_fstring",
            "via_self",
        ):
            bad = _undeclared(fake, reads.of(getattr(mod, name)))
            assert any(b.startswith("cannot tell what it reads") for b in bad), (name, bad)
        assert _undeclared(fake, reads.of(mod.fine)) == []
    finally:
        sys.modules.pop("kpdiag_blind_probe", None)


def test_the_view_cannot_be_copied_or_pickled_and_hides_nothing_behind_defaults():
    import copy
    import pickle

    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

    view = broker.Inputs(NodeState(Bundle.from_files("x", {sources.SYSCTL: b"a = 1\n"})), "KPX", ("sysctl",))
    for attempt in (lambda: copy.copy(view), lambda: pickle.dumps(view)):
        with pytest.raises(TypeError, match="not to be copied or pickled"):
            attempt()
    with pytest.raises(broker.UndeclaredInput):  # getattr(ctx, "x", None) must not turn an undeclared read into None
        getattr(view, "ip_route", None)
    assert view.sysctl["a"].value == "1"
