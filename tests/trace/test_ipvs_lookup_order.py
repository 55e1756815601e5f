"""Review (issue 25): the IPVS virtual server a packet meets, in the kernel's order (ip_vs_ctl.c
``ip_vs_service_find``): the packet's firewall mark first (an fwmark virtual server of that mark), then
(protocol, address, port), then the catch-all port 0 at that address. kube-proxy's KUBE-MARK-MASQ gives a packet from
outside 0x4000 before IPVS sees it; a port-0 (persistent) virtual server takes every port of its address that has no
virtual server of its own. The focused live trace (kpdiag/collect/dest_rules.py ``packet_keys``) must ask for those
too, or it would trace what the whole dump does not.

REVIEW: fails on main b596b61 (the tracer looks (proto, address, port) up first, never port 0; packet_keys asks for
no port-0 virtual server).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "fixtures", "ipvs-healthy")


def _bundle(tmp_path, extra: str) -> str:
    out = str(tmp_path / "b")
    shutil.copytree(FIXTURE, out)
    os.remove(os.path.join(out, "scenario.json"))
    with open(os.path.join(out, "node", "ipvsadm.txt"), "a") as fh:
        fh.write(extra)
    return out


def _trace(bundle: str, dst: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--bundle",
            bundle,
            "--src",
            "10.31.0.99",
            "--dst",
            dst,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_a_port_zero_virtual_server_takes_the_ports_without_their_own(tmp_path):
    # at the node's own address (kube-proxy's KUBE-IPVS-FILTER rejects other ports of kube-ipvs0's addresses first)
    b = _bundle(
        tmp_path,
        "-A -t 192.168.50.1:0 -s rr -p 360\n-a -t 192.168.50.1:0 -r 10.244.9.9:0 -m -w 1\n"
        "-A -t 192.168.50.1:8080 -s rr\n-a -t 192.168.50.1:8080 -r 10.244.1.11:8080 -m -w 1\n",
    )
    own = _trace(b, "192.168.50.1:8080")  # its own virtual server first
    assert {p["dnat"] for p in own["paths"]} == {"10.244.1.11:8080"}, own["paths"]
    other = _trace(b, "192.168.50.1:8443")  # no virtual server at 8443: the catch-all, the port kept
    assert {p["dnat"] for p in other["paths"]} == {"10.244.9.9:8443"}, other["paths"]


def test_the_packets_fwmark_virtual_server_comes_first(tmp_path):
    # a packet from outside the pod CIDR is marked 0x4000 by KUBE-MARK-MASQ in nat PREROUTING, before IPVS
    b = _bundle(tmp_path, "-A -f 16384 -s rr\n-a -f 16384 -r 10.244.9.9:0 -m -w 1\n")
    got = _trace(b, "10.96.0.20:80")
    assert {p["dnat"] for p in got["paths"]} == {"10.244.9.9:80"}, got["paths"]


def test_the_focused_live_trace_asks_for_the_port_zero_virtual_server():
    from kpdiag.collect.dest_rules import packet_keys
    from kpdiag.collect.iptables_focused import Destination

    keys = packet_keys(Destination("10.96.0.20", 8443, "tcp"), [])
    assert ("tcp", "10.96.0.20", 0) in keys, keys
