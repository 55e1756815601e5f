"""`kpdiag trace --rules/--nft/--ipsets FILE` reads its file within a budget, as a bundle's files are read: at most
128 MiB (a 1 GB file is one line, not 2 GB of memory), no device (`/dev/zero` is one line, not a hang), and a pipe
(`--rules <(ssh node iptables-save)`) read until its end within a deadline — a FIFO nobody writes to is empty."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES

TRACE = ["trace", "--src", "1.1.1.1", "--dst", "10.96.0.20:80"]
RULES = os.path.join(FIXTURES, "healthy-iptables", "node", "iptables-save.txt")


_PEAK = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(p.returncode)"
)


def _run(args: list[str], timeout: float = 60) -> tuple[subprocess.CompletedProcess, int]:
    """kpdiag in a child of a fresh interpreter, which reports the child's peak RSS (KB) as its last stderr line."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "kpdiag", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    err, _, peak = proc.stderr.rstrip("\n").rpartition("\n")
    proc.stderr = err + "\n" if err else ""
    return proc, int(peak)


def test_a_rules_file_over_the_limit_is_one_line(tmp_path):
    big = tmp_path / "rules.txt"
    with open(big, "wb") as fh:
        chunk = b"-A KUBE-SERVICES " * 65536
        for _ in range(200 * 1024 * 1024 // len(chunk)):  # 200 MB, one line
            fh.write(chunk)
    for opt in ("--rules", "--nft"):
        proc, rss = _run([*TRACE, opt, str(big)])
        assert proc.returncode == 3, proc.stderr
        assert "larger than the 128 MiB limit" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert rss < 400 * 1024, rss  # KB: the cap, not the file


@pytest.mark.parametrize("opt", ["--rules", "--nft", "--ipsets"])
def test_a_device_is_refused(opt):
    args = [*TRACE, opt, "/dev/zero"] if opt != "--ipsets" else [*TRACE, "--rules", RULES, "--ipsets", "/dev/zero"]
    proc, _ = _run(args)
    assert proc.returncode == 3, proc.stderr
    assert "/dev/zero: is a character device, not a regular file" in proc.stderr


def test_a_fifo_no_one_writes_to_ends(tmp_path):
    """It is an empty file (before: the open waited for a writer forever)."""
    fifo, empty = tmp_path / "rules.fifo", tmp_path / "rules.file"  # names of one length: the same wrapping
    os.mkfifo(fifo)
    empty.write_bytes(b"")
    proc, _ = _run([*TRACE, "--rules", str(fifo)], timeout=30)
    like, _ = _run([*TRACE, "--rules", str(empty)])
    assert proc.returncode == like.returncode, proc.stderr
    assert proc.stdout.replace("rules.fifo", "F") == like.stdout.replace("rules.file", "F")
    assert "Traceback" not in proc.stderr


def test_a_pipe_is_read_to_its_end():
    rules = RULES
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f'{sys.executable} -m kpdiag trace --rules <(sleep 1; cat "$0") --src 1.1.1.1 --dst 10.96.0.20:80',
            rules,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 paths" in proc.stdout
