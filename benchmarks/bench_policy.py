#!/usr/bin/env python3
"""Benchmark: `kpdiag policy` to a Service with many endpoints in one namespace (issue 23.4: 2.4 MB pods.json, 30 s+).

    python3 benchmarks/bench_policy.py [--pods 1800 3600] [--policies 20] [--repeat 1]

For each pod count, writes a bundle: one namespace, N pods (each ~1.3 KB as kubectl prints it: benchmarks/
bench_netpol.py's pods), one Service selecting all of them with its EndpointSlices (100 endpoints a slice, as the
EndpointSlice controller writes them), a few policies; then runs in a fresh process

    python3 -m kpdiag policy --bundle DIR --from NS/POD --to svc/NS/web --port 80 -o json

and prints wall time, CPU time and peak RSS (wait4 rusage) with the pods.json size. Linear work doubles with N;
quadratic work quadruples. With --yaml it also times the YAML documents kpdiag parses (issue 23.4: a 2 MB
kube-proxy config.yaml and a 2 MB kubeconfig took 43 s): the two 2 MB documents, and the largest documents the caps
let through (just under the node cap). With --view N it times kpdiag's API view (ClusterView.services(), which checks
every object's shape) of N Services with 5 endpoints each, in a fresh process. --root DIR runs `kpdiag` from another
source tree (a checkout of the commit before) for a before/after in one run. Results also go to
benchmarks/out/policy.json (or $KPDIAG_BENCH_OUT/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, HERE)

from bench_netpol import make_policy, make_pod, pod_ip  # noqa: E402


def write(dirpath: str, pods: int, policies: int) -> int:
    ns = "prod"
    items = []
    for i in range(pods):
        p = make_pod(i, ns, 0)
        p["metadata"]["labels"] = {"app": "web", "pod-template-hash": "7f9c4d8b6"}
        items.append(p)
    items.append(make_pod(pods, "client", 1))
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}],
        },
    }
    slices = []
    for k in range(0, pods, 100):
        slices.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": f"web-{k:05d}", "namespace": ns, "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                "endpoints": [
                    {
                        "addresses": [pod_ip(i)],
                        "conditions": {"ready": True, "serving": True, "terminating": False},
                        "nodeName": f"node-{i % 500}",
                        "targetRef": {"kind": "Pod", "namespace": ns, "name": items[i]["metadata"]["name"]},
                    }
                    for i in range(k, min(k + 100, pods))
                ],
            }
        )
    pols = [make_policy(j, ns, 20) for j in range(policies)]
    nss = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}}
        for n in (ns, "client")
    ]
    os.makedirs(os.path.join(dirpath, "cluster"), exist_ok=True)
    for rel, objs in (
        ("pods", items),
        ("services", [svc]),
        ("endpointslices", slices),
        ("networkpolicies", pols),
        ("namespaces", nss),
    ):
        with open(os.path.join(dirpath, "cluster", f"{rel}.json"), "w") as fh:
            json.dump({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": objs}, fh, indent=1)
    with open(os.path.join(dirpath, "kpdiag.json"), "w") as fh:
        json.dump({"format": "kpdiag-bundle/1", "errors": []}, fh)
    return os.path.getsize(os.path.join(dirpath, "cluster", "pods.json"))


SOURCE = ROOT  # the tree kpdiag runs from (--root)


def run(bundle: str, src: str, argv: list | None = None) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit code) of one `kpdiag policy` process (or of ``argv``)."""
    if argv is None:
        argv = [sys.executable, "-m", "kpdiag", "policy", "--bundle", bundle, "--from", src]
        argv += ["--to", "prod/svc/web", "--port", "80", "-o", "json"]
    t0 = time.perf_counter()
    pid = os.posix_spawn(
        sys.executable,
        argv,
        dict(os.environ, PYTHONPATH=SOURCE, PYTHONSAFEPATH="1"),  # the cwd does not shadow --root (Python >= 3.11)
        file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
    )
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def yaml_times() -> list[dict]:
    """Seconds to read a kube-proxy config and a kubeconfig of the given size (refused or parsed)."""
    sys.path.insert(0, ROOT)
    from kpdiag.parse.decode import MAX_YAML_NODES, TooDeep, load_yaml
    from kpdiag.errors import InputError
    from kpdiag.parse.node import parse_kube_proxy_config

    def config(n):  # flow mappings of 4 nodes each
        return "kind: KubeProxyConfiguration\nmode: iptables\nextra:\n" + "".join(
            f"  - {{a: {i}, b: [x, y], c: s{i}}}\n" for i in range(n)
        )

    big = config(60000)
    under = config(MAX_YAML_NODES // 9 - 10)  # each line: a mapping, a list, 7 scalars (keys count)
    kubeconfig = "clusters:\n" + "".join(
        f"- name: c{i}\n  cluster: {{server: 'https://10.0.{i // 250}.{i % 250}:6443', x: [1, 2, 3]}}\n"
        for i in range(40000)
    )
    out = []
    for name, text in (
        ("config.yaml 2 MB", big),
        ("kubeconfig 2 MB", kubeconfig),
        ("config.yaml at the node cap", under),
    ):
        t0 = time.perf_counter()
        try:
            parse_kube_proxy_config(text) if name.startswith("config") else load_yaml(text)
            what = "parsed"
        except (InputError, TooDeep) as exc:
            what = f"refused: {exc}"
        took = time.perf_counter() - t0
        print(f"{name:30s} {len(text) / 1e6:5.2f} MB  {took:6.2f} s  {what}")
        out.append({"yaml": name, "mb": round(len(text) / 1e6, 2), "s": round(took, 2), "result": what})
    return out


VIEW = """
import json, sys, time
from kpdiag.bundle.store import Bundle
from kpdiag.state.cluster import ClusterView
files = {k: open(v, "rb").read() for k, v in json.loads(sys.argv[1]).items()}
t0 = time.perf_counter()
n = len(ClusterView(Bundle.from_files("b", files)).services())
print(n, time.perf_counter() - t0)
"""


def view_time(n: int) -> dict:
    """CPU and wall time of ClusterView.services() on N Services (5 endpoints each), in a fresh process."""
    sys.path.insert(0, ROOT)
    from tests import k8sobjects as k8s

    svcs, slices = [], []
    for i in range(n):
        ip = f"10.96.{i // 250}.{i % 250 + 1}"
        svcs.append(k8s.service(f"ns{i % 50}", f"s{i}", ip, [k8s.port(80, 8080, "http")], {"app": f"s{i}"}))
        eps = [(f"10.244.{i // 50}.{(i * 5 + k) % 250 + 1}", True, f"node-{k}", f"s{i}-{k}") for k in range(5)]
        slices.append(k8s.endpointslice(f"ns{i % 50}", f"s{i}", eps, [("http", 8080, "TCP")]))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for rel, items in (("cluster/services.json", svcs), ("cluster/endpointslices.json", slices)):
            paths[rel] = os.path.join(tmp, rel.replace("/", "_"))
            with open(paths[rel], "w") as fh:
                json.dump({"apiVersion": "v1", "kind": "List", "items": items}, fh)
        wall, cpu, rss, code = run("", "", [sys.executable, "-c", VIEW, json.dumps(paths)])
    print(f"API view of {n} Services (5 endpoints each): process {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MiB")
    return {"view_services": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mib": round(rss)}


def small_items(tmp: str, n: int) -> dict:
    """800 pods, then ``n`` small items ``{"name": CLIENT}`` (no metadata: in no item a search can decode) — every
    one a hit of the client's look-up by name."""
    d = os.path.join(tmp, f"small{n}")
    write(d, 800, 5)
    path = os.path.join(d, "cluster", "pods.json")
    with open(path) as fh:
        doc = json.load(fh)
    client = "app1-7f9c4d8b6-00800"
    doc["items"] += [{"name": client}] * n
    with open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    size = os.path.getsize(path)
    wall, cpu, rss, code = run(d, f"client/{client}")
    print(f"small items {n:6d}  pods.json {size / 1e6:5.2f} MB  wall {wall:7.2f} s  cpu {cpu:7.2f} s  exit {code}")
    return {
        "small_items": n,
        "pods_json_mb": round(size / 1e6, 2),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "exit": code,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, nargs="+", default=[1800, 3600])
    ap.add_argument("--policies", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--yaml", action="store_true", help="also time the YAML documents")
    ap.add_argument("--view", type=int, default=0, help="also time the API view of this many Services")
    ap.add_argument("--root", help="run kpdiag from this source tree")
    ap.add_argument(
        "--small",
        type=int,
        default=0,
        help="also time a pods.json of this many small items each holding the client's name (issue 38)",
    )
    args = ap.parse_args()
    global SOURCE
    SOURCE = os.path.abspath(args.root) if args.root else ROOT
    rows = []
    if args.view:
        rows.append(view_time(args.view))
    if args.yaml:
        rows += yaml_times()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.pods:
            d = os.path.join(tmp, f"b{n}")
            size = write(d, n, args.policies)
            src = f"client/app1-7f9c4d8b6-{n:05d}"
            runs = sorted((run(d, src) for _ in range(args.repeat)), key=lambda r: r[0])
            wall, cpu, rss, code = runs[len(runs) // 2]
            rows.append(
                {
                    "pods": n,
                    "pods_json_mb": round(size / 1e6, 2),
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "rss_mib": round(rss),
                    "exit": code,
                }
            )
            print(
                f"pods {n:6d}  pods.json {size / 1e6:5.2f} MB  wall {wall:7.2f} s  cpu {cpu:7.2f} s  peak {rss:6.0f} MiB  exit {code}"
            )
        if args.small:
            rows.append(small_items(tmp, args.small))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "policy.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
