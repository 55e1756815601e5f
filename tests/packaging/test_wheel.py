"""The wheel installs checks/ as kpdiag.checks (and no top-level 'checks' package)."""

import subprocess
import sys
import zipfile

from tests.conftest import ROOT


def test_wheel_contains_kpdiag_checks(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), ROOT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("kpdiag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kpdiag/checks/__init__.py" in names
    assert not any(n.startswith("checks/") for n in names)
    assert "kpdiag/trace/netfilter.py" in names and "kpdiag/parse/iptables.py" in names
    assert "kpdiag/schemas/report.schema.json" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry[0]).decode()
    import re

    scripts = dict(re.findall(r"^(kpdiag|kubectl-kpdiag) = (\S+)$", text, re.M))
    assert scripts.get("kpdiag", "").startswith("kpdiag.cli:") and scripts["kubectl-kpdiag"] == scripts["kpdiag"]
    assert "LICENSE" in " ".join(names)  # the licence travels with the wheel
