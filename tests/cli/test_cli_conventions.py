"""CLI conventions, through the real command line (a subprocess, as a user runs it): shell completion, unknown check
ids, the width of the output, colour, the kubectl plugin's name, unreadable bundles, evidence paths."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES

KPDIAG = [sys.executable, "-m", "kpdiag.cli"]


def run(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("NO_COLOR", None)
    e.update(env or {})
    return subprocess.run([*KPDIAG, *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=120)


# ---------------------------------------------------------------------------------------------- completion
@pytest.mark.parametrize(
    "shell,marker",
    [("bash", "complete -o nosort -F"), ("zsh", "#compdef kpdiag"), ("fish", "complete --no-files --command kpdiag")],
)
def test_completion_script(shell, marker):
    proc = run("completion", shell)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and "_KPDIAG_COMPLETE" in proc.stdout


def _complete(words: str, cword: int, env=None) -> list[str]:
    """What the bash script asks kpdiag for: COMP_WORDS/COMP_CWORD in, 'type,value' lines out."""
    proc = run(env={"_KPDIAG_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword), **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_completion_of_check_ids_and_bundle_paths():
    assert "plain,KP501" in _complete("kpdiag explain KP5", 2) and "plain,KP101" not in _complete(
        "kpdiag explain KP5", 2
    )
    assert "plain,ip-forward-off" in _complete("kpdiag explain ip-f", 2)
    for cmd in ("analyze fixtures/x", "node", "svc web"):
        words = f"kpdiag {cmd} --select KP1"
        assert "plain,KP101" in _complete(words, len(words.split()) - 1), cmd
    words = "kpdiag analyze x --ignore KP6"
    assert "plain,KP601" in _complete(words, 4)
    # bundle paths: the shell completes files and directories (click's Path type)
    assert _complete("kpdiag analyze fixtures/heal", 2) == ["file,fixtures/heal"]
    assert _complete("kpdiag trace --bundle fixtures/heal", 3) == ["file,fixtures/heal"]
    assert "plain,completion" in _complete("kpdiag comp", 1)


# ------------------------------------------------------------------------------------------ unknown ids
@pytest.mark.parametrize(
    "cmd",
    [
        ["analyze", os.path.join(FIXTURES, "healthy-iptables")],
        ["node", "--host-root", "/nonexistent"],
        ["svc", "web", "--kubeconfig", "/nonexistent"],
        ["cluster", "--dry-run"],
    ],
)
@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_unknown_check_ids_are_a_usage_error_naming_the_nearest(cmd, option):
    proc = run(*cmd, option, "KP50l")  # a typo: l for 1
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "KP50l" in proc.stderr and "nearest: KP501" in proc.stderr and proc.stdout == ""
    proc = run(*cmd, option, "ip-forwrd-off")
    assert proc.returncode == 2 and "KP501 (ip-forward-off)" in proc.stderr


def test_known_ids_prefixes_and_slugs_still_select():
    b = os.path.join(FIXTURES, "ip-forward-off")
    assert run("analyze", b, "--select", "KP5", "--select", "service-cidr-leaves-node").returncode == 1
    assert run("analyze", b, "--ignore", "ip-forward-off").returncode == 0
    proc = run("explain", "KP50l")
    assert proc.returncode == 2 and "nearest: KP501" in proc.stderr


# ------------------------------------------------------------------------------------------------ width
def _long_lines(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def test_text_wraps_to_the_terminal_width():
    for fixture in ("ip-forward-off", "svc-selector-typo", "cluster-fleet-drift"):
        text = run("analyze", os.path.join(FIXTURES, fixture), env={"COLUMNS": "80"}).stdout
        # prose is re-flowed; commands to paste ("$ …") and evidence quoted from the bundle are never broken
        # a single word longer than the width (a deep bundle path) cannot be broken, and is never cut
        long = [
            line
            for line in _long_lines(text, 80)
            # (a consequence is indented under its cause: its steps start deeper, the same way)
            if not line.lstrip().startswith(("$ ", "- ")) and not _is_evidence(text, line) and len(line.split()) > 1
        ]
        assert long == [], (fixture, long)
        wide = run("analyze", os.path.join(FIXTURES, fixture), env={"COLUMNS": "120"}).stdout
        assert len(wide.splitlines()) < len(text.splitlines())  # re-flowed to the width, not pre-wrapped
    why = run("analyze", os.path.join(FIXTURES, "ip-forward-off"), env={"COLUMNS": "80"}).stdout
    assert "  why: A node routes packets from one interface to another only when\n" in why  # not pre-wrapped
    block = why.split("  why: ")[1].split("  fix:")[0]
    assert "\\n" not in block and max(len(line) for line in block.splitlines()) <= 80


def _is_evidence(text: str, line: str) -> bool:
    block = text.split("  evidence:\n")
    return any(line in b.split("\n\n")[0] for b in block[1:])


@pytest.mark.parametrize(
    "args",
    [
        ["checks"],
        ["analyze", os.path.join(FIXTURES, "ip-forward-off"), "-o", "table"],
        ["analyze", os.path.join(FIXTURES, "cluster-fleet-drift"), "-o", "table"],
        ["explain", "KP601"],
        [
            "trace",
            "--bundle",
            os.path.join(FIXTURES, "no-endpoints"),
            "--src",
            "192.168.50.2",
            "--dst",
            "10.96.0.30:80",
        ],
    ],
)
def test_tables_fit_80_columns(args):
    proc = run(*args, env={"COLUMNS": "80"})
    assert proc.returncode in (0, 1, 5), proc.stderr
    assert _long_lines(proc.stdout, 80) == []
    assert proc.stdout.strip()


# ----------------------------------------------------------------------------------------------- colour
def _on_a_tty(args, env) -> str:
    """Run kpdiag with its stdout on a pseudo-terminal, as in an interactive shell."""
    master, slave = pty.openpty()
    e = dict(os.environ)
    e.pop("NO_COLOR", None)
    e.update(env)
    proc = subprocess.Popen([*KPDIAG, *args], stdout=slave, stderr=subprocess.DEVNULL, env=e)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_colour_only_on_a_capable_terminal():
    args = ["analyze", os.path.join(FIXTURES, "ip-forward-off")]
    assert "\x1b[" in _on_a_tty(args, {"TERM": "xterm-256color"})
    assert "\x1b[" not in _on_a_tty(args, {"TERM": "dumb"})
    assert "\x1b[" not in _on_a_tty(args, {"TERM": "xterm", "NO_COLOR": "1"})
    assert "\x1b[" not in run(*args, env={"TERM": "xterm"}).stdout  # not a terminal


# ------------------------------------------------------------------------------------------ kubectl plugin
def test_usage_names_kubectl_kpdiag_when_run_as_the_plugin(tmp_path):
    plugin = tmp_path / "kubectl-kpdiag"
    plugin.write_text(f"#!{sys.executable}\nimport sys\nfrom kpdiag.cli import main\nsys.exit(main())\n")
    plugin.chmod(0o755)
    proc = subprocess.run([str(plugin), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: kubectl kpdiag [OPTIONS] COMMAND")
    proc = subprocess.run([str(plugin), "analyze"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Usage: kubectl kpdiag analyze" in proc.stderr
    assert run("--help").stdout.startswith("Usage: kpdiag [OPTIONS] COMMAND")
    installed = shutil.which("kubectl-kpdiag")
    if installed:  # the console script pip installed
        assert subprocess.run([installed, "--help"], capture_output=True, text=True).stdout.startswith(
            "Usage: kubectl kpdiag"
        )


# -------------------------------------------------------------------------------------- unreadable bundles
def test_empty_or_unreadable_bundle_is_one_error_line_exit_3(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    junk = tmp_path / "junk"
    (junk / "node").mkdir(parents=True)
    (junk / "node" / "iptables-save.txt").write_text("garbage\n")
    for b, says in ((empty, "nothing kpdiag can read there"), (junk, "node/iptables-save.txt:1")):
        for output in ("text", "table"):
            proc = run("analyze", str(b), "-o", output)
            assert proc.returncode == 3
            assert proc.stdout == ""
            assert (
                len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("kpdiag: error: ") and says in proc.stderr
            ), proc.stderr
            assert "No problems found" not in proc.stderr + proc.stdout
    proc = run("analyze", str(junk), "-o", "json")  # JSON still carries the whole (unreadable) report
    assert proc.returncode == 3 and json.loads(proc.stdout)["readable"] is False and len(proc.stderr.splitlines()) == 1


# ------------------------------------------------------------------------------------------ evidence paths
def test_json_is_the_same_however_the_bundle_path_is_typed(tmp_path):
    root = os.path.dirname(FIXTURES)
    rel = os.path.relpath(os.path.join(FIXTURES, "ip-forward-off"), root)
    spellings = [rel, "./" + rel + "/", os.path.join(FIXTURES, "ip-forward-off")]
    docs = []
    for path in spellings:
        proc = run("analyze", path, "-o", "json", cwd=root)
        assert proc.returncode == 1, proc.stderr
        docs.append(json.loads(proc.stdout))
    assert docs[0] == docs[1] == docs[2]
    sources = [e["source"] for f in docs[0]["findings"] for e in f["evidence"]]
    assert "node/sysctl.txt" in sources and all(not s.startswith(("/", ".")) and "fixtures" not in s for s in sources)
    # an archive of the same bundle names the same files
    tgz = tmp_path / "b.tar.gz"
    subprocess.run(["tar", "-czf", str(tgz), "-C", os.path.join(FIXTURES, "ip-forward-off"), "."], check=True)
    doc = json.loads(run("analyze", str(tgz), "-o", "json").stdout)
    assert [e["source"] for f in doc["findings"] for e in f["evidence"]] == sources


def test_skipped_checks_collapse_to_one_line_per_reason():
    b = os.path.join(FIXTURES, "duplicated-rules")  # a warning: the full report (a quiet one is a single line)
    text = run("analyze", b).stdout
    tail = text.split("not checked (")[1]
    assert re.search(r"^  \d+ checks need the Kubernetes API objects \(cluster/…\) — -v lists them$", tail, re.M)
    assert "KP101" not in tail
    verbose = run("analyze", b, "-v").stdout.split("not checked (")[1]
    assert "KP101 no-endpoints: skipped — needs the Service from the API" in verbose


def test_verdict_and_headline_come_first():
    from kpdiag.model import Report
    from kpdiag.render.report import report_to_text

    rep = Report(
        "service shop/web",
        (),
        (),
        extra={
            "headline": "API unreachable: connection refused (https://10.0.0.1:6443)",
            "verdict": ["shop/web: could not be diagnosed"],
        },
    )
    lines = report_to_text(rep).splitlines()
    assert lines[0].startswith("API unreachable: connection refused") and lines[1].startswith("» shop/web")
    assert "No problems found" not in "\n".join(lines)
    text = run("analyze", os.path.join(FIXTURES, "svc-selector-typo")).stdout.splitlines()
    assert text[0].startswith("» shop/web is broken") and text.index("kpdiag: service shop/web") > 0
    assert [i for i, l in enumerate(text) if "error(s)" in l][0] > [i for i, l in enumerate(text) if l.startswith("»")][
        -1
    ]
