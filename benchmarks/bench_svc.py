#!/usr/bin/env python3
"""Benchmark: time to verdict of `kpdiag svc` — the whole process, as a user waits for it — on the lab.

    sudo python3 benchmarks/bench_svc.py [--runs 5]

The lab (tests/lab/netlab.py, real kernel): pod0 (the client, with a Kubernetes API server and a DNS server on its
loopback) → node (kube-proxy's rules for shop/web) → pod1, pod2 (HTTP servers). Cases:
  - healthy: everything answers;
  - dropping: both backends drop port 8080 (every probe waits for its timeout);
  - no-probe: --no-probe (API and rules only).
For each: the median and max wall time of the whole `python -m kpdiag svc web -n shop` process over --runs runs, and
its exit code. Results are printed and written to benchmarks/out/svc.json. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_svc: needs root (network namespaces)", file=sys.stderr)
        return 2
    from tests.synth import Endpoint, Port, Service, iptables_ruleset
    from tests import k8sobjects as k8s
    from tests.apiserver import write_kubeconfig
    from tests.lab.netlab import KubeNodeLab, Lab

    rows = []
    with Lab() as lab, tempfile.TemporaryDirectory() as tmp:
        k = KubeNodeLab.build(lab, pod_count=3)
        p1, p2 = k.pods["pod1"], k.pods["pod2"]
        k.load_iptables(
            iptables_ruleset(
                [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(p1), Endpoint(p2)])]
            )
        )
        for role in ("pod1", "pod2"):
            lab.background(role, [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
        objects = [
            k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
            k8s.endpointslice(
                "shop",
                "web",
                [(p1, True, "lab-node", "web-1"), (p2, True, "lab-node", "web-2")],
                [("http", 8080, "TCP")],
            ),
            k8s.pod(
                "shop", "web-1", p1, {"app": "web"}, node="lab-node", ports=[{"name": "http", "containerPort": 8080}]
            ),
            k8s.pod(
                "shop", "web-2", p2, {"app": "web"}, node="lab-node", ports=[{"name": "http", "containerPort": 8080}]
            ),
        ]
        with open(f"{tmp}/objects.json", "w") as fh:
            json.dump(objects, fh)
        with open(f"{tmp}/dns.json", "w") as fh:
            json.dump(
                {"web.shop.svc.cluster.local": "10.96.0.20", "kubernetes.default.svc.cluster.local": "10.96.0.1"}, fh
            )
        lab.set_resolv(
            "pod0",
            "nameserver 127.0.0.53\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:1 attempts:1\n",
        )
        env = ["env", f"PYTHONPATH={ROOT}", sys.executable]
        lab.background("pod0", env + ["-m", "tests.lab.dnsserver", "127.0.0.53", f"{tmp}/dns.json"], subprocess.DEVNULL)
        lab.background("pod0", env + ["-m", "tests.apiserver", f"{tmp}/objects.json", f"{tmp}/url"], subprocess.DEVNULL)
        for _ in range(150):
            if os.path.exists(f"{tmp}/url") and open(f"{tmp}/url").read():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        write_kubeconfig(f"{tmp}/kc", open(f"{tmp}/url").read())
        argv = [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", f"{tmp}/kc", "-o", "json"]

        def case(name: str, extra=()):
            times, codes = [], set()
            for _ in range(args.runs):
                t = time.monotonic()
                proc = lab.sh("pod0", argv + list(extra), check=False, timeout=120)
                times.append(time.monotonic() - t)
                codes.add(proc.returncode)
            rows.append(
                {
                    "case": name,
                    "runs": args.runs,
                    "median_s": round(statistics.median(times), 2),
                    "max_s": round(max(times), 2),
                    "exit": sorted(codes),
                }
            )

        case("healthy")
        case("no-probe", ["--no-probe"])
        for role in ("pod1", "pod2"):
            lab.sh(role, ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"])
        case("dropping")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "svc.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    print(f"{'case':<10} {'runs':>4} {'median s':>9} {'max s':>7}  exit")
    for r in rows:
        print(f"{r['case']:<10} {r['runs']:>4} {r['median_s']:>9} {r['max_s']:>7}  {r['exit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
