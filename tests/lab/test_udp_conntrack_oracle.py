"""KP504 and KP529 on the real kernel: UDP flows whose conntrack entries outlive the rules they were made under.

- A client's flow to a NodePort keeps its DNAT to the old endpoint after kube-proxy's rules moved to a new one (its
  conntrack cleanup did not run): the kernel sends the client's next packet to the old endpoint, never the new one.
- A client that sent to a ClusterIP (and a NodePort) before the Service was programmed keeps an untranslated entry:
  once the endpoint is there, its packets still never reach it.

kpdiag's collector records the entries, the analysis names the cause first, and its fix command — run on the kernel
— lets the very next packet through."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from kpdiag.bundle import sources
from kpdiag.commands.pipeline import analyze_bundle
from tests import k8sobjects as k8s
from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .bundle_from_ns import bundle_from_ns, collect_in_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

LISTEN = (  # a UDP server that appends one line per datagram to its file
    "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 5140))\n"
    "while True:\n    data, _ = s.recvfrom(100)\n    open(sys.argv[1], 'a').write(data.decode() + '\\n')\n"
)
SEND = (  # one datagram from a fixed source port (the same flow each time)
    "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', int(sys.argv[3])))\n"
    "s.sendto(sys.argv[4].encode(), (sys.argv[1], int(sys.argv[2])))\n"
)


def _bound(lab, role: str, port: int = 5140) -> None:
    """Wait until the UDP server in ``role`` has its socket (a datagram sent before would be refused)."""
    for _ in range(60):
        if lab.sh(role, ["ss", "-Huln", f"sport = :{port}"]).stdout.strip():
            return
        time.sleep(0.1)
    raise AssertionError(f"no UDP server on {role}:{port}")


def _syslog(endpoint: str | None) -> Service:
    return Service(
        "shop",
        "syslog",
        "10.96.0.60",
        [Port("syslog", 514, 5140, "udp", node_port=30514)],
        [Endpoint(endpoint)] if endpoint else [],
    )


def _api(endpoint: str) -> dict:
    svc = k8s.service(
        "shop", "syslog", "10.96.0.60", [k8s.port(514, 5140, "syslog", "UDP", node_port=30514)], {"app": "syslog"}
    )
    svc["spec"]["type"] = "NodePort"
    sl = k8s.endpointslice("shop", "syslog", [(endpoint, True, "lab-node", "syslog-0")], [("syslog", 5140, "UDP")])

    def listing(kind, item):
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": [item]}, indent=1) + "\n"

    return {sources.SERVICES: listing("Service", svc), sources.ENDPOINTSLICES: listing("EndpointSlice", sl)}


def _listen(lab, tmp_path, role: str) -> str:
    path = str(tmp_path / f"{role}.got")
    lab.background(role, [sys.executable, "-c", LISTEN, path], subprocess.DEVNULL)
    _bound(lab, role)
    return path


def _got(path: str) -> list[str]:
    time.sleep(0.3)
    try:
        with open(path) as fh:
            return fh.read().split()
    except FileNotFoundError:
        return []


def _send(lab, role: str, dst: str, dport: int, sport: int, what: str) -> None:
    lab.sh(role, [sys.executable, "-c", SEND, dst, str(dport), str(sport), what])


def _analyze(lab, tmp_path, name: str, endpoint: str):
    files, _errors = collect_in_ns(lab, "node", (sources.CONNTRACK_STATS, sources.CONNTRACK))
    extra = {**_api(endpoint), sources.CONNTRACK: files[sources.CONNTRACK].decode()}
    out = bundle_from_ns(lab, "node", str(tmp_path / name), extra=extra)
    report = analyze_bundle(out)
    loud = [f for f in report.findings if f.severity in ("warning", "error")]
    return loud


def _lab(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=3)
    lab.route("node", "default", "via", k.client_ip)
    lab.sysctl("node", "net.ipv4.conf.all.route_localnet", "1")
    time.sleep(0.2)
    return k, {role: _listen(lab, tmp_path, role) for role in ("pod1", "pod2")}


def test_a_nodeport_flow_stays_on_its_old_endpoint_until_its_entry_is_deleted(lab, tmp_path):
    k, got = _lab(lab, tmp_path)
    k.load_iptables(iptables_ruleset([_syslog(k.pods["pod1"])]))
    lab.sh("pod1", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    _send(lab, "client", "192.168.50.1", 30514, 40514, "first")
    k.load_iptables(iptables_ruleset([_syslog(k.pods["pod2"])]))  # pod1 replaced by pod2; no conntrack cleanup
    _send(lab, "client", "192.168.50.1", 30514, 40514, "second")
    assert _got(got["pod1"]) == ["first", "second"] and _got(got["pod2"]) == []  # the old entry's DNAT wins

    loud = _analyze(lab, tmp_path, "stale", k.pods["pod2"])
    assert loud and loud[0].id == "KP504", [(f.id, f.summary) for f in loud]
    f = loud[0]
    assert "NodePort 192.168.50.1:30514" in f.summary and f.data["stale_endpoints"] == [k.pods["pod1"]]
    assert "dport=30514" in f.evidence[0].text and f"src={k.pods['pod1']}" in f.evidence[0].text
    for cmd in f.fix:  # the fix, on the kernel: the next packet of the same flow reaches the new endpoint
        if cmd.startswith("conntrack -D"):
            lab.sh("node", cmd.split())
    _send(lab, "client", "192.168.50.1", 30514, 40514, "third")
    assert _got(got["pod2"]) == ["third"]


def test_flows_sent_before_the_service_was_programmed_bypass_its_endpoint(lab, tmp_path):
    k, got = _lab(lab, tmp_path)
    k.load_iptables(iptables_ruleset([]))  # kube-proxy has not programmed shop/syslog yet
    _send(lab, "pod0", "10.96.0.60", 514, 40600, "early-cluster-ip")  # leaves by the default route, untranslated
    _send(lab, "client", "192.168.50.1", 30514, 40601, "early-nodeport")  # delivered to the node: nobody listens
    k.load_iptables(iptables_ruleset([_syslog(k.pods["pod1"])]))  # the endpoint appears; no conntrack cleanup
    lab.sh("pod1", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    _send(lab, "pod0", "10.96.0.60", 514, 40600, "late-cluster-ip")
    _send(lab, "client", "192.168.50.1", 30514, 40601, "late-nodeport")
    _send(lab, "pod0", "10.96.0.60", 514, 40700, "new-flow")  # a new flow meets the DNAT
    assert _got(got["pod1"]) == ["new-flow"]

    loud = _analyze(lab, tmp_path, "early", k.pods["pod1"])
    assert loud and loud[0].id == "KP529", [(f.id, f.summary) for f in loud]
    f = loud[0]
    assert f.severity == "error" and f.data["clients"] == ["10.244.1.10:40600", "192.168.50.2:40601"]
    assert not [x for x in loud if x.id == "KP504"]
    for cmd in f.fix:
        if cmd.startswith("conntrack -D"):
            lab.sh("node", cmd.split())
    _send(lab, "pod0", "10.96.0.60", 514, 40600, "after-fix-cluster-ip")
    _send(lab, "client", "192.168.50.1", 30514, 40601, "after-fix-nodeport")
    assert _got(got["pod1"]) == ["new-flow", "after-fix-cluster-ip", "after-fix-nodeport"]
