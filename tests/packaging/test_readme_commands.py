"""The README's two commands, verbatim, in a fresh clone: one installs kpdiag in a venv and runs the demo, the other
installs the test extras (a plain, non-editable install) and runs the tests. Then the same tests after an editable
install, and `python -m kpdiag` from the repository root.

It needs git and the package index and takes a few minutes: it runs under CI=true (or KPDIAG_SLOW=1), else it
skips saying so. The clone is of this repository's HEAD (what is committed). The inner test run is the README's
command verbatim, narrowed with PYTEST_ADDOPTS to the tests that show the installed package works (the built-in
checks import as kpdiag.checks and every fixture gives its findings, the trace CLI runs through `python -m kpdiag`,
the wheel holds kpdiag.checks); .ci/run runs that same command
over the whole suite."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SHARED

INNER = "tests/checks/test_fixtures.py tests/cli/test_trace_cli.py tests/packaging/test_wheel.py"


def _readme_commands() -> tuple[str, str]:
    from tests.packaging.docblocks import readme_commands

    return readme_commands()


def test_readme_commands_work_verbatim_in_a_fresh_clone(tmp_path):
    if os.environ.get("KPDIAG_README_INNER"):
        pytest.skip("already inside the README test's own clone")
    if not (os.environ.get("CI") == "true" or os.environ.get("KPDIAG_SLOW")):
        pytest.skip(
            "clones the repository and installs from the package index (minutes): runs under CI=true or KPDIAG_SLOW=1"
        )
    if not shutil.which("git"):
        pytest.fail("git is needed to clone the repository")
    clone = tmp_path / "kpdiag"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True, timeout=300)
    demo, test = _readme_commands()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    # a PATH without this test run's venv, as in a fresh shell
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.update(KPDIAG_README_INNER="1", KPDIAG_SHARED=SHARED, NO_COLOR="1")

    def sh(cmd, **kw):
        return subprocess.run(
            ["bash", "-c", cmd], cwd=clone, env={**env, **kw}, capture_output=True, text=True, timeout=1500
        )

    run = sh(demo)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]  # 1: errors found, as the README says
    assert "KP301" in run.stdout and "KP701" in run.stdout, run.stdout[-2000:]
    assert "Traceback" not in run.stderr

    run = sh(test, PYTEST_ADDOPTS=INNER)
    assert run.returncode == 0, run.stdout[:3000] + "\n…\n" + run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", run.stdout) and " failed" not in run.stdout, run.stdout[-2000:]
    site = sh(". .venv/bin/activate && cd /tmp && python -c 'import kpdiag.checks, kpdiag; print(kpdiag.__file__)'")
    assert site.returncode == 0 and ".venv" in site.stdout, site.stdout + site.stderr  # a plain install, not the tree

    run = sh(". .venv/bin/activate && pip install -q -e '.[test]' && python -m pytest -q -ra", PYTEST_ADDOPTS=INNER)
    assert run.returncode == 0, run.stdout[:3000] + "\n…\n" + run.stdout[-3000:] + run.stderr[-2000:]
    mod = sh(". .venv/bin/activate && python -m kpdiag analyze fixtures/ipvs-fallback -o json")
    assert mod.returncode == 1 and '"KP301"' in mod.stdout, mod.stdout[-1000:] + mod.stderr[-1000:]
