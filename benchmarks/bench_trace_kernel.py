#!/usr/bin/env python3
"""Benchmark: what ``kpdiag trace --kernel`` costs over the simulated trace alone, on the real kernel.

    sudo python3 benchmarks/bench_trace_kernel.py [--services 1000] [--repeat 10]

Builds a lab node (network namespaces, tests/lab/netlab.py) with kube-proxy's nftables table for N Services
(tests/synth.py), then runs, alternately and REPEAT times each, the same live trace from the node to one Service
(`kpdiag trace --from node --dst IP:PORT --sport P`) without and with ``--kernel``, each as the whole process a user
runs. Prints the medians and their difference (the cost of the kernel's confirmation: the owner-flagged table, the
listener, the probe) and writes benchmarks/out/trace_kernel.json (KPDIAG_BENCH_OUT overrides the folder).
Needs root (namespaces, nft)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.lab.netlab import Lab, KubeNodeLab  # noqa: E402
from tests.synth import Endpoint, Port, Service, nft_ruleset  # noqa: E402

NODE_IP = "192.168.50.1"


def _argv(dst: str, sport: int, kernel: bool) -> list[str]:
    exe = shutil.which("kpdiag")
    base = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return (
        base
        + ["trace", "--from", "node", "--src", NODE_IP, "--dst", dst, "--sport", str(sport), "-o", "json"]
        + (["--kernel"] if kernel else [])
    )


def _timed(lab: Lab, argv: list[str]) -> tuple[float, dict]:
    t = time.perf_counter()
    proc = lab.sh("node", argv, check=False, timeout=120)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr[-500:]}")
    return took, json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, nft)", file=sys.stderr)
        return 2
    with Lab() as lab:
        k = KubeNodeLab.build(lab, pod_count=2)
        lab.route("node", "default", "via", k.client_ip)
        pods = [Endpoint(ip) for ip in k.pods.values()]
        services = [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], pods)]
        services += [
            Service("bulk", f"svc-{i}", f"10.97.{i // 250}.{i % 250 + 1}", [Port("http", 80, 8080)], pods)
            for i in range(max(0, args.services - 1))
        ]
        k.load_nft(nft_ruleset(services))
        plain, confirmed, agree = [], [], 0
        for n in range(args.repeat):
            took, _ = _timed(lab, _argv("10.96.0.20:80", 41000 + 2 * n, kernel=False))
            plain.append(took)
            took, doc = _timed(lab, _argv("10.96.0.20:80", 41001 + 2 * n, kernel=True))
            confirmed.append(took)
            agree += bool((doc.get("kernel") or {}).get("agree"))
    result = {
        "services": args.services,
        "repeat": args.repeat,
        "simulated_median_s": round(statistics.median(plain), 3),
        "with_kernel_median_s": round(statistics.median(confirmed), 3),
        "kernel_cost_s": round(statistics.median(confirmed) - statistics.median(plain), 3),
        "agreed": f"{agree}/{args.repeat}",
    }
    out = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "trace_kernel.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    for key, value in result.items():
        print(f"{key:22} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
