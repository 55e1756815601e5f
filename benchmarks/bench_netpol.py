#!/usr/bin/env python3
"""Benchmark: NetworkPolicy evaluation at scale (kpdiag policy).

    python3 benchmarks/bench_netpol.py [--namespaces 100] [--pods 20000] [--policies 5000] [--flows 10000] [--repeat 3]

Writes a bundle (cluster/namespaces.json, pods.json, networkpolicies.json as kubectl prints v1 Lists) with pods
spread evenly over the namespaces (each pod ~1.3 KB of JSON: labels, owner, one container with two ports and
resources, podIP(s), conditions) and policies of mixed shapes (default deny, matchLabels and matchExpressions pod
and namespace selectors, ipBlock with except, numeric, named and ranged ports, egress rules), then measures:

  1. one flow, whole process: `python3 -m kpdiag policy --bundle DIR --from NS/POD --to NS/POD --port 80 -o json`
     in a fresh process — wall time, CPU time and peak RSS (the child's own rusage from wait4), median of --repeat
     runs (large List files are searched for the two pods and their namespaces' policies, not parsed whole);
  2. many flows, index built once: kpdiag.commands.policy.load(bundle) once (everything parsed), then --flows
     evaluations of random pod pairs (PolicyIndex.evaluate) — load time, time per flow, flows per second.

Results are printed and written to benchmarks/out/netpol.json (or $KPDIAG_BENCH_OUT/netpol.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)


def pod_ip(i: int) -> str:
    return f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}"


def make_pod(i: int, ns: str, app: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"app{app}-7f9c4d8b6-{i:05d}",
            "namespace": ns,
            "uid": f"5b0e3c1e-{i:08d}-4a2b-9c1d-0242ac120002",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"app": f"app{app}", "tier": ("web", "api", "db")[app % 3], "pod-template-hash": "7f9c4d8b6"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app{app}-7f9c4d8b6",
                    "uid": "0c7d5a2e-1111-4a2b-9c1d-0242ac120002",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{i % 500}",
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/app{app}:1.4.2",
                    "ports": [
                        {"name": "http", "containerPort": 80, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                    ],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": pod_ip(i),
            "podIPs": [{"ip": pod_ip(i)}],
            "hostIP": f"192.168.{i % 500 // 250}.{i % 250 + 1}",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
        },
    }


def make_policy(j: int, ns: str, apps: int) -> dict:
    app = j % apps
    shape = j % 7
    spec: dict = {"podSelector": {"matchLabels": {"app": f"app{app}"}}}
    if shape == 0:
        spec = {"podSelector": {}, "policyTypes": ["Ingress"]}  # default deny
    elif shape == 1:
        spec["ingress"] = [
            {"from": [{"podSelector": {"matchLabels": {"app": f"app{(app + 1) % apps}"}}}], "ports": [{"port": 80}]}
        ]
    elif shape == 2:
        spec["ingress"] = [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchExpressions": [
                                {"key": "team", "operator": "In", "values": [f"t{j % 10}", f"t{j % 13}"]}
                            ]
                        },
                        "podSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]},
                    }
                ],
                "ports": [{"port": "http"}],
            }
        ]
    elif shape == 3:
        spec["ingress"] = [
            {
                "from": [{"ipBlock": {"cidr": "10.64.0.0/10", "except": [f"10.64.{j % 256}.0/24"]}}],
                "ports": [{"port": 8000, "endPort": 8100}],
            }
        ]
    elif shape == 4:
        spec["policyTypes"] = ["Egress"]
        spec["egress"] = [
            {
                "to": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }
                ],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
            {"to": [{"podSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}]},
        ]
    elif shape == 5:
        spec["ingress"] = [{"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "UDP", "port": 5353}]}]
    else:
        spec["ingress"] = [{}]
        spec["egress"] = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}]}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"pol-{j}",
            "namespace": ns,
            "uid": f"pol-{j:08d}",
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": spec,
    }


def write(dirpath: str, namespaces: int, pods: int, policies: int) -> tuple[list[str], int]:
    nss = [f"ns{k}" for k in range(namespaces)]
    apps = 20
    pod_items = [make_pod(i, nss[i % namespaces], (i // namespaces) % apps) for i in range(pods)]
    pol_items = [make_policy(j, nss[j % namespaces], apps) for j in range(policies)]
    ns_items = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n, "team": f"t{k % 10}"}},
        }
        for k, n in enumerate(nss)
    ]
    os.makedirs(os.path.join(dirpath, "cluster"), exist_ok=True)
    for rel, items in (("pods", pod_items), ("networkpolicies", pol_items), ("namespaces", ns_items)):
        with open(os.path.join(dirpath, "cluster", f"{rel}.json"), "w") as fh:
            json.dump({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, fh, indent=1)
    with open(os.path.join(dirpath, "kpdiag.json"), "w") as fh:
        json.dump({"format": "kpdiag-bundle/1", "errors": []}, fh)
    names = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pod_items]
    return names, os.path.getsize(os.path.join(dirpath, "cluster", "pods.json")) + os.path.getsize(
        os.path.join(dirpath, "cluster", "networkpolicies.json")
    )


def one_flow_measured(bundle: str, src: str, dst: str) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MiB, exit code, CPU seconds user+system) of one `kpdiag policy` process."""
    t0 = time.perf_counter()
    pid = os.posix_spawn(
        sys.executable,
        [
            sys.executable,
            "-m",
            "kpdiag",
            "policy",
            "--bundle",
            bundle,
            "--from",
            src,
            "--to",
            dst,
            "--port",
            "80",
            "-o",
            "json",
        ],
        dict(os.environ, PYTHONPATH=ROOT),
        file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
    )
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"kpdiag policy failed with exit {code}")
    return wall, usage.ru_maxrss / 1024, code, usage.ru_utime + usage.ru_stime


def many_flows(bundle: str, names: list[str], flows: int) -> dict:
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.netpol import End
    from kpdiag.commands.policy import load

    t0 = time.perf_counter()
    data = load(Bundle.open(bundle))
    t_load = time.perf_counter() - t0
    rnd = random.Random(7)
    pairs = [(rnd.choice(names), rnd.choice(names)) for _ in range(flows)]
    idx = data.index
    allowed = 0
    t0 = time.perf_counter()
    for s, d in pairs:
        sp, dp = idx.pods[s], idx.pods[d]
        allowed += idx.evaluate(End(sp.ip, sp), End(dp.ip, dp), 80, "TCP").allowed
    t_eval = time.perf_counter() - t0
    return {
        "load_s": round(t_load, 3),
        "flows": flows,
        "eval_s": round(t_eval, 3),
        "per_flow_us": round(t_eval / max(flows, 1) * 1e6, 1),
        "flows_per_s": round(flows / t_eval) if t_eval else None,
        "allowed": allowed,
        "problems": len(data.problems),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--namespaces", type=int, default=100)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--policies", type=int, default=5000)
    ap.add_argument("--flows", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kpdiag-bench-netpol-") as tmp:
        names, size = write(tmp, args.namespaces, args.pods, args.policies)
        src, dst = names[1], names[args.namespaces + 2 if len(names) > args.namespaces + 2 else -1]
        runs = [one_flow_measured(tmp, src, dst) for _ in range(args.repeat)]
        walls = [r[0] for r in runs]
        rss = [r[1] for r in runs]
        cpu = [r[3] for r in runs]
        result = {
            "namespaces": args.namespaces,
            "pods": args.pods,
            "policies": args.policies,
            "input_mb": round(size / 2**20, 1),
            "one_flow": {
                "wall_s_median": round(statistics.median(walls), 3),
                "wall_s_max": round(max(walls), 3),
                "cpu_s_median": round(statistics.median(cpu), 3),
                "peak_rss_mb": round(max(rss), 1),
                "exit": runs[0][2],
                "runs": args.repeat,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            },
            "many_flows": many_flows(tmp, names, args.flows),
        }
    print(
        f"netpol: {args.pods} pods, {args.policies} policies, {args.namespaces} namespaces ({result['input_mb']} MB of JSON)"
    )
    o = result["one_flow"]
    print(
        f"  one flow, whole process (kpdiag policy --bundle): wall median {o['wall_s_median']} s (max {o['wall_s_max']} s), "
        f"CPU median {o['cpu_s_median']} s, peak RSS {o['peak_rss_mb']} MB (1-min load average {o['load_avg_1m']})"
    )
    m = result["many_flows"]
    print(
        f"  index built once: load {m['load_s']} s; {m['flows']} flows in {m['eval_s']} s ({m['per_flow_us']} µs/flow, {m['flows_per_s']}/s)"
    )
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "netpol.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
