"""A node whose iptables rules cannot be read is not "not a Kubernetes node". iptables keeps a rule's comment as
bytes: a host firewall's comment in Latin-1 (`café`) makes iptables-save print a byte that is not UTF-8, the whole
dump is then unreadable ("could not read" names its line) — and with it every KUBE-* chain, the one sign of
Kubernetes a node without a kubelet in sight or a known network plugin's interfaces has. kpdiag must then say the rules
could not be read, not that the host is no node (KP709: "nothing is diagnosed or recommended")."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.conftest import FIXTURES

pytestmark = pytest.mark.lab


def _kpdiag(lab, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh("node", argv + list(args), check=False, timeout=300)


def test_rules_with_a_comment_not_in_utf8_do_not_make_a_node_no_node(lab):
    lab.add_ns("node")
    lab.add_ns("client")
    lab.veth("client", "eth0", "node", "ext0")
    lab.addr("node", "ext0", "192.168.50.1/24")
    with open(f"{FIXTURES}/healthy-iptables/node/iptables-save.txt") as fh:
        lab.sh("node", ["iptables-restore"], input=fh.read(), timeout=300)

    def report() -> dict:
        proc = _kpdiag(lab, "node", "-o", "json", "--host-root", "/", "--fail-on", "never", "--no-api")
        assert proc.stdout, proc.stderr
        return json.loads(proc.stdout)

    before = report()  # kube-proxy's rules readable: a node (its rules are the sign)
    assert not [f for f in before["findings"] if f["id"] == "KP709"]
    assert before["facts"]["iptables_rules"] > 0

    # argv is bytes to the kernel: U+DCFF/U+DCE9 (surrogateescape) are the bytes 0xff and 0xe9
    lab.sh(
        "node", ["iptables", "-A", "INPUT", "-m", "comment", "--comment", "host fw caf\udce9 \udcff", "-j", "ACCEPT"]
    )
    after = report()
    unreadable = [p for p in after["problems"] if p["source"].startswith("node/iptables-save.txt:")]
    assert unreadable and "not UTF-8" in unreadable[0]["error"], after["problems"]
    assert not [f for f in after["findings"] if f["id"] == "KP709"], [f["summary"] for f in after["findings"]]
