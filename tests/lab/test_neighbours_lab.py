"""KP525 on the real kernel. The neighbour tables are the kernel's, shared by every namespace, and their bounds
(gc_thresh1/2/3) and counters (/proc/net/stat/arp_cache) live in the host's namespace only — so a node namespace
shows its entries and nothing more: `kpdiag node` there skips KP525 naming the missing sysctls. Recorded with the
host's real bounds and counters beside the namespace's real entries, and the Nodes and pods the arithmetic needs,
KP525 is the first finding (a warning: no overflow on this kernel's log), and silent where the table has room.
Overflowing the table for real would break every namespace on the machine: the log's overflow line is a fixture's
(fixtures/neigh-table-overflow)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from kpdiag.bundle import sources
from kpdiag.commands.pipeline import analyze_bundle
from tests import k8sobjects as k8s

from .bundle_from_ns import bundle_from_ns
from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab
STALE = 30


def _kpdiag(lab, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh("node", argv + list(args), check=False, timeout=300)


def _host(fam: str, n: int) -> int:
    with open(f"/proc/sys/net/{fam}/neigh/default/gc_thresh{n}") as fh:
        return int(fh.read())


def _build(lab):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    for i in range(20, 20 + STALE):
        lab.sh(
            "node",
            [
                "ip",
                "neigh",
                "replace",
                f"192.168.50.{i}",
                "lladdr",
                f"02:00:00:00:33:{i:02x}",
                "dev",
                "ext0",
                "nud",
                "stale",
            ],
        )
    for i in (200, 201):
        lab.sh(
            "node",
            ["ip", "neigh", "replace", f"192.168.50.{i}", "lladdr", f"02:00:00:00:34:{i - 190:02x}", "dev", "ext0"],
        )
    return k


def _record(lab, out: str, lan: int, pods: int) -> str:
    """The namespace recorded, with the host's gc_thresh and /proc/net/stat (read now, while its entries exist), and
    ``lan`` Nodes on ext0's /24 and ``pods`` pods on this node."""
    from kpdiag.collect.neigh import read_stat

    stat = {fam: read_stat("/proc/1", fam) for fam in ("ipv4", "ipv6")}
    me = "lab-neigh"
    nodes = [k8s.node(me, "192.168.50.1")] + [k8s.node(f"w{i}", f"192.168.50.{i}") for i in range(2, 2 + lan)]
    items = [k8s.pod("batch", f"job-{i}", f"10.244.{1 + i // 250}.{i % 250 + 2}", {}, node=me) for i in range(pods)]
    as_list = lambda objs: json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})  # noqa: E731
    path = bundle_from_ns(
        lab,
        "node",
        out,
        node_name=me,
        extra={str(sources.NODES): as_list(nodes), str(sources.PODS): as_list(items)},
        also=(sources.NEIGH, sources.KERNEL_LOG),
    )
    with open(os.path.join(path, sources.NEIGH)) as fh:
        doc = json.load(fh)
    doc["stat"] = stat
    with open(os.path.join(path, sources.NEIGH), "w") as fh:
        json.dump(doc, fh)
    with open(os.path.join(path, sources.SYSCTL), "a") as fh:
        for fam in ("ipv4", "ipv6"):
            fh.write("".join(f"net.{fam}.neigh.default.gc_thresh{n} = {_host(fam, n)}\n" for n in (1, 2, 3)))
    return path


def test_a_namespace_shows_its_entries_not_the_bounds(lab):
    _build(lab)
    proc = _kpdiag(lab, "node", "-o", "json", "--host-root", "/", "--fail-on", "never")
    report = json.loads(proc.stdout)
    run = next(c for c in report["checks"] if c["id"] == "KP525")
    assert run["status"] == "skipped" and "gc_thresh1/2/3 are not in the collected sysctls" in run["reason"]


def test_counts_are_the_kernels_and_the_arithmetic_fires_first(lab, tmp_path):
    _build(lab)
    t3 = _host("ipv4", 3)
    lan = 200
    pods = max(0, (t3 + 1 - lan + 1) // 2)  # lan + 2 × pods > gc_thresh3, whatever this host's value is
    path = _record(lab, str(tmp_path / "low"), lan, pods)
    # listed after the record: the collect's own reads over lo add a NOARP entry for 127.0.0.1, which both then count
    listed = json.loads(lab.sh("node", ["ip", "-4", "-j", "neigh", "show", "nud", "all"]).stdout)
    with open(os.path.join(path, sources.NEIGH)) as fh:
        doc = json.load(fh)
    exempt = [n for n in listed if {"PERMANENT", "NOARP"} & set(n.get("state", []))]  # the kernel never collects them
    assert doc["ipv4"]["permanent"] == len(exempt) >= 2 and doc["ipv4"]["devices"]["ext0"] == STALE
    assert doc["ipv4"]["entries"] == len(listed) - len(exempt)
    assert doc["stat"]["ipv4"]["entries"] >= STALE  # the kernel's count covers this namespace's entries
    report = analyze_bundle(path)
    first = [f for f in report.findings if f.severity.value in ("error", "warning")]
    assert first and first[0].id == "KP525" and first[0].severity.value == "warning", [(f.id, f.summary) for f in first]
    assert f"{lan} other Nodes on this node's subnets + 2 × {pods} local pods" in first[0].summary
    assert f"gc_thresh3 = {t3}" in first[0].summary

    room = _record(lab, str(tmp_path / "room"), lan, 10)
    if lan + 20 < t3 and doc["stat"]["ipv4"]["entries"] < _host("ipv4", 2):
        report = analyze_bundle(room)
        assert not [f for f in report.findings if f.id == "KP525"]
        assert next(c for c in report.checks if c.id == "KP525").status == "ran"
