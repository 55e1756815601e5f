"""iptables keeps a rule's comment as bytes: a host firewall's comment in Latin-1 (`café`) makes iptables-save print a
byte that is not UTF-8. That made the whole dump unreadable — every rule, and with them every KUBE-* chain, the one
sign of Kubernetes a node without a kubelet in sight or a known network plugin's interfaces has, so KP709 called the
node "not a Kubernetes node" and diagnosed nothing. The rules are read with the byte as U+FFFD (a note names its line),
and rules in a bundle that could not be read never make a host "not a node"."""

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


def _node_with_kube_proxy_rules(lab) -> None:
    """A namespace node behind a client, with healthy-iptables' rules (kube-proxy's, recorded) loaded."""
    lab.add_ns("node")
    lab.add_ns("client")
    lab.veth("client", "eth0", "node", "ext0")
    lab.addr("node", "ext0", "192.168.50.1/24")
    with open(f"{FIXTURES}/healthy-iptables/node/iptables-save.txt") as fh:
        lab.sh("node", ["iptables-restore"], input=fh.read(), timeout=300)


def test_rules_with_a_comment_not_in_utf8_do_not_make_a_node_no_node(lab):
    _node_with_kube_proxy_rules(lab)

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
    # and the rules are read all the same, the comment's bytes as U+FFFD: one rule more than before
    assert "read as U+FFFD" in unreadable[0]["error"]
    assert after["facts"]["iptables_rules"] == before["facts"]["iptables_rules"] + 1
    assert after["facts"]["service_ports_programmed"] == before["facts"]["service_ports_programmed"] > 0


def test_a_bundle_whose_rules_cannot_be_read_is_not_called_no_node(lab, tmp_path):
    """Collected for real from a namespace node with kube-proxy's rules, then its iptables-save damaged (a NUL byte:
    not text): the rules are there but unreadable, so the absence of KUBE-* chains is unknown — no KP709."""
    _node_with_kube_proxy_rules(lab)
    out = tmp_path / "bundle"
    proc = _kpdiag(lab, "collect", "-o", str(out), "--host-root", "/")
    assert proc.returncode == 0, proc.stderr
    rules = out / "node/iptables-save.txt"
    rules.write_bytes(rules.read_bytes().replace(b"\n", b"\n\x00", 1))
    proc = _kpdiag(lab, "analyze", str(out), "-o", "json", "--fail-on", "never")
    report = json.loads(proc.stdout)
    assert any(p["source"] == "node/iptables-save.txt:2" for p in report["problems"]), report["problems"]
    assert not [f for f in report["findings"] if f["id"] == "KP709"], [f["summary"] for f in report["findings"]]


def test_kube_proxy_absent_does_not_say_no_rules_exist_when_they_could_not_be_read(lab, tmp_path):
    """Collected without CAP_NET_ADMIN (iptables-save is refused) on a namespace node that has kube-proxy's rules:
    KP707 may say kube-proxy is not running, not that "no Service rules exist" — they were never read."""
    _node_with_kube_proxy_rules(lab)
    out = tmp_path / "bundle"
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    caps = "-all,+net_raw,+sys_ptrace,+sys_chroot"  # the node pod's, less NET_ADMIN
    proc = lab.sh(
        "node",
        [
            "setpriv",
            f"--inh-caps={caps}",
            f"--bounding-set={caps}",
            *argv,
            "collect",
            "-o",
            str(out),
            "--host-root",
            "/",
        ],
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert not (out / "node/iptables-save.txt").exists()
    # what nft could not list is a problem of the file it was for, never of an internal step's name
    sources_said = {e["source"] for e in json.loads((out / "kpdiag.json").read_text())["errors"]}
    assert "node/nft-ruleset.json" in sources_said and not any("/." in s for s in sources_said), sources_said
    proc = _kpdiag(lab, "analyze", str(out), "-o", "json", "--fail-on", "never")
    kp707 = [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "KP707"]
    assert kp707, proc.stdout[:2000]  # no kube-proxy process here: it is absent
    assert "no Service rules exist" not in kp707[0]["summary"]
    assert (
        "whether it left Service rules is not known: they could not be read (node/iptables-save.txt:"
        in kp707[0]["summary"]
    )
