"""Packets traced in a conntrack state other than NEW: an ICMP "fragmentation needed" about a tracked connection is
RELATED (the kernel's ICMP error tracking), meets `ctstate RELATED` / `ct state related` rules and no nat chain. The
nft JSON is what `nft -j list ruleset` printed for the rules in the comments (nftables 1.0.6)."""

import json

import pytest

from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.parse.nft import parse_nft_json
from kpdiag.trace.model import Packet
from kpdiag.trace.netfilter import IptablesTracer
from kpdiag.trace.nftables import NftTracer
from kpdiag.trace.routing import RoutingTable

FRAG = dict(proto="icmp", icmp_type=3, icmp_code=4)
RULES = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A OUTPUT -p icmp -j DNAT --to-destination 10.9.9.9
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT DROP [0:0]
-A OUTPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT
-A OUTPUT -p icmp --icmp-type echo-request -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -p icmp --icmp-type fragmentation-needed -j DROP
COMMIT
"""


def _ipt():
    return IptablesTracer(parse_iptables_save(RULES, "t"), RoutingTable.from_local_ips(["10.244.1.1"]))


def test_related_icmp_meets_related_rules_and_no_nat():
    t = _ipt()
    fwd = t.trace(Packet("192.0.2.1", "10.244.1.5", iif="eth0", ct_state="related", **FRAG))
    assert {p.verdict for p in fwd.paths} == {"accept"}
    assert "RELATED" in fwd.paths[0].steps[-1].text
    out = t.trace(Packet("10.244.1.1", "10.244.1.5", origin="node", ct_state="related", **FRAG))
    (path,) = out.paths
    assert path.verdict == "drop" and path.steps[-1].action == "policy DROP"
    assert path.dnat is None  # a related packet follows its connection's NAT: no nat chain runs for it


def test_new_icmp_is_still_new():
    t = _ipt()
    (path,) = t.trace(Packet("192.0.2.1", "10.244.1.5", iif="eth0", **FRAG)).paths
    assert path.verdict == "drop" and "fragmentation-needed" in path.steps[-1].text
    (echo,) = t.trace(Packet("10.244.1.1", "10.244.1.5", origin="node", proto="icmp")).paths
    assert echo.verdict == "accept" and echo.dnat == "10.9.9.9"


# table inet hostfw {
#   chain output { type filter hook output priority 0; policy drop; ct state established accept
#                  icmp type echo-request accept }
#   chain forward { type filter hook forward priority 0; policy drop; ct state established,related accept
#                   icmp type destination-unreachable drop } }
NFT = {
    "nftables": [
        {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
        {"table": {"family": "inet", "name": "hostfw", "handle": 1}},
        {
            "chain": {
                "family": "inet",
                "table": "hostfw",
                "name": "output",
                "handle": 1,
                "type": "filter",
                "hook": "output",
                "prio": 0,
                "policy": "drop",
            }
        },
        {
            "chain": {
                "family": "inet",
                "table": "hostfw",
                "name": "forward",
                "handle": 2,
                "type": "filter",
                "hook": "forward",
                "prio": 0,
                "policy": "drop",
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "hostfw",
                "chain": "output",
                "handle": 3,
                "expr": [
                    {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "established"}},
                    {"accept": None},
                ],
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "hostfw",
                "chain": "output",
                "handle": 4,
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"payload": {"protocol": "icmp", "field": "type"}},
                            "right": "echo-request",
                        }
                    },
                    {"accept": None},
                ],
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "hostfw",
                "chain": "forward",
                "handle": 5,
                "expr": [
                    {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
                    {"accept": None},
                ],
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "hostfw",
                "chain": "forward",
                "handle": 6,
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"payload": {"protocol": "icmp", "field": "type"}},
                            "right": "destination-unreachable",
                        }
                    },
                    {"drop": None},
                ],
            }
        },
    ]
}


@pytest.mark.parametrize(
    "packet, verdict",
    [
        (Packet("192.0.2.1", "10.244.1.5", iif="eth0", ct_state="related", **FRAG), "accept"),  # related first
        (Packet("192.0.2.1", "10.244.1.5", iif="eth0", **FRAG), "drop"),  # no connection: the icmp rule drops it
        (Packet("10.244.1.1", "10.244.1.5", origin="node", ct_state="related", **FRAG), "drop"),  # only established
        (Packet("10.244.1.1", "10.244.1.5", origin="node", proto="icmp"), "accept"),  # echo-request by its name
    ],
)
def test_nft_ct_state_and_icmp_names(packet, verdict):
    rs = parse_nft_json(json.dumps(NFT), "nft.json")
    result = NftTracer(rs, RoutingTable.from_local_ips(["10.244.1.1"])).trace(packet)
    assert {p.verdict for p in result.paths} == {verdict}
    assert not result.uncertain


def test_ct_state_is_checked_and_shown():
    with pytest.raises(ValueError, match="conntrack state"):
        Packet("10.0.0.1", "10.0.0.2", ct_state="invalid-ish", **FRAG)
    assert Packet("10.0.0.1", "10.0.0.2", ct_state="related", **FRAG).to_dict()["ct_state"] == "related"
    assert "ct_state" not in Packet("10.0.0.1", "10.0.0.2", **FRAG).to_dict()
