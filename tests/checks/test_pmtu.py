"""KP524: a PMTU black hole — the pods' MTU above the path's and a firewall rule that drops the ICMP "fragmentation
needed" the node sends them (traced as RELATED through every rule at its hook). Fires only when both hold. The
kernel's side (the ICMP really is sent through OUTPUT and really is dropped): tests/lab/test_pmtu_lab.py."""

from __future__ import annotations

import json
import os

from kpdiag.bundle import sources
from tests.conftest import FIXTURES
from tests.given import given

BASE = os.path.join(FIXTURES, "healthy-iptables", "node")


def _read(name: str) -> str:
    with open(os.path.join(BASE, name), encoding="utf-8") as fh:
        return fh.read()


def _uplink_mtu(mtu: int) -> str:
    links = json.loads(_read("ip-addr.json"))
    for link in links:
        if link.get("ifname") == "ext0":
            link["mtu"] = mtu
    return json.dumps(links)


def _filter(*rules: str, policy: str = "ACCEPT") -> str:
    """The base node's iptables-save with ``rules`` at the top of the filter table's OUTPUT chain."""
    text = _read("iptables-save.txt").replace(":OUTPUT ACCEPT [0:0]", f":OUTPUT {policy} [0:0]", 1)
    head, sep, rest = text.partition("-A OUTPUT ")
    return head + "".join(r + "\n" for r in rules) + sep + rest


DROP_FRAG = "-A OUTPUT -p icmp -m icmp --icmp-type 3/4 -j DROP"
DROP_ICMP = "-A OUTPUT -p icmp -j DROP"
RELATED = "-A OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"


def test_a_drop_of_frag_needed_with_pods_above_the_uplink_fires_with_the_rule():
    (f,) = given(iptables=_filter(DROP_FRAG), files={sources.IP_ADDR: _uplink_mtu(1400)}).fires("KP524")
    assert f.severity == "error"
    assert "drops the ICMP 'fragmentation needed' this node sends its pods (OUTPUT filter OUTPUT:" in f.summary
    assert "pods have MTU 1500 above the 1400 bytes that fit through the uplink ext0" in f.summary
    (rule,) = [e for e in f.evidence if "--icmp-type 3/4" in e.text]
    assert rule.source == "node/iptables-save.txt" and rule.line == 22
    assert f.fix[0].startswith("iptables -I OUTPUT 1 -p icmp --icmp-type fragmentation-needed -j ACCEPT")
    assert any("lower the pods' MTU to 1400" in s for s in f.fix)
    assert f.data["icmp"] == {"src": "10.244.1.1", "dst": "10.244.1.10", "type": 3, "code": 4, "ct_state": "related"}


def test_an_output_policy_that_accepts_only_established_fires():
    (f,) = given(
        iptables=_filter(
            "-A OUTPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT", "-A OUTPUT -p tcp -j ACCEPT", policy="DROP"
        ),
        files={sources.IP_ADDR: _uplink_mtu(1400)},
    ).fires("KP524")
    assert "the host firewall drops the ICMP" in f.summary and "(OUTPUT filter OUTPUT: :OUTPUT DROP)" in f.summary


def test_related_accepted_before_the_drop_is_silent():
    """Many healthy nodes drop ICMP but accept RELATED first: the ICMP error of a tracked flow passes."""
    given(iptables=_filter(RELATED, DROP_ICMP), files={sources.IP_ADDR: _uplink_mtu(1400)}).silent("KP524")


def test_consistent_mtus_are_silent_whatever_the_firewall_does():
    given(iptables=_filter(DROP_FRAG)).silent("KP524")  # pods 1500, uplink 1500
    given(files={sources.IP_ADDR: _uplink_mtu(1400)}).silent("KP524")  # too big, but the ICMP passes


def test_no_uplink_skips():
    assert "uplink" in given(files={sources.IP_ROUTE: "[]"}).skips("KP524")
