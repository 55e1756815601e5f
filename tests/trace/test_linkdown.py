"""Routes into interfaces without carrier in the routing decision (kpdiag/trace/routing.py): chosen unless
ignore_routes_with_linkdown is 1 for "all" or the route's device (per family); dead routes never. The kernel's side:
tests/lab/test_linkdown_oracle.py."""

from __future__ import annotations

from kpdiag.parse.addr import parse_ip
from kpdiag.trace.routing import routing_from_ip_json

ADDRS = [
    {"ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "operstate": "UP", "addr_info": []},
    {
        "ifname": "docker0",
        "flags": ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"],
        "operstate": "DOWN",
        "addr_info": [],
    },
    {"ifname": "old0", "flags": ["BROADCAST", "MULTICAST"], "operstate": "DOWN", "addr_info": []},
]
ROUTES = [
    {"dst": "default", "gateway": "192.0.2.254", "dev": "eth0"},
    {"dst": "172.17.0.0/16", "dev": "docker0", "flags": ["linkdown"]},
    {"dst": "10.9.0.0/16", "dev": "old0", "flags": ["dead", "linkdown"]},
    {"dst": "fd00:17::/64", "dev": "docker0", "flags": ["linkdown"]},
    {"dst": "default", "gateway": "fe80::1", "dev": "eth0"},
]


def _route(sysctl=None, dst="172.17.5.10"):
    addr, ver = parse_ip(dst)
    return routing_from_ip_json(ADDRS, ROUTES, sysctl).lookup(addr, ver)


def test_a_route_without_carrier_is_still_chosen():
    route = _route()
    assert route.dev == "docker0" and route.linkdown.startswith("docker0: <NO-CARRIER")
    assert _route({"net.ipv4.conf.all.ignore_routes_with_linkdown": "0"}).dev == "docker0"


def test_ignored_for_the_device_or_all_the_next_route_is_taken():
    for key in ("all", "docker0"):
        route = _route({f"net.ipv4.conf.{key}.ignore_routes_with_linkdown": "1"})
        assert (route.dev, route.gateway, route.linkdown) == ("eth0", "192.0.2.254", None)
    assert _route({"net.ipv4.conf.eth0.ignore_routes_with_linkdown": "1"}).dev == "docker0"  # not its device


def test_each_family_has_its_own_setting():
    v4 = {"net.ipv4.conf.all.ignore_routes_with_linkdown": "1"}
    assert _route(v4, "fd00:17::5").dev == "docker0"
    assert _route({"net.ipv6.conf.docker0.ignore_routes_with_linkdown": "1"}, "fd00:17::5").dev == "eth0"


def test_a_dead_route_is_never_used():
    assert _route(dst="10.9.1.1").dev == "eth0"


def test_what_a_linkdown_route_shadows():
    rt = routing_from_ip_json(ADDRS, ROUTES)
    behind = rt.without_linkdown(parse_ip("172.17.5.10")[0], 4)
    assert (behind.dst, behind.dev) == ("default", "eth0")
