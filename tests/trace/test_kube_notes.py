"""A drop or reject by kube-proxy's own rules is explained in the trace, naming the check that covers it — on the
lab-recorded fixtures (real kernel dumps), in iptables and nftables mode. Accepted paths get no such note."""

from __future__ import annotations

import os

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet
from tests.conftest import FIXTURES

CASES = [
    (
        "itp-local-iptables",
        "10.244.1.11",
        "pod",
        "10.96.0.51",
        80,
        "drop",
        "shop/probe:http has internalTrafficPolicy: Local",
        "KP106",
    ),
    ("itp-local-nftables", "10.244.1.11", "pod", "10.96.0.51", 80, "drop", "traffic policy is Local", "KP106"),
    (
        "no-endpoints",
        "192.168.50.2",
        "external",
        "10.96.0.30",
        80,
        "reject",
        "shop/cart:http has no ready endpoint anywhere",
        "KP101",
    ),
    (
        "nodeport-etp-local",
        "192.168.50.2",
        "external",
        "192.168.50.1",
        30081,
        "drop",
        "shop/api:http has externalTrafficPolicy: Local",
        "KP105",
    ),
    (
        "healthy-nftables",
        "192.168.50.2",
        "external",
        "10.96.0.20",
        81,
        "reject",
        "a port its Service does not define",
        "",
    ),
    ("healthy-nftables", "192.168.50.2", "external", "10.96.0.99", 80, "drop", "no Service has", ""),
]


@pytest.mark.parametrize("fixture,src,origin,dst,dport,verdict,text,check", CASES)
def test_kube_proxy_verdicts_are_explained(fixture, src, origin, dst, dport, verdict, text, check):
    tracer = NodeState(Bundle.open(os.path.join(FIXTURES, fixture))).mode_tracer()
    result = tracer.trace(Packet(src, dst, "tcp", dport, origin=origin))
    assert [p.verdict for p in result.paths] == [verdict]
    notes = [n for n in result.paths[0].notes if n.startswith("kube-proxy ")]
    assert len(notes) == 1 and text in notes[0] and check in notes[0], result.paths[0].notes


def test_accepted_paths_get_no_verdict_note():
    tracer = NodeState(Bundle.open(os.path.join(FIXTURES, "itp-local-iptables"))).mode_tracer()
    result = tracer.trace(Packet("10.244.1.11", "10.96.0.50", "tcp", 80, origin="pod"))
    assert result.dnat_set() == {"10.244.1.13:8080"}
    assert not any(n.startswith("kube-proxy ") for p in result.paths for n in p.notes)
