"""KP511's claims on the kernel: with net.ipv4.ip_local_port_range over the NodePort range the node's own connections
leave from NodePorts; ip_local_reserved_ports keeps them off; and in iptables mode (kube-proxy's NodePort DNAT loaded)
such a connection still gets its replies (conntrack tells them from NodePort traffic) — why KP511 is a warning.
kpdiag's collector records both sysctls, and the analysis reads them back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .bundle_from_ns import bundle_from_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

# eleven connections to the client's server; prints each one's source port (or the error)
CONNECT = (
    "import json, socket\nout = []\nfor _ in range(11):\n    s = socket.socket(); s.settimeout(2)\n"
    "    try:\n        s.connect(('192.168.50.2', 8000)); out.append(s.getsockname()[1])\n"
    "    except OSError as e:\n        out.append(str(e))\n    s.close()\nprint(json.dumps(out))\n"
)


def _ports(lab) -> list:
    return json.loads(lab.sh("node", [sys.executable, "-c", CONNECT]).stdout)


def test_nodeports_as_source_ports_and_the_reservation(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "default", "via", k.client_ip)
    k.load_iptables(
        iptables_ruleset(
            [
                Service(
                    "shop", "front", "10.96.0.40", [Port("http", 80, 8080, node_port=30080)], [Endpoint(k.pods["pod0"])]
                )
            ]
        )
    )
    lab.background("client", [sys.executable, "-m", "http.server", "8000", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    lab.sh("client", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    lab.sysctl("node", "net.ipv4.ip_local_port_range", "30075 30085")  # narrow, over NodePort 30080: every port used
    overlapping = _ports(lab)
    # each closed connection keeps its port in TIME_WAIT: eleven connections take all eleven ports, NodePort 30080
    # (shop/front's) too, and every one was answered (connected) through kube-proxy's NodePort rules
    assert sorted(overlapping) == list(range(30075, 30086)), overlapping
    report = analyze_bundle(bundle_from_ns(lab, "node", str(tmp_path / "over")))
    kp511 = [f for f in report.findings if f.id == "KP511"]
    assert kp511 and kp511[0].data["overlap"] == [30075, 30085] and kp511[0].data["unreserved"] == 11

    lab.sysctl("node", "net.ipv4.ip_local_port_range", "30075 32800")
    lab.sysctl("node", "net.ipv4.ip_local_reserved_ports", "30000-32767")
    reserved = _ports(lab)
    assert all(isinstance(p, int) and 32768 <= p <= 32800 for p in reserved), reserved
    path = bundle_from_ns(lab, "node", str(tmp_path / "reserved"))
    assert NodeState(Bundle.open(path)).sysctl["net.ipv4.ip_local_reserved_ports"].value.strip() == "30000-32767"
    runs = {r.id: r for r in analyze_bundle(path).checks}
    assert runs["KP511"].status == "ran" and runs["KP511"].findings == 0
