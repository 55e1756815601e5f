#!/usr/bin/env python3
"""What verifying kube-proxy's HTTP answers costs `kpdiag node` (issue 23 item 2): in a lab network namespace, a
listener that kpdiag believes is kube-proxy (an executable named kube-proxy, root) serves /proxyMode, /metrics (a
metrics body of --metrics-kb) and /healthz, while --sockets idle loopback connections fill /proc/net/tcp. Timed:
the three GETs as kpdiag made them before (urllib, a timeout per read, nothing verified) and
NodeCollector.kube_proxy_http now (one deadline per GET, the listening socket's owner checked before and after).

    sudo python3 benchmarks/bench_kube_proxy_http.py [--sockets 20000] [--metrics-kb 2048] [--repeat 5]

Writes $KPDIAG_BENCH_OUT/kube-proxy-http.json (default benchmarks/out/)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SERVER = r"""
import os, resource, socket, sys, threading
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
n, kb = int(sys.argv[1]), int(sys.argv[2])
metrics = b"".join(b"kubeproxy_sync_proxy_rules_endpoint_changes_total{i=\"%d\"} 1\n" % i for i in range(kb * 1024 // 56))
BODIES = {"/proxyMode": b"iptables", "/metrics": metrics, "/healthz": b'{"lastUpdated": "x", "currentTime": "x"}'}
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen(64)
    return s
def serve(srv):
    while True:
        c, _ = srv.accept()
        with c:
            req = c.recv(4096).decode("latin-1"); body = BODIES.get(req.split(" ")[1], b"")
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
for port in (10249, 10256):
    threading.Thread(target=serve, args=(listen(port),), daemon=True).start()
if os.fork() == 0:  # another process holds the idle connections: /proc/net/tcp grows as on a busy node
    import ctypes; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the server dies
    idle = listen(20000); keep = []
    for _ in range(n):
        a = socket.create_connection(("127.0.0.1", 20000)); b, _ = idle.accept(); keep += [a, b]
    sys.stdout.write("ready\n"); sys.stdout.flush()
    threading.Event().wait()
threading.Event().wait()
"""

MEASURE = r"""
import json, sys, time, urllib.request
from kpdiag.collect.node import NodeCollector
repeat = int(sys.argv[1])
def before():
    for url in ("http://127.0.0.1:10249/proxyMode", "http://127.0.0.1:10249/metrics", "http://127.0.0.1:10256/healthz"):
        with urllib.request.urlopen(url, timeout=2.0) as r:
            r.read(8 * 1024 * 1024)
def after():
    c = NodeCollector(host_root="/")
    c.kube_proxy_http()
    assert len(c.out.verified) == 3, c.out.errors
out = {}
for name, fn in (("before", before), ("after", after)):
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    out[name] = min(times)
with open("/proc/self/net/tcp") as fh:
    out["tcp_lines"] = sum(1 for _ in fh)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockets", type=int, default=20000)
    ap.add_argument("--metrics-kb", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from tests.lab.netlab import Lab

    tmp = tempfile.mkdtemp()
    exe = os.path.join(tmp, "kube-proxy")
    shutil.copy2(os.path.realpath(sys.executable), exe)
    with Lab() as lab:
        lab.add_ns("node")
        srv = subprocess.Popen(
            ["ip", "netns", "exec", lab.ns("node"), exe, "-c", SERVER, str(args.sockets), str(args.metrics_kb)],
            stdout=subprocess.PIPE,
        )
        try:
            assert srv.stdout.readline() == b"ready\n"
            proc = lab.sh("node", [sys.executable, "-c", MEASURE, str(args.repeat)], timeout=600)
        finally:
            srv.kill()
            srv.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    row = json.loads(proc.stdout) | {"sockets": args.sockets, "metrics_kb": args.metrics_kb}
    print(
        f"{row['tcp_lines'] - 1} sockets in /proc/net/tcp, metrics {args.metrics_kb} KiB: "
        f"before {row['before'] * 1000:.1f} ms (unverified), after {row['after'] * 1000:.1f} ms (verified)"
    )
    out = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kube-proxy-http.json"), "w") as fh:
        json.dump([row], fh, indent=1)


if __name__ == "__main__":
    main()
