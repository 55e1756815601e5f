"""KP640 on the real kernel: a Calico BGP node (no encapsulation) of the healthy zoo on EC2, whose pods' packets to
another node's pod cross the cloud's network with pod addresses. The network between the nodes is a namespace that
holds node-b's address and its pod; EC2's source/destination check is what it does to a packet whose source is not
the sending node's own address — drop it. kpdiag's own probe (collect/probes.tcp_connect) is run from a pod of the
node, on the kernel: with the check on, the pod on node-b does not answer, and KP640 names the cloud's setting as
the likely cause, first; with it off, the pod answers and KP640 is only the one-line note of what kpdiag cannot see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fixtures import zoo
from kpdiag.commands.pipeline import analyze_bundle

pytestmark = pytest.mark.lab

NAME = "zoo-calico-bgp-ec2"
NODE_B, POD_B = "192.168.50.11", "10.244.33.5"  # node-b and its pod (zoo.CALICO_REMOTE: 10.244.33.0/26 via node-b)

_PROBE = """
import json, sys
from kpdiag.collect.probes import ProbeBudget, tcp_connect
ip, port = sys.argv[1], int(sys.argv[2])
print(json.dumps(tcp_connect(ProbeBudget({ip}), ip, port)))
"""


def _network_between_nodes(lab, source_dest_check: bool) -> None:
    """The 'client' namespace (the node's uplink) plays EC2's network and node-b: node-b's address, its pod's, the
    route back to this node's pods; with the check on, packets whose source is not a node's address are dropped."""
    lab.addr("client", "eth0", f"{NODE_B}/24")
    lab.sh("client", ["ip", "addr", "add", f"{POD_B}/32", "dev", "lo"])
    lab.route("client", zoo.CALICO_BLOCK, "via", zoo.NODE_IP)
    if source_dest_check:
        lab.sh("client", ["iptables", "-A", "INPUT", "-i", "eth0", "!", "-s", "192.168.50.0/24", "-j", "DROP"])


def _listen(lab, role: str, ip: str, port: int) -> None:
    """A TCP server (the pods' application), up before the probes."""
    lab.background(role, [sys.executable, "-m", "http.server", str(port), "--bind", ip], subprocess.DEVNULL)
    for _ in range(150):
        if f":{port} " in lab.sh(role, ["ss", "-Hltn"]).stdout:
            return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {ip}:{port} in {role}")


def _probe(lab, ip: str, port: int) -> dict:
    out = lab.sh("pod0", [sys.executable, "-c", _PROBE, ip, str(port)], timeout=30).stdout
    return json.loads(out)


def _record(lab, tmp_path, source_dest_check: bool):
    out = str(tmp_path / NAME)
    zoo.record_into(lab, NAME, out)
    _network_between_nodes(lab, source_dest_check)
    _listen(lab, "client", POD_B, 53)
    _listen(lab, "pod1", zoo.CALICO_PODS[1], 8080)
    results = [_probe(lab, POD_B, 53), _probe(lab, zoo.CALICO_PODS[1], 8080)]  # kube-dns on node-b; web here
    doc = {
        "schema": "kpdiag.probes/v1",
        "source": zoo.CALICO_PODS[0],
        "raw": False,
        "raw_skipped_reason": "TCP connects only (tests/lab/test_cloud_forwarding.py)",
        "packets_sent": len(results),
        "results": results,
    }
    os.makedirs(os.path.join(out, "probes"), exist_ok=True)
    with open(os.path.join(out, "probes", "service.json"), "w") as fh:
        json.dump(doc, fh)
    return results, analyze_bundle(out)


def test_the_source_dest_check_is_found_as_the_likely_cause_first(lab, tmp_path):
    results, report = _record(lab, tmp_path, source_dest_check=True)
    assert [r["result"] for r in results] == ["timeout", "connected"], results  # the kernel: lost across, fine here
    loud = [f for f in report.findings if f.severity in ("warning", "error")]
    assert loud and loud[0].id == "KP640", [(f.id, f.summary) for f in loud]
    assert "the likely cause is EC2's source/destination check" in loud[0].summary
    assert f"{POD_B}:53/tcp (kube-dns-1 on node node-b): timeout" in [e.text for e in loud[0].evidence]
    assert (
        loud[0].fix[1] == "aws ec2 modify-instance-attribute --instance-id i-0abc123def4567890 --no-source-dest-check"
    )


def test_with_the_check_off_the_pod_across_answers_and_kpdiag_only_says_what_it_cannot_see(lab, tmp_path):
    results, report = _record(lab, tmp_path, source_dest_check=False)
    assert [r["result"] for r in results] == ["connected", "connected"], results  # node-b's pod answers
    assert [f.id for f in report.findings if f.severity in ("warning", "error")] == []
    (kp640,) = [f for f in report.findings if f.id == "KP640"]
    assert kp640.severity == "info" and "cannot see" in kp640.summary
