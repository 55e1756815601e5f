"""The node checks of issue 15, live: each state is made for real in a namespace node (sysctls, interfaces, tunnels,
firewall tables, duplicated rules, conntrack counters), where the kernel can show it the kernel's own behaviour is
checked (a counter, a connection), and `kpdiag node` run in that namespace must name it — and stay silent once the
state is put right."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

HOSTFW = """table inet hostfw {
  chain input { type filter hook input priority 0; policy drop; iifname "lo" accept; ct state established,related accept; tcp dport 22 accept; }
  chain forward { type filter hook forward priority 0; policy drop; ct state established,related accept; }
}
"""


def _kpdiag(lab, role, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh(role, argv + list(args), check=False, timeout=300)


def _node_report(lab) -> dict:
    proc = _kpdiag(lab, "node", "node", "-o", "json", "--host-root", "/", "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _findings(report, check_id) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == check_id]


def _ran(report, check_id) -> dict:
    return next(c for c in report["checks"] if c["id"] == check_id)


def _nodeport_lab(lab):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset(
            [Service("shop", "front", "10.96.0.40", [Port("http", 80, 8080, node_port=30080)], [Endpoint(ips[0])])]
        )
    )
    return k, ips


def test_rp_filter_strict_drops_for_real_and_kpdiag_names_it(lab):
    k, _ = _nodeport_lab(lab)
    lab.add_ns("client2")  # a second network on a second uplink, ext1
    lab.veth("client2", "eth0", "node", "ext1")
    lab.addr("client2", "eth0", "192.168.51.2/24")
    lab.addr("node", "ext1", "192.168.51.1/24")
    lab.sh(
        "client2", ["ip", "addr", "add", "198.51.100.9/32", "dev", "eth0"]
    )  # a client from elsewhere, routed via ext1
    lab.route("client2", "default", "via", "192.168.51.1")
    for value, strict in (("1", True), ("2", False)):
        lab.sysctl("node", "net.ipv4.conf.all.rp_filter", value)
        lab.sysctl("node", "net.ipv4.conf.ext1.rp_filter", value)
        # the kernel's own input route lookup, reverse-path check included, for that client's packet arriving on ext1
        verdict = lab.sh(
            "node", ["ip", "route", "get", "192.168.51.1", "from", "198.51.100.9", "iif", "ext1"], check=False
        )
        assert (verdict.returncode != 0) == strict, (value, verdict.stdout, verdict.stderr)
        report = _node_report(lab)
        found = _findings(report, "KP506")
        assert _ran(report, "KP506")["status"] == "ran"
        if strict:
            assert [f["subject"] for f in found] == ["ext1"], found
            assert "192.168.51.1" in found[0]["summary"] and "ext0" in found[0]["summary"]
        else:
            assert not found, found


def test_ipv6_forwarding_off_on_a_dual_stack_node(lab):
    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "default", "via", k.client_ip)
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:50::1/64", "dev", "ext0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:244:1::1/64", "dev", "cni0", "nodad"])
    k.load_iptables(
        iptables_ruleset(
            [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(list(k.pods.values())[0])])]
        )
    )
    lab.sh(
        "node",
        ["ip6tables-restore"],
        input=iptables_ruleset(
            [Service("shop", "web", "fd00:10:96::20", [Port("http", 80, 8080)], [Endpoint("fd00:244:1::a")])],
            cluster_cidr="fd00:244::/48",
        ),
    )
    lab.sysctl("node", "net.ipv6.conf.all.forwarding", "0")
    found = _findings(_node_report(lab), "KP507")
    assert len(found) == 1 and "net.ipv6.conf.all.forwarding = 0" in found[0]["summary"], found
    assert any("ip6tables-save" in e["source"] for e in found[0]["evidence"])
    lab.sysctl("node", "net.ipv6.conf.all.forwarding", "1")
    report = _node_report(lab)
    assert not _findings(report, "KP507") and _ran(report, "KP507")["status"] == "ran"


def test_vxlan_mtu_mismatch_and_fixed(lab):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    lab.sh(
        "node",
        ["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472", "local", "192.168.50.1"],
    )
    lab.sh("node", ["ip", "link", "set", "flannel.1", "mtu", "1500", "up"])
    lab.sh("node", ["ip", "addr", "add", "10.244.1.0/32", "dev", "flannel.1"])
    lab.route("node", "10.244.2.0/24", "via", "10.244.2.0", "dev", "flannel.1", "onlink")
    found = _findings(_node_report(lab), "KP508")
    assert {f["subject"] for f in found} == {"flannel.1", "node"}, found  # the tunnel, and the pods behind it
    pods = next(f for f in found if f["subject"] == "node")
    assert "1450" in pods["summary"] and "veth0" in pods["summary"]
    # what flannel would have set: tunnel = uplink − 50, pods and bridge no larger
    lab.sh("node", ["ip", "link", "set", "flannel.1", "mtu", "1450"])
    for dev in ("veth0", "veth1", "cni0"):
        lab.sh("node", ["ip", "link", "set", dev, "mtu", "1450"])
    report = _node_report(lab)
    assert not _findings(report, "KP508") and _ran(report, "KP508")["status"] == "ran"


def test_host_firewall_drops_nodeports_for_real_and_kpdiag_says_where(lab):
    k, ips = _nodeport_lab(lab)
    lab.background("pod0", [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], stdout=None)
    probe = [
        sys.executable,
        "-c",
        "import socket,time\nfor _ in range(30):\n    s = socket.socket(); s.settimeout(1)\n"
        "    try:\n        s.connect(('192.168.50.1', 30080)); print('connected'); break\n    except OSError: time.sleep(0.2)\n"
        "    finally: s.close()\nelse: print('failed')",
    ]
    assert lab.sh("client", probe).stdout.strip() == "connected"  # kube-proxy's NodePort works without the firewall
    report = _node_report(lab)
    assert not _findings(report, "KP509") and _ran(report, "KP509")["status"] == "ran"

    lab.sh("node", ["nft", "-f", "-"], input=HOSTFW)
    assert (
        lab.sh("client", probe[:2] + [probe[2].replace("range(30)", "range(2)")]).stdout.strip() == "failed"
    )  # the kernel drops it
    found = _findings(_node_report(lab), "KP509")
    assert len(found) == 1, found
    text = found[0]["summary"]
    assert "30080/tcp" in text and "inet hostfw forward" in text, text
    assert any("nft insert rule inet hostfw forward" in f for f in found[0]["fix"])


def test_duplicated_rules(lab):
    k, _ = _nodeport_lab(lab)
    rule = (
        '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" '
        "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
    )
    lab.sh("node", ["iptables-restore", "--noflush"], input="*filter\n" + "\n".join([rule] * 60) + "\nCOMMIT\n")
    found = _findings(_node_report(lab), "KP209")
    assert len(found) == 1 and "61 times" in found[0]["summary"], found
    assert found[0]["evidence"][0]["line"] is not None


def test_conntrack_invalid_counter_from_real_packets(lab):
    k, _ = _nodeport_lab(lab)
    lab.sysctl("node", "net.netfilter.nf_conntrack_tcp_loose", "0")  # a mid-stream ACK is INVALID then
    script = (
        "from scapy.all import IP, TCP, send, conf\nconf.verb = 0\n"
        "send([IP(src='192.168.50.2', dst='192.168.50.1')/TCP(sport=40000 + i, dport=22, flags='A', seq=1, ack=1) for i in range(1200)])"
    )
    lab.sh("client", [sys.executable, "-c", script], timeout=300)
    stats = lab.sh("node", ["conntrack", "-S"]).stdout
    assert sum(int(x.split("=")[1]) for x in stats.split() if x.startswith("invalid=")) >= 1200, stats
    found = _findings(_node_report(lab), "KP510")
    assert len(found) == 1 and "INVALID" in found[0]["summary"], found
    assert any("KUBE-FORWARD" in e["text"] for e in found[0]["evidence"])


def test_kube_proxy_absent_and_conntrack_entries_collected_udp_first(lab, tmp_path):
    k, ips = _nodeport_lab(lab)
    # UDP and TCP conntrack entries in the node's table (from real packets through kube-proxy's rules)
    udp = [
        sys.executable,
        "-c",
        "import socket\nfor i in range(30):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.sendto(b'x', ('192.168.50.1', 40000 + i))\n",
    ]
    lab.sh("client", udp)
    report = _node_report(lab)
    found = _findings(report, "KP707")
    assert len(found) == 1 and "service ports" in found[0]["summary"], found  # rules left, nothing updating them
    out = tmp_path / "b"
    code = (
        "import sys, kpdiag.collect.node as n\nn.CONNTRACK_MAX_ENTRIES = 10\n"
        "from kpdiag.bundle.store import write_bundle\nfrom kpdiag.bundle import sources as src\n"
        "c = n.NodeCollector(host_root='/', only=(src.CONNTRACK_STATS, src.CONNTRACK, src.PROCESSES))\nc.collect()\n"
        "write_bundle(c.out.files, sys.argv[1], c.out.manifest('lab'))"
    )
    lab.sh("node", [sys.executable, "-c", code, str(out)])
    lines = (out / "node" / "conntrack.txt").read_text().splitlines()
    assert len(lines) == 10 and all(line.startswith("udp") for line in lines), lines
    manifest = json.loads((out / "kpdiag.json").read_text())
    assert any(e["source"] == "node/conntrack.txt" and "cut at 10 entries" in e["error"] for e in manifest["errors"]), (
        manifest["errors"]
    )
    assert (out / "node" / "processes.txt").read_text().startswith("1 ")
