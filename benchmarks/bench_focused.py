#!/usr/bin/env python3
"""Benchmark: `kpdiag node --service NS/NAME` (a focused read) against the whole dump, on a node with N Services.

    sudo python3 benchmarks/bench_focused.py [--services 10000] [--endpoints 5] [--runs 3] [--main /work/main]
                                             [--mode iptables|nftables]

A network namespace gets kube-proxy's iptables rules for N Services (tests.synth, loaded with iptables-restore, on the
nf_tables backend of this host's iptables). Measured in the same run, in that namespace:
  - `iptables-save` (the whole dump a full run waits for);
  - `kpdiag node --service NS/NAME --all-rules` (before: the full collection, then the Service's traces);
  - `kpdiag node --service NS/NAME` (after: only the chains that Service's packets can meet);
  - with --main DIR, also a plain `kpdiag node` of this tree and of the tree at DIR (full runs must not regress);
  - a live `kpdiag trace` to that Service's ClusterIP:port, with --all-rules (before: the whole dump) and without
    (after: only the chains a packet to that destination can meet — in nftables mode kube-proxy's table over netlink,
    its maps with only the elements whose key the packet can match); the two traces must be identical.
Both --service runs are compared: the Service's findings and its traces (rule file lines aside) must be identical.
No API (--no-api): the rules are what is slow. Results go to benchmarks/out/focused.json (or $KPDIAG_BENCH_OUT).

With --mode nftables the namespace gets kube-proxy's nftables table instead (tests.synth.nft_ruleset, loaded with
``nft -f``: minutes of kernel time for 10,000 Services), the whole dump measured is ``nft -j list ruleset``, and the
focused read is kube-proxy's table over netlink (kpdiag/collect/service_rules.py NftablesFocused); results go to
focused-nftables.json. ``--service-cidrs "10.96.0.0/12, 10.200.0.0/16"`` gives cluster-ips-check two ServiceCIDRs (an
anonymous interval set on every packet's path; focused-nftables-cidrs.json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)

from tests.synth import iptables_ruleset, many_services, nft_ruleset  # noqa: E402

# bytecode is written once and used by every run (as an installed kpdiag has it): no run pays for compiling
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LC_ALL": "C",
}


CPU: dict[str, float] = {}  # CPU seconds (user + system) of the last command and its children, by command


def _wall(argv, stdout=subprocess.DEVNULL, env=None, ok=(0, 1)) -> float:
    """Wall seconds of ``argv``; its CPU seconds (and its children's) are kept in CPU["last"] (a loaded machine
    stretches the wall time, not the CPU time)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, env=env or ENV)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(argv[:8])} failed ({proc.returncode}): {proc.stderr.decode()[-300:]}")
    return elapsed


def _service_of(f) -> str | None:
    svc = (f.get("data") or {}).get("service")
    if isinstance(svc, str) and svc:
        return svc.split(":")[0]
    subject = f.get("subject") or ""
    return subject.split(":")[0] if "/" in subject and " " not in subject else None


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("source", "sources")}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"node/(ip6?tables-save\.txt|nft-ruleset\.json):\d+", "RULES:LINE", obj)
    return obj


def _kpdiag(ns: str, out: str, *args: str, pythonpath: str | None = None) -> float:
    # another tree: its bytecode is not written there (PYTHONDONTWRITEBYTECODE): it is not this benchmark's to change
    env = ENV | ({"PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"} if pythonpath else {})
    argv = ["ip", "netns", "exec", ns, sys.executable, "-m", "kpdiag", "node", "--no-api", "--host-root", "/"]
    argv += ["-o", "json", "--fail-on", "never", "-q", *args]
    with open(out, "w") as fh:
        return _wall(argv, stdout=fh, env=env)


def _trace(ns: str, out: str, dst: str, *args: str) -> float:
    """A live `kpdiag trace` in the namespace (exit 0, 3, 4 or 5 are answers: delivered, not traced to the end …)."""
    argv = ["ip", "netns", "exec", ns, sys.executable, "-m", "kpdiag", "trace", "--host-root", "/", "--dst", dst]
    argv += ["--src", "10.31.0.99", "-o", "json", *args]
    with open(out, "w") as fh:
        return _wall(argv, stdout=fh, ok=(0, 3, 4, 5))


def bench(
    n: int,
    endpoints: int,
    runs: int,
    main_tree: str | None,
    mode: str = "iptables",
    service_cidrs: str = "10.96.0.0/12",
) -> dict:
    services = many_services(n, endpoints)
    target = services[len(services) // 2]
    svc = f"{target.namespace}/{target.name}"
    row: dict = {"mode": mode, "services": n, "endpoints_per_service": endpoints, "service": svc}
    if service_cidrs != "10.96.0.0/12":
        row["service_cidrs"] = service_cidrs
    ns = "kpfoc" + uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    tmp = tempfile.mkdtemp(prefix="kpdiag-bench-")
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        rules = os.path.join(tmp, "rules.txt")
        with open(rules, "w") as fh:
            if mode == "nftables":
                fh.write(nft_ruleset(services, service_cidr=service_cidrs))
            else:
                fh.write(iptables_ruleset(services))
        t = time.perf_counter()
        load = ["nft", "-f", rules] if mode == "nftables" else ["iptables-restore", rules]
        subprocess.run(["ip", "netns", "exec", ns, *load], check=True, env=ENV)
        row["load_s"] = round(time.perf_counter() - t, 1)
        row["rules_bytes"] = os.path.getsize(rules)
        row["iptables"] = subprocess.run(["iptables", "--version"], capture_output=True, text=True).stdout.strip()
        row["nft"] = subprocess.run(["nft", "--version"], capture_output=True, text=True).stdout.strip()
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "kpdiag"), os.path.join(ROOT, "checks")],
            env=ENV,
            stdout=subprocess.DEVNULL,
        )
        row["load_average_before"] = os.getloadavg()[0]
        if mode == "nftables":
            row["nft_list_ruleset_s"] = round(_wall(["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"]), 2)
            row["nft_list_ruleset_cpu_s"] = round(CPU["last"], 2)
        else:
            row["iptables_save_s"] = round(_wall(["ip", "netns", "exec", ns, "iptables-save"]), 2)
            row["iptables_save_cpu_s"] = round(CPU["last"], 2)
        full_json, focus_json = os.path.join(tmp, "full.json"), os.path.join(tmp, "focused.json")
        row["node_service_all_rules_s"] = round(_kpdiag(ns, full_json, "--service", svc, "--all-rules"), 2)
        row["node_service_all_rules_cpu_s"] = round(CPU["last"], 2)
        focused, cpu = [], []
        for _ in range(runs):
            focused.append(_kpdiag(ns, focus_json, "--service", svc))
            cpu.append(CPU["last"])
        row["node_service_focused_s"] = round(min(focused), 2)
        row["node_service_focused_runs_s"] = [round(x, 2) for x in focused]
        row["node_service_focused_cpu_s"] = round(min(cpu), 2)
        full, part = json.load(open(full_json)), json.load(open(focus_json))
        mine = lambda r: sorted((f["id"], f["subject"], f["summary"]) for f in r["findings"] if _service_of(f) == svc)  # noqa: E731
        row["service_findings_identical"] = mine(full) == mine(part)
        row["service_findings"] = [f[0] for f in mine(part)]
        row["traces"] = len(part["extra"]["traces"])
        row["traces_identical"] = _strip(full["extra"]["traces"]) == _strip(part["extra"]["traces"])
        row["partial"] = part["extra"].get("partial", {}).get("service")
        row["skipped_as_partial"] = sorted(
            c["id"] for c in part["checks"] if c["status"] == "skipped" and "partial bundle" in (c["reason"] or "")
        )
        # a live trace to the Service's ClusterIP: the whole dump (--all-rules) and what that packet can meet
        port = target.ports[0]
        dst = f"{target.cluster_ip}:{port.port}"
        row["trace_dst"] = dst
        all_json, dst_json = os.path.join(tmp, "trace-all.json"), os.path.join(tmp, "trace-focused.json")
        row["trace_all_rules_s"] = round(_trace(ns, all_json, dst, "--all-rules"), 2)
        row["trace_all_rules_cpu_s"] = round(CPU["last"], 2)
        focused, cpu = [], []
        for _ in range(runs):
            focused.append(_trace(ns, dst_json, dst))
            cpu.append(CPU["last"])
        row["trace_focused_s"] = round(min(focused), 2)
        row["trace_focused_runs_s"] = [round(x, 2) for x in focused]
        row["trace_focused_cpu_s"] = round(min(cpu), 2)
        whole, part = json.load(open(all_json)), json.load(open(dst_json))
        row["trace_identical"] = _strip(whole) == _strip({k: v for k, v in part.items() if k != "read"})
        row["trace_dnat"] = sorted({p["dnat"] for p in part["paths"] if p.get("dnat")})
        read = part.get("read") or {}
        row["trace_read_chains"] = sum(len(c) for t in read.get("chains", {}).values() for c in t.values())
        row["trace_elements_left_out"] = sum(
            n for t in (read.get("elements_left_out") or {}).values() for m in t.values() for n in m.values()
        )
        if main_tree:
            row["node_full_s"] = round(_kpdiag(ns, os.path.join(tmp, "node.json")), 2)
            row["node_full_cpu_s"] = round(CPU["last"], 2)
            row["node_full_main_s"] = round(_kpdiag(ns, os.path.join(tmp, "main.json"), pythonpath=main_tree), 2)
            row["node_full_main_cpu_s"] = round(CPU["last"], 2)
        row["load_average_after"] = os.getloadavg()[0]
    finally:
        subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[10000])
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="focused runs (the best is kept; each is listed)")
    ap.add_argument("--main", help="also time a plain `kpdiag node` of this tree and of the kpdiag tree at this path")
    ap.add_argument("--mode", choices=("iptables", "nftables"), default="iptables", help="kube-proxy's proxy mode")
    ap.add_argument(
        "--service-cidrs",
        default="10.96.0.0/12",
        help="nftables mode: the ServiceCIDRs of cluster-ips-check, comma-separated (two or more: an interval set)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    rows = [bench(n, args.endpoints, args.runs, args.main, args.mode, args.service_cidrs) for n in args.services]
    for r in rows:
        print(json.dumps(r))
    os.makedirs(OUT, exist_ok=True)
    name = "focused.json" if args.mode == "iptables" else f"focused-{args.mode}.json"
    if args.service_cidrs != "10.96.0.0/12":
        name = name.replace(".json", "-cidrs.json")
    with open(os.path.join(OUT, name), "w") as fh:
        json.dump({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
