"""``kpdiag trace --kernel`` on the real kernel: the kernel's own trace of a probe the node sends agrees with the
simulated path, and nothing of it is left behind — no table, no listener — after a normal exit, SIGINT, SIGTERM and
SIGKILL (the owner-flagged table dies with the ``nft -i`` process holding its socket, which dies with kpdiag)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.synth import Endpoint, Port, Service, nft_ruleset

from .netlab import ENV, KubeNodeLab

pytestmark = pytest.mark.lab

NODE_IP = "192.168.50.1"


def _argv(*args: str) -> list[str]:
    exe = shutil.which("kpdiag")
    return ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + ["trace", *args]


def _node(lab) -> KubeNodeLab:
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    services = [
        Service("default", "kubernetes", "10.96.0.1", [Port("https", 443, 6443)], [Endpoint(NODE_IP)]),
        Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ip) for ip in k.pods.values()]),
    ]
    k.load_nft(nft_ruleset(services))
    return k


def _left_behind(lab) -> tuple[str, str]:
    """(kpdiag's trace tables, processes) still in the node's namespace."""
    tables = lab.sh("node", ["nft", "list", "tables"]).stdout
    pids = subprocess.run(["ip", "netns", "pids", lab.ns("node")], capture_output=True, text=True).stdout.split()
    return "\n".join(t for t in tables.splitlines() if "kpdiag_trace" in t), " ".join(pids)


@pytest.mark.parametrize(
    "dst, src",
    [("10.96.0.1:443", "10.244.1.1"), ("10.96.0.20:80", NODE_IP), (f"{NODE_IP}:22", NODE_IP)],
)
def test_the_kernels_trace_agrees_and_nothing_is_left(lab, dst, src):
    _node(lab)
    t = time.monotonic()
    proc = lab.sh(
        "node",
        _argv("--from", "node", "--src", src, "--dst", dst, "--sport", "41234", "--kernel", "-o", "json"),
        check=False,
    )
    took = time.monotonic() - t
    assert proc.returncode == 0, proc.stderr + proc.stdout[:3000]
    kernel = json.loads(proc.stdout)["kernel"]
    assert kernel["agree"], kernel
    assert kernel["says"].startswith("AGREE")
    assert kernel["rules"] and all(r["table"] == "kube-proxy" for r in kernel["rules"]), kernel["rules"]
    dnat = [r["rule"] for r in kernel["rules"] if "dnat to" in r["rule"]]
    assert len(dnat) == (0 if dst.startswith(NODE_IP) else 1), kernel["rules"]  # the kernel's branch, one of kpdiag's
    assert "changes this node" in proc.stderr and "owner flag" in proc.stderr
    assert _left_behind(lab) == ("", ""), took


def _wait_for_table(lab, proc, limit: float = 10.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        if "kpdiag_trace" in lab.sh("node", ["nft", "list", "tables"], check=False).stdout:
            return
    raise AssertionError("kpdiag's trace table never appeared")


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_signal_leaves_nothing_behind(lab, signum, code):
    _node(lab)
    # the probe's destination drops it: the run waits for its connect() to time out, the window for the signal
    lab.sh(
        "node",
        [
            "nft",
            "add table ip blackhole; add chain ip blackhole out { type filter hook output priority 0; ip daddr 192.0.2.9 drop; }",
        ],
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("node")] + _argv("--from", "node", "--dst", "192.0.2.9:80", "--kernel"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        _wait_for_table(lab, proc)
        proc.send_signal(signum)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, proc.stderr.read()
    end = time.monotonic() + 3
    while _left_behind(lab) != ("", "") and time.monotonic() < end:
        time.sleep(0.05)
    assert _left_behind(lab) == ("", "")


OTHER_TRAFFIC = r"""
import socket, sys, time
end = time.monotonic() + float(sys.argv[1])
sent = 0
while time.monotonic() < end:
    for port, kind in ((80, socket.SOCK_STREAM), (80, socket.SOCK_DGRAM)):
        s = socket.socket(socket.AF_INET, kind)
        s.settimeout(0.05)
        try:  # a packet leaves whatever comes back (an answer, a refusal, a timeout)
            sent += 1
            s.connect(("10.96.0.20", port))
            if kind == socket.SOCK_DGRAM:
                s.send(b"other")
        except OSError:
            pass
        finally:
            s.close()
    time.sleep(0.01)
print(sent)
"""


def test_only_the_probe_is_traced_while_other_traffic_flows(lab):
    """A second listener of the kernel's trace (``nft monitor trace`` sees every packet anyone marked) hears only
    kpdiag's probe and its canary while the node sends other packets to the same Service — same address, same port,
    TCP and UDP, other source ports — all through the run."""
    _node(lab)
    monitor = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("node"), "nft", "monitor", "trace"], stdout=subprocess.PIPE, text=True, env=ENV
    )
    other = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("node"), sys.executable, "-c", OTHER_TRAFFIC, "6"],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        time.sleep(0.5)  # the listener has read the ruleset; the other traffic flows
        proc = lab.sh(
            "node",
            _argv("--from", "node", "--src", NODE_IP, "--dst", "10.96.0.20:80", "--sport", "41234", "--kernel"),
            check=False,
        )
        sent = int(other.communicate(timeout=30)[0].strip() or 0)
    finally:
        for p in (monitor, other):
            if p.poll() is None:
                p.kill()
    heard = monitor.communicate(timeout=10)[0].splitlines()
    assert proc.returncode == 0, proc.stderr + proc.stdout[:2000]
    assert sent > 50, sent  # the other traffic did flow during the run
    ports = {m for line in heard for m in re.findall(r"\bsport (\d+)", line)}
    assert ports == {"41234"}, (ports, heard[:20])  # the probe (and its canary, which uses the probe's source port)
    assert any("dport 80" in line for line in heard), heard[:20]
