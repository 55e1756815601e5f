"""KP614 (a route into an interface without carrier captures endpoints), on the recorded lab node of
fixtures/route-into-down-link (docker0 with no carrier, shop/db's endpoint 172.17.5.10 behind it); the kernel's side
is tests/lab/test_linkdown_oracle.py."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from tests import k8sobjects as k8s
from tests.given import base_files, given

DOWN = "route-into-down-link"


def _db_api(ready: bool = True) -> dict:
    return dict(
        services=[k8s.service("shop", "db", "10.96.0.70", [k8s.port(5432, 5432, "postgres")])],
        endpointslices=[
            k8s.endpointslice("shop", "db", [("172.17.5.10", ready, None, "db")], [("postgres", 5432, "TCP")])
        ],
    )


def test_the_route_and_the_endpoint_behind_it_are_named():
    (f,) = given(base=DOWN).fires("KP614")
    assert f.summary.startswith("shop/db:postgres: endpoint 172.17.5.10 is routed into docker0")
    assert "route 172.17.0.0/16 dev docker0 linkdown" in f.summary and f.data["service"] == "shop/db:postgres"
    assert f.data["shadowed"] == {"dst": "default", "dev": "ext0", "gateway": "192.168.50.2"}
    assert f.data["sysctl"] == "net.ipv4.conf.docker0.ignore_routes_with_linkdown"
    assert f.fix[0].startswith("sudo sysctl -w net.ipv4.conf.docker0.ignore_routes_with_linkdown=1")
    assert any("NO-CARRIER" in e.text for e in f.evidence)


def test_the_api_endpoints_are_judged_when_the_api_was_read():
    (f,) = given(base=DOWN, **_db_api()).fires("KP614")
    assert f.data["endpoints"] == ["172.17.5.10"] and f.data["service"] == "shop/db"
    assert any(e.source.startswith("cluster/services.json") for e in f.evidence)
    given(base=DOWN, **_db_api(ready=False)).silent("KP614")  # the API says no ready endpoint is there


def test_ignored_for_all_interfaces_is_silent():
    given(base=DOWN, sysctl="net.ipv4.conf.all.ignore_routes_with_linkdown = 1").silent("KP614")
    given(base=DOWN, sysctl="net.ipv4.conf.ext0.ignore_routes_with_linkdown = 1").fires("KP614")  # not its device


def test_link_state_alone_says_no_carrier():
    """A route dump without flags (ip -j route of an older collector): the interface's NO-CARRIER is enough."""
    routes = json.loads(base_files(DOWN)[sources.IP_ROUTE])
    for r in routes:
        r.pop("flags", None)
    given(base=DOWN, files={sources.IP_ROUTE: routes}).fires("KP614")
    links = json.loads(base_files(DOWN)[sources.IP_ADDR])
    for link in links:
        link["flags"] = [f for f in link.get("flags", []) if f != "NO-CARRIER"]
    given(base=DOWN, files={sources.IP_ROUTE: routes, sources.IP_ADDR: links}).silent("KP614")


def test_no_endpoint_source_skips():
    reason = given(base=DOWN, drop=("node/iptables",)).skips("KP614")
    assert "no endpoints known" in reason
