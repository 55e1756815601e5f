#!/usr/bin/env python3
"""Benchmark: what the root-cause pass (kpdiag/rootcause.py) adds to a report, beside the sort it replaced.

    python3 benchmarks/bench_rootcause.py [--findings 10000] [--runs 5]

Cases, each the median of --runs runs, in one process:
  - sort: the runner's former ordering (severity, id, subject) of the same findings — the "before";
  - link, no cause: N stale-endpoint findings (KP203) of N Services, nothing that explains them (iptables mode);
  - link, one cause: the same with kube-proxy absent (KP707): N consequences linked, their fixes rewritten;
  - text: rendering that report (consequences nested under their cause), beside the same findings unlinked;
  - analyze rule-scale: `kpdiag analyze fixtures/rule-scale` end to end (1,104 service ports; the pass is a share of it).
Results are printed and written to benchmarks/out/rootcause.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--findings", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from kpdiag.checkapi import load_registry
    from kpdiag.commands.pipeline import analyze_bundle
    from kpdiag.model import Finding, Report, Severity
    from kpdiag.render.report import report_to_text
    from kpdiag.rootcause import link

    load_registry()
    stale = [
        Finding(
            "KP203",
            "stale-endpoints",
            Severity.ERROR,
            "Node sends traffic to other endpoints than the API lists",
            f"ns{i}/svc{i} port 80: the node DNATs to 10.244.{i // 250}.{i % 250}:8080",
            "why",
            fix=(
                "kubectl -n kube-system logs <kube-proxy pod on this node> --tail=100",
                "kubectl -n kube-system delete pod <kube-proxy pod on this node>   # forces a full resync",
            ),
            subject=f"ns{i}/svc{i}:80",
            data={"service": f"ns{i}/svc{i}"},
        )
        for i in range(args.findings)
    ]
    absent = Finding(
        "KP707",
        "kube-proxy-absent",
        Severity.ERROR,
        "t",
        "kube-proxy is not running",
        "why",
        fix=("x",),
        subject="node",
    )
    linked, _ = link(stale + [absent], [], "iptables")
    report = Report("bench", tuple(linked), ())
    results = {
        "findings": args.findings,
        "sort_s": _median(lambda: sorted(stale, key=lambda f: (-f.severity.rank, f.id, f.subject or "")), args.runs),
        "link_no_cause_s": _median(lambda: link(stale, [], "iptables"), args.runs),
        "link_one_cause_s": _median(lambda: link(stale + [absent], [], "iptables"), args.runs),
        "text_s": _median(lambda: report_to_text(report), args.runs),
        "text_unlinked_s": _median(lambda: report_to_text(Report("bench", tuple(stale + [absent]), ())), args.runs),
        "analyze_rule_scale_s": _median(
            lambda: analyze_bundle(os.path.join(ROOT, "fixtures", "rule-scale")), max(1, args.runs // 2)
        ),
    }
    for k, v in results.items():
        print(f"{k:24} {v:.4f}" if isinstance(v, float) else f"{k:24} {v}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "rootcause.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
