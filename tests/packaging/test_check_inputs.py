"""Every check receives exactly the inputs it declares (kpdiag/state/inputs.py) — shown two ways.

Statically: every built-in check, node and cluster, takes typed inputs (kpdiag/state/typed.py) and receives plain
values. What still receives a view of the state is each typed input's ``build`` (from a view opening its one input,
of NodeState or of FleetState), and a build may use that view in one way only: ``ctx.NAME``, ``ctx.cluster.NAME``, or
a source method given a source it names (``ctx.source(sources.CONNTRACK)``, ``ctx.file(…)``). Every such read must be
granted by its input; any other use of the view (handed to a helper, aliased, a computed source, getattr) fails the
test. So the rule is simple enough that the whole analysis is one pass over each build, and it covers the paths no
fixture takes.

At run time the view itself refuses any undeclared read (tests/state/test_inputs_view.py), and every fixture runs
every check through it; third-party checks that still take ``ctx`` are policed that way only.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types


from kpdiag.state import inputs as broker
from kpdiag.bundle import sources
from kpdiag.checkapi import load_registry

SOURCE_METHODS = {"source", "has", "source_text", "display", "problem", "problems_with", "file"}
OWN = SOURCE_METHODS | {"cluster", "check_id", "declared", "violations"}


def reads_of(fn) -> set[str]:
    """What ``fn`` reads of the view passed as its last parameter: member names, ``cluster.NAME``, ``src:PATH``, and
    ``?why: code`` for each use of the view that is none of those (a failure, not a pass)."""
    module = sys.modules[fn.__module__]
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    params = list(inspect.signature(fn).parameters)
    param = params[-1]
    parent = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    out = set()
    if len(params) - (params[0] in ("cls", "self")) != 1:  # the view is its one parameter (after cls)
        out.add(f"?parameters other than the view: {params}")
    # names the function binds itself (a local ``sources`` is not the module the constant is read from)
    local = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    local |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    local |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    local |= {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    local |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}

    def named(expr):  # a source the code names: a string, or a module-level constant (sources.CONNTRACK)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id not in local:
            base = module.__dict__.get(expr.value.id)
            value = getattr(base, expr.attr, None) if isinstance(base, types.ModuleType) else None
            return value if isinstance(value, str) else None
        return None

    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr.startswith("__") and n.attr not in ("__class__", "__name__"):
            out.add(f"?Python's internals: {ast.unparse(n)[:80]}")
        elif isinstance(n, ast.Attribute) and n.attr.startswith("_"):  # a kept file's _view, a view's _target
            out.add(f"?a private member: {ast.unparse(n)[:80]}")
        if not (isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Load)):
            continue
        up = parent.get(id(n))
        call = parent.get(id(up))
        if not isinstance(up, ast.Attribute):
            out.add(f"?the view goes where this cannot follow: {ast.unparse(up or n)[:80]}")
        elif up.attr == "cluster":
            ok = isinstance(call, ast.Attribute)
            out.add(f"cluster.{call.attr}" if ok else f"?the API view goes where this cannot follow: {ast.unparse(up)}")
        elif up.attr in SOURCE_METHODS:
            rel = named(call.args[0]) if isinstance(call, ast.Call) and call.func is up and call.args else None
            out.add(f"src:{rel}" if rel else f"?a source it cannot name: {ast.unparse(call or up)[:80]}")
        else:
            out.add(up.attr)
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
    import importlib
    import pkgutil

    import kpdiag.state
    from kpdiag.state import typed

    # every typed input, in whichever module of its area it lives (kpdiag/state/typed_*.py)
    modules = [
        importlib.import_module(f"kpdiag.state.{m.name}")
        for m in pkgutil.iter_modules(kpdiag.state.__path__)
        if m.name.startswith("typed")
    ]
    kinds = [
        t
        for mod in modules
        for t in vars(mod).values()
        if isinstance(t, type) and issubclass(t, typed.Typed) and t is not typed.Typed and t.__module__ == mod.__name__
    ]
    assert {t.SCOPE for t in kinds} == {"node", "cluster"}
    for t in kinds:
        assert t.INPUT in broker.catalogue(t.SCOPE), (t.__name__, t.SCOPE, t.INPUT)
        fake = type("Spec", (), {"scope": t.SCOPE, "inputs": (t.INPUT,)})()
        got = reads_of(t.build.__func__)
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
    is typed (the registry says which checks there are: no list of ids is kept by hand)."""
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
    assert {spec.id for spec in typed_checks} == {spec.id for spec in registry.checks}


def test_the_analysis_sees_reads_in_lambdas_sources_and_both_views():
    """The analysis is not vacuous: it sees reads in a lambda a typed input keeps for later, of the sources it names
    (``ctx.file`` too), of the API view, and of the fleet's (FleetState) view."""
    from kpdiag.state import typed_api, typed_fleet, typed_node, typed_proxy

    # lambdas kept for a dump read on first use: lambda which: ctx.iptables(which), lambda which: ctx.programmed(which)
    assert {"iptables", "programmed"} <= reads_of(typed_proxy.KubeProxyRules.build.__func__)
    assert "src:" + sources.CONNTRACK in reads_of(typed_node.ConntrackEntries.build.__func__)
    assert "src:" + sources.DNS_ENDPOINTSLICES in reads_of(typed_api.DnsService.build.__func__)  # ctx.file(...)
    # whether a file exists, not whether it parses: ctx.has(sources.KP_HEALTHZ)
    assert "src:" + sources.KP_HEALTHZ in reads_of(typed_proxy.HealthzAnswered.build.__func__)
    assert {"cluster.node_name", "cluster.node_zone"} <= reads_of(typed_api.NodeObject.build.__func__)
    assert {"programmed_groups", "local_keys", "policy_known"} <= reads_of(typed_fleet.ProgrammedTables.build.__func__)
    assert {"results", "fact", "node_findings_by_check"} <= reads_of(typed_fleet.NodeReports.build.__func__)
    # an undeclared read is reported
    fake = type("Spec", (), {"scope": "node", "inputs": ("sysctl",)})()
    assert _undeclared(fake, {"sysctl", "ip_route", "src:" + sources.SYSCTL, "src:" + sources.IP_ROUTE}) == [
        "ip_route",
        f"the source {sources.IP_ROUTE}",
    ]


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


BLIND = """
from kpdiag.bundle import sources

def _helper(ctx, rel):
    return ctx.source(rel)

def into_helper(ctx):
    return _helper(ctx, sources.IP_ROUTE)

def computed_source(ctx):
    return ctx.source({"a": sources.IP_ROUTE}["a"])

def aliased(ctx):
    s = ctx
    return s.ip_route

def api_aliased(ctx):
    api = ctx.cluster
    return api.pods()

def source_method_aliased(ctx):
    read = ctx.source
    return read(sources.IP_ROUTE)

def by_getattr(ctx):
    return getattr(ctx, "ip_" + "route")

def by_fstring(ctx):
    return ctx.source(f"node/{'ip-route'}.json")

def via_self(ctx):
    return ctx.sysctl_value.__self__.ip_route

def through_a_kept_file(ctx):
    return ctx.file(sources.SYSCTL)._view._target.ip_route

def module_shadowed(ctx):
    class sources:
        SYSCTL = "node/ip-route.json"
    return ctx.source(sources.SYSCTL)

def another_parameter(ctx, sysctl=None):
    return ctx.ip_route, sysctl.sysctl

def fine(ctx):
    return ctx.sysctl.get("x"), ctx.source(sources.SYSCTL), ctx.file(sources.SYSCTL), lambda: ctx.sysctl["y"]
"""


def test_what_the_analysis_cannot_follow_is_a_failure_not_a_pass(tmp_path):
    """A use of the view other than a named member or a named source (handed to a helper, aliased, a computed source,
    getattr, a bound method's ``__self__``, a private member such as a kept file's ``_view``, a module name shadowed by a
    local one, a parameter after the view) is reported as such: the test fails on it instead of passing it by."""
    import importlib.util

    path = tmp_path / "kpdiag_blind_probe.py"
    path.write_text(BLIND)
    spec = importlib.util.spec_from_file_location("kpdiag_blind_probe", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kpdiag_blind_probe"] = mod
    try:
        spec.loader.exec_module(mod)
        fake = type("Spec", (), {"scope": "node", "inputs": ("sysctl",)})()
        blind = [name for name in vars(mod) if callable(vars(mod)[name]) and not name.startswith("_")]
        assert len(blind) == 12
        for name in blind:
            if name != "fine":
                bad = _undeclared(fake, reads_of(getattr(mod, name)))
                assert any(b.startswith("cannot tell what it reads") for b in bad), (name, bad)
        assert _undeclared(fake, reads_of(mod.fine)) == []
    finally:
        sys.modules.pop("kpdiag_blind_probe", None)
