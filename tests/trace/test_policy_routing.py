"""Policy routing in the routing decision (kpdiag/trace/routing.py), beyond what the kernel oracle
(tests/lab/test_policy_routing_oracle.py) covers: selectors kpdiag cannot evaluate make the answer uncertain and
name the rule; with only the kernel's default rules, or no rules known, the lookup is the plain main-table one."""

from __future__ import annotations

import json

from kpdiag.parse.addr import parse_ip
from kpdiag.parse.node import parse_ip_rules
from kpdiag.trace.routing import routing_from_ip_json

ADDRS = [{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.0.2.1", "prefixlen": 24}]}]
ROUTES = [
    {"type": "unicast", "dst": "default", "gateway": "192.0.2.254", "dev": "eth0", "table": "main"},
    {"type": "unicast", "dst": "default", "gateway": "198.51.100.1", "dev": "eth1", "table": "100"},
    {"type": "blackhole", "dst": "10.99.0.0/16", "table": "100"},
]
DEFAULTS = [
    {"priority": 0, "src": "all", "table": "local"},
    {"priority": 32766, "src": "all", "table": "main"},
    {"priority": 32767, "src": "all", "table": "default"},
]


def _rt(extra):
    rules = parse_ip_rules(json.dumps([dict(r, family="inet") for r in DEFAULTS + extra]), "node/ip-rule.json")
    return routing_from_ip_json(ADDRS, ROUTES, None, rules)


def _get(rt, dst, src="10.244.1.5", **kw):
    return rt.lookup(parse_ip(dst)[0], 4, src=parse_ip(src)[0], **kw)


def test_default_rules_only_is_the_plain_lookup():
    rt = _rt([])
    assert rt.policy_rules(4) is None
    route = _get(rt, "8.8.8.8", iif="cni0")
    assert (route.dev, route.rule, route.uncertain) == ("eth0", None, None)


def test_unknown_selector_is_named_and_uncertain():
    rt = _rt([{"priority": 10, "src": "all", "uid_start": 0, "uid_end": 0, "table": "100"}])
    route = _get(rt, "8.8.8.8", iif="cni0")
    assert route.dev == "eth0"  # assumed not to apply …
    assert "10: from all uidrange 0-0 lookup 100" in route.uncertain  # … and said so


def test_mark_unknown_is_uncertain_and_known_mark_decides():
    rt = _rt([{"priority": 10, "src": "all", "fwmark": "0x4000", "fwmask": "0x4000", "table": "100"}])
    assert _get(rt, "8.8.8.8", iif="cni0", mark=0x4000).dev == "eth1"
    assert _get(rt, "8.8.8.8", iif="cni0", mark=0).dev == "eth0"
    unsure = _get(rt, "8.8.8.8", iif="cni0")
    assert unsure.dev == "eth0" and "fwmark 0x4000/0x4000" in unsure.uncertain


def test_rule_table_blackhole_and_actions():
    rt = _rt(
        [
            {"priority": 10, "src": "10.244.0.0", "srclen": 16, "table": "100"},
            {"priority": 20, "src": "all", "dst": "10.60.0.0", "dstlen": 16, "action": "prohibit"},
        ]
    )
    assert _get(rt, "10.99.1.1").type == "blackhole"  # table 100's blackhole route
    assert (
        _get(rt, "8.8.8.8").gateway == "198.51.100.1"
        and _get(rt, "8.8.8.8").rule == "10: from 10.244.0.0/16 lookup 100"
    )
    assert _get(rt, "10.60.1.1", src="192.0.2.9", iif="eth0").type == "prohibit"
    # without a source (address-type questions), rules are not consulted: the main table answers
    assert rt.lookup(parse_ip("10.99.1.1")[0], 4).dev == "eth0"


def test_iif_of_the_nodes_own_packets_is_lo():
    rt = _rt([{"priority": 10, "src": "all", "iif": "lo", "table": "100"}])
    assert _get(rt, "8.8.8.8", src="192.0.2.1", iif="lo").dev == "eth1"
    assert _get(rt, "8.8.8.8", iif="cni0").dev == "eth0"
    assert _get(rt, "8.8.8.8", iif=None).uncertain  # an incoming packet whose interface is not known


def test_the_trace_names_the_rule_that_routed_or_stopped_the_packet():
    from kpdiag.parse.iptables import parse_iptables_save
    from kpdiag.trace.model import Packet
    from kpdiag.trace.netfilter import IptablesTracer

    rt = _rt(
        [
            {"priority": 10, "src": "10.244.0.0", "srclen": 16, "table": "100"},
            {"priority": 20, "src": "all", "dst": "10.60.0.0", "dstlen": 16, "action": "prohibit"},
            {"priority": 30, "src": "all", "dst": "10.70.0.0", "dstlen": 16, "table": "main"},
        ]
    )
    rt.forwarding = None
    rs = parse_iptables_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", "r")
    tracer = IptablesTracer(rs, rt)

    def notes(src, dst):
        r = tracer.trace(Packet(src, dst, "tcp", 80, origin="external", iif="eth0"))
        return " ".join([*r.notes, *(n for p in r.paths for n in p.notes)]), r

    text, r = notes("10.244.1.5", "8.8.8.8")
    assert "routed by the policy-routing rule '10: from 10.244.0.0/16 lookup 100' (table 100)" in text
    text, r = notes("192.0.2.9", "10.60.1.1")
    assert "the policy-routing rule '20: from all to 10.60.0.0/16 prohibit' stops it (prohibit)" in text
    assert all(p.verdict != "accept" for p in r.paths)
    text, _ = notes("192.0.2.9", "10.70.0.1")
    assert "policy-routing" not in text  # an explicit lookup of main is the plain decision
