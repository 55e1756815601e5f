"""The kernel as oracle for policy routing (``ip rule``): kpdiag's routing decision must be the kernel's.

A node namespace with three uplinks, extra routing tables and rules of every kind kpdiag evaluates (from, to, iif,
fwmark, ipproto/dport, not, unreachable/prohibit actions, an empty table that falls through) and one it cannot
(uidrange). The rules are collected by kpdiag's own collector (pyroute2, run inside the namespace) and must read the
same as ``ip -j rule``; then for each packet ``ip route get … from … iif … mark … ipproto … dport …`` (the kernel's
answer) is compared with ``RoutingTable.lookup`` on the bundle: same device and gateway, or both refuse. Finally a
trace through kube-proxy-free rules shows the rule that routed the packet, and the uncertainty the uidrange rule adds.
"""

from __future__ import annotations

import json
import sys

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.parse.addr import parse_ip
from kpdiag.parse.node import parse_ip_rules
from kpdiag.state.node import NodeState
from kpdiag.trace.model import Packet

from .bundle_from_ns import bundle_from_ns

pytestmark = pytest.mark.lab

RULES = [
    ["pref", "50", "lookup", "100", "suppress_prefixlength", "0"],  # wg-quick's: table 100 but never its default route
    ["pref", "100", "from", "10.244.1.0/24", "lookup", "100"],
    ["pref", "150", "to", "10.60.0.0/16", "unreachable"],
    ["pref", "200", "iif", "ext0", "to", "10.50.0.0/16", "lookup", "200"],
    ["pref", "300", "fwmark", "0x4000/0x4000", "lookup", "100"],
    ["pref", "400", "ipproto", "udp", "dport", "5353", "prohibit"],
    ["pref", "500", "not", "from", "192.0.2.0/24", "lookup", "300"],  # table 300 is empty: falls through
    ["pref", "600", "from", "192.0.2.0/24", "to", "10.70.0.0/16", "lookup", "main"],
]

# (src, dst, iif, mark, proto, dport)
CASES = [
    ("192.0.2.2", "8.8.8.8", "ext0", 0, "tcp", 80),  # main: default via up1
    ("10.244.1.5", "8.8.8.8", "pod0", 0, "tcp", 80),  # from pods: table 100, default via up2
    ("10.244.2.5", "8.8.8.8", "pod0", 0, "tcp", 80),  # another pod range: main
    ("192.0.2.2", "10.60.1.1", "ext0", 0, "tcp", 80),  # unreachable rule
    ("192.0.2.2", "10.50.3.3", "ext0", 0, "tcp", 80),  # iif ext0 to 10.50/16: table 200 (via up3)
    ("10.244.2.5", "10.50.3.3", "pod0", 0, "tcp", 80),  # same destination from pod0: main (default via up1)
    ("192.0.2.2", "8.8.8.8", "ext0", 0x4000, "tcp", 80),  # masquerade mark: table 100
    ("192.0.2.2", "8.8.8.8", "ext0", 0x8000, "tcp", 80),  # another mark: main
    ("192.0.2.2", "8.8.8.8", "ext0", 0, "udp", 5353),  # prohibit
    ("192.0.2.2", "8.8.8.8", "ext0", 0, "udp", 53),  # not that port: main
    ("192.0.2.2", "10.70.0.9", "ext0", 0, "tcp", 80),  # explicit lookup main
    ("10.244.1.5", "10.60.1.1", "pod0", 0, "tcp", 80),  # rule 100 first: table 100's default, not unreachable
    ("192.0.2.2", "10.80.1.1", "ext0", 0, "tcp", 80),  # rule 50: table 100's /16 (longer than /0): up2
]


def _build(lab) -> None:
    for role in ("node", "client", "up1", "up2", "up3", "pod"):
        lab.add_ns(role)
    lab.veth("node", "ext0", "client", "eth0")
    lab.veth("node", "up1", "up1", "eth0")
    lab.veth("node", "up2", "up2", "eth0")
    lab.veth("node", "up3", "up3", "eth0")
    lab.veth("node", "pod0", "pod", "eth0")
    lab.addr("node", "ext0", "192.0.2.1/24")
    lab.addr("node", "up1", "198.51.100.1/24")
    lab.addr("node", "up2", "203.0.113.1/24")
    lab.addr("node", "up3", "100.64.0.1/24")
    lab.addr("node", "pod0", "10.244.0.1/16")
    lab.sysctl("node", "net.ipv4.ip_forward", "1")
    lab.sysctl("node", "net.ipv4.conf.all.rp_filter", "0")
    for dev in ("ext0", "pod0"):
        lab.sysctl("node", f"net.ipv4.conf.{dev}.rp_filter", "0")
    lab.route("node", "default", "via", "198.51.100.2", "dev", "up1")
    lab.route("node", "default", "via", "203.0.113.2", "dev", "up2", "table", "100")
    lab.route("node", "10.80.0.0/16", "via", "203.0.113.2", "dev", "up2", "table", "100")
    lab.route("node", "10.50.0.0/16", "via", "100.64.0.2", "dev", "up3", "table", "200")
    lab.route("node", "10.50.0.0/16", "via", "100.64.0.2", "dev", "up3", "table", "300")
    lab.sh("node", ["ip", "route", "flush", "table", "300"])  # table 300 exists but is empty
    for rule in RULES:
        lab.sh("node", ["ip", "rule", "add", *rule])
    lab.sh("node", ["ip", "rule", "add", "pref", "700", "uidrange", "1000-2000", "lookup", "100"])


def _kernel(lab, src, dst, iif, mark, proto, dport) -> dict | None:
    argv = [
        "ip",
        "-j",
        "route",
        "get",
        dst,
        "from",
        src,
        "iif",
        iif,
        "mark",
        hex(mark),
        "ipproto",
        proto,
        "dport",
        str(dport),
    ]
    proc = lab.sh("node", argv, check=False)
    if proc.returncode != 0:
        return None  # unreachable / prohibit / blackhole: the kernel refuses the route
    return json.loads(proc.stdout)[0]


def _collected_rules(lab) -> str:
    """kpdiag's own collector (pyroute2) run inside the node namespace."""
    code = (
        "import json; from pyroute2 import IPRoute; from kpdiag.collect.netlink_dump import pyroute2_rules as _pyroute2_rules\n"
        "with IPRoute() as i: print(json.dumps(_pyroute2_rules(i)))"
    )
    proc = lab.sh("node", [sys.executable, "-c", code])
    return proc.stdout


def test_kernel_agrees_on_policy_routing(lab, tmp_path):
    _build(lab)
    collected = _collected_rules(lab)
    ours = parse_ip_rules(collected, "collector")
    shown = json.loads(lab.sh("node", ["ip", "-j", "rule", "show"]).stdout)
    theirs = parse_ip_rules(json.dumps([dict(r, family="inet") for r in shown]), "ip -j rule")
    assert [r.text() for r in ours if r.family == 4] == [r.text() for r in theirs]
    assert any(r.unknown == ("uidrange 1000-2000",) for r in ours), [r.text() for r in ours]

    path = bundle_from_ns(lab, "node", str(tmp_path / "b"), extra={"node/ip-rule.json": collected})
    state = NodeState(Bundle.open(path))
    routing = state.routing
    assert routing.rules and routing.policy_rules(4)
    disagree = []
    for src, dst, iif, mark, proto, dport in CASES:
        kernel = _kernel(lab, src, dst, iif, mark, proto, dport)
        ip, ver = parse_ip(dst)
        route = routing.lookup(ip, ver, src=parse_ip(src)[0], iif=iif, mark=mark, proto=proto, dport=dport, sport=40000)
        assert route is not None
        if kernel is None:
            ok = route.type in ("unreachable", "prohibit", "blackhole")
        else:
            ok = (
                route.type in ("unicast", "local")
                and route.dev == kernel.get("dev")
                and route.gateway == kernel.get("gateway")
            )
        if not ok:
            disagree.append((src, dst, iif, hex(mark), proto, dport, kernel, route))
        # the uidrange rule (700) can only be reached by packets no earlier rule routed: kpdiag says it may apply
        assert (route.uncertain is not None) == ("uidrange" in (route.uncertain or "")), route
    assert not disagree, "\n".join(map(str, disagree))
    # the three packets the uidrange rule could have caught are the ones main (rule 32766) routed after it
    main_routed = [
        c
        for c in CASES
        if (
            r := routing.lookup(
                parse_ip(c[1])[0], 4, src=parse_ip(c[0])[0], iif=c[2], mark=c[3], proto=c[4], dport=c[5], sport=40000
            )
        ).rule
        is None
        and r.type == "unicast"
    ]
    assert main_routed and all(
        routing.lookup(
            parse_ip(c[1])[0], 4, src=parse_ip(c[0])[0], iif=c[2], mark=c[3], proto=c[4], dport=c[5], sport=40000
        ).uncertain
        for c in main_routed
    )

    # the tracer follows the rules: a pod's packet to the outside leaves by up2 (table 100), and the trace says why
    tracer = state.mode_tracer("iptables")
    result = tracer.trace(Packet("10.244.1.5", "8.8.8.8", "tcp", 80, origin="pod", iif="pod0"))
    notes = " ".join([*result.notes, *(n for p in result.paths for n in p.notes)])
    assert "policy-routing rule '100: from 10.244.1.0/24 lookup 100'" in notes, notes
    assert all(p.verdict == "accept" for p in result.paths), result.to_dict()
    # without the rules (an older bundle), the plain main-table lookup is unchanged
    plain = NodeState(Bundle.open(bundle_from_ns(lab, "node", str(tmp_path / "c"))))
    route = plain.routing.lookup(parse_ip("8.8.8.8")[0], 4, src=parse_ip("10.244.1.5")[0], iif="pod0")
    assert route.dev == "up1" and route.rule is None and route.uncertain is None
