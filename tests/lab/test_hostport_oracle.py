"""KP530 and KP528 on the real kernel, on a flannel-shaped lab node (the CNI model says portmap implements hostPort):

- portmap's DNAT for a pod's hostPort carries the node's port to the pod; a restored ruleset (what firewalld's reload
  with its iptables backend, or netfilter-persistent, does) takes it away: the same connection is refused; kpdiag
  names the pod's hostPort as the first error; portmap's rules written again (what re-running the CNI does) bring
  the traffic back.
- a UDP flow to a hostPort keeps its DNAT to the pod that held the port after another pod took it (portmap's
  conntrack cleanup did not run): the kernel delivers it to the old pod; KP528 names the entry and its conntrack -D
  lets the next datagram reach the new holder."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fixtures.make_fixtures import _flannel
from fixtures.make_modes import hostport_pod, portmap_nat
from kpdiag.bundle import sources
from kpdiag.commands.pipeline import analyze_bundle
from tests.synth import iptables_ruleset

from .bundle_from_ns import bundle_from_ns, collect_in_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

CONNECT = (
    "import socket, sys\ns = socket.socket(); s.settimeout(2)\n"
    "try:\n    s.connect((sys.argv[1] if len(sys.argv) > 1 else '192.168.50.1', 8080)); print('connected')\n"
    "except OSError as e:\n    print('failed', e)\n"
)
LISTEN_UDP = (
    "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 8125))\n"
    "while True:\n    data, _ = s.recvfrom(100)\n    open(sys.argv[1], 'a').write(data.decode() + '\\n')\n"
)
SEND = (
    "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 40125))\n"
    "s.sendto(sys.argv[1].encode(), ('192.168.50.1', 8125))\n"
)
DN1, DN2 = "CNI-DN-1a2b3c4d5e6f7a8b9c0d1", "CNI-DN-9f8e7d6c5b4a39281706f"


def _bound(lab, role: str, port: int = 8125) -> None:
    """Wait until the UDP server in ``role`` has its socket (a datagram sent before would be refused)."""
    for _ in range(60):
        if lab.sh(role, ["ss", "-Huln", f"sport = :{port}"]).stdout.strip():
            return
        time.sleep(0.1)
    raise AssertionError(f"no UDP server on {role}:{port}")


def _flannel_node(lab):
    k = KubeNodeLab.build(lab, pod_count=4)
    lab.route("node", "default", "via", k.client_ip)
    for role, argv, *stdin in _flannel():
        lab.sh(role, argv, input=stdin[0] if stdin else None)
    kube_proxy = iptables_ruleset([])
    k.load_iptables(kube_proxy)
    return k, kube_proxy


def _pods(*pods) -> dict:
    return {sources.PODS: json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)}, indent=1) + "\n"}


def _loud(lab, tmp_path, name: str, extra: dict):
    report = analyze_bundle(bundle_from_ns(lab, "node", str(tmp_path / name), extra=extra))
    return report, [f for f in report.findings if f.severity in ("warning", "error")]


def test_a_restored_ruleset_takes_a_pods_hostport_away_and_kpdiag_names_it_first(lab, tmp_path):
    k, kube_proxy = _flannel_node(lab)
    pod = k.pods["pod2"]
    lab.sh("node", ["iptables-restore", "--noflush"], input=portmap_nat(pod, "tcp", 8080, 8080, DN1, "5e6f"))
    lab.background("pod2", [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    for _ in range(40):  # the pod's server is up (reached directly, not through the host port)
        if lab.sh("node", [sys.executable, "-c", CONNECT, pod]).stdout.startswith("connected"):
            break
        time.sleep(0.25)
    before = lab.sh("client", [sys.executable, "-c", CONNECT]).stdout.strip()
    k.load_iptables(kube_proxy)  # the saved ruleset restored over the running one: portmap's chains are gone
    after = lab.sh("client", [sys.executable, "-c", CONNECT]).stdout.strip()
    assert before == "connected" and after.startswith("failed"), (before, after)

    pods = _pods(hostport_pod("ingress-7d9f", pod, "tcp", 8080))
    report, loud = _loud(lab, tmp_path, "flushed", pods)
    assert report.facts["cni"]["cni"] == "flannel"
    assert loud and loud[0].id == "KP530", [(f.id, f.summary) for f in loud]
    assert loud[0].data["pod_ip"] == pod and "no CNI-HOSTPORT-DNAT chain" in loud[0].summary

    lab.sh("node", ["iptables-restore", "--noflush"], input=portmap_nat(pod, "tcp", 8080, 8080, DN1, "5e6f"))
    assert lab.sh("client", [sys.executable, "-c", CONNECT]).stdout.strip() == "connected"
    _report, loud = _loud(lab, tmp_path, "restored", pods)
    assert not [f for f in loud if f.id == "KP530"]


def test_a_udp_flow_stays_with_the_pod_that_held_the_hostport(lab, tmp_path):
    k, kube_proxy = _flannel_node(lab)
    old, new = k.pods["pod1"], k.pods["pod2"]
    got = {}
    for role in ("pod1", "pod2"):
        got[role] = str(tmp_path / f"{role}.got")
        lab.background(role, [sys.executable, "-c", LISTEN_UDP, got[role]], subprocess.DEVNULL)
        _bound(lab, role)
    lab.sh("node", ["iptables-restore", "--noflush"], input=portmap_nat(old, "udp", 8125, 8125, DN1, "1111"))
    time.sleep(0.5)
    lab.sh("client", [sys.executable, "-c", SEND, "first"])
    k.load_iptables(kube_proxy)  # portmap DEL for the old pod, ADD for the new one, without its conntrack cleanup
    lab.sh("node", ["iptables-restore", "--noflush"], input=portmap_nat(new, "udp", 8125, 8125, DN2, "2222"))
    lab.sh("client", [sys.executable, "-c", SEND, "second"])

    def read(role):
        time.sleep(0.3)
        try:
            return open(got[role]).read().split()
        except FileNotFoundError:
            return []

    assert read("pod1") == ["first", "second"] and read("pod2") == []

    files, _ = collect_in_ns(lab, "node", (sources.CONNTRACK_STATS, sources.CONNTRACK))
    extra = {**_pods(hostport_pod("agent-b", new, "udp", 8125)), sources.CONNTRACK: files[sources.CONNTRACK].decode()}
    _report, loud = _loud(lab, tmp_path, "stale", extra)
    assert loud and loud[0].id == "KP528", [(f.id, f.summary) for f in loud]
    assert loud[0].data["stale_endpoints"] == [old]
    for cmd in loud[0].fix:
        lab.sh("node", cmd.split())
    lab.sh("client", [sys.executable, "-c", SEND, "third"])
    assert read("pod2") == ["third"]
