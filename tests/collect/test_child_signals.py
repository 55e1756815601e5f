"""Every child a collection starts dies with its whole process group: on SIGTERM, SIGINT and SIGHUP of kpdiag (which
then exits 128 + signal), and on the command's own time bound. A real slow ``iptables-save`` (a shell script that
starts a ``sleep``) is put first on kpdiag's PATH — /usr/local/sbin, bind-mounted in a mount namespace of the test's
own — and /proc is searched for the sleeper and its shell afterwards."""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from kpdiag import exitcodes
from tests.conftest import ROOT, lab_or_skip

pytestmark = pytest.mark.lab


def _fake_dump(tmp_path) -> tuple[str, str]:
    """(folder to mount on /usr/local/sbin, the sleeper's unique argument)."""
    lab_or_skip()
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux)")
    mark = f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    script = sbin / "iptables-save"
    script.write_text(f"#!/bin/sh\nsleep {mark}\necho done\n")  # not exec: the sleeper is a grandchild of kpdiag
    script.chmod(0o755)
    return str(sbin), mark


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _sleepers(mark: str) -> list[int]:
    """The pids of the fake dump's sleeper (by its unique argument), not yet reaped."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        st = _stat(int(entry))
        if argv[:2] == [b"sleep", mark.encode()] and st is not None and st[1] != "Z":
            pids.append(int(entry))
    return pids


def _alive(procs: list[tuple[int, int]]) -> list[int]:
    """Those of (pid, start time) still running (a pid taken again since has another start time)."""
    return [pid for pid, started in procs if (st := _stat(pid)) is not None and st[2] == started and st[1] != "Z"]


def _in_namespace(sbin: str, argv: list[str]) -> list[str]:
    """``argv`` in a private mount and network namespace where /usr/local/sbin is ``sbin`` (unshare execs it: the pid
    is kpdiag's own)."""
    cmd = f"mount --bind {sbin} /usr/local/sbin && exec " + " ".join(argv)
    return ["unshare", "--mount", "--propagation", "private", "--net", "--", "sh", "-c", cmd]


def _wait_for(mark: str, proc: subprocess.Popen, seconds: float = 60.0) -> list[tuple[int, int]]:
    """(pid, start time) of the sleeper and of the shell running the fake iptables-save, once the sleeper runs."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for pid in _sleepers(mark):
            st, parent = _stat(pid), None
            if st is not None:
                parent = _stat(st[0])
            if st is not None and parent is not None:
                return [(pid, st[2]), (st[0], parent[2])]
        if proc.poll() is not None:
            pytest.fail(f"kpdiag ended ({proc.returncode}) before it ran iptables-save: {proc.stderr.read()!r}")
        time.sleep(0.05)
    pytest.fail("the fake iptables-save never started")


def _cleanup(mark: str, procs: list[tuple[int, int]]) -> None:
    for pid in _alive(procs) + _sleepers(mark):  # what this test started and the code under test left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize(
    "sig,code",
    [
        (signal.SIGTERM, exitcodes.TERMINATED),
        (signal.SIGINT, exitcodes.INTERRUPTED),
        (signal.SIGHUP, exitcodes.HANGUP),
    ],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_signal_during_collect_kills_the_dump_and_its_children(tmp_path, sig, code):
    sbin, mark = _fake_dump(tmp_path)
    out = tmp_path / "bundle"
    argv = [sys.executable, "-m", "kpdiag", "collect", "-o", str(out)]
    proc = subprocess.Popen(
        _in_namespace(sbin, argv), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    procs: list[tuple[int, int]] = []
    try:
        procs = _wait_for(mark, proc)
        proc.send_signal(sig)
        rc = proc.wait(timeout=20)
        time.sleep(0.2)  # a SIGKILL is delivered at once; this only lets /proc catch up
        left = _alive(procs)
        assert left == [], f"left running after {sig.name}: {left} (the sleeper, then its shell)"
        assert rc == code, (rc, proc.stderr.read())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _cleanup(mark, procs)


def test_time_bound_kills_the_whole_group(tmp_path):
    """A command past its time bound is killed with everything it started, and said as a timeout of its source."""
    sbin, mark = _fake_dump(tmp_path)
    code = (
        "from kpdiag.collect.node import NodeCollector; c = NodeCollector(host_root='/'); "
        "print(c._run('node/iptables-save.txt', 'iptables-save', [], timeout=1.0)); print(c.out.errors)"
    )
    try:
        t = time.monotonic()
        done = subprocess.run(
            _in_namespace(sbin, [sys.executable, "-c", f'"{code}"']),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - t
        assert done.returncode == 0, done.stderr
        assert "iptables-save timed out after 1 s" in done.stdout
        assert took < 20, took  # not held until the sleeper ends (it kept the output pipe open)
        assert _sleepers(mark) == [], "the sleeper outlived its time bound"
    finally:
        _cleanup(mark, [])
