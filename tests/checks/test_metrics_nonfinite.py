"""A kube-proxy /metrics value that is not a finite number (+Inf, -Inf, NaN) is left out by the parser with one line
naming the file and line; KP703 and KP704's neighbours read the rest: no crash, no "nan s"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kpdiag.parse.node import parse_metrics
from tests.conftest import FIXTURES

NAME = "kube-proxy-unhealthy"
METRICS = "node/kube-proxy/metrics.txt"


def test_the_parser_leaves_out_non_finite_samples():
    m = parse_metrics('a_total +Inf\nb_sum NaN\nc -Inf\nd 2\ne_bucket{le="+Inf"} 3\n', "metrics.txt")
    assert m.get("a_total") is None and m.get("b_sum") is None and m.get("c") is None
    assert m.get("d") == 2 and m.get("e_bucket") == 3  # a +Inf bucket *label* is normal
    assert [(e.line, e.source) for e in m.rejected] == [(1, "metrics.txt"), (2, "metrics.txt"), (3, "metrics.txt")]
    assert "not a finite number" in str(m.rejected[0])


@pytest.mark.parametrize("value", ["+Inf", "NaN", "-Inf"])
def test_kp703_and_kp705_over_non_finite_metrics(tmp_path, value):
    dest = tmp_path / NAME
    shutil.copytree(os.path.join(FIXTURES, NAME), dest)
    path = dest / METRICS
    text = path.read_text()
    text = text.replace(
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 37",
        f"kubeproxy_sync_proxy_rules_iptables_restore_failures_total {value}",
    )
    text = text.replace(
        "kubeproxy_sync_proxy_rules_duration_seconds_sum 0.62",
        f"kubeproxy_sync_proxy_rules_duration_seconds_sum {value}",
    )
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(dest), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    runs = {c["id"]: c for c in report["checks"]}
    assert runs["KP703"]["status"] != "error", runs["KP703"]
    dumped = json.dumps(report).lower()
    assert "nan s" not in dumped and "inf times" not in dumped
    lines = [p for p in report["problems"] if p["source"].startswith(METRICS + ":")]
    assert len(lines) == 2 and all("not a finite number" in p["error"] for p in lines), report["problems"]
    # the rest of the file is still read: the last sync time is
    assert not any(p["source"] == METRICS for p in report["problems"])
