"""Issue 23 item 2: kpdiag believes an answer on 127.0.0.1:10249/10256 only when kube-proxy's own socket gave it.

Real listeners on the loopback of a lab network namespace, and kpdiag's collector run inside that namespace:
- a plain Python HTTP server (as an unprivileged user) that says it runs IPVS → recorded *unverified*, not kept;
- a process that is kube-proxy by kpdiag's rules (root, executable and argv[0] named kube-proxy, same network
  namespace) listening there → verified and kept;
- kube-proxy present but bound elsewhere, a stranger on 127.0.0.1:10249 → unverified, the stranger named;
- a listener that trickles one byte every 1.5 s → the collection ends at its deadline, not never.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import lab_or_skip
from tests.lab.netlab import KubeNodeLab
from tests.synth import Endpoint, Port, Service, iptables_ruleset

SERVER = r"""
import os, socket, sys, threading, time
port, mode = int(sys.argv[1]), sys.argv[2]
uid = os.environ.get("KP_UID")
if uid:  # what any unprivileged user on the node can do
    os.setgroups([]); os.setgid(int(uid)); os.setuid(int(uid))
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((os.environ.get("KP_ADDR", "127.0.0.1"), port))
srv.listen(16)
sys.stdout.write("ready\n"); sys.stdout.flush()
BODIES = {
    "/proxyMode": b"ipvs",
    "/metrics": b"kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7647205e+09\n",
    "/healthz": b'{"lastUpdated": "2026-12-03T00:09:51Z", "currentTime": "2026-12-03T00:10:00Z"}',
}
def serve(conn):
    with conn:
        req = conn.recv(4096).decode("latin-1")
        path = req.split(" ")[1] if " " in req else "/"
        body = BODIES.get(path, b"not found")
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        if mode == "trickle":
            for b in answer * 100:
                conn.sendall(bytes([b])); time.sleep(1.5)
        else:
            conn.sendall(answer)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

COLLECT = r"""
import json, sys, time
from kpdiag.collect.node import NodeCollector
c = NodeCollector(host_root="/")
t = time.monotonic()
c.kube_proxy_http()
took = time.monotonic() - t
c.processes()
m = c.out.manifest("lab")
print(json.dumps({"files": {k: v.decode("utf-8", "replace") for k, v in c.out.files.items()},
                  "errors": m["errors"], "verified": m.get("verified", {}), "took": took}))
"""

MODE = "node/kube-proxy/proxy-mode.txt"
METRICS = "node/kube-proxy/metrics.txt"


@pytest.fixture
def node():
    """A bare lab namespace ("node": loopback only), the listeners started in it, and the collector run in it."""
    lab_or_skip()
    from tests.lab.netlab import Lab

    started: list[subprocess.Popen] = []
    with Lab() as lab:
        lab.add_ns("node")

        def listen(port: int, mode: str = "serve", exe: str = sys.executable, env: dict | None = None):
            p = subprocess.Popen(
                ["ip", "netns", "exec", lab.ns("node"), exe, "-c", SERVER, str(port), mode],
                stdout=subprocess.PIPE,
                env={**os.environ, **(env or {})},
            )
            started.append(p)
            assert p.stdout.readline() == b"ready\n"
            return p

        def collect() -> dict:
            proc = lab.sh("node", [sys.executable, "-c", COLLECT], timeout=60)
            return json.loads(proc.stdout)

        try:
            yield lab, listen, collect
        finally:
            for p in started:
                p.kill()
                p.wait()


@pytest.fixture
def kube_proxy_exe(tmp_path):
    """An interpreter whose executable file is named kube-proxy (what kpdiag's process rules accept)."""
    exe = tmp_path / "bin" / "kube-proxy"
    exe.parent.mkdir()
    shutil.copy2(os.path.realpath(sys.executable), exe)
    return str(exe)


def _errors(out, rel):
    return [e for e in out["errors"] if e["source"] == rel]


def test_a_python_server_on_10249_is_not_believed(node):
    """Before: /proxyMode 'ipvs' from any local user was written to the bundle and reported as kube-proxy's mode."""
    lab, listen, collect = node
    spoof = listen(10249, env={"KP_UID": "65534"})
    out = collect()
    assert MODE not in out["files"] and METRICS not in out["files"]
    (err,) = _errors(out, MODE)
    assert err.get("unverified") is True
    assert err["error"].startswith("unverified: GET http://127.0.0.1:10249/proxyMode was answered (HTTP 200")
    assert f"pid {spoof.pid}" in err["error"] and "'ipvs'" in err["error"], err
    assert "no trusted kube-proxy process is visible" in err["error"]
    assert not out["verified"]


def test_kube_proxy_own_listener_is_verified(node, kube_proxy_exe):
    lab, listen, collect = node
    kp = listen(10249, exe=kube_proxy_exe)
    assert open(f"/proc/{kp.pid}/comm").read().strip() == "kube-proxy"
    out = collect()
    assert out["files"][MODE] == "ipvs"
    assert out["verified"][MODE] == f"the socket listening on 127.0.0.1:10249 belongs to kube-proxy (pid {kp.pid})"
    assert not [e for e in out["errors"] if e.get("unverified")]
    assert f"{kp.pid} kube-proxy" in out["files"]["node/processes.txt"].splitlines()


def test_kube_proxy_bound_elsewhere_and_a_stranger_on_loopback(node, kube_proxy_exe):
    """kube-proxy runs (metrics on another address); an unprivileged listener takes 127.0.0.1:10249."""
    lab, listen, collect = node
    lab.sh("node", ["ip", "addr", "add", "10.0.0.5/32", "dev", "lo"])
    kp = listen(10249, exe=kube_proxy_exe, env={"KP_ADDR": "10.0.0.5"})
    spoof = listen(10249, env={"KP_UID": "65534"})
    out = collect()
    assert MODE not in out["files"]
    (err,) = _errors(out, MODE)
    assert f"belongs to pid {spoof.pid} (python" in err["error"], err
    assert f"not to kube-proxy (pid {kp.pid})" in err["error"], err


def test_a_process_only_named_kube_proxy_is_not_listed_as_kube_proxy(node):
    """An unprivileged process that renames itself kube-proxy does not make processes.txt say kube-proxy runs."""
    lab, listen, collect = node
    fake = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            lab.ns("node"),
            sys.executable,
            "-c",
            "import ctypes,os,sys,time\nctypes.CDLL(None).prctl(15, b'kube-proxy', 0, 0, 0)\n"
            "os.setgid(65534); os.setuid(65534); print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert fake.stdout.readline() == b"ready\n"
        out = collect()
        assert f"{fake.pid} kube-proxy" not in out["files"]["node/processes.txt"]
    finally:
        fake.kill()
        fake.wait()


def test_a_trickling_listener_does_not_hang_the_collection(node):
    """1 byte every 1.5 s: a per-read timeout never fires; the total deadline per source does."""
    from kpdiag.collect.node_kube_proxy import HTTP_DEADLINE

    lab, listen, collect = node
    listen(10249, mode="trickle", env={"KP_UID": "65534"})
    listen(10256, mode="trickle", env={"KP_UID": "65534"})
    t = time.monotonic()
    out = collect()
    assert time.monotonic() - t < 3 * HTTP_DEADLINE + 10
    assert out["took"] < 3 * HTTP_DEADLINE + 2
    for rel in (MODE, METRICS, "node/kube-proxy/healthz.json"):
        assert rel not in out["files"]
        (err,) = _errors(out, rel)
        assert f"no complete answer within {HTTP_DEADLINE:g} s" in err["error"], err


def _kpdiag(lab, *args, timeout=300):
    exe = shutil.which("kpdiag")
    argv = ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + list(args)
    return lab.sh("node", argv, check=False, timeout=timeout)


def test_kpdiag_node_does_not_report_a_spoofed_mode(lab):
    """End to end on a node with kube-proxy's iptables rules and no kube-proxy: a stranger answering 'ipvs' on
    127.0.0.1:10249 is not the mode; the report says the answer was unverified, and KP707 says what answered."""
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0])])])
    )
    spoof = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("node"), sys.executable, "-c", SERVER, "10249", "serve"],
        stdout=subprocess.PIPE,
        env={**os.environ, "KP_UID": "65534"},
    )
    try:
        assert spoof.stdout.readline() == b"ready\n"
        proc = _kpdiag(lab, "node", "-o", "json", "--no-api", "--host-root", "/")
    finally:
        spoof.kill()
        spoof.wait()
    assert proc.stdout.strip(), proc.stderr  # a report, whatever it says
    report = json.loads(proc.stdout)
    facts = report["facts"]
    assert facts["proxy_mode"] == "iptables" and "proxyMode" not in facts["proxy_mode_source"], facts
    ids = {f["id"] for f in report["findings"]}
    assert not ids & {"KP308", "KP301", "KP701"}, ids
    problems = [p for p in report["problems"] if p["source"] == MODE]
    assert problems and "unverified" in problems[0]["error"] and f"pid {spoof.pid}" in problems[0]["error"], problems
    (kp707,) = [f for f in report["findings"] if f["id"] == "KP707"]
    assert "something that is not kube-proxy answers on its ports (unverified, not used)" in kp707["summary"]
    assert kp707["data"]["kube_proxy"] == "absent" and MODE in kp707["data"]["unverified_answers"]


def test_sock_diag_and_proc_tables_agree():
    """The listening sockets come from NETLINK_SOCK_DIAG (fast); /proc/net/tcp{,6} is the fallback: same answer."""
    import socket

    from kpdiag.collect.kube_proxy import _diag_listeners, _proc_listeners

    v4 = socket.socket()
    v6 = socket.socket(socket.AF_INET6)
    try:
        v4.bind(("127.0.0.1", 0))
        port = v4.getsockname()[1]
        v4.listen()
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(("::", port))
        v6.listen()
        diag, proc = _diag_listeners(port), _proc_listeners(port, None)
    finally:
        v4.close()
        v6.close()
    assert sorted(map(str, diag)) == sorted(map(str, proc)) == [f"127.0.0.1:{port}", f"[::]:{port}"]
    assert {x.inode for x in diag} == {x.inode for x in proc}


def test_kube_proxy_embedded_in_kubelite_is_verified(node, tmp_path):
    """MicroK8s runs kube-proxy inside kubelite: that process's socket is kube-proxy's (as k3s's is)."""
    lab, listen, collect = node
    exe = tmp_path / "kubelite"
    shutil.copy2(os.path.realpath(sys.executable), exe)
    kl = listen(10249, exe=str(exe))
    out = collect()
    assert out["files"][MODE] == "ipvs", out["errors"]
    assert out["verified"][MODE] == f"the socket listening on 127.0.0.1:10249 belongs to kubelite (pid {kl.pid})"
    assert f"{kl.pid} kubelite" in out["files"]["node/processes.txt"].splitlines()
