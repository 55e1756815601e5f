"""node/neigh.json, node/kernel-log.txt and the neighbour tables' sysctls: what the collector reads (a fake /proc for
the files; the kernel's neighbour table itself: tests/lab/test_neighbours_lab.py), bounded, and each failure named."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from kpdiag.collect import neigh
from kpdiag.collect.node import NodeCollector
from kpdiag.parse.neigh import parse_kernel_log, parse_neigh

ARP = """entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast periodic_gc_runs forced_gc_runs unresolved_discards table_fulls
00000400 000008c9 00000925 00000000   00002a3b 00000846 0000000f   00000000         00000000         0000031c         00000010       00000000            00000003
00000400 000008b6 00000858 00000003   000027d5 00000849 00000016   00000000         00000000         00000000         00000002       00000000            00000001
"""


def _proc(tmp_path, with_neigh: bool = True):
    proc = tmp_path / "proc"
    (proc / "net" / "stat").mkdir(parents=True)
    (proc / "net" / "stat" / "arp_cache").write_text(ARP)
    for fam in ("ipv4", "ipv6"):
        d = proc / "sys" / "net" / fam / "neigh" / "default"
        d.mkdir(parents=True)
        for n, v in ((1, 128), (2, 512), (3, 1024)):
            (d / f"gc_thresh{n}").write_text(f"{v}\n")
        eth = proc / "sys" / "net" / fam / "neigh" / "eth0"
        eth.mkdir(parents=True)
        (eth / "base_reachable_time_ms").write_text("30000\n")
    (proc / "sys" / "net" / "ipv4" / "ip_forward").write_text("1\n")
    return proc


def test_stat_counts_the_table_once_and_sums_the_counters(tmp_path):
    proc = _proc(tmp_path)
    assert neigh.read_stat(str(proc), "ipv4") == {"entries": 1024, "forced_gc_runs": 18, "table_fulls": 4}
    assert neigh.read_stat(str(proc), "ipv6") is None  # not there: a namespace other than the host's


def test_sysctls_keep_the_neighbour_defaults_not_each_interface(tmp_path):
    c = NodeCollector(host_root="/", proc=str(_proc(tmp_path)))
    c.sysctls()
    text = c.out.files[sources.SYSCTL].decode()
    assert "net.ipv4.neigh.default.gc_thresh3 = 1024" in text and "net.ipv6.neigh.default.gc_thresh2 = 512" in text
    assert "neigh.eth0" not in text and "net.ipv4.ip_forward = 1" in text


def test_neighbours_document_parses_and_names_what_was_missing(tmp_path):
    c = NodeCollector(host_root="/", proc=str(_proc(tmp_path)))
    c.neighbours()
    doc = json.loads(c.out.files[sources.NEIGH])
    assert doc["stat"]["ipv4"]["table_fulls"] == 4 and "ipv6" not in doc["stat"]
    assert isinstance(doc["ipv4"]["entries"], int)  # this namespace's table, over netlink
    tables = parse_neigh(c.out.files[sources.NEIGH].decode())
    assert tables.families["ipv4"].total == 1024 and tables.families["ipv4"].table_fulls == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    c2 = NodeCollector(host_root="/", proc=str(empty))
    c2.neighbours()
    assert any("arp_cache is not readable" in e["error"] for e in c2.out.errors)


def test_kernel_log_keeps_network_lines_only_and_bounded():
    lines = ["[1.0] usb 1-1: new device", "[2.0] neighbour: arp_cache: neighbor table overflow!"] * 300
    lines += ["[3.0] nf_conntrack: nf_conntrack: table full, dropping packet", "[4.0] " + "x" * 1000]
    kept = neigh.network_lines(lines).splitlines()
    assert len(kept) == neigh.MAX_LOG_LINES and kept[-1].endswith("table full, dropping packet")
    assert not any("usb" in line for line in kept)
    log = parse_kernel_log("# header\n" + "\n".join(kept) + "\n")
    assert len(log.overflows()) == neigh.MAX_LOG_LINES - 1 and log.overflows()[0][0] == 2


def test_kernel_log_is_read_live():
    c = NodeCollector(host_root="/")
    c.kernel_log()
    text = c.out.files.get(sources.KERNEL_LOG, b"").decode()
    errors = [e for e in c.out.errors if e["source"] == sources.KERNEL_LOG]
    assert text.startswith("# the kernel log (") or errors  # read, or why not
    assert len(text.splitlines()) <= neigh.MAX_LOG_LINES + 1
