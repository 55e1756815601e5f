"""Redaction's budgets (issue 23 items 4 and 5): memory linear in the input whatever one line holds, a secret or an
address never split from what identifies it where a long line is cut, and a bundle folder thousands deep is one
plain line, not a RecursionError. Speed: benchmarks/bench_redact.py."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from kpdiag.bundle.redact import Redactor, redact_files
from kpdiag.bundle.scrub import PIECE_LIMIT
from kpdiag.cli import main

SHAPES = {
    "quoted-words": lambda n: ("kube svc 10.77.0.32 " * (n // 20 + 1))[:n],
    "dotted-words": lambda n: ("a.b " * (n // 4 + 1))[:n],
    "hex-colons": lambda n: ("fd00:a1:" * (n // 8 + 1))[:n],
    "slashes": lambda n: ("a/" * (n // 2 + 1))[:n],
    "dots-no-space": lambda n: ("a.b." * (n // 4 + 1))[:n],
    "secrets": lambda n: ("password=x token=y " * (n // 19 + 1))[:n],
    "one-word": lambda n: "a" * n,
    "dashed-word": lambda n: ("a-" * (n // 2 + 1))[:n],
}


def _peak(text: str) -> int:
    files = {"node/iptables-save.txt": f'-A INPUT -m comment --comment "{text}" -j ACCEPT\n'.encode()}
    tracemalloc.start()
    try:
        redact_files(files, salt="budget")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_one_long_line_costs_memory_linear_in_its_length(shape):
    """One 128 KiB line (a quoted iptables comment) of each hostile shape: redaction's peak memory stays within a
    small multiple of the line (pseudonyms are longer than a one-letter name: the output may be 10x), and doubling
    the line at most doubles it (no quadratic term; the old regex held ~140 bytes per character)."""
    n = 1 << 16
    small, big = _peak(SHAPES[shape](n)), _peak(SHAPES[shape](2 * n))
    assert big < 24 * 2 * n, f"{shape}: {big / 2 / n:.1f} bytes of peak memory per input character"
    assert big < 2.6 * small + (1 << 18), (small, big)


@pytest.mark.parametrize(
    "secret,hidden",
    [
        ("--token s3cr3tVALUE", "s3cr3tVALUE"),
        ("password: s3cr3tVALUE", "s3cr3tVALUE"),
        ("Authorization: Bearer s3cr3tVALUE", "s3cr3tVALUE"),
        ("10.77.0.32", "10.77.0.32"),
        ("fd12:3456:789a::1", "fd12:3456:789a"),
    ],
)
def test_a_long_line_is_cut_where_nothing_is_split(secret, hidden):
    """A line longer than PIECE_LIMIT is processed in pieces: wherever the secret or address falls relative to a
    possible cut, it is redacted."""
    r = Redactor(salt="cut")
    for filler in ("ab ", "a/", "a.b", "ab"):
        for shift in range(0, 36, 7):
            head = (filler * (PIECE_LIMIT // len(filler) + 1))[: PIECE_LIMIT // 2 + PIECE_LIMIT // 4 + shift]
            line = head + " " + secret + " " + filler * 40 + "\n"
            line = line * 3  # the cut falls before, inside the window, and after
            out = r.text(line)
            assert hidden.lower() not in out.lower(), (filler, shift)


def test_a_folder_thousands_deep_is_a_plain_line(tmp_path, capsys):
    root = tmp_path / "b"
    os.makedirs(root / "node")
    (root / "node" / "processes.txt").write_text("peer 52.18.44.21\n")
    deep = str(root)
    for _ in range(1500):  # os.makedirs recurses: one level at a time
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    with open(os.path.join(deep, "x.txt"), "w") as fh:
        fh.write("10.77.0.32\n")
    capsys.readouterr()
    try:
        assert main(["redact", str(root), "-o", str(tmp_path / "r")]) == 0
    finally:
        os.unlink(os.path.join(deep, "x.txt"))
        while deep != str(root):  # so does rmtree
            os.rmdir(deep)
            deep = os.path.dirname(deep)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "folders deep: not read" in warnings[0] and len(warnings[0]) < 200, err
    assert "Traceback" not in err and "RecursionError" not in err
    assert "52.18.44.21" not in (tmp_path / "r" / "node" / "processes.txt").read_text()


def test_a_file_name_in_a_warning_is_escaped(tmp_path, capsys):
    """A bundle's file names are someone else's text: a terminal escape in one is shown, never obeyed."""
    root = tmp_path / "b"
    os.makedirs(root / "node")
    (root / "node" / "processes.txt").write_text("x\n")
    os.symlink("/etc/hostname", root / "node" / "evil\x1b]0;owned\x07.txt")
    capsys.readouterr()
    assert main(["redact", str(root), "-o", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07" in err, err
