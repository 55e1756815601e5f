"""kube-proxy's nftables ruleset (TestOverallNFTablesRules) and packets whose fate a real kernel recorded."""

import json
import os

import pytest

from kpdiag.parse.nft import parse_nft_json
from tests.trace.conformance import assert_case
from kpdiag.trace.nftables import NftTracer
from kpdiag.trace.routing import RoutingTable


def test_every_case(shared_dir):
    d = os.path.join(shared_dir, "conformance", "kube-proxy-nftables")
    with open(os.path.join(d, "cases.json")) as fh:
        spec = json.load(fh)
    with open(os.path.join(d, "ruleset.json")) as fh:
        ruleset = parse_nft_json(fh.read(), "ruleset.json")
    tracer = NftTracer(ruleset, RoutingTable.from_local_ips(spec["node_ips"]))
    assert len(spec["cases"]) >= 13
    for case in spec["cases"]:
        assert_case(tracer, case)


def test_bad_nft_json_names_the_file():
    from kpdiag.errors import InputError

    with pytest.raises(InputError) as exc:
        parse_nft_json(
            '{"nftables": [{"rule": {"family": "ip", "table": "t", "chain": "nope", "expr": []}}]}', "r.json"
        )
    assert "r.json" in str(exc.value) and "nope" in str(exc.value)
    with pytest.raises(InputError) as exc:
        parse_nft_json("{not json", "r.json")
    assert str(exc.value).startswith("r.json:1: invalid JSON")
    with pytest.raises(InputError):
        parse_nft_json('{"something": 1}', "r.json")
