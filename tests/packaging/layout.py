"""docs/architecture.md §2's list of kpdiag's layers, generated from the one place their order is written — the
import-linter layers contract in pyproject.toml — and from each module's docstring (its first paragraph).
``python docs/make_docs.py`` rewrites the list; tests/packaging/test_layers.py compares it with the committed one."""

from __future__ import annotations

import ast
import os
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCH = os.path.join("docs", "architecture.md")
BEGIN = "<!-- layers: generated from pyproject.toml's contract and each module's docstring by docs/make_docs.py -->"
END = "<!-- /layers -->"


def layers_contract() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        contracts = tomllib.load(fh)["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return layers


def layers() -> list[tuple[str, list[str]]]:
    """The contract's layers, highest first: (the separator, the names), "|" for packages that import neither
    each other."""
    out = []
    for layer in layers_contract()["layers"]:
        sep = ":" if ":" in layer else "|"
        out.append((sep, [n.strip() for n in layer.split(sep)]))
    return out


def summary(path: str) -> str:
    """The first paragraph of the module's docstring, on one line."""
    with open(path, encoding="utf-8") as fh:
        doc = ast.get_docstring(ast.parse(fh.read(), path))
    if not doc:
        raise ValueError(f"{os.path.relpath(path, ROOT)} has no docstring: the layout says what a module is from it")
    return re.sub(r"\s+", " ", doc.split("\n\n")[0]).strip()


def _shown(name: str) -> str:
    return f"`{name}/`" if os.path.isdir(os.path.join(ROOT, "kpdiag", name)) else f"`{name}.py`"


def _entry(name: str, indent: str) -> list[str]:
    """``name`` (a module or a package of kpdiag) with what it is, and a package's modules under it."""
    folder = os.path.join(ROOT, "kpdiag", name)
    if not os.path.isdir(folder):
        return [f"{_shown(name)}: {summary(folder + '.py')}"]
    lines = [f"{_shown(name)}: {summary(os.path.join(folder, '__init__.py'))}"]
    if name == "checks":  # the built-in checks: §5's table names their modules, area by area
        return lines
    for n in sorted(os.listdir(folder)):
        if n.endswith(".py") and n != "__init__.py":
            lines.append(f"{indent}- `{n}`: {summary(os.path.join(folder, n))}")
    return lines


def layout() -> str:
    lines = [BEGIN]
    for i, (sep, names) in enumerate(layers(), 1):
        if len(names) == 1:
            first, *rest = _entry(names[0], "   ")
            lines += [f"{i}. {first}", *rest]
            continue
        lines.append(f"{i}. " + f" {sep} ".join(_shown(n) for n in names))
        for name in names:
            first, *rest = _entry(name, "     ")
            lines += [f"   - {first}", *rest]
    lines.append(END)
    return "\n".join(lines)


def regenerate(text: str) -> str:
    """``text`` (docs/architecture.md) with the list between BEGIN and END made anew."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + layout() + text[end:]
