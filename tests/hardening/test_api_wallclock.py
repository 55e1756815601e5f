"""`kpdiag svc` ends within its documented bound whatever the API server or the credential plugin does.

Each case is a real process on loopback, met by kpdiag's real kubernetes client through a real kubeconfig, with the
default budget (no ``$KPDIAG_API_BUDGET``): a raw socket server that sends a complete, valid answer one byte a second
(each byte well within any per-read timeout), one that sends a chunked answer and stops before its last chunk (the
connection left open), and an exec credential plugin that never exits and leaves a child behind that it no longer
waits for (reparented: not its child any more). Before, each held `svc` for the whole 60 s of the API budget and the
orphan survived; now one call is bounded whole (``CALL_SECONDS``: connect, headers, body), loading credentials is
bounded (``CONFIG_TIMEOUT``) and the plugin's whole session is killed. The three run at once (one wait, not three).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kpdiag.collect.cluster import CALL_SECONDS
from kpdiag.collect.credplugin import CONFIG_TIMEOUT
from tests.apiserver import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
MARGIN = 5.0  # seconds: what a loaded 2-core machine adds to a run, beyond the time of the run it is compared with
SERVICE = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "web"}},
    }
).encode()


class RawServer:
    """A TCP server on loopback that answers every request with ``attack(conn)`` (a thread per connection)."""

    def __init__(self, attack):
        self.attack = attack
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> "RawServer":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        try:
            conn.recv(65536)
            self.attack(conn, self.stop)
        except OSError:
            pass  # the client hung up: what it should do
        finally:
            conn.close()


def trickle(conn, stop) -> None:
    """A whole, valid answer, one byte a second."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(SERVICE))
    for byte in SERVICE:
        if stop.wait(1.0):
            return
        conn.sendall(bytes([byte]))


def chunked_cut(conn, stop) -> None:
    """A chunked answer with half the Service in its first chunk, then nothing: no last chunk, no close."""
    head = SERVICE[: len(SERVICE) // 2]
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    conn.sendall(b"%x\r\n%s\r\n" % (len(head), head))
    stop.wait(120)


def _plugin_kubeconfig(tmp_path: Path, url: str) -> tuple[str, Path]:
    """A kubeconfig whose user's exec credential plugin never exits: it records its pid, starts a sleeper it leaves
    behind (a subshell's child, reparented when the subshell ends) and one it waits for."""
    pids = tmp_path / "pids"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        f"#!/bin/sh\necho $$ >> {pids}\n( sleep 301 & echo $! >> {pids} )\nsleep 302 &\necho $! >> {pids}\nwait\n"
    )
    plugin.chmod(0o755)
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [
                    {
                        "name": "u",
                        "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}},
                    }
                ],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return str(kc), pids


def _start_svc(kc: str) -> tuple[subprocess.Popen, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KPDIAG_API_BUDGET")}
    argv = [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", kc, "-o", "json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    return proc, time.monotonic()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _problem(proc: subprocess.Popen, started: float, words: str) -> tuple[str, float]:
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - started
    assert "Traceback" not in err, err
    assert proc.returncode == 3, (proc.returncode, out, err)
    report = json.loads(out)
    why = next((p["error"] for p in report["problems"] if words in p["error"]), None)
    assert why is not None, report["problems"]
    assert "\n" not in why and len(why) < 600, why
    return why, took


def test_svc_ends_within_its_bound_against_a_trickle_a_cut_chunked_answer_and_a_plugin_that_never_exits(tmp_path):
    """Against each, `svc` takes no longer than against a server that refuses at once (started alongside: the same
    load, the same start and analysis) plus its bound: one call's (CALL_SECONDS), or the credentials' (CONFIG_TIMEOUT).
    Before: the API budget (60 s) each, and the plugin's orphan still running."""
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    with refused, RawServer(trickle) as slow, RawServer(chunked_cut) as cut:
        for name, url in (("base", f"http://127.0.0.1:{refused.getsockname()[1]}"), ("a", slow.url), ("b", cut.url)):
            (tmp_path / name).mkdir()
            write_kubeconfig(str(tmp_path / name / "kc"), url)
        (tmp_path / "c").mkdir()
        plugin_kc, pids = _plugin_kubeconfig(tmp_path / "c", cut.url)
        runs = [_start_svc(str(tmp_path / n / "kc")) for n in ("base", "a", "b")] + [_start_svc(plugin_kc)]
        _, base = _problem(*runs[0], "get service shop/web")
        trickled, t1 = _problem(*runs[1], "get service shop/web")
        chunked, t2 = _problem(*runs[2], "get service shop/web")
        plugin, t3 = _problem(*runs[3], "plugin")
    for why in (trickled, chunked):
        assert "did not answer in time" in why and "deadline" in why, why
        assert f"within {CALL_SECONDS:.0f} s" in why or f"of the answer in {CALL_SECONDS:.0f} s" in why, why
    assert f"its credential plugin '{tmp_path / 'c' / 'plugin.sh'}' did not finish in time" in plugin, plugin
    assert t1 < base + CALL_SECONDS + MARGIN and t2 < base + CALL_SECONDS + MARGIN, (base, t1, t2)
    assert t3 < base + CONFIG_TIMEOUT + MARGIN, (base, t3)
    time.sleep(0.3)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3, started
    assert not [p for p in started if _alive(p)], "a process of the credential plugin is still running"


def test_the_documented_bounds_are_the_code_s():
    """docs/api-access.md states the bounds the code keeps (the call's whole deadline, the credentials' load)."""
    text = (ROOT / "docs" / "api-access.md").read_text()
    deadlines = text.split("## Deadlines", 1)[1].split("\n## ", 1)[0]
    assert f"{CALL_SECONDS:.0f} s for one whole call" in deadlines, deadlines
    assert f"{CONFIG_TIMEOUT:.0f} s for loading the credentials" in deadlines, deadlines
