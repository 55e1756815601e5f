"""Unit tests of the `nft -j list ruleset` parser (kpdiag/parse/nft.py) on what a real kernel printed (the fixtures and
kube-proxy's own nftables conformance ruleset), and its errors for what nft never prints."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.errors import InputError
from kpdiag.parse.nft import parse_nft_json, render_rule
from tests.conftest import FIXTURES, SHARED

KUBE = os.path.join(SHARED, "conformance", "kube-proxy-nftables", "ruleset.json")


def _text(path):
    with open(path) as fh:
        return fh.read()


def test_tables_chains_sets_and_rules_of_kube_proxys_table():
    text = _text(KUBE)
    rs = parse_nft_json(text, "ruleset.json")
    assert ("ip", "kube-proxy") in rs.tables and rs.has_table("ip", "kube-proxy")
    doc = json.loads(text)["nftables"]
    assert rs.rule_count == sum(1 for i in doc if "rule" in i)
    assert len(rs.chains) == sum(1 for i in doc if "chain" in i)
    # base chains: kube-proxy hooks its own chains at the standard priorities ("dstnat" = -100, "srcnat" = 100)
    pre = rs.base_chains(("ip",), "prerouting")
    assert [c.name for c in pre] and all(c.base and c.hook == "prerouting" for c in pre)
    assert sorted(c.prio for c in pre) == [c.prio for c in pre]
    nat = next(c for c in pre if c.type == "nat")
    assert nat.prio == -100
    post = next(c for c in rs.base_chains(("ip",), "postrouting") if c.type == "nat")
    assert post.prio == 100
    # every rule is filed under its chain, in order, with its handle
    for chain in rs.chains.values():
        assert [r.index for r in chain.rules] == list(range(1, len(chain.rules) + 1))
        assert all(r.handle is not None for r in chain.rules)
    # sets and maps keep their elements as nft printed them
    cluster_ips = rs.set("ip", "kube-proxy", "cluster-ips")
    assert cluster_ips is not None and not cluster_ips.is_map and cluster_ips.elems
    vmap = next(s for s in rs.sets.values() if s.is_map)
    assert vmap.map_type and all(isinstance(e, list) and len(e) == 2 for e in vmap.elems)


def test_rules_are_decoded_lazily_and_rendered_readably():
    rs = parse_nft_json(_text(os.path.join(FIXTURES, "healthy-nftables", "node", "nft-ruleset.json")))
    rules = [r for c in rs.chains.values() for r in c.rules]
    assert rules and all(r._raw is not None for r in rules)  # nothing decoded yet
    texts = [r.text for r in rules]
    assert all(r._raw is None for r in rules)
    assert any(t.startswith("ip daddr") and "vmap" in t for t in texts)  # the service dispatch map
    assert any("dnat to" in t for t in texts) and any("masquerade" in t for t in texts)
    assert (
        render_rule([{"match": {"op": "!=", "left": {"meta": {"key": "iifname"}}, "right": "lo"}}, {"accept": None}])
        == "meta iifname != lo accept"
    )


def test_the_same_result_from_a_decoded_document():
    text = _text(KUBE)
    a, b = parse_nft_json(text), parse_nft_json(json.loads(text))
    assert a.tables == b.tables and a.rule_count == b.rule_count
    assert {k: [r.text for r in c.rules] for k, c in a.chains.items()} == {
        k: [r.text for r in c.rules] for k, c in b.chains.items()
    }


@pytest.mark.parametrize(
    "bad, what",
    [
        ('{"nftables": [{"table": {"family": "ip", "name": "t"}}', "truncated"),
        ('{"nftables": [{"table": {"family": "ip", "name": "t"}}, {"chain": ', "invalid JSON"),
        ('{"tables": []}', 'no top-level "nftables" list'),
        ("[1, 2]", 'no top-level "nftables" list'),
        ('{"nftables": [{"table": {}, "chain": {}}]}', "single-key object"),
        ('{"nftables": [{"rule": {"family": "ip", "table": "t", "chain": "c", "expr": []}}]}', "not declared"),
        (
            '{"nftables": [{"chain": {"family": "ip", "table": "t", "name": "c"}}, {"rule": {"family": "ip", "table": "t", "chain": "c"}}]}',
            "no expression list",
        ),
    ],
)
def test_what_nft_never_prints_is_one_error_naming_the_file(bad, what):
    with pytest.raises(InputError) as err:
        parse_nft_json(bad, "node/nft-ruleset.json")
    assert what in str(err.value) and "node/nft-ruleset.json" in str(err.value)


def test_invalid_utf8_and_deep_nesting_are_refused():
    with pytest.raises(InputError, match="UTF-8"):
        parse_nft_json(b'{"nftables": ["\xff"]}')
    deep = (
        '{"nftables": [{"rule": {"family": "ip", "table": "t", "chain": "c", "expr": '
        + "[" * 5000
        + "]" * 5000
        + "}}]}"
    )
    with pytest.raises(InputError, match="deeper"):
        parse_nft_json(deep)
