"""Issue 25 item 3: `kpdiag node` on a host that is no Kubernetes node says so first, recommends nothing, exits 3.

A bare lab namespace — an uplink (veth) with an address and a default route, IPv4 forwarding off (a new namespace's
default), no kubelet, kube-proxy, CNI interface or KUBE-* rule — is such a host. Before: KP501 "ip_forward off" with
`sysctl -w …` and a persistent drop-in, and KP707, exit 1. The same namespace with kube-proxy's rules loaded is a
node again (the counter-case: the checks run)."""

from __future__ import annotations

import json
import shutil
import sys

from tests.synth import Endpoint, Port, Service, iptables_ruleset


def _kpdiag(lab, *args):
    exe = shutil.which("kpdiag")
    argv = ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + list(args)
    return lab.sh("node", argv, check=False, timeout=300)


def _bare_host(lab) -> None:
    lab.add_ns("node")
    lab.add_ns("gw")
    lab.veth("node", "eth0", "gw", "eth0")
    lab.addr("node", "eth0", "192.168.77.2/24")
    lab.addr("gw", "eth0", "192.168.77.1/24")
    lab.route("node", "default", "via", "192.168.77.1")
    lab.sysctl("node", "net.ipv4.ip_forward", "0")


def test_a_bare_host_is_not_a_node(lab):
    _bare_host(lab)
    text = _kpdiag(lab, "node", "--quiet", "--no-api", "--host-root", "/")
    assert text.returncode == 3, (text.returncode, text.stdout[-2000:], text.stderr[-2000:])
    first = text.stderr.strip().splitlines()[0]
    assert "this does not look like a Kubernetes node" in first, text.stderr
    for looked_for in ("kubelet", ":10249/:10256", "cni0", "KUBE-* iptables chains"):
        assert looked_for in first, (looked_for, first)
    assert "sysctl" not in text.stdout + text.stderr and "ip_forward" not in text.stdout + text.stderr

    js = _kpdiag(lab, "node", "-o", "json", "--no-api", "--host-root", "/")
    assert js.returncode == 3
    report = json.loads(js.stdout)
    assert [f["id"] for f in report["findings"]] == ["KP709"]
    assert report["findings"][0]["data"]["not_a_node"] is True
    assert report["extra"]["headline"].split(": ", 1)[1].startswith("this does not look like a Kubernetes node")
    runs = {r["id"]: r for r in report["checks"]}
    assert runs["KP501"]["status"] == "skipped" and "does not look like a Kubernetes node" in runs["KP501"]["reason"]
    assert runs["KP707"]["status"] == "skipped"
    assert not [f for f in report["findings"] if f["fix"] and any("sysctl" in s for s in f["fix"])]


def test_the_same_host_with_kube_proxys_rules_is_a_node(lab):
    _bare_host(lab)
    lab.sh(
        "node",
        ["iptables-restore"],
        input=iptables_ruleset(
            [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint("10.244.1.10")])]
        ),
    )
    proc = _kpdiag(lab, "node", "-o", "json", "--no-api", "--host-root", "/")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    ids = {f["id"] for f in report["findings"]}
    assert "KP709" not in ids and {"KP501", "KP707"} <= ids, ids
    assert "headline" not in report["extra"]
