#!/usr/bin/env python3
"""Benchmark: aggregating the node reports of a big cluster (kpdiag cluster / kpdiag analyze DIR).

    python3 benchmarks/bench_fleet.py [--nodes 1000] [--services 1000] [--repeat 3]

Writes N node reports (a real `kpdiag analyze` report of fixtures/healthy-iptables, whose programmed table
is replaced by one of S service ports with 3 endpoints each; 1 % of the nodes lack a Service, 1 % send one
to a stale endpoint, 2 % run kube-proxy one minor behind) into a temporary directory, then measures in a
fresh process each time:
  - `kpdiag analyze DIR -o json` wall time and peak RSS (read + parse + aggregate + render), and
  - the aggregation alone on reports already in memory.
Results are printed and written to benchmarks/out/fleet.json.

    python3 benchmarks/bench_fleet.py --live 1000 [--parallel 50] [--pod-seconds 2]

runs the whole `kpdiag cluster` against the test API server (kmock's emulator with a kubelet that runs each
pod for --pod-seconds) and reports API calls per node, wall time, nodes diagnosed and pods left behind. The
emulator needs time proportional to the objects it has ever held for each request (a delete costs ~80 ms
after 200 pods), so the wall time of big live runs is mostly the emulator's.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")  # where the results go
sys.path.insert(0, ROOT)

from kpdiag.state import programmed  # noqa: E402
from kpdiag.commands.pipeline import analyze_bundle  # noqa: E402
from kpdiag.fleet.aggregate import NodeResult, aggregate, write_report_dir  # noqa: E402


def table(services: int) -> dict:
    out = {}
    for i in range(services):
        ip = f"10.96.{i // 250}.{i % 250 + 1}"
        eps = tuple(f"10.244.{(i * 3 + k) // 250 % 250}.{(i * 3 + k) % 250 + 1}:8080" for k in range(3))
        out[f"{ip}:80/tcp"] = (f"ns{i % 40}/svc{i}:http", eps, i % 20 == 5)  # every 20th: internalTrafficPolicy: Local
    return out


def reports(nodes: int, services: int) -> list[NodeResult]:
    base = analyze_bundle(os.path.join(ROOT, "fixtures", "healthy-iptables")).to_dict()
    full = table(services)
    common = programmed.encode(full, "iptables")
    out = []
    for n in range(nodes):
        rep = copy.deepcopy(base)
        name = f"node-{n:04d}"
        rep["facts"]["node"], rep["subject"] = name, f"node {name}"
        if n % 100 == 7:  # lags: misses one Service
            t = dict(full)
            t.pop(next(iter(t)))
            rep["extra"]["programmed"] = programmed.encode(t, "iptables")
        elif n % 100 == 13:  # stale endpoints for one Service
            t = dict(full)
            k = sorted(t)[n % services]
            t[k] = (t[k][0], ("10.244.250.250:8080",), t[k][2])
            rep["extra"]["programmed"] = programmed.encode(t, "iptables")
        else:
            rep["extra"]["programmed"] = common
        if n % 50 == 3:
            rep["facts"]["kube_proxy_version"] = "1.30"
        out.append(NodeResult(name, report=rep))
    return out


def peak_of(argv) -> tuple[float, int, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return took, (after if after > before else -1), proc.returncode


def live(nodes: int, parallel: int, pod_seconds: float) -> dict:
    import contextlib
    import io

    from kpdiag.cli import main as kpdiag_main
    from tests import k8sobjects as k8s
    from tests.apiserver import ApiServer

    report = json.dumps(analyze_bundle(os.path.join(ROOT, "fixtures", "healthy-iptables")).to_dict())
    names = [f"node-{i:04d}" for i in range(nodes)]
    with (
        ApiServer(
            [k8s.node(n, ready=True) for n in names],
            kubelet={n: {"log": report} for n in names},
            kubelet_delay=pod_seconds,
        ) as api,
        tempfile.TemporaryDirectory() as d,
    ):
        out = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = kpdiag_main(
                ["cluster", "--kubeconfig", api.kubeconfig(d), "--parallel", str(parallel), "--poll", "1", "-o", "json"]
            )
        took = time.perf_counter() - t
        doc = json.loads(out.getvalue())
        calls = list(api.requests)
        polls = sum(1 for m, p in calls if m == "GET" and p == "/api/v1/namespaces/kpdiag/pods")
        return {
            "live_nodes": nodes,
            "parallel": parallel,
            "pod_seconds": pod_seconds,
            "wall_s": round(took, 1),
            "exit": rc,
            "diagnosed": doc["facts"]["nodes_diagnosed"],
            "api_calls": len(calls),
            "pod_lists": polls,
            "calls_per_node_besides_lists": round((len(calls) - polls) / nodes, 2),
            "pods_left": len(api.live_pods("kpdiag")),
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--services", type=int, nargs="+", default=[1000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--live", type=int, help="run kpdiag cluster on this many emulated nodes instead")
    ap.add_argument("--parallel", type=int, default=50)
    ap.add_argument("--pod-seconds", type=float, default=2.0)
    args = ap.parse_args()
    if args.live:
        row = live(args.live, args.parallel, args.pod_seconds)
        print(json.dumps(row))
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "fleet-live.json"), "w") as fh:
            json.dump(row, fh, indent=1)
        return
    rows = []
    for services in args.services:
        results = reports(args.nodes, services)
        with tempfile.TemporaryDirectory() as d:
            write_report_dir(d, results, {"api_version": "v1.31.4", "local_itp": []}, force=True)  # d exists
            size = sum(os.path.getsize(os.path.join(top, f)) for top, _, names in os.walk(d) for f in names)
            runs = [peak_of([sys.executable, "-m", "kpdiag", "analyze", d, "-o", "json"]) for _ in range(args.repeat)]
        mem = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            rep = aggregate(results, api_version="v1.31.4", local_itp=set())
            mem.append(time.perf_counter() - t)
        ids = sorted({f.id for f in rep.findings})
        row = {
            "nodes": args.nodes,
            "services_per_node": services,
            "reports_MB": round(size / 1e6, 1),
            "analyze_dir_s": round(statistics.median(r[0] for r in runs), 2),
            "analyze_dir_peak_MB": round(max(r[1] for r in runs) / 1024, 0),
            "aggregate_in_memory_s": round(statistics.median(mem), 3),
            "exit": runs[0][2],
            "findings": ids,
        }
        rows.append(row)
        print(json.dumps(row))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "fleet.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
