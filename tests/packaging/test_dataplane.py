"""A dataplane is a class (kpdiag/dataplane/): no other module compares the proxy mode with a mode's name, and what
a check is about (kube-proxy advice, a mode's preflight, its modes) is declared on the check, nowhere else."""

from __future__ import annotations

import ast
import os

from kpdiag import dataplane
from kpdiag.checkapi import load_registry
from tests.conftest import ROOT


def _mode_names() -> set[str]:
    return {d.name for d in dataplane.kube_proxy_modes()}


def mode_comparisons(source: str, path: str, names: set[str]) -> list[str]:
    """Every choice made on a mode's name written as a string: ``x == "ipvs"``, ``x != "nftables"``,
    ``x in ("iptables", "ipvs")`` (also against a module constant that holds a name: ``IPVS = "ipvs"; x == IPVS``),
    ``x.startswith("ipvs")``, ``match x: case "nftables":``, and a table keyed by modes' names (``{"iptables": …, "ipvs": …}``;
    one such key is a format's word: nft's ``{"nftables": [...]}``).
    A substring test such as ``"iptables" in line`` is no choice of a mode."""
    tree = ast.parse(source, path)
    constants = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in names
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, ast.Name) and node.id in constants

    def modes(node) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set"):
            return any(modes(a) for a in node.args)
        return named(node) and not isinstance(node, ast.Constant)  # `x in IPVS` (a constant holding a name)

    found = []

    def hit(node) -> None:
        found.append(f"{path}:{node.lineno}: {ast.unparse(node)[:120]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and (named(left) or named(right)):
                    hit(node)
                elif isinstance(op, (ast.In, ast.NotIn)) and modes(right):
                    hit(node)
                left = right
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(named(a) or modes(a) for a in node.args)
        ):
            hit(node)
        elif isinstance(node, ast.match_case):
            if any(
                isinstance(p, ast.MatchValue) and named(p.value)
                for p in ast.walk(node.pattern)
                if isinstance(p, ast.MatchValue)
            ):
                found.append(f"{path}:{node.pattern.lineno}: case {ast.unparse(node.pattern)[:120]}")
        elif isinstance(node, ast.Dict) and sum(1 for k in node.keys if k is not None and named(k)) >= 2:
            if all(k is not None and isinstance(k, ast.Constant) for k in node.keys):
                hit(node)
    return found


def _engine_files():
    skip = os.path.join(ROOT, "kpdiag", "dataplane")
    for top in ("kpdiag", "checks"):
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, top)):
            if os.path.islink(dirpath) or dirpath.startswith(skip) or os.path.basename(dirpath) == "__pycache__":
                dirnames[:] = []
                continue
            for n in names:
                if n.endswith(".py"):
                    yield os.path.join(dirpath, n)


def test_the_finder_finds_mode_comparisons():
    src = (
        'a = mode == "ipvs"\nb = "nftables" != m\nc = m in ("iptables", "x")\nd = "iptables" in line\ne = m == "auto"\n'
        'IPVS = "ipvs"\nf = m == IPVS\ng = m.startswith("ipvs")\nh = {"iptables": 3, "ipvs": 4}.get(m)\n'
        'match m:\n    case "nftables":\n        pass\ni = m in frozenset({"ipvs"})\nj = m in {"ipvs"}\n'
    )
    hits = mode_comparisons(src, "x.py", {"iptables", "ipvs", "nftables"})
    assert sorted({int(h.split(":")[1]) for h in hits}) == [1, 2, 3, 7, 8, 9, 11, 13, 14]


def test_no_mode_is_compared_as_a_string_outside_the_dataplane_classes():
    names = _mode_names()
    assert {"iptables", "ipvs", "nftables"} <= names
    files = list(_engine_files())
    assert any(f.endswith(os.path.join("checks", "dataplane.py")) for f in files) and len(files) > 80
    found = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            found += mode_comparisons(fh.read(), os.path.relpath(path, ROOT), names)
    assert not found, "ask state.dataplane (kpdiag/dataplane/) instead:\n" + "\n".join(found)


def test_every_dataplane_is_complete_and_found_by_name():
    planes = dataplane.registered()
    assert {"iptables", "ipvs", "nftables", "userspace", "cilium", "kube-router", "calico-ebpf"} <= {
        d.name for d in planes
    }
    for d in planes:
        assert d.name and d.label and dataplane.get(d.name) is d, d
        if d.kube_proxy:
            assert d.services_live and d.precedence > 0, d
        else:
            assert d.tools and type(d).detect is not dataplane.Dataplane.detect, d  # a replacement is recognised
    precedences = [d.precedence for d in dataplane.kube_proxy_modes()]
    assert len(set(precedences)) == len(precedences)
    assert not dataplane.get(None).known and dataplane.get("kernelspace").name == "kernelspace"


def test_preflight_and_kube_proxy_advice_are_declared_on_the_checks():
    checks = load_registry().checks
    for d in dataplane.kube_proxy_modes():  # a mode offered to --preflight has prerequisite checks, and only those
        declared = [c.id for c in checks if d.name in c.preflight]
        assert bool(declared) == d.preflight, (d, declared)
    # a check about one mode's rules is kube-proxy advice: skipped where a replacement implements Services
    assert [c.id for c in checks if c.modes and c.advice_for != "kube-proxy"] == []
    assert [c.id for c in checks if c.any_host]  # the not-a-node case has its check


def test_preflight_runs_the_checks_that_declare_it(tmp_path):
    import shutil

    from kpdiag.bundle.store import Bundle
    from kpdiag.commands.pipeline import preflight_checks
    from kpdiag.state.node import NodeState

    ids = preflight_checks("ipvs")
    assert ids and all("ipvs" in load_registry().get(i).preflight for i in ids)
    shutil.copytree(os.path.join(ROOT, "fixtures", "healthy-iptables"), tmp_path / "node")
    from kpdiag.commands.diagnose import analyze_state

    report = analyze_state(NodeState(Bundle.open(str(tmp_path / "node")), preflight="ipvs"), ids, ())
    assert {r.id for r in report.checks} == set(ids)
