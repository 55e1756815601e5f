"""Small things a newcomer reads first: every --help fits 80 columns; a tool's failure reads "iptables-save exited
4", not "iptables-save  exited 4"."""

import os
import subprocess
import sys

import pytest

from kpdiag.cli import cli
from kpdiag.collect.node import NodeCollector


@pytest.mark.parametrize("command", [[], *([name] for name in sorted(cli.commands))], ids=lambda c: c[0] if c else "-")
def test_every_help_fits_80_columns(command):
    env = dict(os.environ, COLUMNS="80")
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", *command, "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    wide = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert wide == [], wide


def test_a_failing_tool_is_named_with_single_spaces():
    collector = NodeCollector(host_root="/")
    assert collector._run("node/x.txt", "false", []) is None  # /usr/bin/false: exit 1, no arguments
    assert collector.out.errors == [{"source": "node/x.txt", "error": "false exited 1: no message"}]
    collector._run("node/y.txt", "false", ["-a", "b"])
    assert collector.out.errors[-1]["error"] == "false -a b exited 1: no message"
