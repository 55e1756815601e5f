"""The Service checks take the API side as typed inputs (kpdiag/state/typed.py: Services, EndpointSlices, Focus,
NodeObject …): the focus, the node's name and the Services judged come from those values."""

from __future__ import annotations

from tests.given import given
from tests.k8sobjects import endpointslice, node, port, service

WEB = service("shop", "web", "10.96.0.10", [port(80, 8080, name="http")], selector={"app": "web"})
DB = service("shop", "db", "None", [port(5432)], selector={"app": "db"})
WEB_SLICE = endpointslice("shop", "web", [("10.244.1.5", True, "node-b", "web-1")], [("http", 8080, "TCP")])


def test_a_focused_service_the_api_does_not_have_is_a_skip_naming_it():
    case = given(services=[WEB], endpointslices=[WEB_SLICE], focus=("shop", "gone"))
    for check_id in ("KP101", "KP107"):
        assert case.skips(check_id) == "Service shop/gone is not in the API data"


def test_the_focus_narrows_the_services_judged():
    case = given(services=[WEB, DB], endpointslices=[WEB_SLICE])
    (f,) = case.fires("KP107")  # the headless one, of every Service read
    assert f.subject == "shop/db" and f.evidence[0].source == "cluster/services.json"
    given(services=[WEB, DB], endpointslices=[WEB_SLICE], focus=("shop", "web")).silent("KP107")


def test_the_node_name_comes_from_the_api_else_the_manifest():
    local = service("shop", "web", "10.96.0.10", [port(80, 8080, name="http")], selector={"app": "web"})
    local["spec"]["internalTrafficPolicy"] = "Local"
    (f,) = given(services=[local], endpointslices=[WEB_SLICE], nodes=[node("node-a")]).fires("KP106")
    assert "no ready endpoint on node node-a" in f.summary
    assert [e.text for e in f.evidence][1] == "ready endpoints on: node-b — not on node-a"
    given(services=[local], endpointslices=[WEB_SLICE], nodes=[node("node-b")]).silent("KP106")
    (f,) = given(services=[local], endpointslices=[WEB_SLICE]).fires("KP106")  # no Node read: the manifest's node
    assert "no ready endpoint on node lab-healthy-iptables" in f.summary
    reason = given(services=[local], endpointslices=[WEB_SLICE], manifest={"node": ""}).skips("KP106")
    assert reason.startswith("the node kpdiag runs on is unknown")
