"""Which capability the node pod's reads of kube-proxy's /proc/PID entries need, measured on the real kernel: a
process with every capability (as kube-proxy runs, privileged) is read by one with exactly the node pod's
capabilities (kpdiag.fleet.pods.NODE_CAPABILITIES), then without SYS_PTRACE, then with DAC_READ_SEARCH and
DAC_OVERRIDE instead. exe, root and ns/net need SYS_PTRACE (the kernel's ptrace access check); cmdline and status
do not; the DAC capabilities do not replace it."""

import os
import shutil
import subprocess
import sys

import pytest

from kpdiag.fleet import pods

pytestmark = pytest.mark.lab

READ = """
import os, sys
p = "/proc/" + sys.argv[1]
for what, f in [("exe", lambda: os.readlink(p + "/exe")), ("root", lambda: os.listdir(p + "/root")),
                ("ns", lambda: os.stat(p + "/ns/net")), ("cmdline", lambda: open(p + "/cmdline").read()),
                ("status", lambda: open(p + "/status").read())]:
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, e.errno)
"""


def _reads(pid: int, caps: list[str]) -> dict[str, str]:
    bound = "-all" + "".join(f",+{c.lower()}" for c in caps)
    out = subprocess.run(
        ["setpriv", f"--bounding-set={bound}", "--inh-caps=-all", sys.executable, "-c", READ, str(pid)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines())


def test_kube_proxys_proc_entries_need_sys_ptrace_and_nothing_else_gives_them():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        if os.environ.get("CI") == "true":
            pytest.fail("needs root and setpriv")
        pytest.skip("needs root and setpriv")
    target = subprocess.Popen(["sleep", "60"])
    try:
        full = _reads(target.pid, list(pods.NODE_CAPABILITIES))
        assert full == {k: "ok" for k in ("exe", "root", "ns", "cmdline", "status")}, full
        without = [c for c in pods.NODE_CAPABILITIES if c != "SYS_PTRACE"]
        for caps in (without, without + ["DAC_READ_SEARCH", "DAC_OVERRIDE"]):
            got = _reads(target.pid, caps)
            assert got["exe"] == got["root"] == got["ns"] == "13", (caps, got)  # EACCES
            assert got["cmdline"] == got["status"] == "ok", (caps, got)
    finally:
        target.kill()
        target.wait()
