"""Work budgets (hostile rulesets end in seconds with an incomplete, uncertain answer — never memory growth),
every nft dnat form nft 1.0.6 prints, NOTRACK, and routing failures / IPVS refusals as the kernel answers them."""

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from kpdiag import exitcodes
from kpdiag.bundle.store import Bundle
from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.parse.nft import parse_nft_json
from kpdiag.state.node import NodeState
from kpdiag.trace import walker
from kpdiag.trace.ipvs import IpvsTracer
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.nftables import NftTracer
from kpdiag.trace.routing import RoutingTable, routing_from_ip_json
from tests.synth import Endpoint, Port, Service, ipvs_files
from tests.trace import hostile

DATA = os.path.join(os.path.dirname(__file__), "data")
PKT = Packet("10.0.0.2", "10.96.0.1", "tcp", 80)


def _bounded(fn):
    """Run fn, returning (result, seconds, MB of peak RSS growth) — the growth measured in this process."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def _assert_cut(result):
    assert not result.complete and result.uncertain
    note = result.incomplete
    assert note.startswith("too many paths: ") and "stopped at budget" in note, note
    assert note in result.notes
    assert sum(p.probability for p in result.paths) < 1.0


@pytest.mark.parametrize(
    "make", [hostile.ipt_jump_ladder, hostile.ipt_statistic_ladder], ids=["jump-ladder", "statistic-ladder"]
)
def test_iptables_ladders_stop_at_the_budget(make):
    tracer = IptablesTracer(parse_iptables_save(make(41), "ladder"), RoutingTable.from_local_ips(["192.168.0.2"]))
    result, seconds, grown = _bounded(lambda: tracer.trace(PKT))
    _assert_cut(result)
    assert seconds < 20 and grown < 400, (seconds, grown)
    assert tracer.budget.work <= walker.MAX_WORK + 1 and tracer.budget.paths <= walker.MAX_PATHS
    assert all(len(p.steps) <= walker.MAX_STEPS + 1 for p in result.paths)
    assert exitcodes.for_trace(result.verdicts(), result.complete) == exitcodes.NO_DIAGNOSIS


@pytest.mark.parametrize(
    "make", [hostile.nft_numgen_ladder, hostile.nft_vmap_ladder], ids=["numgen-ladder", "chained-vmaps"]
)
def test_nft_ladders_stop_at_the_budget(make):
    tracer = NftTracer(parse_nft_json(make(41), "ladder"), RoutingTable.from_local_ips(["192.168.0.2"]))
    result, seconds, grown = _bounded(lambda: tracer.trace(PKT))
    _assert_cut(result)
    assert seconds < 20 and grown < 400, (seconds, grown)


def test_numgen_mod_a_hundred_million_costs_what_mod_two_does():
    tracer = NftTracer(parse_nft_json(hostile.nft_numgen_huge(), "numgen"), RoutingTable.from_local_ips(["10.9.9.9"]))
    result, seconds, _ = _bounded(lambda: tracer.trace(PKT))
    assert seconds < 2
    assert result.complete and not result.uncertain
    by = {p.verdict: p for p in result.paths}
    assert by["accept"].probability == pytest.approx(1e-8) and by["accept"].dnat == "10.244.1.10:8080"
    assert by["drop"].probability == pytest.approx(1 - 1e-8)


def test_a_jump_loop_is_cut_and_named_not_a_made_up_drop():
    text = hostile.IPT_HEAD + ":A - [0:0]\n:B - [0:0]\n-A PREROUTING -j A\n-A A -j B\n-A B -j A\nCOMMIT\n"
    result = IptablesTracer(parse_iptables_save(text, "loop"), RoutingTable()).trace(PKT)
    assert result.paths == () and not result.complete
    assert "nested jumps" in result.incomplete and "a loop?" in result.incomplete


def test_a_ten_megabyte_comment_parses_in_linear_memory():
    text = hostile.ipt_huge_comment(10)
    rs, seconds, grown = _bounded(lambda: parse_iptables_save(text, "big"))
    rule = rs.chain("filter", "FORWARD").rule_at(0)
    assert rule.comment.endswith('"end') and len(rule.comment) > 10 * 2**20
    result = IptablesTracer(rs, RoutingTable()).trace(Packet("10.0.0.2", "10.0.0.3", "tcp", 80))
    assert result.verdicts() == {"drop"}
    _, _, grown = _bounded(lambda: parse_iptables_save(text, "again").chain("filter", "FORWARD").rule_at(0))
    assert grown < 200, grown  # the alternation regex took ~1.4 GB here


def test_the_cli_exits_3_on_an_incomplete_trace_and_says_why(tmp_path):
    rules = tmp_path / "ladder.txt"
    rules.write_text(hostile.ipt_jump_ladder(41))
    argv = [sys.executable, "-m", "kpdiag.cli", "trace", "--rules", str(rules), "--src", "10.0.0.2"]
    proc = subprocess.run(
        argv + ["--dst", "10.96.0.1", "--dport", "80", "-o", "json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == exitcodes.NO_DIAGNOSIS, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["complete"] is False and doc["uncertain"] is True
    assert any(n.startswith("too many paths:") for n in doc["notes"])


# ---------------------------------------------------------------------- nft dnat forms (JSON from nft 1.0.6 -j)
def _forms():
    with open(os.path.join(DATA, "nft-dnat-forms.json")) as fh:
        return NftTracer(parse_nft_json(fh.read(), "forms"), RoutingTable.from_local_ips(["192.168.0.2"]))


@pytest.mark.parametrize(
    "dst,dport,expect",
    [
        ("10.96.0.1", 80, {"10.244.1.10:8080": 1.0}),  # dnat to A:tcp dport map { 80 : 8080, … }
        ("10.96.0.2", 80, {"10.244.1.10:8080": 1.0}),  # dnat to A:8080-8090 (80 is outside: the first port)
        ("10.96.0.3", 80, {"10.244.1.10:80": 0.5, "10.244.1.11:80": 0.5}),  # numgen random mod 2 map
        ("10.96.0.4", 80, {"10.244.1.10-10.244.1.12:80": 1.0}),  # an address range
        ("10.96.0.5", 80, {"10.244.1.10-10.244.1.12:8080": 1.0}),  # address and port ranges
        ("10.96.0.6", 80, {"10.244.1.13:80": 1.0}),  # ip daddr map
        ("10.96.0.7", 80, {"10.244.1.14:8080": 1.0}),  # dnat ip addr . port to ip daddr . tcp dport map
        ("10.96.0.8", 80, {"10.244.1.10:80": 1 / 3, "10.244.1.11:80": 2 / 3}),  # numgen inc, a range element
        ("10.96.0.9", 80, {"10.244.1.10:8080": 1.0}),  # a port map by name (@m1)
        ("10.96.0.10", 80, {"10.244.1.10:80": 0.5, "10.244.1.11:80": 0.5}),  # jhash map
        ("10.96.0.11", 80, {"10.244.1.10:80": 1.0}),  # flags fully-random,persistent
        ("10.96.0.12", 80, {"(node itself):8080": 1.0}),  # redirect to :8080
        ("10.96.0.13", 80, {"10.244.1.10:8080": 0.5, "10.244.1.11:9090": 0.5}),  # numgen map of addr . port
    ],
)
def test_every_nft_dnat_form(dst, dport, expect):
    result = _forms().trace(Packet("192.168.0.9", dst, "tcp", dport))
    assert {p.dnat: p.probability for p in result.paths} == pytest.approx(expect)
    assert not result.uncertain, result.notes + tuple(n for p in result.paths for n in p.notes)


def test_nft_dnat_port_range_keeps_a_port_already_inside_it():
    result = _forms().trace(Packet("192.168.0.9", "10.96.0.2", "tcp", 8085))
    assert result.verdicts() != set()  # the rule needs tcp dport 80: not matched, nothing translated
    tr = NftTracer(
        parse_nft_json(
            hostile._doc(
                {"pre": [[{"dnat": {"addr": "10.244.1.10", "port": {"range": [8080, 8090]}}}]]},
            ),
            "r",
        ),
        RoutingTable.from_local_ips(["192.168.0.2"]),
    )
    assert tr.trace(Packet("192.168.0.9", "10.96.0.2", "tcp", 8085)).dnat_set() == {"10.244.1.10:8085"}
    assert tr.trace(Packet("192.168.0.9", "10.96.0.2", "tcp", 80)).dnat_set() == {"10.244.1.10:8080"}


def test_a_dnat_map_without_an_element_for_the_packet_does_not_match():
    result = _forms().trace(Packet("192.168.0.9", "10.96.0.1", "tcp", 81))  # the rule wants dport 80
    assert result.dnat_set() == set()
    tr = NftTracer(
        parse_nft_json(
            hostile._doc(
                {
                    "pre": [
                        [
                            {
                                "dnat": {
                                    "addr": "10.244.1.10",
                                    "port": {
                                        "map": {
                                            "key": {"payload": {"protocol": "tcp", "field": "dport"}},
                                            "data": {"set": [[80, 8080]]},
                                        }
                                    },
                                }
                            }
                        ]
                    ]
                }
            ),
            "r",
        ),
        RoutingTable.from_local_ips(["192.168.0.2"]),
    )
    result = tr.trace(Packet("192.168.0.9", "10.96.0.1", "tcp", 443))
    assert result.dnat_set() == set() and result.verdicts() == {"accept"}
    assert any("no element for this packet" in n for n in result.paths[0].notes)


# ---------------------------------------------------------------------- NOTRACK
NOTRACK_IPT = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -j {target}
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 169.254.20.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination 10.244.1.50:53
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -d 169.254.20.10/32 -p udp -m udp --dport 53 -j ACCEPT
COMMIT
"""


@pytest.mark.parametrize("target", ["CT --notrack", "NOTRACK"])
def test_notrack_skips_nat_and_is_delivered(target):
    tracer = IptablesTracer(
        parse_iptables_save(NOTRACK_IPT.format(target=target), "nodelocaldns"),
        RoutingTable.from_local_ips(["192.168.0.2", "169.254.20.10"]),
    )
    result = tracer.trace(Packet("10.244.1.7", "169.254.20.10", "udp", 53, origin="pod"))
    (path,) = result.paths
    assert result.complete and not result.uncertain
    assert path.verdict == "accept" and path.delivery == "local" and path.dnat is None
    assert any("NOTRACK" in s.action for s in path.steps)


def test_nft_notrack_skips_nat():
    daddr = {"payload": {"protocol": "ip", "field": "daddr"}}
    doc = json.loads(
        hostile._doc(
            {
                "raw": [[{"match": {"op": "==", "left": daddr, "right": "169.254.20.10"}}, {"notrack": None}]],
                "pre": [
                    [
                        {"match": {"op": "==", "left": daddr, "right": "169.254.20.10"}},
                        {"dnat": {"addr": "10.244.1.50"}},
                    ]
                ],
            }
        )
    )
    for item in doc["nftables"]:
        if item.get("chain", {}).get("name") == "raw":
            item["chain"].update(type="filter", hook="prerouting", prio=-300, policy="accept")
    tracer = NftTracer(parse_nft_json(json.dumps(doc), "r"), RoutingTable.from_local_ips(["169.254.20.10"]))
    (path,) = tracer.trace(Packet("10.244.1.7", "169.254.20.10", "udp", 53, origin="pod")).paths
    assert path.verdict == "accept" and path.dnat is None and path.delivery == "local"


def test_zero_paths_are_never_a_silent_answer():
    class Lost(IptablesTracer):
        def _hook(self, hook, states, finished):
            return []  # a tracer that loses every packet (what NOTRACK did before)

    result = Lost(parse_iptables_save(NOTRACK_IPT.format(target="NOTRACK"), "r"), RoutingTable()).trace(PKT)
    assert result.paths == () and result.uncertain and not result.complete
    assert "no path came out of the trace" in result.incomplete
    assert exitcodes.for_trace(result.verdicts(), result.complete) == exitcodes.NO_DIAGNOSIS


# ---------------------------------------------------------------------- routing failures and IPVS refusals
ROUTES = [
    {"dst": "192.168.0.0/24", "dev": "eth0", "prefsrc": "192.168.0.2"},
    {"dst": "10.244.1.0/24", "dev": "cni0"},
    {"type": "unreachable", "dst": "10.50.0.0/16"},
    {"type": "prohibit", "dst": "10.51.0.0/16"},
    {"type": "blackhole", "dst": "10.52.0.0/16"},
]
ADDRS = [{"ifname": "eth0", "addr_info": [{"local": "192.168.0.2"}]}]
EMPTY = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"


@pytest.mark.parametrize(
    "dst,verdict,icmp",
    [
        ("10.99.0.1", "reject", "icmp-net-unreachable"),  # no route (no default route)
        ("10.50.0.1", "reject", "icmp-host-unreachable"),
        ("10.51.0.1", "reject", "icmp-admin-prohibited"),
        ("10.52.0.1", "drop", None),
        ("10.244.1.9", "accept", None),
    ],
)
def test_forwarded_packet_meets_the_route_the_kernel_has(dst, verdict, icmp):
    tracer = IptablesTracer(parse_iptables_save(EMPTY, "r"), routing_from_ip_json(ADDRS, ROUTES))
    (path,) = tracer.trace(Packet("192.168.0.9", dst, "tcp", 80)).paths
    assert (path.verdict, path.reject_with) == (verdict, icmp)
    assert path.route is not None and (path.route["dev"] == "cni0") == (verdict == "accept")


@pytest.mark.parametrize(
    "dst,err", [("10.99.0.1", "ENETUNREACH"), ("10.50.0.1", "EHOSTUNREACH"), ("10.51.0.1", "EACCES")]
)
def test_the_nodes_own_packet_without_a_route_fails_at_connect(dst, err):
    tracer = IptablesTracer(parse_iptables_save(EMPTY, "r"), routing_from_ip_json(ADDRS, ROUTES))
    (path,) = tracer.trace(Packet("192.168.0.2", dst, "tcp", 80, origin="node")).paths
    assert (path.verdict, path.reject_with) == ("reject", err)
    assert path.steps[0].hook == "routing"  # before OUTPUT: no hook sees it


def _ipvs(weights=None, routes_extra=()):
    svc = Service(
        "shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint("10.244.1.10"), Endpoint("10.60.0.5")]
    )
    files = ipvs_files([svc], weights=weights or {})
    routes = json.loads(files["node/ip-route.json"]) + list(routes_extra)
    files["node/ip-route.json"] = json.dumps(routes)
    state = NodeState(Bundle.from_files("ipvs", {k: v.encode() for k, v in files.items()}))
    return IpvsTracer(state.iptables(), state.routing, state.ipsets, state.ipvs)


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_ipvs_without_an_available_destination_refuses(proto):
    tracer = _ipvs(weights={"10.244.1.10": 0, "10.60.0.5": 0})
    if proto == "udp":
        tracer.services[("udp", "10.96.0.20", 80)] = tracer.services[("tcp", "10.96.0.20", 80)]
    result = tracer.trace(Packet("10.244.9.9", "10.96.0.20", proto, 80, origin="pod"))
    (path,) = result.paths
    assert (path.verdict, path.reject_with) == ("reject", "icmp-port-unreachable")
    assert exitcodes.for_trace(result.verdicts(), result.complete) == exitcodes.TRACE_REJECTED


def test_ipvs_real_server_the_node_cannot_route_to_is_host_unreachable_on_that_path():
    tracer = _ipvs(routes_extra=[{"type": "unreachable", "dst": "10.60.0.0/16"}])
    result = tracer.trace(Packet("10.244.9.9", "10.96.0.20", "tcp", 80, origin="pod"))
    by = {p.dnat: p for p in result.paths}
    assert by["10.244.1.10:8080"].verdict == "accept" and by["10.244.1.10:8080"].route["gateway"] == "192.168.50.2"
    assert (by["10.60.0.5:8080"].verdict, by["10.60.0.5:8080"].reject_with) == ("reject", "icmp-host-unreachable")


# ---------------------------------------------------------------------- long chains walk in constant stack
def test_a_service_with_thousands_of_endpoints_is_traced_in_full():
    svc = Service(
        "shop",
        "big",
        "10.96.0.1",
        [Port("http", 80, 8080)],
        [Endpoint(f"10.244.{i // 250}.{i % 250 + 1}") for i in range(2500)],
    )
    from tests.synth import iptables_ruleset

    tracer = IptablesTracer(
        parse_iptables_save(iptables_ruleset([svc]), "big"), RoutingTable.from_local_ips(["1.1.1.1"])
    )
    result = tracer.trace(Packet("192.168.0.9", "10.96.0.1", "tcp", 80))
    assert result.complete and len(result.paths) == 2500  # was a RecursionError from 1,000 endpoints on
    assert sum(p.probability for p in result.paths) == pytest.approx(1.0)


def test_thousands_of_jump_and_return_rules_in_one_chain():
    n = 5000
    ipt = hostile.IPT_HEAD + ":R - [0:0]\n" + "-A PREROUTING -j R\n" * n + "-A R -j RETURN\nCOMMIT\n"
    result = IptablesTracer(parse_iptables_save(ipt, "r"), RoutingTable()).trace(PKT)
    assert result.complete and result.verdicts() == {"accept"}
    doc = hostile._doc({"pre": [[{"jump": {"target": "r"}}]] * n, "r": [[{"return": None}]]})
    result = NftTracer(parse_nft_json(doc, "r"), RoutingTable()).trace(PKT)
    assert result.complete and result.verdicts() == {"accept"}


# ---------------------------------------------------------------------- iptables mode sees the other nft tables
def _firewalld_bundle(tmp_path, with_firewall: bool):
    from kpdiag.commands.trace import setup_trace

    items = [{"metainfo": {"json_schema_version": 1}}, {"table": {"family": "ip", "name": "filter", "handle": 1}}]
    items.append(
        {
            "chain": {
                "family": "ip",
                "table": "filter",
                "name": "FORWARD",
                "handle": 2,
                "type": "filter",
                "hook": "forward",
                "prio": 0,
                "policy": "accept",
            }
        }
    )  # iptables-nft's own: not traced twice
    if with_firewall:
        items.append({"table": {"family": "inet", "name": "firewalld", "handle": 3}})
        items.append(
            {
                "chain": {
                    "family": "inet",
                    "table": "firewalld",
                    "name": "filter_FORWARD",
                    "handle": 4,
                    "type": "filter",
                    "hook": "forward",
                    "prio": 10,
                    "policy": "accept",
                }
            }
        )
        items.append(
            {
                "rule": {
                    "family": "inet",
                    "table": "firewalld",
                    "chain": "filter_FORWARD",
                    "handle": 5,
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                "right": {"prefix": {"addr": "10.244.0.0", "len": 16}},
                            }
                        },
                        {"reject": {"type": "icmpx", "expr": "admin-prohibited"}},
                    ],
                }
            }
        )
    files = {
        "node/iptables-save.txt": EMPTY,
        "node/nft-ruleset.json": json.dumps({"nftables": items}),
        "node/ip-addr.json": json.dumps(ADDRS),
        "node/ip-route.json": json.dumps(ROUTES),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "kpdiag.json").write_text(json.dumps({"format": "kpdiag-bundle/v1", "kind": "node"}))
    return setup_trace(bundle=str(tmp_path), mode="iptables")


@pytest.mark.parametrize("with_firewall", [True, False])
def test_iptables_mode_traces_a_host_firewall_table(tmp_path, with_firewall):
    setup = _firewalld_bundle(tmp_path, with_firewall)
    assert (setup.tracer.nft is not None) == with_firewall  # parsed only when another table has base chains
    (path,) = setup.tracer.trace(Packet("192.168.0.9", "10.244.1.9", "tcp", 80, iif="eth0")).paths
    if with_firewall:
        assert (path.verdict, path.reject_with, path.steps[-1].table) == (
            "reject",
            "admin-prohibited",
            "inet firewalld",
        )
    else:
        assert path.verdict == "accept" and path.route["dev"] == "cni0"
