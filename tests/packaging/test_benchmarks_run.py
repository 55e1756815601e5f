"""The benchmark scripts still run against the current code (tiny sizes; nothing is timed here — the figures come
from running them at full size, see README "Performance")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, *argv):
    env = dict(os.environ, KPDIAG_BENCH_OUT=str(tmp_path))
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_bench_fleet_runs(tmp_path):
    _run(tmp_path, "benchmarks/bench_fleet.py", "--nodes", "12", "--services", "30", "--repeat", "1")
    rows = json.load(open(tmp_path / "fleet.json"))
    assert [r["nodes"] for r in rows] == [12] and "KP802" in rows[0]["findings"]  # the lagging node (1 in 100: node 7)


def test_bench_trace_runs_without_the_kernel(tmp_path):
    _run(
        tmp_path,
        "benchmarks/bench_trace.py",
        "--services",
        "200",
        "--packets",
        "20",
        "--no-kernel",
        "--node-e2e",
        "0",
        "--nft-max",
        "0",
    )
    assert os.path.getsize(tmp_path / "trace.json") > 0


def test_bench_netpol_runs(tmp_path):
    _run(
        tmp_path,
        "benchmarks/bench_netpol.py",
        "--namespaces",
        "4",
        "--pods",
        "60",
        "--policies",
        "30",
        "--flows",
        "50",
        "--repeat",
        "1",
    )
    result = json.load(open(tmp_path / "netpol.json"))
    assert result["pods"] == 60 and result["one_flow"]["exit"] in (0, 1) and result["many_flows"]["flows"] == 50


def test_bench_node_api_runs(tmp_path):
    from tests.conftest import lab_or_skip

    lab_or_skip()  # a network namespace and kube-proxy's rules loaded in it
    _run(tmp_path, "benchmarks/bench_node_api.py", "--services", "40")
    (row,) = json.load(open(tmp_path / "node_api.json"))["rows"]
    assert row["services"] == 40 and row["api_checks_ran"] == ["KP105", "KP202", "KP203"]  # the API really was compared


def test_bench_focused_runs(tmp_path):
    from tests.conftest import lab_or_skip

    lab_or_skip()  # a network namespace and kube-proxy's rules loaded in it
    _run(tmp_path, "benchmarks/bench_focused.py", "--services", "40", "--runs", "1")
    (row,) = json.load(open(tmp_path / "focused.json"))["rows"]
    # the focused run is partial, skips the checks that judge every rule, and agrees with the whole dump
    assert row["partial"] == row["service"] and row["service_findings_identical"] and row["traces_identical"]
    assert row["traces"] == 2 and "KP205" in row["skipped_as_partial"]


def test_bench_routes_runs(tmp_path):
    _run(tmp_path, "benchmarks/bench_routes.py", "--routes", "300", "--lookups", "20")
    rows = json.load(open(tmp_path / "routes.json"))
    assert [r["routes"] for r in rows] == [300] and rows[0]["answers"]


@pytest.mark.lab
def test_bench_trace_kernel_runs(tmp_path):
    from tests.conftest import lab_or_skip

    lab_or_skip()
    _run(tmp_path, "benchmarks/bench_trace_kernel.py", "--services", "20", "--repeat", "1")
    result = json.load(open(tmp_path / "trace_kernel.json"))
    assert result["agreed"] == "1/1" and result["with_kernel_median_s"] > 0, result
