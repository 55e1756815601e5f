#!/usr/bin/env python3
"""Benchmark: the tracer's and the iptables parser's work budgets on hostile rulesets (tests/trace/hostile.py).

    python3 benchmarks/bench_trace_budget.py [--timeout 60] [--mem-mb 3000]

Each case runs the whole `kpdiag trace` process on one ruleset and records its wall time, peak RSS and exit code
(os.wait4: the rusage of that child alone). A run that passes --timeout is killed and reported as such; --mem-mb is
an address-space limit, so that a tracer without budgets fails at that limit instead of taking the machine.
Results are printed as a table and written to benchmarks/out/trace_budget.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)

from tests.trace import hostile  # noqa: E402

CASES = [
    ("iptables jump ladder (41 chains x 2 jumps: 82 rules)", "--rules", lambda: hostile.ipt_jump_ladder(41)),
    ("iptables statistic ladder (41 forks)", "--rules", lambda: hostile.ipt_statistic_ladder(41)),
    ("iptables 10 MB quoted comment", "--rules", lambda: hostile.ipt_huge_comment(10)),
    ("nft numgen random mod 100000000", "--nft", lambda: hostile.nft_numgen_huge()),
    ("nft numgen ladder (41 forks)", "--nft", lambda: hostile.nft_numgen_ladder(41)),
    ("nft chained vmaps (41 chains x 2 vmaps)", "--nft", lambda: hostile.nft_vmap_ladder(41)),
]


def run_one(argv: list[str], timeout: float, mem_mb: int) -> dict:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))

    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    killed = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t > timeout:
            proc.send_signal(signal.SIGKILL)
            killed = True
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - t
    err = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
    proc.stderr.close()
    row = {
        "wall_s": round(elapsed, 2),
        "cpu_s": round(
            usage.ru_utime + usage.ru_stime, 2
        ),  # the machine may be shared: CPU time is the steadier figure
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }
    if killed:
        row["outcome"] = f"killed after {timeout:.0f} s"
    elif os.WIFSIGNALED(status):
        row["outcome"] = f"signal {os.WTERMSIG(status)}"
    else:
        code = os.WEXITSTATUS(status)
        row["exit"] = code
        memory = any("MemoryError" in line for line in err)
        row["outcome"] = f"MemoryError at the {mem_mb} MB limit" if memory else f"exit {code}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--mem-mb", type=int, default=3000)
    ap.add_argument("--label", default="", help="a label stored with the results (e.g. before / after)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, flag, make in CASES:
            path = os.path.join(d, "rules.json" if flag == "--nft" else "rules.txt")
            with open(path, "w") as fh:
                fh.write(make())
            argv = [sys.executable, "-m", "kpdiag.cli", "trace", flag, path]
            argv += ["--src", "10.0.0.2", "--dst", "10.96.0.1", "--dport", "80", "-o", "json"]
            row = {"case": name, **run_one(argv, args.timeout, args.mem_mb)}
            rows.append(row)
            print(
                f"{name:<48} {row['wall_s']:>7.2f} s wall {row['cpu_s']:>7.2f} s cpu {row['peak_rss_mb']:>8.1f} MB  "
                f"{row['outcome']}",
                flush=True,
            )
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "trace_budget.json"), "w") as fh:
        json.dump({"label": args.label, "timeout_s": args.timeout, "mem_mb": args.mem_mb, "cases": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
