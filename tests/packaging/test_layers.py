"""kpdiag's layers run one way and no package's modules import each other round a cycle — function-level (lazy)
imports included, since a lazy import is still a dependency. The order is written once, as import-linter contracts
in pyproject.toml, and `lint-imports` checks them; docs/architecture.md §2 lists the layers as generated from the
contract. The tracers share their walker through public names only."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT
from tests.packaging import layout


def lint_imports(cwd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    return subprocess.run(
        [
            exe if os.path.exists(exe) else "lint-imports",
            "--no-cache",
            "--config",
            os.path.join(ROOT, "pyproject.toml"),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _broken(out: str) -> str:
    return out[out.index("Broken contracts") :] if "Broken contracts" in out else out


def test_every_import_contract_is_kept():
    res = lint_imports(ROOT)
    assert res.returncode == 0, "lint-imports:\n" + _broken(res.stdout) + res.stderr
    assert "Contracts: 2 kept, 0 broken." in res.stdout, res.stdout


def test_the_contracts_fail_on_an_upward_import_and_on_a_cycle(tmp_path):
    """A copy of kpdiag where a parser imports the CLI (upward, and lazily), state/cni.py imports state/node.py (which
    imports it) and a new top-level module has no layer yet (the contract is exhaustive): both contracts break,
    naming each."""
    copy = tmp_path / "kpdiag"
    shutil.copytree(os.path.join(ROOT, "kpdiag"), copy, ignore=shutil.ignore_patterns("__pycache__", "checks"))
    shutil.copytree(os.path.join(ROOT, "checks"), copy / "checks", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "parse" / "addr.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _upward():\n    from kpdiag import cli  # noqa: F401\n")
    with open(copy / "state" / "cni.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom kpdiag.state import node  # noqa: E402, F401\n")
    (copy / "newcomer.py").write_text('"""Not yet placed."""\n', encoding="utf-8")
    res = lint_imports(str(tmp_path), env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Contracts: 0 kept, 2 broken." in res.stdout, res.stdout
    assert "kpdiag.parse.addr -> kpdiag.cli" in res.stdout, res.stdout
    assert "No cycles are allowed in kpdiag.state." in res.stdout, res.stdout
    assert "kpdiag.newcomer" in res.stdout, res.stdout


def test_the_architecture_lists_the_layers_of_the_contract():
    with open(os.path.join(ROOT, layout.ARCH), encoding="utf-8") as fh:
        text = fh.read()
    assert text.count(layout.BEGIN) == 1 and text.count(layout.END) == 1
    assert layout.regenerate(text) == text, "docs/architecture.md §2 is stale: run python docs/make_docs.py"


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
