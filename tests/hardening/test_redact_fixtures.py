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


def _node_fixtures() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        root = os.path.join(FIXTURES, name)
        if os.path.isdir(os.path.join(root, "node")) or os.path.isfile(os.path.join(root, "kpdiag.json")):
            out.append(name)
    return out


@pytest.mark.parametrize("name", _node_fixtures())
def test_redacted_fixture_gives_the_same_findings(name):
    files = _files(name)
    red, redactor = redact_files(files, salt="fixtures")
    before = sorted(f.id for f in analyze_state(NodeState(Bundle.from_files("a", files))).findings)
    after = sorted(f.id for f in analyze_state(NodeState(Bundle.from_files("b", red))).findings)
    assert before == after
    assert redactor.ips or redactor.names or not any(k.startswith("cluster/") for k in files)
