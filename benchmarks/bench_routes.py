#!/usr/bin/env python3
"""Benchmark: building the routing table of a node with many routes (issue 38: add_route re-sorted on every insert —
2k routes 1.4 s, 10k 18 s, 30k past 30 s; an IPVS node has a local route per ClusterIP).

    python3 benchmarks/bench_routes.py [--routes 10000 30000] [--lookups 2000] [--root DIR]

For each count, makes `ip -j route show table all` as an IPVS node prints it (a local route per ClusterIP on
kube-ipvs0, a /24 per node's pod CIDR, a default route), then in a fresh process builds kpdiag's RoutingTable from it
(kpdiag.trace.routing.routing_from_ip_json) and looks up --lookups addresses. Prints the build and lookup times and a
digest of the answers (the same digest before and after a change means the same answers). --root DIR imports kpdiag
from another source tree (a checkout of the commit before) for a before/after in one run. Results also go to
benchmarks/out/routes.json (or $KPDIAG_BENCH_OUT/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")

CHILD = r"""
import hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
from kpdiag.trace.routing import routing_from_ip_json
from kpdiag.parse.addr import parse_ip
routes = json.load(open(sys.argv[2]))
lookups = int(sys.argv[3])
t0 = time.perf_counter()
rt = routing_from_ip_json([], routes)
built = time.perf_counter() - t0
digest = hashlib.sha256()
t0 = time.perf_counter()
for i in range(lookups):
    addr, _ = parse_ip(f"10.{96 + (i * 7919) % 32}.{(i * 31) % 256}.{(i * 17) % 256}")
    r = rt.lookup(addr, 4)
    digest.update(repr(r).encode())
looked = time.perf_counter() - t0
order = hashlib.sha256(repr([p.text for p, _ in rt.routes + rt.local_routes]).encode()).hexdigest()[:12]
print(json.dumps({"build_s": round(built, 3), "lookup_s": round(looked, 3), "answers": digest.hexdigest()[:12], "order": order}))
"""


def make_routes(n: int) -> list[dict]:
    """n routes: 90% local /32s (ClusterIPs on kube-ipvs0, table local), 10% /24 pod CIDRs via other nodes, a
    default route and the node's own subnet."""
    out = [
        {"dst": "default", "gateway": "192.168.1.1", "dev": "eth0", "table": "main"},
        {"dst": "192.168.1.0/24", "dev": "eth0", "table": "main", "type": "unicast"},
    ]
    cidrs = max(1, n // 10)
    for i in range(n - cidrs):
        out.append(
            {
                "type": "local",
                "dst": f"10.{96 + (i >> 16) % 32}.{(i >> 8) & 255}.{i & 255}",
                "dev": "kube-ipvs0",
                "table": "local",
            }
        )
    for i in range(cidrs):
        out.append(
            {
                "dst": f"10.{96 + (i >> 8) % 32}.{i & 255}.0/24",
                "gateway": f"192.168.1.{2 + i % 250}",
                "dev": "eth0",
                "table": "main",
            }
        )
    return out


def run(root: str, n: int, lookups: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(make_routes(n), fh)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, root, fh.name, str(lookups)], capture_output=True, text=True, timeout=3600
        )
    finally:
        os.unlink(fh.name)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return {"routes": n, **json.loads(proc.stdout)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--root", default=ROOT, help="the source tree to import kpdiag from")
    args = ap.parse_args()
    rows = [run(os.path.abspath(args.root), n, args.lookups) for n in args.routes]
    for r in rows:
        print(
            f"{r['routes']:>7} routes: build {r['build_s']:8.3f} s, {args.lookups} lookups {r['lookup_s']:.3f} s, answers {r['answers']} order {r['order']}"
        )
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "routes.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
