"""Anonymous sets in rules (kpdiag/collect/nft_netlink.py) against nft itself: each rule below is loaded into a
namespace and decoded from the kernel; the decoder either refuses it (Undecodable: the focused read then reads the
whole dump) or prints it exactly as ``nft -j list chain`` does — never a different value or order.

The rules are the edges of what nft stores as an anonymous set: interval sets of addresses at 0 and at the top of
the space, IPv6 addresses nft prints with an embedded IPv4 address, and sets declared with ``typeof`` whose elements
nft prints by that expression (a raw payload read as an integer in network order, concatenations)."""

from __future__ import annotations

import json
import sys

import pytest

pytestmark = pytest.mark.lab

RULES = {
    "ip": [
        "ip daddr { 0.0.0.0/8, 10.0.0.0/8 } drop",
        "ip daddr { 128.0.0.0/1, 1.2.3.4 } drop",
        "ip daddr != { 0.0.0.0, 255.255.255.255 } drop",
        "ip daddr { 10.0.0.0-10.0.0.9, 10.0.0.10-10.0.0.20 } drop",
        "th dport { 80-90, 443 } drop",
        "@th,16,16 { 80, 443 } drop",
        "@nh,128,32 { 0x0a000001, 0x0a000002 } drop",
        "meta l4proto . th dport { tcp . 80, udp . 53 } drop",
        "ip daddr . meta l4proto . th dport { 1.2.3.4 . tcp . 80, 1.2.3.5 . udp . 53 } drop",
        "ip saddr . ip daddr { 1.1.1.0/24 . 2.2.2.0/24, 3.3.3.3 . 4.4.4.4 } drop",
    ],
    "ip6": [
        "ip6 daddr { ::/8, fd00::/8 } drop",
        "ip6 daddr { ::ffff:1.2.3.4, fd00::/8 } drop",
        "ip6 daddr { ::1.2.3.4, fd00::/8 } drop",
        "ip6 daddr { ::ffff:0.0.0.0/96, 2001:db8::/32 } drop",
        "ip6 daddr != { ::, ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff } drop",
        "ip6 daddr { 2001:db8::1-2001:db8::ff, fe80::/10 } drop",
    ],
}

DECODE = r"""
import json, sys
from kpdiag.collect import nft_netlink as nn
from kpdiag.collect.nft_rules import RuleDecoder
fam = sys.argv[1]
out = []
with nn.Netlink() as nl:
    dec = RuleDecoder(fam, "t", lambda n: nn.read_set(nl, fam, "t", n))
    for a in nl.rules(fam, "t", "c"):
        try:
            out.append(dec.rule("c", a)[0]["rule"]["expr"])
        except nn.Undecodable as e:
            out.append("refused: " + str(e))
print(json.dumps(out))
"""


@pytest.mark.parametrize("family", sorted(RULES))
def test_an_anonymous_set_is_printed_as_nft_prints_it_or_refused(lab, family):
    lab.add_ns("node")
    text = f"add table {family} t\nadd chain {family} t c\n" + "".join(
        f"add rule {family} t c {r}\n" for r in RULES[family]
    )
    lab.sh("node", ["nft", "-f", "-"], input=text)
    doc = json.loads(lab.sh("node", ["nft", "-j", "list", "chain", family, "t", "c"]).stdout)
    theirs = [i["rule"]["expr"] for i in doc["nftables"] if "rule" in i]
    mine = json.loads(lab.sh("node", [sys.executable, "-c", DECODE, family]).stdout)
    assert len(mine) == len(theirs) == len(RULES[family])
    wrong = [
        (rule, m, t)
        for rule, m, t in zip(RULES[family], mine, theirs)
        if not (isinstance(m, str) and m.startswith("refused: ")) and m != t
    ]
    assert wrong == [], json.dumps(wrong, indent=1)
    # the sets of addresses kube-proxy writes (two ServiceCIDRs, two loadBalancerSourceRanges) are read, not refused
    addresses = [
        m
        for r, m in zip(RULES[family], mine)
        if r.startswith((f"{family} daddr", f"{family} saddr")) and " . " not in r
    ]
    assert len(addresses) >= 3 and not any(isinstance(m, str) for m in addresses), addresses
