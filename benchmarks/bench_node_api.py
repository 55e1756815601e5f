#!/usr/bin/env python3
"""Benchmark: `kpdiag node` with the Kubernetes API on a node with N Services, against the bare work it needs.

    sudo python3 benchmarks/bench_node_api.py [--services 10000] [--endpoints 5] [--runs 1]

A network namespace gets kube-proxy's iptables rules for N services (tests.synth, loaded with iptables-restore);
kmock's API server (tests/apiserver.py) runs inside that namespace and serves the same N Services and their
EndpointSlices. Measured in the same run, in that namespace:
  - the bare dumps `kpdiag node` needs (iptables-save, ip6tables-save, nft list tables, ip -j addr / route,
    conntrack -S, conntrack -L) plus one list of Services and one of EndpointSlices (curl, unpaged), each timed;
  - `kpdiag node --kubeconfig … -o json` as a whole process (its dumps, its paged lists through the kubernetes
    client, every rules-versus-API check, the report);
  - `kpdiag node --service NS/NAME --kubeconfig …` of one Service: this tree (after: the chains that Service's packets
    can meet, that Service, its EndpointSlices and this Node from the API) and, with --main DIR, the tree at DIR
    (before: the same rules, every Service and EndpointSlice listed); the Service's findings must be identical.
    --service-only leaves out the rest.
The target is kpdiag ≤ 1.2 × bare. Results go to benchmarks/out/node_api.json (or $KPDIAG_BENCH_OUT).
"""

from __future__ import annotations

import argparse
import json
import os
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

from tests.synth import iptables_ruleset, many_services  # noqa: E402
from tests import k8sobjects as k8s  # noqa: E402
from tests.apiserver import write_kubeconfig  # noqa: E402

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
TOKEN = "kpdiag-test"  # what tests/apiserver.write_kubeconfig puts in the kubeconfig


def _wall(argv, stdin=None) -> float:
    t = time.perf_counter()
    proc = subprocess.run(
        argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **ENV}
    )
    elapsed = time.perf_counter() - t
    if proc.returncode not in (0,):
        raise RuntimeError(f"{' '.join(argv[:6])} failed ({proc.returncode}): {proc.stderr.decode()[:300]}")
    return elapsed


def api_objects(services, node: str = "bench-node") -> list[dict]:
    """The API side of the synthetic services: Services and EndpointSlices as the API serves them."""
    objs = []
    for svc in services:
        ports = [k8s.port(p.port, p.target_port, p.name, p.protocol.upper(), p.node_port) for p in svc.ports]
        extra = {"externalTrafficPolicy": "Local"} if svc.etp_local else {}
        objs.append(
            k8s.service(
                svc.namespace,
                svc.name,
                svc.cluster_ip,
                ports,
                {"app": svc.name},
                type_="NodePort" if any(p.node_port for p in svc.ports) else "ClusterIP",
                **extra,
            )
        )
        eps = [(e.ip, e.ready, node if e.local else "other-node", None) for e in svc.endpoints]
        objs.append(
            k8s.endpointslice(
                svc.namespace, svc.name, eps, [(p.name, p.target_port, p.protocol.upper()) for p in svc.ports]
            )
        )
    objs.append(k8s.node(node))
    return objs


def _service_run(ns: str, kubeconfig: str, svc: str, out: str, pythonpath: str | None = None) -> tuple[float, float]:
    """`kpdiag node --service SVC --kubeconfig …` (this tree, or the tree at ``pythonpath``): (wall s, CPU s)."""
    import resource

    env = {**os.environ, **ENV, "NODE_NAME": "bench-node"}
    if pythonpath:  # another tree: its bytecode is not written there
        env |= {"PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    argv = ["ip", "netns", "exec", ns, sys.executable, "-m", "kpdiag", "node", "--service", svc]
    argv += ["--kubeconfig", kubeconfig, "-o", "json", "--host-root", "/", "--fail-on", "never", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(out, "w") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, env=env, cwd=pythonpath or ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"kpdiag node --service failed: {proc.stderr.decode()[-400:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _mine(report: dict, svc: str) -> list:
    def about(f):
        s = (f.get("data") or {}).get("service") or f.get("subject") or ""
        return s.split(":")[0] if isinstance(s, str) else ""

    return sorted((f["id"], f["subject"], f["summary"]) for f in report["findings"] if about(f) == svc)


def bench_service(row: dict, ns: str, kubeconfig: str, svc: str, tmp: str, runs: int, main_tree: str | None) -> None:
    """`kpdiag node --service` with the API: before (the tree at --main: focused rules, every Service and
    EndpointSlice listed) and after (this tree: that Service, its EndpointSlices, this Node)."""
    row["service"] = svc
    after_json, before_json = os.path.join(tmp, "svc-after.json"), os.path.join(tmp, "svc-before.json")
    if main_tree:
        best = min(_service_run(ns, kubeconfig, svc, before_json, main_tree) for _ in range(runs))
        row["node_service_api_before_s"], row["node_service_api_before_cpu_s"] = round(best[0], 2), round(best[1], 2)
    walls = [_service_run(ns, kubeconfig, svc, after_json) for _ in range(runs)]
    best = min(walls)
    row["node_service_api_after_s"], row["node_service_api_after_cpu_s"] = round(best[0], 2), round(best[1], 2)
    row["node_service_api_after_runs_s"] = [round(w[0], 2) for w in walls]
    after = json.load(open(after_json))
    row["service_findings"] = [f[0] for f in _mine(after, svc)]
    row["api_holds"] = sorted(k for k in after["extra"].get("partial", {}).get("holds", {}) if k.startswith("cluster/"))
    if main_tree:
        row["service_findings_identical"] = _mine(after, svc) == _mine(json.load(open(before_json)), svc)


def bench(
    n: int, endpoints: int, runs: int, full_nft: bool = False, main_tree: str | None = None, service_only: bool = False
) -> dict:
    services = many_services(n, endpoints)
    row: dict = {"services": n, "endpoints_per_service": endpoints}
    ns = "kpapi" + uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    tmp = tempfile.mkdtemp(prefix="kpdiag-bench-")
    server = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        rules = os.path.join(tmp, "rules.txt")
        with open(rules, "w") as fh:
            fh.write(iptables_ruleset(services))
        with open(rules) as src:
            row["load_s"] = round(_wall(["ip", "netns", "exec", ns, "iptables-restore"], stdin=src), 1)
        objects = os.path.join(tmp, "objects.json")
        with open(objects, "w") as fh:
            json.dump(api_objects(services), fh)
        url_file = os.path.join(tmp, "url")
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "env",
                f"PYTHONPATH={ROOT}",
                sys.executable,
                "-m",
                "tests.apiserver",
                objects,
                url_file,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        for _ in range(600):
            if os.path.exists(url_file) and open(url_file).read():
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the API emulator did not start")
        url = open(url_file).read().strip()
        kubeconfig = os.path.join(tmp, "kubeconfig")
        write_kubeconfig(kubeconfig, url)
        exe = shutil.which("kpdiag") or "kpdiag"
        target = services[len(services) // 2]
        bench_service(row, ns, kubeconfig, f"{target.namespace}/{target.name}", tmp, runs, main_tree)
        bare_runs, node_runs = [], []
        for _ in range(0 if service_only else runs):
            bare = 0.0
            # the dumps kpdiag node needs: on an nf_tables-backend node it lists the nftables tables and dumps only those
            # that are not iptables-nft's own (their rules are in iptables-save) — here there are none
            per = {}
            for argv in (
                ["iptables-save"],
                ["ip6tables-save"],
                ["nft", "list", "tables"],
                ["ip", "-j", "addr"],
                ["ip", "-j", "route", "show", "table", "all"],
                ["conntrack", "-S"],
                ["conntrack", "-L", "-p", "udp"],
                ["conntrack", "-L", "-p", "tcp"],
            ):
                per[" ".join(argv)] = round(_wall(["ip", "netns", "exec", ns] + argv), 2)
                bare += per[" ".join(argv)]
            row["bare_commands"] = per
            if full_nft:  # what a user who dumps everything would also wait for (kpdiag leaves it out)
                row["nft_full_ruleset_s"] = round(_wall(["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"]), 2)
            api = 0.0
            for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
                api += _wall(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "curl",
                        "-sf",
                        "-H",
                        f"Authorization: Bearer {TOKEN}",
                        "-o",
                        "/dev/null",
                        url + path,
                    ]
                )
            bare_runs.append((bare, api))
            out = os.path.join(tmp, "report.json")
            t = time.perf_counter()
            with open(out, "w") as fh:
                proc = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        exe,
                        "node",
                        "--kubeconfig",
                        kubeconfig,
                        "-o",
                        "json",
                        "--host-root",
                        "/",
                        "--fail-on",
                        "never",
                    ],
                    stdout=fh,
                    stderr=subprocess.PIPE,
                    env={**os.environ, **ENV, "NODE_NAME": "bench-node"},
                )
            node_runs.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise RuntimeError(f"kpdiag node failed: {proc.stderr.decode()[-400:]}")
            report = json.load(open(out))
            ran = {c["id"]: c["status"] for c in report["checks"]}
            row["api_checks_ran"] = sorted(c for c in ("KP202", "KP203", "KP105", "KP602") if ran.get(c) == "ran")
            row["findings"] = len(report["findings"])
        if not service_only:
            bare, api = min(bare_runs, key=lambda b: b[0] + b[1])
            row["bare_dumps_s"] = round(bare, 2)
            row["api_lists_s"] = round(api, 2)
            row["kpdiag_node_api_s"] = round(min(node_runs), 2)
            row["ratio"] = round(min(node_runs) / (bare + api), 2)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[10000])
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1, help="repeat and keep the best of each (default 1)")
    ap.add_argument(
        "--full-nft", action="store_true", help="also time nft -j list ruleset (iptables-nft's tables included)"
    )
    ap.add_argument("--main", help="also time `kpdiag node --service` of the kpdiag tree at this path (before)")
    ap.add_argument("--service-only", action="store_true", help="only the --service runs (no bare dumps, no full run)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    rows = [bench(n, args.endpoints, args.runs, args.full_nft, args.main, args.service_only) for n in args.services]
    for r in rows:
        print(json.dumps(r))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "node_api.json"), "w") as fh:
        json.dump({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
