"""kube-proxy's log: the newest of every place it can be wins (a 2019 /var/log/kube-proxy.log does not beat today's
container log), and KP704 says how old the log it cites is."""

from __future__ import annotations

import json
import os
import shutil
import time

from kpdiag.collect.node import NodeCollector
from kpdiag.commands.pipeline import analyze_bundle
from tests.conftest import FIXTURES

OLD = time.mktime((2019, 5, 1, 12, 0, 0, 0, 0, -1))
LOG = "node/kube-proxy/log.txt"


def _host(tmp_path, plain_mtime: float, pod_mtime: float):
    host = tmp_path / "host"
    pod_dir = host / "var" / "log" / "pods" / "kube-system_kube-proxy-abc" / "kube-proxy"
    pod_dir.mkdir(parents=True)
    pod = pod_dir / "0.log"
    pod.write_text('I1207 proxier.go:1] "Syncing iptables rules" today\n')
    plain = host / "var" / "log" / "kube-proxy.log"
    plain.write_text('E0501 proxier.go:1] "Failed to execute iptables-restore" err="exit status 1" in 2019\n')
    os.utime(plain, (plain_mtime, plain_mtime))
    os.utime(pod, (pod_mtime, pod_mtime))
    return host


def test_todays_container_log_wins_over_a_2019_file(tmp_path):
    c = NodeCollector(host_root=str(_host(tmp_path, OLD, time.time())))
    c.kube_proxy_files()
    assert b"today" in c.out.files[LOG] and b"2019" not in c.out.files[LOG]
    written = c.out.manifest("n1")["written"][LOG]
    assert written["path"] == "/var/log/pods/kube-system_kube-proxy-abc/kube-proxy/0.log"
    assert written["at"].startswith(time.strftime("%Y-%m-%d", time.gmtime()))


def test_a_newer_log_file_wins_over_an_old_container_log(tmp_path):
    c = NodeCollector(host_root=str(_host(tmp_path, time.time(), OLD)))
    c.kube_proxy_files()
    assert b"2019" in c.out.files[LOG]
    assert c.out.manifest("n1")["written"][LOG]["path"] == "/var/log/kube-proxy.log"


def test_kp704_states_the_age_of_the_log(tmp_path):
    dest = tmp_path / "b"
    shutil.copytree(os.path.join(FIXTURES, "kube-proxy-log-errors"), dest)
    manifest = json.loads((dest / "kpdiag.json").read_text())
    manifest["written"] = {LOG: {"path": "/var/log/kube-proxy.log", "at": "2019-05-01T12:00:00Z"}}
    (dest / "kpdiag.json").write_text(json.dumps(manifest))
    found = [f for f in analyze_bundle(str(dest)).findings if f.id == "KP704"]
    assert found
    for f in found:
        said = [e.text for e in f.evidence]
        assert any(
            "last written 2019-05-01T12:00:00Z" in t and "days before this bundle was collected" in t for t in said
        )
        assert "may be long past" in f.summary
        assert f.data["log_age_s"] > 365 * 86400
    # a log written just before the collection is cited as current
    manifest["written"][LOG]["at"] = manifest["created"]
    (dest / "kpdiag.json").write_text(json.dumps(manifest))
    for f in [f for f in analyze_bundle(str(dest)).findings if f.id == "KP704"]:
        assert "may be long past" not in f.summary and f.data["log_age_s"] == 0
