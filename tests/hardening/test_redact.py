"""collect --redact: no original name or non-cluster address survives anywhere, and analyze still works."""

import os
import re

import pytest

from kpdiag.bundle import Bundle
from kpdiag.diagnose import analyze_state
from kpdiag.redact import redact_files
from kpdiag.state import NodeState
from tests.conftest import FIXTURES


def _files(name):
    root = os.path.join(FIXTURES, name)
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n == "scenario.json":
                continue
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


@pytest.mark.parametrize("name", ["cluster-node-drift", "svc-selector-typo", "ipvs-drift", "healthy-nftables"])
def test_redacted_bundle_leaks_nothing_and_diagnoses_the_same(name):
    files = _files(name)
    red, r = redact_files(files, salt="test")
    blob = b"\n".join(red.values()).decode()
    secrets_ = [n for n in r.names if len(n) > 2]
    assert secrets_ or name == "healthy-nftables"
    for original in secrets_:
        assert not re.search(rf"(?<!\w){re.escape(original)}(?![\w-])", blob), f"{original} survived"
    for ip in r.ips:
        assert not re.search(rf"(?<![\w.]){re.escape(ip)}(?![\w.])", blob), f"{ip} survived"
    assert "192.168.50.1" in r.ips or name.startswith("svc") or name.startswith("ipvs")  # the node's own address is hidden
    before = analyze_state(NodeState(Bundle.from_files("a", files)))
    after = analyze_state(NodeState(Bundle.from_files("b", red)))
    assert sorted(f.id for f in before.findings) == sorted(f.id for f in after.findings)
    # the same salt gives the same mapping: bundles of several nodes stay comparable
    red2, _ = redact_files(files, salt="test")
    assert red2 == red


def test_ipv6_and_macs():
    files = {"node/ip-addr.json": b'[{"ifname": "eth0", "address": "0a:1b:72:6b:93:83", "addr_info": [{"family": "inet6", "local": "2a01:4f8:c17:1::2", "prefixlen": 64}, {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]}]'}
    red, r = redact_files(files, salt="x")
    text = red["node/ip-addr.json"].decode()
    assert "2a01:4f8:c17:1::2" not in text and "2001:db8:" in text
    assert "fe80::1" in text and "0a:1b:72:6b:93:83" in text  # link-local and MACs say nothing about the network
