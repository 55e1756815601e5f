#!/usr/bin/env python3
"""Benchmark: `kpdiag redact` time and peak memory, on hostile and on ordinary bundles.

    python3 benchmarks/bench_redact.py [--mb 10] [--services 5000] [--repeat 1] [--only NAME] [--compare DIR]

--compare DIR runs each case with the kpdiag of another checkout DIR as well (e.g. a worktree of the commit
before a change), one after the other, so both see the same machine load.

Each case writes a bundle directory, then runs `python3 -m kpdiag redact BUNDLE -o OUT --salt bench` in a fresh
process and reports its wall time and peak RSS (the child's own rusage from wait4; median of --repeat runs):

  comment-words   node/iptables-save.txt holding one rule whose quoted comment is --mb MB of short words
  comment-short   the same comment as short dotted words ("a.b a.b …": one match of every pattern per 4 bytes)
  comment-hex     the same comment as one --mb MB run of hex digits and colons/dots (address-like, no spaces)
  comment-slash   the same comment as one run of "a/" (a name/name path, no spaces)
  comment-dashes  the same comment as one run of "a-" (one 10 MB word: a repeated regex group kept 60 B/char)
  secrets-line    one --mb MB line of "password=x token=y " pairs (many secret matches)
  ordinary        an iptables-mode node of --services Services (iptables-save, endpoints, pods.json, services.json)

Results are printed and written to benchmarks/out/redact.json (or $KPDIAG_BENCH_OUT/redact.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")


def _ipt(comment: str) -> str:
    return (
        f'*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 10.77.0.32/32 -m comment --comment "{comment}" -j ACCEPT\nCOMMIT\n'
    )


def hostile(kind: str, mb: int) -> dict[str, str]:
    n = mb * 1024 * 1024
    if kind == "comment-words":
        body = ("kube svc 10.77.0.32 " * (n // 20 + 1))[:n]
        return {"node/iptables-save.txt": _ipt(body)}
    if kind == "comment-short":
        body = ("a.b " * (n // 4 + 1))[:n]
        return {"node/iptables-save.txt": _ipt(body)}
    if kind == "comment-hex":
        body = ("fd00:a1:" * (n // 8 + 1))[:n]
        return {"node/iptables-save.txt": _ipt(body)}
    if kind == "comment-dashes":
        body = ("a-" * (n // 2 + 1))[:n]
        return {"node/iptables-save.txt": _ipt(body)}
    if kind == "comment-slash":
        body = ("a/" * (n // 2 + 1))[:n]
        return {"node/iptables-save.txt": _ipt(body)}
    if kind == "secrets-line":
        body = ("password=x token=y " * (n // 19 + 1))[:n]
        return {"node/kube-proxy/log.txt": body + "\n"}
    raise ValueError(kind)


def ordinary(services: int) -> dict[str, str]:
    nat = ["*nat", ":KUBE-SERVICES - [0:0]", ":KUBE-MARK-MASQ - [0:0]"]
    svcs, slices, pods = [], [], []
    for i in range(services):
        ns, name = f"ns{i % 50}", f"svc{i}"
        cip, pip = f"10.96.{i // 256 % 256}.{i % 256}", f"10.244.{i // 256 % 256}.{i % 256}"
        h = f"{i:016X}"
        nat += [
            f":KUBE-SVC-{h} - [0:0]",
            f":KUBE-SEP-{h} - [0:0]",
            f'-A KUBE-SERVICES -d {cip}/32 -p tcp -m comment --comment "{ns}/{name}:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-{h}',
            f'-A KUBE-SVC-{h} -m comment --comment "{ns}/{name}:http -> {pip}:8080" -j KUBE-SEP-{h}',
            f'-A KUBE-SEP-{h} -s {pip}/32 -m comment --comment "{ns}/{name}:http" -j KUBE-MARK-MASQ',
            f'-A KUBE-SEP-{h} -p tcp -m comment --comment "{ns}/{name}:http" -m tcp -j DNAT --to-destination {pip}:8080',
        ]
        svcs.append(
            {
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": {
                    "clusterIP": cip,
                    "selector": {"app": name},
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                },
            }
        )
        slices.append(
            {
                "metadata": {"name": f"{name}-abcde", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [pip], "conditions": {"ready": True}, "nodeName": "node-1"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
        )
        pods.append(
            {
                "metadata": {"name": f"{name}-7f9c4-abcde", "namespace": ns, "labels": {"app": name}},
                "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "registry.acme.io/app:1"}]},
                "status": {"podIP": pip, "hostIP": "192.168.1.10"},
            }
        )
    nat.append("COMMIT")
    lst = lambda items: json.dumps({"apiVersion": "v1", "kind": "List", "items": items})  # noqa: E731
    return {
        "node/iptables-save.txt": "\n".join(nat) + "\n",
        "cluster/services.json": lst(svcs),
        "cluster/endpointslices.json": lst(slices),
        "cluster/pods.json": lst(pods),
    }


def write(files: dict[str, str], root: str) -> int:
    total = 0
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
        total += len(text)
    with open(os.path.join(root, "kpdiag.json"), "w") as fh:
        json.dump({"format": "kpdiag-bundle/1", "node": "node-1", "errors": []}, fh)
    return total


def run_once(bundle: str, out: str, root: str = ROOT) -> tuple[float, int, int]:
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=root)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kpdiag", "redact", bundle, "-o", out, "--salt", "bench"],
        env=env,
        cwd=root,  # `-m` puts the working directory first on the path: the checkout measured is the one imported
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        print(err, file=sys.stderr)
    return wall, usage.ru_maxrss // 1024, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=10)
    ap.add_argument("--services", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default=None)
    ap.add_argument("--compare", default=None, help="another checkout's root, run on the same cases")
    args = ap.parse_args()
    cases = [
        "comment-words",
        "comment-short",
        "comment-hex",
        "comment-slash",
        "comment-dashes",
        "secrets-line",
        "ordinary",
    ]
    if args.only:
        cases = [c for c in cases if c == args.only]
    results = {}
    with tempfile.TemporaryDirectory(prefix="kpdiag-bench-redact-") as tmp:
        for case in cases:
            bundle = os.path.join(tmp, case)
            files = ordinary(args.services) if case == "ordinary" else hostile(case, args.mb)
            size = write(files, bundle)
            roots = [("", ROOT)] + ([("compare:", os.path.abspath(args.compare))] if args.compare else [])
            for tag, root in roots:
                runs = [run_once(bundle, os.path.join(tmp, case + "-out"), root) for _ in range(args.repeat)]
                wall = statistics.median(r[0] for r in runs)
                rss = statistics.median(r[1] for r in runs)
                results[tag + case] = {"input_mb": round(size / 1e6, 1), "wall_s": round(wall, 2), "peak_rss_mb": rss}
                results[tag + case]["exit"] = runs[-1][2]
                print(
                    f"{tag + case:22} input {size / 1e6:7.1f} MB  wall {wall:7.2f} s  peak RSS {rss:6d} MB  "
                    f"exit {runs[-1][2]}",
                    flush=True,
                )
            shutil.rmtree(bundle, ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "redact.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
