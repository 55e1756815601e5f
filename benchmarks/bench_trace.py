#!/usr/bin/env python3
"""Benchmark: kpdiag trace on kube-proxy rulesets of 1k–20k services, side by side with iptables-save.

    sudo python3 benchmarks/bench_trace.py [--services 10000 --endpoints 5] [--packets 1000] [--no-kernel]

For each size it generates a kube-proxy-faithful ruleset (tests.synth), loads it into a fresh
network namespace with iptables-restore, and measures in the same run:
  - wall time of `iptables-save` printing it from that namespace (what a user would run);
  - wall time of `iptables -t nat -L -n` there;
  - wall time and peak RSS of the whole `kpdiag trace --rules FILE …` process;
  - per-packet trace latency on the parsed state (median, p99 over N random packets);
  - `kpdiag --help` and `python -c pass` wall time.
Results are printed as a table and written to benchmarks/out/trace.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")  # where the results go
sys.path.insert(0, ROOT)

from tests.synth import iptables_ruleset, many_services  # noqa: E402

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def wall(argv, stdin=None, stdout=subprocess.DEVNULL) -> tuple[float, int]:
    """(seconds, peak RSS in KiB of that child) for one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env={**os.environ, **ENV})
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed: {proc.stderr.decode()[:300]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before) if peak > before else -1


def _tool(argv) -> float | str:
    """Wall time of a user's tool; when the tool itself fails at this size, say so instead of a number."""
    t = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **ENV})
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"failed (exit {proc.returncode} after {elapsed:.0f} s{': ' + msg[-1][:60] if msg else ''})"
    return round(elapsed, 2)


def peak_rss(argv) -> tuple[float, int]:
    """Wall time and the peak RSS of exactly this process (via /usr/bin/time when present)."""
    if os.path.exists("/usr/bin/time"):
        with tempfile.NamedTemporaryFile("r", suffix=".txt") as tf:
            t = time.perf_counter()
            proc = subprocess.run(
                ["/usr/bin/time", "-f", "%M", "-o", tf.name] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            elapsed = time.perf_counter() - t
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.decode()[:300])
            return elapsed, int(tf.read().strip().splitlines()[-1])
    return wall(argv)


def bench_size(n: int, endpoints: int, packets: int, kernel: bool) -> dict:
    services = many_services(n, endpoints)
    text = iptables_ruleset(services)
    row: dict = {"services": n, "endpoints": endpoints, "lines": text.count("\n"), "mbytes": round(len(text) / 1e6, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "rules.txt")
        with open(rules, "w") as fh:
            fh.write(text)
        if kernel:
            ns = "kpbench" + uuid.uuid4().hex[:6]
            subprocess.run(["ip", "netns", "add", ns], check=True)
            try:
                with open(rules) as fh:
                    row["iptables_restore_s"] = round(
                        wall(["ip", "netns", "exec", ns, "iptables-restore"], stdin=fh)[0], 2
                    )
                row["iptables_save_s"] = _tool(["ip", "netns", "exec", ns, "iptables-save"])
                row["iptables_L_nat_s"] = _tool(["ip", "netns", "exec", ns, "iptables", "-t", "nat", "-L", "-n"])
                if shutil.which("iptables-legacy-restore"):
                    # the legacy backend prints much faster: the tougher comparison, reported beside
                    with open(rules) as fh:
                        wall(["ip", "netns", "exec", ns, "iptables-legacy-restore"], stdin=fh)
                    row["legacy_save_s"] = _tool(["ip", "netns", "exec", ns, "iptables-legacy-save"])
            finally:
                subprocess.run(["ip", "netns", "del", ns])
        cip = services[n // 2].cluster_ip
        argv = [
            sys.executable,
            "-m",
            "kpdiag.cli",
            "trace",
            "--rules",
            rules,
            "--src",
            "10.0.0.2",
            "--dst",
            cip,
            "--dport",
            "80",
            "-o",
            "json",
        ]
        times = []
        rss = 0
        for _ in range(3):
            t, r = peak_rss(argv)
            times.append(t)
            rss = max(rss, r)
        row["kpdiag_trace_s"] = round(min(times), 2)
        row["kpdiag_trace_peak_rss_mb"] = round(rss / 1024, 1)
        if isinstance(row.get("iptables_save_s"), float):
            row["ratio_vs_iptables_save"] = round(row["kpdiag_trace_s"] / row["iptables_save_s"], 3)
        if isinstance(row.get("legacy_save_s"), float):
            row["ratio_vs_legacy_save"] = round(row["kpdiag_trace_s"] / row["legacy_save_s"], 3)

        # per-packet latency on parsed state
        from kpdiag.parse.iptables import parse_iptables_save
        from kpdiag.trace.model import Packet
        from kpdiag.trace.netfilter import IptablesTracer
        from kpdiag.trace.routing import RoutingTable

        t = time.perf_counter()
        ruleset = parse_iptables_save(text, "bench")
        row["parse_s"] = round(time.perf_counter() - t, 3)
        tracer = IptablesTracer(ruleset, RoutingTable.from_local_ips(["192.168.0.2"]))
        tracer.trace(Packet("10.0.0.2", cip, "tcp", 80))  # first packet builds the chain indexes
        rng = random.Random(7)
        lat = []
        for _ in range(packets):
            svc = rng.choice(services)
            src = rng.choice(["10.0.0.2", "10.244.3.4", "203.0.113.9"])
            pk = Packet(src, svc.cluster_ip, "tcp", 80, origin="pod" if src.startswith("10.244") else "external")
            t = time.perf_counter()
            tracer.trace(pk)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        row["per_packet_ms_median"] = round(statistics.median(lat), 3)
        row["per_packet_ms_p99"] = round(lat[int(len(lat) * 0.99) - 1], 3)
    return row


def bench_nft(n: int, endpoints: int, packets: int) -> dict:
    """nftables mode: `nft -j list ruleset` vs the whole `kpdiag trace --nft` process, per-packet latency."""
    from tests.synth import nft_ruleset

    services = many_services(n, endpoints)
    row: dict = {"services": n}
    with tempfile.TemporaryDirectory() as tmp:
        ns = "kpbench" + uuid.uuid4().hex[:6]
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            with open(os.path.join(tmp, "rules.nft"), "w") as fh:
                fh.write(nft_ruleset(services))
            with open(os.path.join(tmp, "rules.nft")) as fh:
                row["nft_load_s"] = round(wall(["ip", "netns", "exec", ns, "nft", "-f", "-"], stdin=fh)[0], 2)
            out = os.path.join(tmp, "ruleset.json")
            with open(out, "w") as fh:
                row["nft_list_json_s"] = round(
                    wall(["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"], stdout=fh)[0], 2
                )
        finally:
            subprocess.run(["ip", "netns", "del", ns])
        row["json_mbytes"] = round(os.path.getsize(out) / 1e6, 1)
        cip = services[n // 2].cluster_ip
        argv = [
            sys.executable,
            "-m",
            "kpdiag.cli",
            "trace",
            "--nft",
            out,
            "--src",
            "10.0.0.2",
            "--dst",
            cip,
            "--dport",
            "80",
            "-o",
            "json",
        ]
        best, rss = None, 0
        for _ in range(3):
            t, r = peak_rss(argv)
            best = t if best is None else min(best, t)
            rss = max(rss, r)
        row["kpdiag_trace_nft_s"] = round(best, 2)
        row["ratio_vs_nft_list"] = round(best / row["nft_list_json_s"], 3)
        row["peak_rss_mb"] = round(rss / 1024, 1)
        from kpdiag.parse.nft import parse_nft_json
        from kpdiag.trace.model import Packet
        from kpdiag.trace.nftables import NftTracer
        from kpdiag.trace.routing import RoutingTable

        with open(out) as fh:
            tracer = NftTracer(parse_nft_json(fh.read(), "bench"), RoutingTable.from_local_ips(["192.168.50.1"]))
        tracer.trace(Packet("10.0.0.2", cip, "tcp", 80))
        rng = random.Random(7)
        lat = []
        for _ in range(packets):
            svc = rng.choice(services)
            t = time.perf_counter()
            tracer.trace(Packet("10.0.0.2", svc.cluster_ip, "tcp", 80))
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        row["per_packet_ms_median"] = round(statistics.median(lat), 3)
        row["per_packet_ms_p99"] = round(lat[int(len(lat) * 0.99) - 1], 3)
    return row


def bench_node_e2e(n: int, endpoints: int) -> dict:
    """`kpdiag node` end to end in a namespace holding n services, vs the bare commands it runs."""
    services = many_services(n, endpoints)
    row: dict = {"services": n}
    ns = "kpbench" + uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as fh:
            fh.write(iptables_ruleset(services))
            fh.flush()
            with open(fh.name) as src:
                wall(["ip", "netns", "exec", ns, "iptables-restore"], stdin=src)
        bare = 0.0
        for argv in (
            ["iptables-save"],
            ["nft", "-j", "list", "ruleset"],
            ["ip", "-j", "addr"],
            ["ip", "-j", "route", "show", "table", "all"],
            ["conntrack", "-S"],
            ["ip6tables-save"],
        ):
            bare += wall(["ip", "netns", "exec", ns] + argv)[0]
        row["bare_commands_s"] = round(bare, 2)
        exe = shutil.which("kpdiag") or "kpdiag"
        t, rss = peak_rss(
            ["ip", "netns", "exec", ns, exe, "node", "-o", "json", "--host-root", "/", "--fail-on", "never"]
        )
        row["kpdiag_node_s"] = round(t, 2)
        row["overhead_ratio"] = round(t / bare, 2) if bare else None
        row["peak_rss_mb"] = round(rss / 1024, 1)
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    return row


def startup() -> dict:
    """Whole-process wall time of the console script (best of 5), beside a bare interpreter."""
    exe = shutil.which("kpdiag")
    base = [exe] if exe else [sys.executable, "-m", "kpdiag.cli"]
    help_t = min(wall(base + ["--help"])[0] for _ in range(5))
    checks_t = min(wall(base + ["checks"])[0] for _ in range(5))
    pass_t = min(wall([sys.executable, "-c", "pass"])[0] for _ in range(5))
    return {"kpdiag_help_s": round(help_t, 3), "kpdiag_checks_s": round(checks_t, 3), "python_pass_s": round(pass_t, 3)}


def analyze_bundle_bench(n: int, endpoints: int) -> dict:
    """`kpdiag analyze` of a node bundle whose iptables-save holds n services (the rest from the healthy fixture)."""
    src = os.path.join(ROOT, "fixtures", "healthy-iptables")
    with tempfile.TemporaryDirectory() as tmp:
        b = os.path.join(tmp, "bundle")
        shutil.copytree(src, b)
        for extra in ("iptables-nft-save.txt", "nft-ruleset.json"):
            p = os.path.join(b, "node", extra)
            if os.path.exists(p):
                os.unlink(p)
        with open(os.path.join(b, "node", "iptables-save.txt"), "w") as fh:
            fh.write(iptables_ruleset(many_services(n, endpoints)))
        argv = [sys.executable, "-m", "kpdiag.cli", "analyze", b, "-o", "json", "--fail-on", "never"]
        best, rss = None, 0
        for _ in range(3):
            t, r = peak_rss(argv)
            best = t if best is None else min(best, t)
            rss = max(rss, r)
        return {"services": n, "kpdiag_analyze_s": round(best, 2), "analyze_peak_rss_mb": round(rss / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--packets", type=int, default=1000)
    ap.add_argument("--no-kernel", action="store_true", help="skip loading into a namespace (no root needed)")
    ap.add_argument(
        "--nft-max",
        type=int,
        default=10000,
        help="largest size for the nftables rows (nft -f of 10k services takes ~2 min)",
    )
    ap.add_argument("--node-e2e", type=int, default=10000, help="size for the `kpdiag node` end-to-end row (0: skip)")
    args = ap.parse_args()
    kernel = not args.no_kernel and os.geteuid() == 0
    rows = []
    for n in args.services:
        print(f"… {n} services × {args.endpoints} endpoints", file=sys.stderr, flush=True)
        rows.append(bench_size(n, args.endpoints, args.packets, kernel))
    start = startup()
    analyze_rows = [analyze_bundle_bench(n, args.endpoints) for n in args.services]
    nft_rows = (
        [bench_nft(n, args.endpoints, args.packets) for n in args.services if n <= args.nft_max] if kernel else []
    )
    node_rows = [bench_node_e2e(args.node_e2e, args.endpoints)] if kernel and args.node_e2e else []
    from tabulate import tabulate

    cols = [
        "services",
        "lines",
        "mbytes",
        "iptables_save_s",
        "legacy_save_s",
        "iptables_L_nat_s",
        "kpdiag_trace_s",
        "ratio_vs_iptables_save",
        "ratio_vs_legacy_save",
        "kpdiag_trace_peak_rss_mb",
        "parse_s",
        "per_packet_ms_median",
        "per_packet_ms_p99",
    ]
    print(tabulate([[r.get(c, "-") for c in cols] for r in rows], headers=cols, tablefmt="github"))
    print()
    print(tabulate(analyze_rows, headers="keys", tablefmt="github"))
    if nft_rows:
        print()
        print(tabulate(nft_rows, headers="keys", tablefmt="github"))
    if node_rows:
        print()
        print(tabulate(node_rows, headers="keys", tablefmt="github"))
    print()
    print(tabulate([start], headers="keys", tablefmt="github"))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "trace.json"), "w") as fh:
        json.dump(
            {
                "rows": rows,
                "analyze": analyze_rows,
                "nftables": nft_rows,
                "node_e2e": node_rows,
                "startup": start,
                "machine": {
                    "sysname": os.uname().sysname,
                    "release": os.uname().release,
                    "machine": os.uname().machine,
                },
                "cpus": os.cpu_count(),
            },
            fh,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
