"""ruff (a test dependency, pinned) finds no bug-class problem in the code, the checks, the tests, the benchmarks or
the fixture tools — undefined and unused names, unused variables, closures over loop variables (pyproject.toml) —
and every file is laid out as ``ruff format`` lays it out (line length 120)."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _ruff() -> str:
    exe = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ruff is not installed (it is in the test extras: pip install '.[test]')")
        pytest.skip("ruff is not installed (pip install '.[test]')")
    return exe


def test_ruff_check_is_clean():
    exe = _ruff()
    proc = subprocess.run(
        [exe, "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_is_clean():
    proc = subprocess.run(
        [_ruff(), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, "run `ruff format .`:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]
