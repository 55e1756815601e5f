"""IPVS collection: netlink messages (encoded and decoded by pyroute2 as the kernel's bytes would be) rendered in
ipvsadm's formats and read back by kpdiag's parsers; /proc/net/ip_vs_conn counting; the collector on this kernel,
which has no ip_vs."""

from __future__ import annotations

import io
import json
import os
import socket

from pyroute2.netlink.generic.ipvs import IPVS_CMD_GET_DEST, IPVS_CMD_GET_SERVICE, ipvsmsg

from kpdiag.collect import ipvs as ipvsnl
from kpdiag.collect.node import NodeCollector
from kpdiag.parse.ipvs import parse_ipvsadm_list, parse_ipvsadm_save


def _wire(cmd: int, attr: str, attrs: list) -> ipvsmsg:
    """A message as the kernel sends it: encoded to bytes, then decoded from those bytes by pyroute2."""
    msg = ipvsmsg()
    msg["cmd"], msg["version"] = cmd, 1
    msg["attrs"] = [(attr, {"attrs": attrs})]
    msg.encode()
    back = ipvsmsg(msg.data)
    back.decode()
    return back


def _service(addr, port, proto=socket.IPPROTO_TCP, sched="rr", flags=0, timeout=0, fwmark=None, af=socket.AF_INET):
    attrs = [
        ("IPVS_SVC_ATTR_AF", af),
        ("IPVS_SVC_ATTR_PROTOCOL", proto),
        ("IPVS_SVC_ATTR_SCHED_NAME", sched),
        ("IPVS_SVC_ATTR_FLAGS", {"flags": flags, "mask": 0xFFFFFFFF}),
        ("IPVS_SVC_ATTR_TIMEOUT", timeout),
        ("IPVS_SVC_ATTR_NETMASK", "255.255.255.255"),
    ]
    if fwmark is not None:
        attrs.append(("IPVS_SVC_ATTR_FWMARK", fwmark))
    else:
        attrs += [("IPVS_SVC_ATTR_ADDR", addr), ("IPVS_SVC_ATTR_PORT", port)]
    return _wire(IPVS_CMD_GET_SERVICE, "IPVS_CMD_ATTR_SERVICE", attrs)


def _dest(addr, port, weight=1, fwd=0, active=0, inactive=0, af=socket.AF_INET):
    return _wire(
        IPVS_CMD_GET_DEST,
        "IPVS_CMD_ATTR_DEST",
        [
            ("IPVS_DEST_ATTR_ADDR_FAMILY", af),
            ("IPVS_DEST_ATTR_ADDR", addr),
            ("IPVS_DEST_ATTR_PORT", port),
            ("IPVS_DEST_ATTR_FWD_METHOD", fwd),
            ("IPVS_DEST_ATTR_WEIGHT", weight),
            ("IPVS_DEST_ATTR_ACTIVE_CONNS", active),
            ("IPVS_DEST_ATTR_INACT_CONNS", inactive),
        ],
    )


def _services():
    web = ipvsnl.service_from_nla(_service("10.96.0.20", 80).get_attr("IPVS_CMD_ATTR_SERVICE"))
    for d in (
        _dest("10.244.1.11", 8080, active=3, inactive=1),
        _dest("10.244.1.12", 8080, weight=0, active=17),
        _dest("10.244.2.13", 8080),
    ):
        web.dests.append(ipvsnl.dest_from_nla(d.get_attr("IPVS_CMD_ATTR_DEST")))
    dns = ipvsnl.service_from_nla(
        _service("10.96.0.10", 53, proto=socket.IPPROTO_UDP, flags=0x1, timeout=10800).get_attr("IPVS_CMD_ATTR_SERVICE")
    )
    dns.dests.append(ipvsnl.dest_from_nla(_dest("10.244.1.20", 53).get_attr("IPVS_CMD_ATTR_DEST")))
    v6 = ipvsnl.service_from_nla(_service("fd00:10:96::20", 443, af=socket.AF_INET6).get_attr("IPVS_CMD_ATTR_SERVICE"))
    v6.dests.append(
        ipvsnl.dest_from_nla(_dest("fd00:10:244::11", 8443, af=socket.AF_INET6, fwd=3).get_attr("IPVS_CMD_ATTR_DEST"))
    )
    mark = ipvsnl.service_from_nla(_service(None, None, fwmark=0x4000, sched="sh").get_attr("IPVS_CMD_ATTR_SERVICE"))
    return [web, dns, v6, mark]


def test_netlink_messages_render_as_ipvsadm_save():
    text = ipvsnl.render_save(_services())
    assert text.splitlines() == [
        "-A -t 10.96.0.20:80 -s rr",
        "-a -t 10.96.0.20:80 -r 10.244.1.11:8080 -m -w 1",
        "-a -t 10.96.0.20:80 -r 10.244.1.12:8080 -m -w 0",
        "-a -t 10.96.0.20:80 -r 10.244.2.13:8080 -m -w 1",
        "-A -u 10.96.0.10:53 -s rr -p 10800",
        "-a -u 10.96.0.10:53 -r 10.244.1.20:53 -m -w 1",
        "-A -t [fd00:10:96::20]:443 -s rr",
        "-a -t [fd00:10:96::20]:443 -r [fd00:10:244::11]:8443 -g -w 1",
        "-A -f 16384 -s sh",
    ]
    parsed = parse_ipvsadm_save(text)
    web = parsed[("tcp", "10.96.0.20", 80)]
    assert [(r.target, r.weight, r.forward) for r in web.reals] == [
        ("10.244.1.11:8080", 1, "masq"),
        ("10.244.1.12:8080", 0, "masq"),
        ("10.244.2.13:8080", 1, "masq"),
    ]
    assert parsed[("udp", "10.96.0.10", 53)].persistent == 10800
    assert parsed[("tcp", "fd00:10:96::20", 443)].reals[0].forward == "route"
    assert parsed[("fwmark", 16384)].scheduler == "sh"


def test_netlink_messages_render_as_ipvsadm_list_with_counts():
    parsed = parse_ipvsadm_list(ipvsnl.render_list(_services()))
    web = parsed[("tcp", "10.96.0.20", 80)]
    assert [(r.target, r.weight, r.active, r.inactive) for r in web.reals] == [
        ("10.244.1.11:8080", 1, 3, 1),
        ("10.244.1.12:8080", 0, 17, 0),
        ("10.244.2.13:8080", 1, 0, 0),
    ]
    assert parsed[("udp", "10.96.0.10", 53)].persistent == 10800
    assert parsed[("tcp", "fd00:10:96::20", 443)].reals[0].forward == "route"


IP_VS_CONN = """\
Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP C0A8324D 9C41 0A600014 0050 0AF4010B 1F90 ESTABLISHED     895
TCP C0A8324D 9C42 0A600014 0050 0AF4010B 1F90 ESTABLISHED     894
TCP C0A8324E 9C43 0A600014 0050 0AF40263 1F90 TIME_WAIT        77
UDP C0A8324D 9C44 0A60000A 0035 0AF40114 0035 UDP             300
TCP fd00:0000:0000:0000:0000:0000:0000:0001 9C45 fd00:0010:0096:0000:0000:0000:0000:0020 01BB [fd00:0010:0244:0000:0000:0000:0000:0011] 20FB ESTABLISHED     800
garbage line
"""


def test_ip_vs_conn_is_counted_by_service_real_server_and_state():
    doc = ipvsnl.conn_counts(io.StringIO(IP_VS_CONN))
    assert doc["connections_read"] == 6 and doc["unparsed"] == 1 and not doc["truncated"]
    got = {(e["proto"], e["vaddr"], e["vport"], e["daddr"], e["dport"], e["state"]): e["count"] for e in doc["entries"]}
    assert got == {
        ("tcp", "10.96.0.20", 80, "10.244.1.11", 8080, "ESTABLISHED"): 2,
        ("tcp", "10.96.0.20", 80, "10.244.2.99", 8080, "TIME_WAIT"): 1,
        ("udp", "10.96.0.10", 53, "10.244.1.20", 53, "UDP"): 1,
        ("tcp", "fd00:10:96::20", 443, "fd00:10:244::11", 8443, "ESTABLISHED"): 1,
    }


def test_ip_vs_conn_reading_is_bounded():
    doc = ipvsnl.conn_counts(io.StringIO(IP_VS_CONN), max_lines=2)
    assert doc["truncated"] and doc["connections_read"] == 2
    assert sum(e["count"] for e in doc["entries"]) == 2


def test_collector_on_a_kernel_without_ipvs(tmp_path):
    """This kernel has no ip_vs: with the real /proc the collector says so and runs nothing."""
    col = NodeCollector(host_root="/", proc="/proc")
    col.ipvs()
    errors = {e["source"]: e["error"] for e in col.out.errors}
    assert "no /proc/net/ip_vs" in errors["node/ipvsadm.txt"]
    assert "node/ipvsadm.txt" not in col.out.files


def test_collector_when_proc_shows_ipvs_but_netlink_has_no_family(tmp_path):
    """/proc/net/ip_vs present (here: a copy of /proc's layout) but the IPVS netlink family missing, as on this
    kernel: the real netlink request fails, ipvsadm is not run (it would modprobe ip_vs), ip_vs_conn is still counted."""
    os.makedirs(tmp_path / "net")
    (tmp_path / "net" / "ip_vs").write_text("IP Virtual Server version 1.2.1 (size=4096)\n")
    (tmp_path / "net" / "ip_vs_conn").write_text(IP_VS_CONN)
    col = NodeCollector(host_root="/", proc=str(tmp_path))
    col.ipvs()
    errors = {e["source"]: e["error"] for e in col.out.errors}
    assert "no IPVS generic netlink family" in errors["node/ipvsadm.txt"]
    assert "ipvsadm not run" in errors["node/ipvsadm.txt"]
    assert "node/ipvsadm.txt" not in col.out.files
    conn = json.loads(col.out.files["node/ipvs-conn.json"])
    assert conn["connections_read"] == 6
