"""A live ``kpdiag trace`` on a node whose ``iptables`` is the nft variant and whose kube-proxy rules are in
iptables-legacy (kube-proxy's image chose legacy): the trace read "the 0 chains a packet can meet" of iptables-nft
and said ACCEPT. Now each backend the kernel has tables of is read with its own tool (kpdiag/collect/service_rules.py
``IptablesFocused``), the one whose rules act is traced (kpdiag/trace/backends.py), and when both act the trace is
"not traced" (exit 3) with the reason, never ACCEPT."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from tests.conftest import FIXTURES
from tests.lab.netlab import KubeNodeLab, connect_from

pytestmark = pytest.mark.lab

RULES = f"{FIXTURES}/healthy-iptables/node/iptables-save.txt"
ENDPOINTS = {"10.244.1.10:8080", "10.244.1.11:8080", "10.244.1.12:8080"}  # shop/web:http's, in RULES


def _trace(lab, *args: str):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh("node", argv + ["trace", *args], check=False, timeout=300)


def _legacy_node(lab) -> KubeNodeLab:
    node = KubeNodeLab.build(lab, pod_count=3)
    with open(RULES) as fh:
        lab.sh("node", ["iptables-legacy-restore"], input=fh.read(), timeout=300)
    names = lab.sh("node", ["cat", "/proc/net/ip_tables_names"]).stdout.split()
    assert {"nat", "filter"} <= set(names), names
    assert "KUBE-" not in lab.sh("node", ["iptables-save"]).stdout  # the node's iptables (nft) shows none of them
    return node


@pytest.mark.parametrize("read", ["focused", "all-rules"])
def test_live_trace_walks_the_legacy_backend_that_holds_kube_proxys_rules(lab, read):
    node = _legacy_node(lab)
    extra = ["--all-rules"] if read == "all-rules" else []
    proc = _trace(lab, "--dst", "10.96.0.20:80", "--src", node.client_ip, "--iif", "ext0", "-o", "json", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout[:2000]
    result = json.loads(proc.stdout)
    dnats = {p["dnat"] for p in result["paths"]}
    assert dnats == ENDPOINTS, result["paths"]
    assert all(p["verdict"] == "accept" for p in result["paths"])
    assert result["sources"] == ["iptables-legacy-save on this node, live"], result["sources"]  # live: no file
    assert any("kube-proxy's rules are in iptables-legacy" in n for n in result["notes"]), result["notes"]
    if read == "focused":  # the chains read are legacy's: not zero
        said = re.search(r"read only the (\d+) chains", proc.stderr)
        assert said and int(said.group(1)) > 0, proc.stderr

    # the kernel agrees: a real connection from the client is DNATed by legacy's nat table, to one of those endpoints
    connect_from(lab, "client", [dict(dst="10.96.0.20", dport=80, proto="tcp", sport=41000)])
    counted = lab.sh("node", ["iptables-legacy-save", "-c", "-t", "nat"]).stdout
    hit = re.findall(r"^\[[1-9]\d*:\d+\] -A KUBE-SEP-\S+ .*--to-destination (\S+)", counted, re.M)
    assert len(hit) == 1 and hit[0] in dnats, counted


def test_live_trace_with_kube_proxy_rules_in_both_backends_is_not_traced(lab):
    node = _legacy_node(lab)
    with open(RULES) as fh:
        lab.sh("node", ["iptables-nft-restore"], input=fh.read(), timeout=300)
    for extra in ([], ["--all-rules"]):
        proc = _trace(lab, "--dst", "10.96.0.20:80", "--src", node.client_ip, *extra)
        assert proc.returncode == 3, proc.stdout[:2000] + proc.stderr
        assert not proc.stdout, proc.stdout[:2000]  # no verdict at all, least of all ACCEPT
        assert "not traced: both iptables backends have rules at the hooks" in proc.stderr, proc.stderr
        assert "node/iptables-legacy-save.txt" in proc.stderr and "KP204" in proc.stderr, proc.stderr
