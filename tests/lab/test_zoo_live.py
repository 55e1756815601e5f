"""The healthy zoo and its failures, built on the real kernel now (fixtures/zoo.py) rather than read from the recorded
fixtures: every zoo node really carries pod traffic (the node reaches each pod through the CNI's interface and
route), kpdiag's collector records it, and the analysis gives no warning or error on a healthy node and the failure's
cause first on a broken one. What a finding claims of the kernel is checked on the kernel where it can be."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures import zoo
from kpdiag.commands.pipeline import analyze_bundle

pytestmark = pytest.mark.lab

HEALTHY = sorted(n for n in zoo.ZOO if n.startswith("zoo-"))
# each failure and the cause that must rank first
CAUSES = {
    "calico-pool-outside-cluster-cidr": "KP613",
    "flannel-cni0-stale-address": "KP630",
    "flannel-no-pod-cidr": "KP631",
    "flannel-public-ip-nat": "KP632",
    "flannel-vtep-mac-mismatch": "KP633",
    "calico-autodetect-docker0": "KP634",
    "calico-pool-overlaps-node-lan": "KP635",
    "calico-ebpf-with-kube-proxy": "KP712",
    "calico-endpoint-to-host-drop": "KP636",
}


def _loud(report) -> list:
    return [f for f in report.findings if f.severity in ("warning", "error")]


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_zoo_node_carries_pod_traffic_and_gets_no_warning(lab, tmp_path, name):
    zoo.record_into(lab, name, str(tmp_path / name))
    for ip in zoo.ZOO[name].pod_ips:  # the CNI's interfaces and routes as built really reach each pod
        assert lab.sh("node", ["ping", "-c1", "-W2", ip], check=False).returncode == 0, (name, ip)
    report = analyze_bundle(str(tmp_path / name))
    assert [(f.id, f.summary) for f in _loud(report)] == []
    assert report.facts["cni"]["shape"] != "unknown"


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_each_cni_failure_is_found_with_its_cause_first(lab, tmp_path, name):
    zoo.record_into(lab, name, str(tmp_path / name))
    loud = _loud(analyze_bundle(str(tmp_path / name)))
    assert loud and loud[0].id == CAUSES[name], [(f.id, f.summary) for f in loud]


def test_a_calico_block_in_the_node_lan_takes_lan_addresses_on_the_kernel(lab, tmp_path):
    """KP635's claim: addresses of the node's own network are routed to pods."""
    zoo.record_into(lab, "calico-pool-overlaps-node-lan", str(tmp_path / "b"))
    got = lab.sh("node", ["ip", "-o", "route", "get", "192.168.50.66"]).stdout
    assert " dev cali" in got and "ext0" not in got, got  # a LAN address, but the kernel sends it to a pod
    rest = lab.sh("node", ["ip", "-o", "route", "get", "192.168.50.70"], check=False)
    # the rest of the block is Calico's blackhole, not the LAN: the kernel refuses to route there at all
    assert rest.returncode != 0 and "Invalid argument" in rest.stderr, (rest.stdout, rest.stderr)


def test_a_cni_bridge_with_another_address_routes_the_new_podcidr_nowhere_on_the_kernel(lab, tmp_path):
    """KP630's claim: with cni0 holding the old range, the node has no route of its own to its new podCIDR."""
    zoo.record_into(lab, "flannel-cni0-stale-address", str(tmp_path / "b"))
    got = lab.sh("node", ["ip", "-o", "route", "get", "10.244.1.10"]).stdout
    assert "cni0" not in got, got


CONNECT_INGRESS = (  # refused: the listener is not up yet, try again; a drop times out
    "import socket, time\n"
    "for _ in range(20):\n"
    "    s = socket.socket(); s.settimeout(2)\n"
    "    try:\n        s.connect(('10.96.0.30', 443)); print('connected'); break\n"
    "    except ConnectionRefusedError:\n        time.sleep(0.25)\n"
    "    except OSError as e:\n        print('failed', e); break\n"
    "else:\n    print('refused')\n"
)


@pytest.mark.parametrize("name,want", [("zoo-calico-ipip", "connected"), ("calico-endpoint-to-host-drop", "failed")])
def test_calico_endpoint_to_host_action_decides_whether_a_pod_reaches_a_host_network_endpoint(
    lab, tmp_path, name, want
):
    """KP636's claim on the kernel: through kube-proxy's DNAT to the node's own address (a hostNetwork endpoint),
    a pod here connects when cali-wl-to-host ends in ACCEPT and is dropped when it ends in DROP."""
    zoo.record_into(lab, name, str(tmp_path / name))
    lab.background("node", [sys.executable, "-m", "http.server", "8443", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    got = lab.sh("pod0", [sys.executable, "-c", CONNECT_INGRESS]).stdout.strip()
    assert got.startswith(want), got
