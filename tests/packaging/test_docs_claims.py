"""What docs/architecture.md and README.md say about the code, checked against the code: the areas of the check ids
and the modules that hold them, the exit code tables against kpdiag/exitcodes.py (and no exit code decided anywhere
else), the layer folders against the test folders, module names that read alike, and functions nothing calls. (The
layout of §2 is generated: tests/packaging/test_layers.py.)"""

from __future__ import annotations

import ast
import os
import re
import signal

import pytest

from kpdiag import exitcodes
from tests.conftest import ROOT

ARCH = os.path.join(ROOT, "docs", "architecture.md")
README = os.path.join(ROOT, "README.md")
LAYERS = ("collect", "bundle", "parse", "state", "trace", "commands", "fleet", "render")


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _py_files(folder: str) -> set[str]:
    return {n for n in os.listdir(folder) if n.endswith(".py") and n != "__init__.py"}


# ------------------------------------------------------------------------------------------------ check areas
def area_table() -> dict[str, tuple[str, set[str]]]:
    """§5's table: hundreds digit → (the area in words, the modules that hold its checks)."""
    out = {}
    for m in re.finditer(r"^\s*\| (\d)xx \| (.+?) \| (.+?) \|$", _text(ARCH), re.M):
        out[m.group(1)] = (m.group(2), set(re.findall(r"\b(\w+\.py)\b", m.group(3))))
    return out


def builtin_checks() -> list:
    from kpdiag.checkapi import load_registry

    return [c for c in load_registry(plugins=False).checks if c.fn.__module__.startswith("kpdiag.checks.")]


def test_the_area_table_covers_every_hundred_in_use_and_no_other():
    table = area_table()
    assert sorted(table) == [str(d) for d in range(1, 9)]
    used = {c.id[2] for c in builtin_checks()}
    assert used == set(table), (
        f"areas in the table without checks: {set(table) - used}; checks outside: {used - set(table)}"
    )


def test_each_check_lives_in_a_module_of_its_area_and_each_module_holds_one_area():
    table = area_table()
    wrong, areas_of = [], {}
    for c in builtin_checks():
        module = c.fn.__module__.rsplit(".", 1)[1] + ".py"
        areas_of.setdefault(module, set()).add(c.id[2])
        if module not in table[c.id[2]][1]:
            wrong.append(f"{c.id} is in checks/{module}, not a module the table gives {c.id[2]}xx")
    assert not wrong, wrong
    mixed = {m: sorted(a) for m, a in areas_of.items() if len(a) > 1}
    assert not mixed, f"modules holding checks of several areas: {mixed}"


def test_the_modules_the_table_names_are_the_modules_that_hold_checks():
    named = set().union(*(mods for _, mods in area_table().values()))
    holding = {c.fn.__module__.rsplit(".", 1)[1] + ".py" for c in builtin_checks()}
    files = _py_files(os.path.join(ROOT, "checks"))
    assert named <= files, f"named but no such file: {named - files}"
    assert named == holding, f"named, no check: {named - holding}; holding checks, not named: {holding - named}"
    text = _text(ARCH)
    for helper in files - holding:  # modules without a check of their own are said to be so
        assert f"`{helper}`" in text, f"checks/{helper} holds no check and the architecture does not say what it is"


# ------------------------------------------------------------------------------------------------ exit codes
def _table(text: str, header: str) -> dict[int, str]:
    """The rows of the markdown table whose header line is ``header``: code → meaning."""
    start = text.index(header)
    out = {}
    for line in text[start:].splitlines()[2:]:
        m = re.match(r"^\| (\d+) \| (.*) \|$", line)
        if not m:
            break
        out[int(m.group(1))] = m.group(2)
    return out


def test_the_readme_tables_are_the_codes_of_exitcodes():
    readme = _text(README)
    report = _table(readme, "| code | meaning |\n|---|---|\n| 0 | nothing at or above")
    assert set(report) == {exitcodes.OK, exitcodes.FINDINGS, exitcodes.USAGE, exitcodes.NO_DIAGNOSIS}
    trace = _table(readme, "| code | meaning |\n|---|---|\n| 0 | delivered")
    assert set(trace) == {
        exitcodes.TRACE_DELIVERED,
        exitcodes.TRACE_DROPPED,
        exitcodes.TRACE_REJECTED,
        exitcodes.USAGE,
        exitcodes.NO_DIAGNOSIS,
    }
    assert exitcodes.for_trace(["drop"]) == 4 and "dropped" in trace[4]
    assert exitcodes.for_trace(["reject"]) == 5 and "rejected" in trace[5]
    signals = _table(readme, "| code | signal |")
    for code, meaning in signals.items():
        name = re.match(r"(SIG[A-Z]+)", meaning).group(1)
        assert exitcodes.for_signal(getattr(signal, name)) == code, (code, meaning)
    assert set(signals) == {exitcodes.HANGUP, exitcodes.INTERRUPTED, exitcodes.QUIT, exitcodes.TERMINATED}


def test_every_exit_code_exitcodes_defines_is_in_a_readme_table():
    readme = _text(README)
    documented = set()
    for header in ("| code | meaning |", "| code | signal |"):
        for m in re.finditer(re.escape(header), readme):
            documented |= set(_table(readme[m.start() :], header))
    defined = {
        v
        for k, v in vars(exitcodes).items()
        if k.isupper() and isinstance(v, int) and not isinstance(v, bool) and k != "SIGNAL_BASE"
    }
    assert defined <= documented, f"exit codes not in README.md: {sorted(defined - documented)}"


def test_the_architecture_states_the_same_codes():
    text = _text(ARCH)
    section = text[text.index("## 4. Commands and exit codes") : text.index("## 5. Checks")]
    for code in (exitcodes.OK, exitcodes.FINDINGS, exitcodes.USAGE, exitcodes.NO_DIAGNOSIS):
        assert f"**{code}**" in section
    for m in re.finditer(r"(\d{3}) (Ctrl-C|SIG[A-Z]+)", section):
        signum = signal.SIGINT if m.group(2) == "Ctrl-C" else getattr(signal, m.group(2))
        assert exitcodes.for_signal(signum) == int(m.group(1)), m.group(0)
    m = re.search(r"`kpdiag trace`:\s+(\d)\s+delivered,\s+(\d)\s+dropped,\s+(\d)\s+rejected", section)
    assert tuple(map(int, m.groups())) == (exitcodes.TRACE_DELIVERED, exitcodes.TRACE_DROPPED, exitcodes.TRACE_REJECTED)
    m = re.search(r"`kpdiag policy`:\s+(\d)\s+allowed,\s+(\d)\s+denied,\s+(\d)\s+not\s+evaluable", section)
    assert tuple(map(int, m.groups())) == (
        exitcodes.for_policy(True),
        exitcodes.for_policy(False),
        exitcodes.for_policy(None),
    )


def _engine_files():
    for base in ("kpdiag", "checks"):
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, base)):
            if os.path.islink(dirpath):
                dirnames[:] = []
                continue
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))]
            for n in names:
                if n.endswith(".py"):
                    yield os.path.join(dirpath, n)


def test_no_exit_code_is_decided_outside_exitcodes():
    """A number handed to an exit (click's Exit, SystemExit, sys.exit, os._exit), returned by a main(), or 128 + a
    signal is an exit code: only kpdiag/exitcodes.py may write one."""
    found = []
    for path in _engine_files():
        if path.endswith(os.path.join("kpdiag", "exitcodes.py")):
            continue
        tree = ast.parse(_text(path), path)
        rel = os.path.relpath(path, ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = ast.unparse(node.func).rsplit(".", 1)[-1]
                if name in ("Exit", "SystemExit", "exit", "_exit") and isinstance(
                    node.args[0], (ast.Constant, ast.BinOp)
                ):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Add)
                and any(
                    isinstance(x, ast.Constant) and x.value == exitcodes.SIGNAL_BASE for x in (node.left, node.right)
                )
            ):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.FunctionDef) and node.name in ("main", "run"):
                for r in ast.walk(node):
                    if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant) and type(r.value.value) is int:
                        found.append(f"{rel}:{r.lineno}: return {r.value.value} in {node.name}()")
    assert not found, found


# ------------------------------------------------------------------------------------------------ tests by layer
@pytest.mark.parametrize("layer", ("collect", "bundle", "parse", "state", "trace", "render"))
def test_each_layer_has_its_folder_of_unit_tests(layer):
    """§6: one folder of unit tests per layer, and its tests are that layer's (they import it; a few run it through the
    command line)."""
    assert f"`tests/{layer}/`" in _text(ARCH)
    folder = os.path.join(ROOT, "tests", layer)
    tests = sorted(n for n in os.listdir(folder) if n.startswith("test_") and n.endswith(".py"))
    assert tests, f"tests/{layer}/ holds no test"
    importing = [n for n in tests if f"kpdiag.{layer}" in _text(os.path.join(folder, n))]
    assert len(importing) * 2 > len(tests), f"tests/{layer}/: most tests do not import kpdiag.{layer}: {tests}"


def test_the_other_test_folders_the_architecture_names_exist():
    text = _text(ARCH)
    section = text[text.index("## 6. Testing") : text.index("## 7.")]
    for folder in re.findall(r"`tests/(\w+)/`", section):
        assert os.path.isdir(os.path.join(ROOT, "tests", folder)), f"tests/{folder}/ is named but does not exist"


# ------------------------------------------------------------------------------------------------ names
def test_no_two_modules_have_names_that_differ_by_an_ending():
    """``observe.py`` beside ``observed.py`` reads as one module: a name that is another plus -d, -s, -ed, -er or -ing
    is a different name only to the interpreter."""
    names = {os.path.basename(p)[:-3] for p in _engine_files()} - {"__init__", "__main__"}
    names -= {"firewalld"}  # the daemon's own name (checks/firewalld.py: KP523), not firewall.py's past tense
    alike = sorted(
        (a, b)
        for a in names
        for b in names
        if a != b and b.startswith(a) and b[len(a) :] in ("d", "s", "ed", "er", "ing", "r")
    )
    assert not alike, alike


# ------------------------------------------------------------------------------------------------ dead code
def test_no_function_is_defined_that_nothing_names():
    """A function or method of the engine or the checks that no Python file of the repository names (besides its own
    definition) is dead. Decorated functions are registered by their decorator (@check, click's commands) and are
    exempt, as are dunder methods and the visitor methods ast calls by name."""
    sources = {}
    for base in ("kpdiag", "checks", "tests", "benchmarks", "docs", "fixtures", "deploy"):
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, base)):
            if os.path.islink(dirpath):
                dirnames[:] = []
                continue
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))]
            for n in names:
                if n.endswith(".py"):
                    sources[os.path.join(dirpath, n)] = _text(os.path.join(dirpath, n))
    words: dict[str, int] = {}
    for text in sources.values():
        for w in re.findall(r"\b[A-Za-z_]\w*\b", text):
            words[w] = words.get(w, 0) + 1
    defs: dict[str, list[str]] = {}
    for path in _engine_files():
        for node in ast.walk(ast.parse(sources[path], path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list:
                name = node.name
                if (name.startswith("__") and name.endswith("__")) or name.startswith("visit_"):
                    continue
                defs.setdefault(name, []).append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    dead = {name: where for name, where in defs.items() if words.get(name, 0) <= len(where)}
    assert not dead, dead
