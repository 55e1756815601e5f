"""Every parser, fed anything: a result or an InputError naming the source — no other exception escapes.

CI-sized runs (a few hundred examples each); a longer run: KPDIAG_FUZZ_EXAMPLES=20000 pytest tests/hardening.
Seeds are real outputs (the fixtures and the conformance files), mutated by hypothesis.
"""

import glob
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle
from kpdiag.errors import InputError
from kpdiag.parse import node as nodep
from kpdiag.parse.ipset import parse_ipset_save
from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.parse.ipvs import parse_ipvsadm_list, parse_ipvsadm_save
from kpdiag.parse.nft import parse_nft_json
from tests.conftest import FIXTURES

EXAMPLES = int(os.environ.get("KPDIAG_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def _seed(rel):
    with open(os.path.join(FIXTURES, rel), encoding="utf-8") as fh:
        return fh.read()


IPT = _seed("no-endpoints/node/iptables-save.txt")
LINES = IPT.splitlines()


def _mutated(lines):
    """Real lines, shuffled, cut, and with random tokens spliced in."""
    return st.lists(
        st.one_of(
            st.sampled_from(lines),
            st.text(max_size=80),
            st.builds(lambda a, b: a[: len(a) // 2] + b, st.sampled_from(lines), st.text(max_size=20)),
        ),
        max_size=40,
    ).map(lambda ls: "\n".join(ls) + "\n")


def _safe(fn, data):
    try:
        fn(data)
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)


@SETTINGS
@given(_mutated(LINES))
def test_iptables_save(text):
    def parse(t):
        rs = parse_iptables_save(t, "fuzz.txt")
        for e in rs.compile_all():
            assert e.source == "fuzz.txt" and e.line
        from kpdiag.trace.model import Packet
        from kpdiag.trace.netfilter import IptablesTracer

        IptablesTracer(rs).trace(Packet("10.0.0.1", "10.96.0.30", "tcp", 80))

    _safe(parse, text)


@SETTINGS
@given(st.binary(max_size=400))
def test_iptables_save_binary(data):
    _safe(lambda d: parse_iptables_save(d, "bin"), data)


@SETTINGS
@given(
    _mutated(
        [
            "-A -t 10.96.0.1:443 -s rr",
            "-a -t 10.96.0.1:443 -r 192.168.0.10:6443 -m -w 1",
            "-A -f 100 -s sh",
            "-a -u 10.96.0.10:53 -r [fd00::1]:53 -m -w 0",
            "-A -u 10.96.0.10:53 -s wrr -p",
        ]
    )
)
def test_ipvsadm_save(text):
    _safe(lambda t: parse_ipvsadm_save(t, "ipvs.txt"), text)


@SETTINGS
@given(
    _mutated(
        [
            "TCP  10.96.0.1:443 rr",
            "  -> 192.168.0.10:6443            Masq    1      3          0",
            "FWM  100 sh",
            "Prot LocalAddress:Port Scheduler Flags",
            "UDP  10.96.0.10:53 wrr persistent x",
            "  -> 1.2.3.4:5 Masq a b c",
        ]
    )
)
def test_ipvsadm_list(text):
    _safe(lambda t: parse_ipvsadm_list(t, "ipvsl.txt"), text)


@SETTINGS
@given(
    _mutated(
        [
            "create KUBE-CLUSTER-IP hash:ip,port family inet",
            "add KUBE-CLUSTER-IP 10.96.0.1,tcp:443",
            "add NOPE 1.2.3.4",
            "create X bitmap:port range 1-2",
            "add X tcp:80",
            "add X nonsense,,",
        ]
    )
)
def test_ipset(text):
    _safe(lambda t: parse_ipset_save(t, "ipset.txt"), text)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=30,
)
NFT_SEED = json.loads(_seed("healthy-nftables/node/nft-ruleset.json"))["nftables"]


@SETTINGS
@given(
    st.lists(
        st.one_of(
            st.sampled_from(NFT_SEED),
            st.dictionaries(st.sampled_from(["rule", "chain", "set", "map", "table"]), JSON_VALUES, max_size=1),
        ),
        max_size=30,
    )
)
def test_nft_json(items):
    def parse(doc):
        rs = parse_nft_json(doc, "nft.json")
        from kpdiag.trace.model import Packet
        from kpdiag.trace.nftables import NftTracer

        NftTracer(rs).trace(Packet("10.0.0.1", "10.96.0.20", "tcp", 80))

    _safe(parse, json.dumps({"nftables": items}))


@SETTINGS
@given(
    JSON_VALUES, JSON_VALUES, st.text(max_size=300), st.text(max_size=300), st.text(max_size=300), st.text(max_size=300)
)
def test_node_files_and_bundle_checks(addr, route, sysctl, modules, metrics, config):
    """Whole bundles of junk through the full diagnosis: a report, never an exception."""
    from kpdiag.commands.diagnose import analyze_state
    from kpdiag.state.node import NodeState

    files = {
        "node/ip-addr.json": json.dumps(addr).encode(),
        "node/ip-route.json": json.dumps(route).encode(),
        "node/sysctl.txt": sysctl.encode(),
        "node/modules.txt": modules.encode(),
        "node/kube-proxy/metrics.txt": metrics.encode(),
        "node/kube-proxy/config.yaml": config.encode(),
        "node/iptables-save.txt": IPT.encode(),
        "cluster/services.json": json.dumps(addr).encode(),
        "cluster/endpointslices.json": json.dumps(route).encode(),
        "node/ip-rule.json": json.dumps(route).encode(),
        "kpdiag.json": json.dumps(route).encode(),
    }
    report = analyze_state(NodeState(Bundle.from_files("fuzz", files)))
    assert not [r for r in report.checks if r.status == "error"], [
        r.reason for r in report.checks if r.status == "error"
    ]


# ------------------------------------------------------------------ every declared parser, by its declared strategy
# The catalogue (kpdiag/bundle/sources.py) says which sources have a parser and how each is fuzzed (``fuzz``): a new
# source is fuzzed here without a line of this file changing. Seeds are that source's files in the fixtures.
PARSED = [s for s in sources.CATALOGUE.values() if s.parser]
SEED_FILES, SEED_LINES = 6, 300


def _seeds(src) -> list[str]:
    # non-empty copies only: most nodes' ipset.txt is empty, and an empty seed gives the fuzzer no line to mutate
    paths = sorted(p for p in glob.glob(os.path.join(FIXTURES, "*", src.path)) if os.path.getsize(p) > 0)
    step = max(1, len(paths) // SEED_FILES)
    out = []
    for path in paths[::step][:SEED_FILES]:
        with open(path, encoding="utf-8", errors="replace") as fh:
            out.append(fh.read(4 * 1024 * 1024))
    return out


def _json_seeds(texts: list[str]) -> list:
    docs = []
    for t in texts:
        try:
            docs.append(json.loads(t))
        except ValueError:
            continue
    return docs


@st.composite
def _mutated_json(draw, docs):
    """A real document with random subtrees replaced by junk, lists cut and extended."""

    def walk(node, depth):
        if draw(st.integers(0, 7)) == 0:
            return draw(JSON_VALUES)
        if depth > 8:
            return node
        if isinstance(node, dict):
            return {k: walk(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            start = draw(st.integers(0, max(0, len(node) - 1)))
            items = [walk(v, depth + 1) for v in node[start : start + 12]]
            return items + ([draw(JSON_VALUES)] if draw(st.booleans()) else [])
        return node

    return json.dumps(walk(draw(st.sampled_from(docs)), 0))


def _strategy(src):
    texts = _seeds(src)
    if src.fuzz == "json":
        docs = _json_seeds(texts)
        return st.one_of(_mutated_json(docs), JSON_VALUES.map(json.dumps), st.text(max_size=200))
    lines = [line for t in texts for line in t.splitlines()[:SEED_LINES]]
    return st.one_of(_mutated(lines), st.text(max_size=400))


def test_every_parsed_source_declares_a_strategy_and_has_seeds():
    assert len(PARSED) >= 15
    for src in PARSED:
        assert src.fuzz in sources.FUZZ_STRATEGIES, (src, src.fuzz)
        seeds = _seeds(src)
        assert seeds, f"{src}: no fixture holds this source to seed its fuzzing"
        if src.fuzz == "json":
            assert _json_seeds(seeds), f"{src}: no fixture copy is JSON"


@pytest.mark.parametrize("src", PARSED, ids=[s.path for s in PARSED])
def test_every_declared_parser(src):
    parse = src.parse_function()

    @SETTINGS
    @given(_strategy(src))
    def run(text):
        _safe(lambda t: parse(t, src.path), text)

    run()


_RULE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 70000),
    st.text(max_size=12),
    st.sampled_from(["all", "10.1.0.0", "fd00::", "main", "local", "100", "0x4000", "0xffff", "tcp", "80-90", "lo"]),
)
_RULE = st.dictionaries(
    st.sampled_from(
        [
            "family",
            "priority",
            "src",
            "srclen",
            "dst",
            "dstlen",
            "iif",
            "oif",
            "fwmark",
            "fwmask",
            "not",
            "table",
            "action",
            "ipproto",
            "sport",
            "dport",
            "dport_start",
            "dport_end",
            "uid_start",
            "suppress_prefixlen",
            "tos",
            "l3mdev",
        ]
    ),
    _RULE_VALUES,
    max_size=8,
)


@SETTINGS
@given(st.lists(_RULE | JSON_VALUES, max_size=8))
def test_ip_rules_and_policy_routing(rules):
    """Junk policy-routing rules: an InputError naming the entry, or rules the routing decision can walk."""
    from kpdiag.trace.routing import routing_from_ip_json

    def parse(text):
        parsed = nodep.parse_ip_rules(text, "node/ip-rule.json")
        routes = [
            {"dst": "default", "gateway": "192.0.2.254", "dev": "eth0", "table": "main"},
            {"dst": "10.0.0.0/8", "dev": "eth1", "table": "100"},
        ]
        rt = routing_from_ip_json([], routes, None, parsed)
        for dst in (0x08080808, 0x0A000001):
            route = rt.lookup(dst, 4, src=0x0A010005, iif="eth0", mark=0x4000, proto="tcp", sport=40000, dport=80)
            assert route is not None and route.type

    _safe(parse, json.dumps(rules))


# ---------------------------------------------------------------- node reports for the cluster aggregation

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_REAL = json.loads(
    json.dumps(
        __import__("kpdiag.commands.pipeline", fromlist=["x"])
        .analyze_bundle(os.path.join(FIXTURES, "healthy-iptables"))
        .to_dict()
    )
)


def _same_keys(value):
    """Random values under the real keys (the hard case: right shape, wrong types)."""
    if isinstance(value, dict):
        return st.fixed_dictionaries(
            {
                k: st.one_of(st.just(v), _JSON, _same_keys(v) if isinstance(v, (dict, list)) else _JSON)
                for k, v in value.items()
            }
        )
    if isinstance(value, list) and value:
        return st.lists(st.one_of(_same_keys(value[0]), _JSON), max_size=3)
    return _JSON


def _damaged(report):
    keys = ["facts", "extra", "summary", "findings", "subject", "readable"]
    return st.fixed_dictionaries(
        {k: st.one_of(st.just(report.get(k)), _JSON, _same_keys(report.get(k))) for k in keys}
    ).map(lambda d: {"schema": "kpdiag.report/v1", **d})


@SETTINGS
@given(st.lists(_damaged(_REAL), min_size=1, max_size=5), st.lists(st.text(max_size=200), max_size=3))
def test_aggregation_survives_damaged_node_reports(reports, logs):
    from kpdiag.fleet.aggregate import NodeResult, aggregate, parse_node_report

    results = [NodeResult(f"n{i}", report=json.loads(json.dumps(r, default=str))) for i, r in enumerate(reports)]
    for i, text in enumerate(logs):
        doc, why = parse_node_report(text, f"log{i}")
        results.append(NodeResult(f"l{i}", report=doc, failure=why, kind=None if doc else "not json"))
    report = aggregate(results, api_version="v1.31.4", local_itp=set())
    json.dumps(report.to_dict())
    assert report.facts["nodes"] == len(results)
