"""``-v`` means one thing on every command — more detail: what the text report otherwise sums up in a line (the
informational findings, each check not run, every node, every unreadable source) and, in a trace, every rule's text
in full. Through the real command line; the structured outputs hold everything either way."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click

from tests.conftest import FIXTURES

KPDIAG = [sys.executable, "-m", "kpdiag"]
HEALTHY = f"{FIXTURES}/healthy-iptables"


def run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([*KPDIAG, *args], capture_output=True, text=True, timeout=120, env={"COLUMNS": "80"})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_every_v_is_verbose_and_says_the_same():
    from kpdiag.cli import cli
    from kpdiag.cli.options import VERBOSE_HELP

    seen = []
    for name, command in cli.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and "-v" in param.opts:
                seen.append(name)
                assert param.opts == ["-v", "--verbose"] and param.is_flag, name
                assert param.help.startswith(VERBOSE_HELP), name
    assert {"analyze", "node", "svc", "cluster", "trace"} <= set(seen), seen


def test_info_findings_are_one_line_without_v_and_in_full_with_it():
    short, full = run("analyze", HEALTHY), run("analyze", HEALTHY, "-v")
    assert short.returncode == full.returncode == 0
    flat = " ".join(short.stdout.split())  # the one line, as wrapped at 80 columns
    assert re.search(r"1 info \(KP601 service-cidr-leaves-node\) and \d+ checks not run — -v shows them", flat), (
        short.stdout
    )
    assert "\nINFO\n" not in short.stdout and "why:" not in short.stdout
    assert "\nINFO\n" in full.stdout and "KP601 service-cidr-leaves-node  3 of 3 ClusterIPs" in full.stdout
    assert "-v shows" not in full.stdout
    assert re.search(r"No problems found by the \d+ checks that ran", flat)  # only an info: nothing is wrong
    # each check not run, with its reason, only under -v
    assert "KP101 no-endpoints: skipped — " not in short.stdout and "KP101 no-endpoints: skipped — " in full.stdout
    # the data is whole without -v
    doc = json.loads(run("analyze", HEALTHY, "-o", "json").stdout)
    assert [f["id"] for f in doc["findings"]] == ["KP601"]


def test_table_leaves_out_info_rows_without_v():
    short, full = run("analyze", HEALTHY, "-o", "table"), run("analyze", HEALTHY, "-o", "table", "-v")
    assert short.stdout.splitlines() == [
        "no errors or warnings",
        "1 informational finding (KP601 service-cidr-leaves-node) — -v shows it",
    ]
    assert "info" in full.stdout.splitlines()[2] and "KP601" in full.stdout


def test_an_info_that_follows_from_an_error_is_shown_with_it():
    from kpdiag.model import Finding, Report, Severity
    from kpdiag.render.report import report_to_table, report_to_text

    cause = Finding("KP501", "ip-forward-off", Severity.ERROR, "t", "forwarding off", "why", subject="node")
    follows = Finding(
        "KP601", "service-cidr-leaves-node", Severity.INFO, "t", "ClusterIPs routed out", "why", subject="node"
    )
    follows = Finding(**{**follows.__dict__, "caused_by": {"id": "KP501", "subject": "node"}})
    alone = Finding("KP603", "lonely-info", Severity.INFO, "t", "an unrelated note", "why", subject="node")
    report = Report(subject="x", findings=(cause, follows, alone), checks=())
    text = report_to_text(report, width=80)
    assert "ClusterIPs routed out" in text and "an unrelated note" not in text
    assert "1 informational finding (KP603 lonely-info) — -v shows it" in text
    assert "an unrelated note" in report_to_text(report, verbose=True, width=80)
    table = report_to_table(report, width=80)
    assert "ClusterIPs routed out" in table and "an unrelated note" not in table


def test_trace_v_shows_every_rule_in_full():
    args = ("trace", "--bundle", HEALTHY, "--from", "pod", "--src", "10.244.1.10", "--dst", "10.96.0.20:80")
    short, full = run(*args), run(*args, "-v")
    assert short.returncode == full.returncode == 0
    rule = '"shop/web:http -> 10.244.1.10:8080" -m statistic --mode random'
    assert rule not in short.stdout and '"shop/web:h…' in short.stdout
    assert rule in full.stdout and "…" not in full.stdout.split("path 1/3")[1].split("path 2/3")[0]
