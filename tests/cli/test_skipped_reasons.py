"""The "not checked" lines of a text report group skipped checks by their first reason: a reason is cut only where
the skip reasons of several inputs are joined ("; "), never inside a parenthesis of one reason (a source's
description, KP709's list of what it looked for)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from kpdiag.render.report import skip_group
from tests.conftest import FIXTURES


def test_a_reason_is_cut_only_between_reasons():
    one = "needs node/ethtool-offload.txt (ethtool -k DEV for each device (concatenated; each block starts 'F')), which is missing or unreadable"
    assert (
        skip_group(one)
        == "node/ethtool-offload.txt (ethtool -k DEV for each device (concatenated; each block starts 'F'))"
    )
    two = "needs node/sysctl.txt (sysctl -a), which is missing or unreadable; needs node/uname.txt, which is missing or unreadable"
    assert skip_group(two) == "node/sysctl.txt (sysctl -a)"
    not_a_node = "this does not look like a Kubernetes node (none of: a kubelet; kube-proxy; KUBE-* rules)"
    assert skip_group(not_a_node) == not_a_node


def test_not_checked_lines_keep_their_parentheses_whole():
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", os.path.join(FIXTURES, "ipvs-fallback")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "80"},
    )
    assert proc.returncode == 1, proc.stderr
    section = proc.stdout.split("not checked (", 1)[1].split("\n\n", 1)[0]
    lines: list[str] = []
    for line in section.splitlines()[1:]:  # a group is a line at two spaces, wrapped onto lines at four
        if line.startswith("    "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
    assert any("ethtool" in line for line in lines)
    for line in lines:
        assert line.count("(") == line.count(")"), line
        assert re.search(r" — -v lists (it|them)$", line), line
