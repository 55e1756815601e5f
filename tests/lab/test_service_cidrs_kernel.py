"""KP603 on kube-proxy's "Drop traffic to unallocated ClusterIPs" rule as a real kernel lists it back.

kube-proxy writes its ServiceCIDRs as an anonymous set (``ip daddr { A, B } drop``). nft merges adjacent intervals of
such a set: two adjacent ServiceCIDRs come back as one range, not two prefixes. The rule is loaded into a namespace
over healthy-nftables' tables and the check reads ``nft -j list ruleset`` as nft prints it.
"""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.bundle import sources
from tests.given import given
from tests.lab.test_nft_focused_oracle import FIXTURES, loadable

pytestmark = pytest.mark.lab

COMMENT = "Drop traffic to unallocated ClusterIPs"


def _listed(lab, cidrs: str) -> dict:
    doc = json.load(open(os.path.join(FIXTURES, "healthy-nftables", sources.NFT_RULESET)))
    doc["nftables"] = [i for i in doc["nftables"] if (i.get("rule") or {}).get("comment") != COMMENT]
    lab.add_ns("node")
    lab.sh("node", ["nft", "-j", "-f", "-"], input=json.dumps(loadable(doc)))
    rule = f'add rule ip kube-proxy cluster-ips-check ip daddr {{ {cidrs} }} drop comment "{COMMENT}"'
    lab.sh("node", ["nft", "-f", "-"], input=rule + "\n")
    return json.loads(lab.sh("node", ["nft", "-j", "list", "ruleset"]).stdout)


def test_adjacent_service_cidrs_listed_as_one_range_are_read(lab):
    doc = _listed(lab, "10.96.0.0/12, 10.112.0.0/16")
    (right,) = [
        i["rule"]["expr"][0]["match"]["right"]
        for i in doc["nftables"]
        if (i.get("rule") or {}).get("comment") == COMMENT
    ]
    assert right == {"set": [{"range": ["10.96.0.0", "10.112.255.255"]}]}, right  # the kernel's form, not two prefixes
    files = {sources.NFT_RULESET: json.dumps(doc)}
    (f,) = given(base="healthy-nftables", kube_proxy={"clusterCIDR": "10.112.128.0/17"}, files=files).fires("KP603")
    assert f.data["service_cidr"] == "10.112.0.0/16" and f.data["overlap"] == "10.112.128.0/17", f.data
    given(base="healthy-nftables", files=files).silent("KP603")
