"""The expectations every conformance case is held to, whatever the mode."""

import pytest

from kpdiag.trace.model import Packet


def assert_case(tracer, case: dict) -> None:
    result = tracer.trace(Packet(case["src"], case["dst"], case["proto"], case["dport"], origin=case["from"]))
    want = case["expect"]
    assert sorted(result.dnat_set()) == sorted(want["dnat"]), case["name"]
    assert result.verdicts() == {want["verdict"]}, case["name"]
    assert {p.masquerade for p in result.paths} == {want["masquerade"]}, case["name"]
    assert sum(p.probability for p in result.paths) == pytest.approx(1.0)
    assert not result.uncertain, (case["name"], [p.notes for p in result.paths])
    if len(want["dnat"]) > 1:
        assert [p.probability for p in result.paths] == pytest.approx([1 / len(want["dnat"])] * len(want["dnat"]))
