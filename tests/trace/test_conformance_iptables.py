"""kube-proxy's own packet-flow cases (TestTracePacket), on its restore input and on iptables-save's form."""

import json
import os

import pytest

from kpdiag.parse.iptables import parse_iptables_save
from tests.trace.conformance import assert_case
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.routing import RoutingTable


def _cases(shared):
    d = os.path.join(shared, "conformance", "kube-proxy-iptables")
    with open(os.path.join(d, "cases.json")) as fh:
        return d, json.load(fh)


@pytest.mark.parametrize("rules_file", ["rules.restore.txt", "rules.saved.txt"])
def test_every_case(shared_dir, rules_file):
    d, spec = _cases(shared_dir)
    with open(os.path.join(d, rules_file), "rb") as fh:
        ruleset = parse_iptables_save(fh.read(), rules_file)
    assert ruleset.compile_all() == []
    tracer = IptablesTracer(ruleset, RoutingTable.from_local_ips(spec["local_ips"]))
    assert len(spec["cases"]) >= 7
    for case in spec["cases"]:
        assert_case(tracer, case)
