"""The engine's module graph has no cycle — function-level (lazy) imports included, since a lazy import is still a
dependency — and the tracers share their walker through public names only."""

from __future__ import annotations

import ast
import os

from tests.conftest import ROOT


def _modules() -> dict[str, str]:
    out = {}
    base = os.path.join(ROOT, "kpdiag")
    for dirpath, dirnames, names in os.walk(base):
        if os.path.islink(dirpath) or os.path.basename(dirpath) in ("checks", "__pycache__"):
            dirnames[:] = []
            continue
        for n in names:
            if n.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, n), ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(dirpath, n)
    return out


def _type_only(tree: ast.Module) -> set[int]:
    """The import nodes under a module-level ``if TYPE_CHECKING:``: read by the type checker only, never imported when
    kpdiag runs, so no dependency (annotations name the types of other layers without importing them)."""
    return {
        id(n)
        for stmt in tree.body
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING"
        for n in ast.walk(stmt)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }


def import_graph(mods: dict[str, str]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.endswith("__init__.py") else mod.rsplit(".", 1)[0]
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        type_only = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    target = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for cand in [target, *(f"{target}.{a.name}" for a in node.names)]:
                    if cand in mods and cand != mod:
                        graph[mod].add(cand)
            elif isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in mods and a.name != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_are_no_dependency(tmp_path):
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import B\nimport c\n"
    )
    mods = {"a": str(tmp_path / "a.py"), "b": str(tmp_path / "a.py"), "c": str(tmp_path / "a.py")}
    assert import_graph({"a": mods["a"], "b": mods["b"], "c": mods["c"]})["a"] == {"c"}


def test_no_import_cycle_in_the_engine():
    mods = _modules()
    assert "kpdiag.commands.pipeline" in mods and "kpdiag.trace.netfilter" in mods and len(mods) > 40
    graph = import_graph(mods)
    assert (
        "kpdiag.commands.svc" in graph["kpdiag.commands.pipeline"]
        and "kpdiag.commands.diagnose" in graph["kpdiag.commands.svc"]
    )
    assert cycles(graph) == []


def test_tracers_share_the_walker_through_public_names():
    private = []
    trace_dir = os.path.join(ROOT, "kpdiag", "trace")
    for name in sorted(os.listdir(trace_dir)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(trace_dir, name)
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level
                and node.module
                and node.module.split(".")[0]
                in (
                    "netfilter",
                    "nftables",
                    "ipvs",
                    "routing",
                    "kube",
                    "model",
                )
            ):
                private += [f"trace/{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, private
