"""KP150's and KP151's claims on the kernel, and KP152's: with kube-proxy's rules for a Service loaded (iptables mode,
as kube-proxy writes them), the node's own connection to an externalIP that belongs to an outside host, or to a
LoadBalancer ingress IP, is DNATed to the Service's pod — the outside host or the load balancer never sees it (so no
PROXY header, no TLS termination); without the rules the same connection reaches them. A /healthz bound to 127.0.0.1
is refused on the node's address. kpdiag, run on a bundle recorded from the same lab (its node collector) with the API
objects beside it, names that cause first (fixtures external-ip-captured, lb-proxy-protocol-short-circuit,
healthz-loopback are the same scenarios, recorded by fixtures/make_fixtures.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures.make_fixtures import (
    CONFIG,
    HAIRPIN_ON,
    LB_IP,
    OUTSIDE_HOST,
    PROXY_PROTOCOL,
    Scenario,
    capture_api,
    capture_service,
    kube_proxy_files,
)
from kpdiag.commands.pipeline import analyze_bundle
from tests.synth import iptables_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

# a TCP server that answers every connection with its name (who got the connection)
SERVE = (
    "import socket, sys\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)\n"
    "while True:\n    c, _ = s.accept(); c.sendall(sys.argv[3].encode()); c.close()\n"
)
ASK = (
    "import socket, sys\ns = socket.socket(); s.settimeout(2)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print(s.recv(64).decode() or 'empty')\n"
    "except OSError as e:\n    print('failed', e.__class__.__name__)\n"
)


def _serve(lab, role, addr, port, name):
    lab.background(role, [sys.executable, "-c", SERVE, addr, str(port), name], subprocess.DEVNULL)


def _ask(lab, role, addr, port) -> str:
    return lab.sh(role, [sys.executable, "-c", ASK, addr, str(port)]).stdout.strip()


def _wait(lab):
    lab.sh("node", [sys.executable, "-c", "import time; time.sleep(0.5)"])


def _first_warning_or_error(bundle):
    report = analyze_bundle(bundle)
    serious = [f for f in report.findings if f.severity in ("error", "warning")]
    return serious, report


def _lab(lab, kind):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    for role, argv in HAIRPIN_ON[:2]:  # two pods; as flannel's and the bridge plugin's hairpinMode: true set them
        lab.sh(role, argv)
    return k, capture_service(kind)


def test_an_external_ip_of_an_outside_host_is_captured_on_the_node(lab, tmp_path):
    k, svc = _lab(lab, "external-ip")
    _serve(lab, "client", "0.0.0.0", 5432, "outside-db")
    _serve(lab, "pod1", "0.0.0.0", 5432, "db-proxy-pod")
    _wait(lab)
    before = _ask(lab, "node", OUTSIDE_HOST, 5432)
    k.load_iptables(iptables_ruleset([svc]))
    after = _ask(lab, "node", OUTSIDE_HOST, 5432)
    assert (before, after) == ("outside-db", "db-proxy-pod")  # every node's traffic to the outside host is taken
    extra = kube_proxy_files(Scenario("", [])) | capture_api("external-ip", "lab-node")
    serious, _ = _first_warning_or_error(bundle_from_ns(lab, "node", str(tmp_path / "b"), extra=extra))
    assert serious[0].id == "KP150" and serious[0].data["outside"] == [OUTSIDE_HOST]
    assert not [f for f in serious if f.severity == "error"]


def test_a_load_balancer_ip_is_short_circuited_past_the_load_balancer(lab, tmp_path):
    k, svc = _lab(lab, "lb")
    lab.addr("client", "eth0", f"{LB_IP}/32")  # the load balancer (it would add the PROXY header)
    _serve(lab, "client", LB_IP, 443, "load-balancer")
    _serve(lab, "pod1", "0.0.0.0", 8443, "front-pod")
    lab.route("node", f"{LB_IP}/32", "via", OUTSIDE_HOST)
    _wait(lab)
    before = _ask(lab, "node", LB_IP, 443)
    k.load_iptables(iptables_ruleset([svc]))
    after = _ask(lab, "node", LB_IP, 443)
    assert (before, after) == ("load-balancer", "front-pod")  # the pod gets the node's bytes as sent: no PROXY header
    extra = kube_proxy_files(Scenario("", [])) | capture_api("lb", "lab-node", PROXY_PROTOCOL)
    serious, _ = _first_warning_or_error(bundle_from_ns(lab, "node", str(tmp_path / "b"), extra=extra))
    assert serious[0].id == "KP151" and serious[0].data["ip"] == LB_IP
    # without the annotation the same short-circuit is harmless: nothing to say
    plain = kube_proxy_files(Scenario("", [])) | capture_api("lb", "lab-node")
    serious, report = _first_warning_or_error(bundle_from_ns(lab, "node", str(tmp_path / "c"), extra=plain))
    assert not serious and {r.id: r.status for r in report.checks}["KP151"] == "ran"


def test_healthz_on_loopback_is_refused_on_the_nodes_address(lab, tmp_path):
    k, svc = _lab(lab, "lb")
    k.load_iptables(iptables_ruleset([svc]))
    _serve(lab, "node", "127.0.0.1", 10256, "healthz")
    _wait(lab)
    assert _ask(lab, "node", "127.0.0.1", 10256) == "healthz"
    assert _ask(lab, "client", "192.168.50.1", 10256).startswith("failed ConnectionRefused")  # the LB's health check
    config = CONFIG.format(cluster_cidr="10.244.0.0/16", scheduler="", mode="iptables").replace(
        "healthzBindAddress: 0.0.0.0:10256", "healthzBindAddress: 127.0.0.1:10256"
    )
    extra = kube_proxy_files(Scenario("", [], files={"node/kube-proxy/config.yaml": config})) | capture_api(
        "lb", "lab-node"
    )
    serious, _ = _first_warning_or_error(bundle_from_ns(lab, "node", str(tmp_path / "b"), extra=extra))
    assert serious[0].id == "KP152" and serious[0].data["healthz_bind_address"] == "127.0.0.1:10256"
