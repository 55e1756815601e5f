"""Each failure gives a named, recorded reason, and the rest of the diagnosis still runs."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from kpdiag.collect.node import NodeCollector
from kpdiag.collect.probes import ProbeBudget, ProbeRefused, tcp_connect


def test_missing_binaries_are_named(monkeypatch):
    import kpdiag.collect.node_base as node_mod

    monkeypatch.setitem(node_mod.SAFE_ENV, "PATH", "/nonexistent")
    c = NodeCollector(host_root="/")
    out = c.collect()
    errors = {e["source"]: e["error"] for e in out.errors}
    assert "iptables-save not found" in errors["node/iptables-save.txt"]
    assert "nft not found" in errors["node/nft-ruleset.json"]
    assert "node/sysctl.txt" in out.files and "node/uname.txt" in out.files  # what needs no binary still came


def test_permission_denied_on_proc_and_sys_files(tmp_path):
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv")
    proc = tmp_path / "proc"
    (proc / "sys" / "net" / "ipv4").mkdir(parents=True)
    (proc / "sys" / "net" / "ipv4" / "ip_forward").write_text("1\n")
    (proc / "sys" / "net" / "ipv4" / "secret").write_text("x\n")
    os.chmod(proc / "sys" / "net" / "ipv4" / "secret", 0)
    (proc / "modules").write_text("ip_vs 1 0 - Live 0x0\n")
    os.chmod(proc / "modules", 0)
    code = (
        "import json,sys; from kpdiag.collect.node import NodeCollector;"
        "c=NodeCollector(host_root='/', proc=sys.argv[1]); c.kernel(); c.sysctls();"
        "print(json.dumps({'files': sorted(c.out.files), 'sysctl': c.out.files.get('node/sysctl.txt', b'').decode(), 'errors': c.out.errors}))"
    )
    out = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search",
            "--inh-caps=-dac_override,-dac_read_search",
            sys.executable,
            "-c",
            code,
            str(proc),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert "net.ipv4.ip_forward = 1" in data["sysctl"] and "secret" not in data["sysctl"]
    assert any(e["source"] == "node/modules.txt" and "not readable" in e["error"] for e in data["errors"]), data[
        "errors"
    ]


def test_read_only_host_root_is_only_read(tmp_path):
    host = tmp_path / "host"
    (host / "var" / "log" / "pods" / "kube-system_kube-proxy-abc" / "kube-proxy").mkdir(parents=True)
    log = host / "var" / "log" / "pods" / "kube-system_kube-proxy-abc" / "kube-proxy" / "0.log"
    log.write_text(
        'E1203 proxier.go:1] "Failed to execute iptables-restore" err="Another app is currently holding the xtables lock"\n'
    )
    for d, _, _files in os.walk(host):
        os.chmod(d, 0o555)
    before = sorted(os.walk(host))
    c = NodeCollector(host_root=str(host))
    c.kube_proxy_files()
    assert b"xtables lock" in c.out.files["node/kube-proxy/log.txt"]
    assert sorted(os.walk(host)) == before


def test_api_that_never_answers_times_out_with_a_reason(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])  # accept, never answer
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    from tests.apiserver import write_kubeconfig

    kc = tmp_path / "kc"
    write_kubeconfig(str(kc), f"http://127.0.0.1:{srv.getsockname()[1]}")
    try:
        from kpdiag.collect.cluster import ClusterCollector

        cc = ClusterCollector(str(kc), timeout=1.0)
        assert cc.service("shop", "web") is None
        assert any("timed out" in e["error"].lower() or "unreachable" in e["error"] for e in cc.out.errors), (
            cc.out.errors
        )
    finally:
        stop.set()
        t.join(2)
        srv.close()


def test_probe_budget_targets_and_caps():
    b = ProbeBudget({"10.96.0.20"}, max_packets=2)
    with pytest.raises(ProbeRefused, match="not one of the Service's addresses"):
        b.take("8.8.8.8")
    b.take("10.96.0.20")
    b.take("10.96.0.20")
    with pytest.raises(ProbeRefused, match="budget of 2"):
        b.take("10.96.0.20")
    assert tcp_connect(ProbeBudget({"127.0.0.1"}), "10.0.0.1", 80)["result"] == "skipped"
    late = ProbeBudget({"127.0.0.1"}, deadline=0)
    with pytest.raises(ProbeRefused, match="time budget"):
        late.take("127.0.0.1")
    import time

    paced = ProbeBudget({"127.0.0.1"}, rate=10.0)
    t = time.monotonic()
    for _ in range(4):
        paced.take("127.0.0.1")
    assert time.monotonic() - t >= 0.29  # 4 packets at 10/s: at least 0.3 s apart in all
