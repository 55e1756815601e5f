"""No giant rooms (issue 39): radon (a test dependency, pinned) measures every module of the engine and the checks —
no module over 800 lines, no function over 80 lines, no block of cyclomatic complexity over 30. A room that grows past
a bound is split along its seams, not let through by a larger bound."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT

MODULE_LINES = 800
FUNCTION_LINES = 80
COMPLEXITY = 30


def _sources() -> list[str]:
    out = []
    for top in ("kpdiag", "checks"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            if os.path.islink(dirpath):  # kpdiag/checks is the checks/ folder under its installed name
                continue
            out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return out


def _blocks(path: str):
    from radon.complexity import cc_visit

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    todo = list(cc_visit(text))
    while todo:
        block = todo.pop()
        yield block
        todo += getattr(block, "methods", []) + list(getattr(block, "closures", []))


def _measure(paths: list[str], root: str) -> dict:
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    modules, functions, complex_ = [], [], []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        if n > MODULE_LINES:
            modules.append(f"{rel(path)}: {n} lines")
        for b in _blocks(path):
            if b.letter in ("F", "M") and b.endline - b.lineno + 1 > FUNCTION_LINES:
                functions.append(f"{rel(path)}:{b.lineno} {b.name}: {b.endline - b.lineno + 1} lines")
            if b.complexity > COMPLEXITY:
                complex_.append(f"{rel(path)}:{b.lineno} {b.name}: complexity {b.complexity}")
    return {"modules": modules, "functions": functions, "complexity": complex_, "count": len(paths)}


@pytest.fixture(scope="module")
def measured():
    try:
        import radon  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("radon is not installed (it is in the test extras: pip install '.[test]')")
        pytest.skip("radon is not installed (pip install '.[test]')")
    return _measure(_sources(), ROOT)


def test_the_bounds_can_fail(measured, tmp_path):
    long_fn = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(40)) + "    return -1\n"
    path = tmp_path / "room.py"
    path.write_text(long_fn + "\n" * (MODULE_LINES - long_fn.count("\n") + 1))
    got = _measure([str(path)], str(tmp_path))
    assert got["modules"] == [f"room.py: {MODULE_LINES + 1} lines"]
    assert got["functions"] == ["room.py:1 f: 82 lines"] and got["complexity"] == ["room.py:1 f: complexity 41"]


def test_the_measure_sees_the_code(measured):
    assert measured["count"] > 100  # kpdiag/ and checks/ were walked, not an empty folder


def test_no_module_over_800_lines(measured):
    assert not measured["modules"], "\n".join(measured["modules"])


def test_no_function_over_80_lines(measured):
    assert not sorted(set(measured["functions"])), "\n".join(sorted(set(measured["functions"])))


def test_no_block_over_complexity_30(measured):
    assert not sorted(set(measured["complexity"])), "\n".join(sorted(set(measured["complexity"])))
