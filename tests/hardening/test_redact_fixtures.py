"""Redaction leaves an analysable bundle: every node fixture, redacted, analyses to the same finding ids."""

from __future__ import annotations

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
