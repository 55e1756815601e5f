"""KP525: the neighbour tables — the kernel log's "neighbor table overflow" (error), gc_thresh3 below what the node's
neighbours need (warning, with the arithmetic), silent where there is room, skipped without the facts. The lab side
(real neighbour entries, the collector's counts and sysctls): tests/lab/test_neighbours_lab.py."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from tests import k8sobjects as k8s
from tests.given import given

THRESH = (
    "net.ipv4.neigh.default.gc_thresh1 = 128\nnet.ipv4.neigh.default.gc_thresh2 = 512\n"
    "net.ipv4.neigh.default.gc_thresh3 = 1024\nnet.ipv6.neigh.default.gc_thresh1 = 128\n"
    "net.ipv6.neigh.default.gc_thresh2 = 512\nnet.ipv6.neigh.default.gc_thresh3 = 1024"
)
ME = "lab-healthy-iptables"  # the base bundle's node (its manifest)
LOG = (
    "# the kernel log (/dev/kmsg): 5120 lines read, 2 about the network kept\n"
    "[81234.551020] neighbour: arp_cache: neighbor table overflow!\n"
    "[81239.551311] neighbour: arp_cache: neighbor table overflow!\n"
)


def _neigh(v4_entries=12, v4_total=40, fulls=0) -> str:
    return json.dumps(
        {
            "format": "kpdiag.neigh/v1",
            "ipv4": {
                "entries": v4_entries,
                "permanent": 1,
                "states": {"REACHABLE": v4_entries},
                "devices": {"cni0": 4},
            },
            "ipv6": {"entries": 2, "permanent": 3, "states": {"STALE": 2}, "devices": {"ext0": 2}},
            "stat": {
                "ipv4": {"entries": v4_total, "forced_gc_runs": 0, "table_fulls": fulls},
                "ipv6": {"entries": 5, "forced_gc_runs": 0, "table_fulls": 0},
            },
        }
    )


def _cluster(lan_nodes: int, local_pods: int):
    nodes = [k8s.node(ME, "192.168.50.1")] + [k8s.node(f"n{i}", f"192.168.50.{i}") for i in range(2, 2 + lan_nodes)]
    nodes += [k8s.node(f"m{i}", f"192.168.51.{i}") for i in range(2, 200)]  # another subnet: behind a router
    nodes += [k8s.node("far", "10.20.0.4")]  # routed through a gateway: not a neighbour
    pods = [k8s.pod("default", f"p{i}", f"10.244.1.{i % 250 + 2}", {}, node=ME) for i in range(local_pods)]
    pods += [k8s.pod("default", "elsewhere", "10.244.2.5", {}, node="n2")]
    return nodes, pods


def test_the_kernel_log_line_is_an_error_with_its_line():
    (f,) = given(sysctl=THRESH, files={sources.KERNEL_LOG: LOG, sources.NEIGH: _neigh()}).fires("KP525")
    assert f.severity == "error"
    assert "ipv4 neighbour table (arp_cache) overflowed: 2 'neighbor table overflow' line(s)" in f.summary
    assert any(e.text.endswith("arp_cache: neighbor table overflow!") and e.line == 3 for e in f.evidence)
    assert "net.ipv4.neigh.default.gc_thresh3 = 1024" in [e.text for e in f.evidence]
    assert f.fix[0] == (
        "sysctl -w net.ipv4.neigh.default.gc_thresh1=1024 net.ipv4.neigh.default.gc_thresh2=2048 "
        "net.ipv4.neigh.default.gc_thresh3=4096"
    )
    assert "/etc/sysctl.d/" in f.fix[1]


def test_refusals_counted_by_the_kernel_are_an_error_without_a_log():
    (f,) = given(sysctl=THRESH, files={sources.NEIGH: _neigh(fulls=37)}).fires("KP525")
    assert f.severity == "error" and "the kernel refused 37 new entries (table_fulls)" in f.summary


def test_the_arithmetic_below_gc_thresh3_is_silent():
    nodes, pods = _cluster(lan_nodes=200, local_pods=400)  # 200 + 2 × 400 = 1000 < 1024
    given(sysctl=THRESH, nodes=nodes, pods=pods, files={sources.NEIGH: _neigh()}).silent("KP525")


def test_arithmetic_is_stated():
    nodes, pods = _cluster(lan_nodes=200, local_pods=420)
    (f,) = given(sysctl=THRESH, nodes=nodes, pods=pods, files={sources.NEIGH: _neigh()}).fires("KP525")
    assert f.severity == "warning" and f.data["needed"] == 1040
    assert (
        "it needs 1040 entries (200 other Nodes on this node's subnets + 2 × 420 local pods (the node's entry for "
        "each pod, each pod's for its gateway) = 1040 (the table holds 40 now)), gc_thresh3 = 1024"
    ) in f.summary
    assert "gc_thresh3=4096" in f.fix[0]


def test_a_table_past_gc_thresh2_is_a_warning():
    (f,) = given(sysctl=THRESH, files={sources.NEIGH: _neigh(v4_total=530)}).fires("KP525")
    assert f.severity == "warning" and "it needs 530 entries (530 entries in the table now)" in f.summary


def test_room_enough_is_silent():
    nodes, pods = _cluster(lan_nodes=250, local_pods=110)
    given(sysctl=THRESH, nodes=nodes, pods=pods, files={sources.NEIGH: _neigh(), sources.KERNEL_LOG: LOG[:60]}).silent(
        "KP525"
    )
    big = THRESH.replace("= 1024", "= 8192")
    nodes, pods = _cluster(lan_nodes=250, local_pods=1500)
    given(sysctl=big, nodes=nodes, pods=pods, files={sources.NEIGH: _neigh()}).silent("KP525")


def test_missing_facts_skip_with_the_reason():
    assert "gc_thresh1/2/3 are not in the collected sysctls" in given(files={sources.NEIGH: _neigh()}).skips("KP525")
    reason = given(sysctl=THRESH).skips("KP525")
    assert "neither the neighbour table (node/neigh.json) nor the Nodes and pods were collected" in reason
