"""KP524 on the real kernel: pods at MTU 1500 behind an uplink of 1400, a server beyond a router, and an OUTPUT rule
dropping ICMP "fragmentation needed". The kernel shows the black hole (a pod's large upload hangs while a small one
works; ping -M do gets no "Frag needed") and that the ICMP goes through OUTPUT (dropping it in INPUT and FORWARD
changes nothing); `kpdiag node` in that namespace names the rule as the first error — and is silent once RELATED is
accepted before the drop, or once the MTUs agree."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

FAR = "10.99.0.2"
SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8080)); s.listen(8)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.settimeout(5); data = b''\n"
    "    try:\n"
    "        while len(data) < 16 or len(data) < 16 + int(data[:16].split(b':')[0]):\n"
    "            chunk = c.recv(65536)\n"
    "            if not chunk:\n"
    "                break\n"
    "            data += chunk\n"
    "        c.sendall(b'ok')\n"
    "    except Exception:\n"
    "        pass\n"
    "    c.close()\n"
)
UPLOAD = (
    "import socket, sys\n"
    "size = int(sys.argv[1]); c = socket.create_connection(('" + FAR + "', 8080), timeout=4)\n"
    "c.sendall(f'{size}:'.encode().ljust(16) + b'x' * size); print(c.recv(2).decode())\n"
)


def _kpdiag(lab, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh("node", argv + list(args), check=False, timeout=300)


def _report(lab) -> dict:
    proc = _kpdiag(lab, "node", "-o", "json", "--host-root", "/", "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _upload(lab, size: int) -> bool:
    proc = lab.sh("pod0", [sys.executable, "-c", UPLOAD, str(size)], check=False, timeout=20)
    return proc.returncode == 0 and proc.stdout.strip() == "ok"


def _frag_needed(lab) -> bool:
    lab.sh("pod0", ["ip", "route", "flush", "cache"], check=False)
    proc = lab.sh("pod0", ["ping", "-c", "1", "-W", "1", "-M", "do", "-s", "1472", FAR], check=False)
    return "Frag needed" in proc.stdout


def _build(lab) -> KubeNodeLab:
    k = KubeNodeLab.build(lab, pod_count=2, router=True)
    for role, dev in (("node", "up0"), ("router", "eth0")):
        lab.sh(role, ["ip", "link", "set", dev, "mtu", "1400"])  # the narrow link; pods and cni0 stay at 1500
    lab.add_ns("far")
    lab.veth("router", "eth1", "far", "eth0")
    lab.addr("router", "eth1", "10.99.0.1/24")
    lab.addr("far", "eth0", f"{FAR}/24")
    lab.route("far", "default", "via", "10.99.0.1")
    lab.route("router", "10.244.1.0/24", "via", "192.168.60.2")
    lab.background("far", [sys.executable, "-c", SERVER], stdout=None)
    lab.sh("pod0", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    return k


def test_pmtu_black_hole_for_real_and_kpdiag_names_the_rule_first(lab):
    _build(lab)
    assert _upload(lab, 100_000) and _frag_needed(lab)  # the node tells the pod; TCP adapts
    for chain in ("INPUT", "FORWARD"):  # where the brief's rule usually sits: the node's own ICMP does not pass there
        lab.sh("node", ["iptables", "-A", chain, "-p", "icmp", "--icmp-type", "fragmentation-needed", "-j", "DROP"])
    assert _frag_needed(lab) and _upload(lab, 100_000)
    report = _report(lab)
    assert not [f for f in report["findings"] if f["id"] == "KP524"]

    lab.sh("node", ["iptables", "-A", "OUTPUT", "-p", "icmp", "--icmp-type", "fragmentation-needed", "-j", "DROP"])
    assert not _frag_needed(lab)
    assert _upload(lab, 500) and not _upload(lab, 100_000)  # small works, large hangs: the black hole
    report = _report(lab)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors and errors[0]["id"] == "KP524", [(f["id"], f["summary"]) for f in errors]
    f = errors[0]
    assert "--icmp-type 3/4 -j DROP" in f["summary"] and "MTU 1500 above the 1400 bytes" in f["summary"]
    assert any(e["source"].endswith("iptables-save.txt") and "--icmp-type 3/4" in e["text"] for e in f["evidence"])
    kp508 = [x for x in report["findings"] if x["id"] == "KP508"]
    assert kp508 and all(x.get("caused_by", {}).get("id") == "KP524" for x in kp508)

    # the fix: RELATED accepted before the drop — the kernel delivers the ICMP, kpdiag is silent
    lab.sh("node", ["iptables", "-I", "OUTPUT", "1", "-m", "conntrack", "--ctstate", "RELATED", "-j", "ACCEPT"])
    assert _frag_needed(lab) and _upload(lab, 100_000)
    report = _report(lab)
    assert not [f for f in report["findings"] if f["id"] == "KP524"]
    assert next(c for c in report["checks"] if c["id"] == "KP524")["status"] == "ran"


def test_consistent_mtus_stay_silent_whatever_the_firewall(lab):
    _build(lab)
    for dev in ("veth0", "veth1", "cni0"):
        lab.sh("node", ["ip", "link", "set", dev, "mtu", "1400"])
    lab.sh("pod0", ["ip", "link", "set", "eth0", "mtu", "1400"])
    lab.sh("node", ["iptables", "-A", "OUTPUT", "-p", "icmp", "-j", "DROP"])
    assert _upload(lab, 100_000)  # nothing needs the ICMP: the pod's MSS already fits
    report = _report(lab)
    assert not [f for f in report["findings"] if f["id"] in ("KP524", "KP508")]
    assert next(c for c in report["checks"] if c["id"] == "KP524")["status"] == "ran"
