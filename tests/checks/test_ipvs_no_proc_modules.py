"""KP301 when the bundle has no node/modules.txt: only a collector that found no /proc/modules (a kernel without
loadable modules) makes it say "modules cannot be loaded here" — and then it does not advise `modprobe`, which cannot
work there; a list that is merely missing (not collected for another reason) is not taken for such a kernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.conftest import FIXTURES

NO_IPVS = {"source": "node/ipvsadm.txt", "error": "the ip_vs kernel module is not loaded (no /proc/net/ip_vs)"}


def _kp301(tmp_path, modules_error: str) -> dict:
    b = tmp_path / "b"
    shutil.copytree(os.path.join(FIXTURES, "ipvs-fallback"), b)
    (b / "node/modules.txt").unlink()
    manifest = json.loads((b / "kpdiag.json").read_text())
    manifest["errors"] = [{"source": "node/modules.txt", "error": modules_error}, NO_IPVS]
    (b / "kpdiag.json").write_text(json.dumps(manifest))
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(b), "-o", "json"], capture_output=True, text=True, timeout=120
    )
    found = [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "KP301"]
    assert len(found) == 1, proc.stdout[:1000]
    return found[0]


def test_no_proc_modules_no_modprobe(tmp_path):
    f = _kp301(tmp_path, "/proc/modules does not exist (a kernel without loadable module support?)")
    assert "modules cannot be loaded here" in f["summary"]
    assert not any("modprobe" in step for step in f["fix"]), f["fix"]
    assert any("built in" in step for step in f["fix"]), f["fix"]


def test_modules_list_missing_for_another_reason_is_not_such_a_kernel(tmp_path):
    f = _kp301(tmp_path, "cannot read /proc/modules: permission denied")
    assert "cannot be loaded here" not in f["summary"]
    assert any(step.startswith("modprobe -a ip_vs") for step in f["fix"]), f["fix"]
