"""Tracer semantics beyond kube-proxy's cases: goto/RETURN, marks, sets, uncertainty, routing."""

import pytest

from kpdiag.parse.ipset import parse_ipset_save
from kpdiag.parse.iptables import parse_iptables_save
from tests.synth import Endpoint, Port, Service, iptables_ruleset, many_services
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.routing import RoutingTable, routing_from_ip_json


def tracer(text, local=("192.168.0.2",), ipsets=None, routing=None):
    return IptablesTracer(parse_iptables_save(text, "t"), routing or RoutingTable.from_local_ips(local), ipsets)


def test_goto_returns_to_callers_caller_and_marks():
    t = tracer("""*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:A - [0:0]
:B - [0:0]
-A FORWARD -j A
-A FORWARD -m mark --mark 0x10/0x10 -j ACCEPT
-A A -g B
-A A -j DROP
-A B -j MARK --or-mark 0x10
-A B -j RETURN
-A B -j DROP
COMMIT
""")
    r = t.trace(Packet("10.0.0.1", "10.0.0.2", "tcp", 80))
    (path,) = r.paths
    assert path.verdict == "accept"  # B returns to FORWARD (not A, whose DROP is skipped)
    assert [s.action for s in path.steps] == ["jump A", "goto B", "MARK 0x0 -> 0x10", "RETURN", "ACCEPT"]


def test_policy_drop_and_rules_evaluated():
    t = tracer(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -p udp -j ACCEPT\n-A FORWARD -p icmp -j ACCEPT\nCOMMIT\n"
    )
    (path,) = t.trace(Packet("10.0.0.1", "10.0.0.2", "tcp", 80)).paths
    assert path.verdict == "drop" and path.steps[-1].action == "policy DROP"
    assert path.rules_evaluated == 2


def test_unknown_match_makes_path_uncertain_not_crash():
    t = tracer(
        '*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m u32 --u32 "0>>22&0x3C@12>>26&0x3F=0x10" -j DROP\nCOMMIT\n'
    )
    r = t.trace(Packet("10.0.0.1", "10.0.0.2", "tcp", 80))
    assert r.uncertain and r.paths[0].verdict == "accept"
    assert any("-m u32" in n and "t:5" in n for n in r.paths[0].notes)


def test_ipset_match_and_missing_set():
    sets = parse_ipset_save(
        "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:443\n"
    )
    rules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m set --match-set KUBE-CLUSTER-IP dst,dst -j DROP\nCOMMIT\n"
    assert tracer(rules, ipsets=sets).trace(Packet("10.0.0.1", "10.96.0.1", "tcp", 443)).verdicts() == {"drop"}
    assert tracer(rules, ipsets=sets).trace(Packet("10.0.0.1", "10.96.0.1", "tcp", 80)).verdicts() == {"accept"}
    r = tracer(rules, ipsets={}).trace(Packet("10.0.0.1", "10.96.0.1", "tcp", 443))
    assert r.uncertain and "KUBE-CLUSTER-IP" in r.paths[0].notes[0]


def test_affinity_is_noted_and_endpoints_still_split():
    svc = Service(
        "ns",
        "s",
        "10.96.0.5",
        [Port("p", 80, 8080)],
        [Endpoint("10.244.0.2"), Endpoint("10.244.0.3")],
        affinity_seconds=10800,
    )
    r = tracer(iptables_ruleset([svc])).trace(Packet("10.244.9.9", "10.96.0.5", "tcp", 80, origin="pod"))
    assert r.dnat_set() == {"10.244.0.2:8080", "10.244.0.3:8080"}
    assert any("session affinity" in n for n in r.paths[0].notes)
    assert not r.uncertain


def test_icmp_to_cluster_ip_is_not_dnatted():
    svc = Service("ns", "s", "10.96.0.5", [Port("p", 80, 8080)], [Endpoint("10.244.0.2")])
    r = tracer(iptables_ruleset([svc])).trace(Packet("10.244.9.9", "10.96.0.5", "icmp", origin="pod"))
    assert r.dnat_set() == set() and r.verdicts() == {"accept"}
    assert r.paths[0].delivery == "forward"


def test_blackhole_route_drops_and_routes_pick_device():
    rt = routing_from_ip_json(
        [{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.0.2", "prefixlen": 24}]}],
        [{"dst": "default", "gateway": "192.168.0.1", "dev": "eth0"}, {"dst": "10.96.0.0/12", "type": "blackhole"}],
    )
    t = tracer(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -o eth0 -j DROP\nCOMMIT\n",
        routing=rt,
    )
    r = t.trace(Packet("10.0.0.1", "10.96.0.77", "icmp"))
    assert r.verdicts() == {"drop"} and "blackhole" in r.paths[0].steps[-1].action
    assert t.trace(Packet("10.0.0.1", "8.8.8.8", "udp", 53)).verdicts() == {"drop"}  # -o eth0 via default route


def test_notrack_skips_nat_and_redirect_is_local():
    t = tracer("""*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp -j NOTRACK
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p udp -j DNAT --to-destination 10.1.1.1:53
-A PREROUTING -p tcp --dport 80 -j REDIRECT --to-ports 36000
COMMIT
""")
    assert t.trace(Packet("10.0.0.1", "10.96.0.10", "udp", 53)).dnat_set() == set()
    (path,) = t.trace(Packet("10.0.0.1", "10.96.0.10", "tcp", 80)).paths
    assert path.delivery == "local" and path.dnat == "(node itself):36000"


def test_index_keeps_first_match_order_on_big_chain():
    text = iptables_ruleset(many_services(300, 2))
    t = tracer(text)
    for i in (0, 7, 150, 299):
        dst = f"10.96.0.{10 + i}" if i < 246 else f"10.96.1.{10 + i - 256}"
        r = t.trace(Packet("10.0.0.1", dst, "tcp", 80))
        linear = IptablesTracer(parse_iptables_save(text, "t"), RoutingTable.from_local_ips(["192.168.0.2"]))
        import kpdiag.trace.netfilter as nf

        old, nf.INDEX_MIN_RULES = nf.INDEX_MIN_RULES, 10**9
        try:
            r2 = linear.trace(Packet("10.0.0.1", dst, "tcp", 80))
        finally:
            nf.INDEX_MIN_RULES = old
        assert [p.to_dict() for p in r.paths] == [p.to_dict() for p in r2.paths]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_probabilities_are_uniform(n):
    svc = Service("ns", "s", "10.96.0.5", [Port("p", 80, 8080)], [Endpoint(f"10.244.0.{i + 2}") for i in range(n)])
    r = tracer(iptables_ruleset([svc])).trace(Packet("10.244.9.9", "10.96.0.5", "tcp", 80, origin="pod"))
    assert [p.probability for p in r.paths] == pytest.approx([1 / n] * n, abs=1e-8)


def test_ttl_walk_loop_detection_tolerates_rate_limited_hops():
    from kpdiag.collect.probes import _loop

    assert _loop(["10.0.0.1", "192.168.60.1", "10.0.0.1", "192.168.60.1"]) == ["10.0.0.1", "192.168.60.1"]
    # ICMP rate limiting: some hops silent, so the sequence is uneven
    assert set(_loop(["10.0.0.1", "192.168.60.1", "10.0.0.1", "10.0.0.1", "192.168.60.1"]) or []) == {
        "10.0.0.1",
        "192.168.60.1",
    }
    assert _loop(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "8.8.8.8"]) is None  # a path, not a loop
    assert _loop(["10.0.0.1", "192.168.60.1"]) is None


def test_a_packet_has_one_ip_version(capsys):
    """--src of one IP version and --dst of the other is a usage error on one line, not a trace of nonsense."""
    from kpdiag.cli import main

    rc = main(["trace", "--rules", "/dev/null", "--src", "10.0.0.1", "--dst", "fd00::1", "--dport", "80"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "one IP version" in err
