"""Redaction leaves an analysable bundle: every node fixture, redacted, analyses to the same finding ids."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.bundle.redact import redact_files
from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES
from tests.hardening.test_redact import _files


# the checks that read the CNI's annotations on the Node objects (checks/cni.py): lost to redaction, skipped
NODE_RECORD_CHECKS = {"KP630", "KP631", "KP632", "KP633", "KP634"}


def _node_fixtures() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        root = os.path.join(FIXTURES, name)
        if os.path.isdir(os.path.join(root, "node")) or os.path.isfile(os.path.join(root, "kpdiag.json")):
            out.append(name)
    return out


@pytest.mark.parametrize("name", _node_fixtures())
def test_redacted_fixture_gives_the_same_findings(name):
    """The same findings — but for the checks that compare the CNI's record in the Node objects (its annotations:
    flannel's public-ip, VtepMAC, subnet manager; Calico's address) with the node: redaction replaces annotation
    keys and values and the Nodes' addresses, so those checks are skipped in a redacted bundle, saying why."""
    files = _files(name)
    red, redactor = redact_files(files, salt="fixtures")
    before = sorted(f.id for f in analyze_state(NodeState(Bundle.from_files("a", files))).findings)
    report = analyze_state(NodeState(Bundle.from_files("b", red)))
    after = sorted(f.id for f in report.findings)
    lost = sorted(set(before) - set(after))
    assert set(lost) <= NODE_RECORD_CHECKS, (before, after)
    assert [i for i in before if i not in lost] == after
    runs = {r.id: r for r in report.checks}
    assert all(runs[i].status == "skipped" and runs[i].reason for i in lost), [runs[i] for i in lost]
    assert redactor.ips or redactor.names or not any(k.startswith("cluster/") for k in files)


def test_what_names_a_cloud_a_cni_device_or_a_kubernetes_component_stays():
    """A redacted bundle keeps what kpdiag judges by and that names no one: the cloud in a Node's providerID (the
    zone and the instance are redacted), the CNI's devices whose names look like host names (vxlan.calico,
    flannel.1), and Kubernetes' own component names (the EndpointSlice controller in managed-by)."""
    node = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "kind": "Node",
                "metadata": {"name": "ip-10-0-0-7.internal"},
                "spec": {"providerID": "aws:///eu-west-1a/i-0abc123def4567890"},
            }
        ],
    }
    addr = [{"ifname": "vxlan.calico"}, {"ifname": "flannel.1"}]
    slices = {
        "kind": "List",
        "items": [
            {"metadata": {"labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}}}
        ],
    }
    files = {
        "cluster/nodes.json": json.dumps(node).encode(),
        "node/ip-addr.json": json.dumps(addr).encode(),
        "cluster/endpointslices.json": json.dumps(slices).encode(),
    }
    red, _ = redact_files(files, salt="t")
    pid = json.loads(red["cluster/nodes.json"])["items"][0]["spec"]["providerID"]
    assert pid.startswith("aws:///") and "eu-west-1a" not in pid and "i-0abc123def4567890" not in pid, pid
    assert [i["ifname"] for i in json.loads(red["node/ip-addr.json"])] == ["vxlan.calico", "flannel.1"]
    labels = json.loads(red["cluster/endpointslices.json"])["items"][0]["metadata"]["labels"]
    assert labels["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"
