"""Typed inputs (kpdiag/state/typed.py): the signature is the declaration, the runner builds the values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import pytest

from kpdiag.checkapi import _REGISTRY, check, run_checks
from kpdiag.state.typed import Typed
from kpdiag.state.typed_api import NodePodCIDRs
from kpdiag.state.typed_node import Sysctls
from kpdiag.state.typed_proxy import KubeProxyConfig
from tests.given import given, node


@pytest.fixture
def declared():
    ids = []
    yield ids
    for cid in ids:
        _REGISTRY.pop(cid, None)


def _decl(cid, fn, declared):
    declared.append(cid)
    return check(cid, f"t-{cid.lower()}", "t", "info", symptom="s", why="w", fix="f")(fn)


def test_a_type_is_a_need_and_optional_a_use(declared):
    def both(new, sysctls: Sysctls, config: Optional[KubeProxyConfig] = None):
        yield new(f"forward={sysctls.get('net.ipv4.ip_forward')} config={config is not None}")

    spec = _decl("KPT71", both, declared).spec
    assert (spec.needs, spec.uses) == (("sysctl",), ("kube-proxy-config",))
    findings, _ = run_checks(given().state(), [spec])
    assert [f.summary for f in findings] == ["forward=1 config=True"]
    findings, _ = run_checks(given(files={"node/kube-proxy/config.yaml": None}).state(), [spec])
    assert [f.summary for f in findings] == ["forward=1 config=False"]  # a use that is missing: None
    _, runs = run_checks(given(files={"node/sysctl.txt": None}).state(), [spec])
    assert runs[0].status == "skipped" and "node/sysctl.txt" in runs[0].reason  # a need that is missing: skipped


def test_a_parameter_that_is_no_typed_input_is_refused_when_declared(declared):
    def untyped(new, nodes: dict):
        yield new("never")

    with pytest.raises(ValueError, match="'nodes' is not a typed input"):
        _decl("KPT72", untyped, declared)


@dataclass(frozen=True)
class _Sneaky(Typed):
    INPUT: ClassVar[str] = "sysctl"
    routes: object

    @classmethod
    def build(cls, ctx):
        return cls(ctx.ip_route)  # not granted by "sysctl"


def test_a_build_that_reads_past_its_input_is_an_error_of_the_check(declared):
    def sneaky(new, s: _Sneaky):
        yield new("never")

    _, runs = run_checks(given().state(), [_decl("KPT73", sneaky, declared).spec])
    assert runs[0].status == "error" and "read ip_route" in runs[0].reason


def test_a_needed_input_there_but_unreadable_as_its_type_is_a_skip(declared):
    def reads_nodes(new, nodes: NodePodCIDRs):
        yield new(f"{len(nodes.nodes)} nodes")

    spec = _decl("KPT74", reads_nodes, declared).spec
    findings, _ = run_checks(given(nodes=[node("a", "10.244.1.0/24")]).state(), [spec])
    assert [f.summary for f in findings] == ["1 nodes"]
    _, runs = run_checks(given(files={"cluster/nodes.json": [{"kind": "Node"}]}).state(), [spec])  # a list, no List
    assert runs[0].status == "skipped" and "cluster/nodes.json" in runs[0].reason
