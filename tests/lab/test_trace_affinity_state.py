"""Session affinity state on the real kernel: after a client has hit a ClientIP-affinity Service, the kernel's
``-m recent --rcheck`` rule sends it back to the endpoint whose recent table holds it. ``kpdiag trace`` (live, and
from a bundle collected there) reads ``/proc/net/xt_recent/KUBE-SEP-*`` (node/xt-recent.json) and takes that
endpoint, saying so and until when; a client with no entry gets the 1/N choice."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import sys

import pytest

from tests.lab.netlab import KubeNodeLab, connect_from
from tests.synth import Endpoint, Port, Service, iptables_ruleset

pytestmark = pytest.mark.lab

CLUSTER_IP = "10.96.0.30"
SECONDS = 10800


def _kpdiag(lab, *args: str):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh("node", argv + list(args), check=False, timeout=300)


def _recorded(lab) -> dict[str, str]:
    """What the kernel recorded: client address → the endpoint (DNAT target) of the recent table holding it."""
    rules = lab.sh("node", ["iptables-save", "-t", "nat"]).stdout
    target = dict(re.findall(r"^-A (KUBE-SEP-\S+) .*--set .*--to-destination (\S+)", rules, re.M))
    out = {}
    for sep, dest in target.items():
        text = lab.sh("node", ["cat", f"/proc/net/xt_recent/{sep}"]).stdout
        for addr in re.findall(r"^src=(\S+) ", text, re.M):
            out[addr] = dest
    return out


def _check_trace(proc, client: str, endpoint: str, before: datetime.datetime) -> None:
    assert proc.returncode == 0, proc.stderr + proc.stdout[:2000]
    result = json.loads(proc.stdout)
    assert [p["dnat"] for p in result["paths"]] == [endpoint], result["paths"]
    assert result["paths"][0]["probability"] == 1.0
    notes = [n for p in result["paths"] for n in p["notes"] if "was recorded here" in n]
    assert notes and client in notes[0] and f"(last seen + --seconds {SECONDS})" in notes[0], result["paths"][0]
    until = re.search(r"until (\S+ \S+) UTC", notes[0])
    end = datetime.datetime.strptime(until.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    expected = before + datetime.timedelta(seconds=SECONDS)
    assert abs((end - expected).total_seconds()) <= 5, (end, expected)  # last seen at the connection, ± clock steps


def test_a_client_with_a_recorded_entry_goes_to_its_endpoint_live_and_from_a_bundle(lab, tmp_path):
    node = KubeNodeLab.build(lab, pod_count=3)
    lab.addr("client", "eth0", "192.168.50.3/24")  # a second client address, never seen by the Service
    pods = [Endpoint(ip) for ip in sorted(node.pods.values())]
    svc = Service("shop", "sticky", CLUSTER_IP, [Port("http", 80, 8080)], pods, affinity_seconds=SECONDS)
    node.load_iptables(iptables_ruleset([svc]))

    before = datetime.datetime.now(datetime.timezone.utc)
    connect_from(lab, "client", [dict(dst=CLUSTER_IP, dport=80, proto="tcp", sport=41000, bind=node.client_ip)])
    recorded = _recorded(lab)
    assert list(recorded) == [node.client_ip], recorded
    endpoint = recorded[node.client_ip]

    live = _kpdiag(lab, "trace", "--dst", f"{CLUSTER_IP}:80", "--src", node.client_ip, "-o", "json")
    _check_trace(live, node.client_ip, endpoint, before)

    bundle = tmp_path / "bundle"
    proc = _kpdiag(lab, "collect", "-o", str(bundle), "--host-root", "/")
    assert proc.returncode == 0, proc.stderr
    assert (bundle / "node/xt-recent.json").exists()
    saved = _kpdiag(
        lab, "trace", "--bundle", str(bundle), "--dst", f"{CLUSTER_IP}:80", "--src", node.client_ip, "-o", "json"
    )
    _check_trace(saved, node.client_ip, endpoint, before)

    # a client the kernel has not recorded: a new choice, 1/3 each, and said so
    other = _kpdiag(lab, "trace", "--dst", f"{CLUSTER_IP}:80", "--src", "192.168.50.3", "-o", "json")
    assert other.returncode == 0, other.stderr
    paths = json.loads(other.stdout)["paths"]
    assert sorted(p["dnat"] for p in paths) == sorted(f"{ip}:8080" for ip in node.pods.values())
    assert all(abs(p["probability"] - 1 / 3) < 1e-6 for p in paths)
    assert any("192.168.50.3 has no entry in the node's recent tables" in n for n in paths[0]["notes"]), paths[0]
