"""A live ``kpdiag trace``'s focused read (the chains a packet to its destination can meet,
kpdiag/collect/dest_rules.py) against the whole dump, on the real kernel, over every iptables-mode fixture.

Each fixture's rules are loaded into a namespace that has a node address; for every Service port in its rules
(ClusterIPs, external and load-balancer IPs from KUBE-SERVICES, NodePorts at the node's address, from outside and
from the node itself) and for destinations that match nothing (an address no rule names, a ClusterIP on a port its
Service does not define, another protocol), the trace through the focused read must equal the trace through the
whole dump (rule file lines aside: the partial file is shorter).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from tests.checks.test_partial_bundles import FIXTURE_NAMES, FIXTURES
from tests.lab.test_focused_differential import _load, _strip_sources

from kpdiag.bundle import sources

pytestmark = pytest.mark.lab

NODE_IP = "10.31.0.10"
MAX_PORTS = 16  # Service ports per fixture (each one a focused read of its own): every fixture but rule-scale has fewer
_SVC_RULE = re.compile(r"^-A KUBE-SERVICES .*?-d (\S+?)(?:/\d+)? .*?-p (tcp|udp|sctp) .*?--dport (\d+) ", re.M)
_NODEPORT = re.compile(r"^-A KUBE-NODEPORTS .*?-p (tcp|udp|sctp) .*?--dport (\d+) ", re.M)


def _nat(text: str) -> str:
    m = re.search(r"^\*nat\n(.*?)^COMMIT", text, re.M | re.S)
    return m.group(1) if m else ""


def packets_for(text: str) -> list[dict]:
    """Every Service port the rules name (MAX_PORTS of them, spread, where there are more), each from outside and
    from the node, and packets that match no rule."""
    nat = _nat(text)
    dests: list[tuple[str, str, int]] = []
    for addr, proto, port in _SVC_RULE.findall(nat):
        if ":" not in addr and (addr, proto, int(port)) not in dests:
            dests.append((addr, proto, int(port)))
    for proto, port in _NODEPORT.findall(nat):
        if (NODE_IP, proto, int(port)) not in dests:
            dests.append((NODE_IP, proto, int(port)))
    if len(dests) > MAX_PORTS:  # rule-scale (1,100 ports): a sample spread over the whole chain, the last included
        dests = dests[:: len(dests) // (MAX_PORTS - 1)][: MAX_PORTS - 1] + dests[-1:]
    out = []
    for addr, proto, port in dests:
        out.append({"src": "10.31.0.99", "dst": addr, "proto": proto, "dport": port, "origin": "external"})
        out.append({"src": NODE_IP, "dst": addr, "proto": proto, "dport": port, "origin": "node"})
    misses = [("192.0.2.77", "tcp", 80), (NODE_IP, "tcp", 22)]
    if dests:
        addr, proto, port = dests[0]
        misses += [(addr, proto, port + 1), (addr, "udp" if proto == "tcp" else "tcp", port)]
    for addr, proto, port in misses:
        out.append({"src": "10.31.0.99", "dst": addr, "proto": proto, "dport": port, "origin": "external"})
    out.append({"src": "10.31.0.99", "dst": dests[0][0] if dests else "192.0.2.77", "proto": "icmp", "origin": "pod"})
    return out


def _node(lab) -> None:
    lab.sh("node", ["ip", "link", "add", "kp0", "type", "veth", "peer", "name", "kp1"])
    lab.sh("node", ["ip", "addr", "add", f"{NODE_IP}/24", "dev", "kp0"])
    lab.sh("node", ["ip", "link", "set", "kp0", "up"])
    lab.sh("node", ["ip", "link", "set", "kp1", "up"])


def _compare(lab, pkts: list[dict]) -> list[dict]:
    proc = lab.sh("node", [sys.executable, "-m", "tests.lab.trace_read", json.dumps(pkts)], check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert len(got) == len(pkts)
    for one in got:
        assert one["read"] is not None, (one["packet"], one["problems"])
        assert _strip_sources(one["focused"]) == _strip_sources(one["full"]), one["packet"]
    return got


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_focused_trace_equals_full(lab, name):
    d = os.path.join(FIXTURES, name)
    why = _load(lab, d)
    assert why is None, why
    _node(lab)
    text = open(os.path.join(d, sources.IPTABLES_SAVE)).read()
    pkts = packets_for(text)
    assert len(pkts) >= 6, name
    got = _compare(lab, pkts)
    # the focused read is smaller than the whole: no chain of a Service the packet cannot reach is read
    for one in got:
        read = {c for t in one["read"]["chains"].values() for cs in t.values() for c in cs}
        assert read, one["packet"]


def test_another_services_chains_are_not_read(lab):
    """On a 40-Service node a packet to one ClusterIP reads that Service's chains, none of the others'; a packet to
    an address no rule names reads no per-Service chain at all."""
    from tests.synth import iptables_ruleset, many_services

    text = iptables_ruleset(many_services(40, 2))
    lab.add_ns("node")
    _node(lab)
    lab.sh("node", ["iptables-restore"], input=text)
    (addr, proto, port), (other, _, _) = [(a, p, int(n)) for a, p, n in _SVC_RULE.findall(_nat(text))][:2]
    pkts = [
        {"src": "10.31.0.99", "dst": addr, "proto": proto, "dport": port, "origin": "external"},
        {"src": "10.31.0.99", "dst": "192.0.2.77", "proto": "tcp", "dport": 80, "origin": "external"},
    ]
    hit, miss = _compare(lab, pkts)
    chains = {c for cs in hit["read"]["chains"][sources.IPTABLES_SAVE].values() for c in cs}
    svc = re.search(rf"^-A KUBE-SERVICES -d {re.escape(addr)}/32 .*-j (KUBE-SVC-\S+)$", _nat(text), re.M).group(1)
    other_svc = re.search(rf"^-A KUBE-SERVICES -d {re.escape(other)}/32 .*-j (KUBE-SVC-\S+)$", _nat(text), re.M)
    assert svc in chains and other_svc.group(1) not in chains
    assert any(c.startswith("KUBE-SEP-") for c in chains)
    assert any(p["dnat"] for p in hit["full"]["paths"])
    missed = {c for cs in miss["read"]["chains"][sources.IPTABLES_SAVE].values() for c in cs}
    assert not any(c.startswith(("KUBE-SVC-", "KUBE-SEP-", "KUBE-EXT-")) for c in missed), missed


def _kpdiag_trace(lab, *args, codes=(0, 4, 5)):
    argv = [sys.executable, "-m", "kpdiag", "trace", "--host-root", "/", "--src", "10.31.0.99", "-o", "json", *args]
    proc = lab.sh("node", argv, check=False)
    assert proc.returncode in codes, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return (json.loads(proc.stdout) if proc.stdout else None), proc.stderr


def test_live_trace_end_to_end_and_its_fallback(lab):
    """`kpdiag trace` on the node: focused (it says how many chains it read), the same answer as --all-rules; a chain
    on the packet's path that iptables cannot show makes it read the whole rules, and it says why."""
    from tests.synth import iptables_ruleset, many_services

    text = iptables_ruleset(many_services(40, 2))
    lab.add_ns("node")
    _node(lab)
    lab.sh("node", ["iptables-restore"], input=text)
    (addr, _, port), (other, _, other_port) = [(a, p, int(n)) for a, p, n in _SVC_RULE.findall(_nat(text))][:2]
    focused, said = _kpdiag_trace(lab, "--dst", f"{addr}:{port}")
    whole, said_whole = _kpdiag_trace(lab, "--dst", f"{addr}:{port}", "--all-rules")
    assert re.search(rf"read only the \d+ chains a packet to {re.escape(addr)}:{port}/tcp can meet", said), said
    assert "read only" not in said_whole
    assert focused.pop("read")["destination"] == f"{addr}:{port}/tcp" and "read" not in whole  # what the read held
    assert _strip_sources(focused) == _strip_sources(whole)
    assert any(p["dnat"] for p in focused["paths"])
    # a rule iptables-nft cannot translate back (iptables -S of that chain exits 3) in the packet's Service chain
    chain = re.search(rf"^-A KUBE-SERVICES -d {re.escape(addr)}/32 .*-j (KUBE-SVC-\S+)$", _nat(text), re.M).group(1)
    lab.sh("node", ["nft", "add", "rule", "ip", "nat", chain, "meta", "cpu", "1", "counter"])
    # (here iptables-save fails on that rule as well: the trace ends with exit 3, naming both)
    _, said = _kpdiag_trace(lab, "--dst", f"{addr}:{port}", codes=(3,))
    assert "focused read of the rules a packet to" in said and f"-S {chain} exited 3" in said, said
    assert "the whole rules were read" in said and "iptables-save exited 3" in said
    # another Service's chain does not matter to this packet
    traced, said = _kpdiag_trace(lab, "--dst", f"{other}:{other_port}")
    assert "read only the" in said and "focused read" not in said, said
    assert any(p["dnat"] for p in traced["paths"])
