"""kpdiag trace against the real kernel (network namespaces): live on a node, and martian packets to 127.0.0.0/8."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from kpdiag import exitcodes
from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests.lab.bundle_from_ns import bundle_from_ns
from tests.lab.netlab import KubeNodeLab

pytestmark = pytest.mark.lab


def _kpdiag(lab, role, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh(role, argv + list(args), check=False, timeout=300)


def _paths(doc: dict) -> list:
    return sorted(
        (
            p["verdict"],
            p["dnat"],
            p["probability"],
            p["delivery"],
            [(s["table"], s["chain"], s["rule"]) for s in p["steps"]],
        )
        for p in doc["paths"]
    )


def _rules(lab) -> tuple:
    """The node's rules without counters and timestamps (the trace's own GET to /proxyMode on loopback counts)."""
    import re

    ipt = [
        re.sub(r"\[\d+:\d+\]", "", line)
        for line in lab.sh("node", ["iptables-save"]).stdout.splitlines()
        if not line.startswith("#")
    ]
    return ipt, re.sub(r"counter packets \d+ bytes \d+", "counter", lab.sh("node", ["nft", "list", "ruleset"]).stdout)


def test_live_trace_on_the_node_agrees_with_its_bundle_and_changes_nothing(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset(
            [
                Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0]), Endpoint(ips[1])]),
                Service("shop", "empty", "10.96.0.21", [Port("http", 80, 8080)], []),
            ]
        )
    )
    before = _rules(lab)

    live = _kpdiag(
        lab, "node", "trace", "--host-root", "/", "--src", k.client_ip, "--dst", "10.96.0.20:80", "-o", "json"
    )
    assert live.returncode == exitcodes.TRACE_DELIVERED, live.stderr
    doc = json.loads(live.stdout)
    assert sorted(p["dnat"] for p in doc["paths"]) == sorted(f"{ip}:8080" for ip in ips)

    bundle = bundle_from_ns(lab, "node", str(tmp_path / "bundle"))
    offline = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--bundle",
            bundle,
            "--src",
            k.client_ip,
            "--dst",
            "10.96.0.20:80",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert offline.returncode == 0, offline.stderr
    assert _paths(json.loads(offline.stdout)) == _paths(doc)
    # a live trace read no file: its rules are labelled live, a bundle's by the file
    assert doc["sources"] == ["iptables-save on this node, live"], doc["sources"]
    assert json.loads(offline.stdout)["sources"] == ["node/iptables-save.txt"]

    # live: --from node takes the node's address on the way out (ext0: the default route), no Service has .99, rejects
    node = json.loads(
        _kpdiag(
            lab, "node", "trace", "--host-root", "/", "--from", "node", "--dst", "10.96.0.20:80", "-o", "json"
        ).stdout
    )
    assert node["packet"]["src"] == "192.168.50.1"
    none = _kpdiag(lab, "node", "trace", "--host-root", "/", "--src", k.client_ip, "--dst", "10.96.0.99:80")
    assert none.returncode == 0 and "no Service has 10.96.0.99" in none.stdout
    assert "rules from iptables-save on this node, live" in none.stdout and "iptables-save.txt" not in none.stdout
    empty = _kpdiag(lab, "node", "trace", "--host-root", "/", "--src", k.client_ip, "--dst", "10.96.0.21:80")
    assert empty.returncode == exitcodes.TRACE_REJECTED and "has no endpoints" in empty.stdout
    assert _rules(lab) == before  # read-only


COUNT = """table ip kpcount {
  chain pre { type filter hook prerouting priority -400; ip daddr 127.0.0.1 tcp dport 3999 counter; }
  chain inp { type filter hook input priority -400; ip daddr 127.0.0.1 tcp dport 3999 counter; }
}
"""


def _counters(lab) -> dict[str, int]:
    doc = json.loads(lab.sh("node", ["nft", "-j", "list", "table", "ip", "kpcount"]).stdout)
    out = {}
    for item in doc["nftables"]:
        rule = item.get("rule")
        if rule:
            out[rule["chain"]] = next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
    return out


@pytest.mark.parametrize("localnet", ["0", "1"])
def test_a_packet_to_loopback_from_outside_is_a_martian_unless_route_localnet(lab, tmp_path, localnet):
    """A real SYN to 127.0.0.1 arrives on the node's ext0 (sent as an Ethernet frame: no host routes 127/8 out of
    an interface). The kernel drops it after PREROUTING when route_localnet is 0, delivers it when 1; kpdiag,
    tracing a bundle recorded from the same namespace, must say the same."""
    k = KubeNodeLab.build(lab, pod_count=1)
    lab.sysctl("node", "net.ipv4.conf.all.route_localnet", localnet)
    bundle = bundle_from_ns(lab, "node", str(tmp_path / "bundle"))
    lab.sh("node", ["nft", "-f", "-"], input=COUNT)
    mac = json.loads(lab.sh("node", ["ip", "-j", "link", "show", "ext0"]).stdout)[0]["address"]
    script = (
        "from scapy.all import Ether, IP, TCP, sendp, conf\nconf.verb = 0\n"
        f"sendp(Ether(dst='{mac}')/IP(src='{k.client_ip}', dst='127.0.0.1')/TCP(sport=41000, dport=3999, flags='S'), iface='eth0')\n"
    )
    lab.sh("client", [sys.executable, "-c", script], timeout=120)
    seen = _counters(lab)
    assert seen["pre"] == 1, seen  # it reached the node
    kernel_delivered = seen["inp"] == 1
    assert kernel_delivered == (localnet == "1"), seen

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--bundle",
            bundle,
            "--src",
            k.client_ip,
            "--dst",
            "127.0.0.1:3999",
            "--iif",
            "ext0",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    doc = json.loads(proc.stdout)
    assert not doc["uncertain"]
    if kernel_delivered:
        assert proc.returncode == 0 and [(p["verdict"], p["delivery"]) for p in doc["paths"]] == [("accept", "local")]
    else:
        assert proc.returncode == exitcodes.TRACE_DROPPED and [p["verdict"] for p in doc["paths"]] == ["drop"]
        assert any("martian destination" in n for n in doc["paths"][0]["notes"])


COUNT6 = """table netdev kpin6 {
  chain in { type filter hook ingress device "ext0" priority 0; ip6 daddr ::1 tcp dport 3999 counter; }
}
table ip6 kpcount6 {
  chain pre { type filter hook prerouting priority -400; ip6 daddr ::1 tcp dport 3999 counter; }
}
"""


def test_an_ipv6_packet_to_loopback_from_outside_never_reaches_prerouting(lab, tmp_path):
    """IPv6 has no route_localnet: a frame to ::1 arriving on ext0 is seen at ingress and never at PREROUTING."""
    KubeNodeLab.build(lab, pod_count=1)
    bundle = bundle_from_ns(lab, "node", str(tmp_path / "bundle"), ipv6=True)
    lab.sh("node", ["nft", "-f", "-"], input=COUNT6)
    mac = json.loads(lab.sh("node", ["ip", "-j", "link", "show", "ext0"]).stdout)[0]["address"]
    script = (
        "from scapy.all import Ether, IPv6, TCP, sendp, conf\nconf.verb = 0\n"
        f"sendp(Ether(dst='{mac}')/IPv6(src='fd00:50::2', dst='::1')/TCP(sport=41000, dport=3999, flags='S'), iface='eth0')\n"
    )
    lab.sh("client", [sys.executable, "-c", script], timeout=120)
    doc = json.loads(lab.sh("node", ["nft", "-j", "list", "ruleset"]).stdout)
    seen = {
        r["rule"]["table"]: next(e["counter"]["packets"] for e in r["rule"]["expr"] if "counter" in e)
        for r in doc["nftables"]
        if "rule" in r and r["rule"]["table"] in ("kpin6", "kpcount6")
    }
    assert seen == {"kpin6": 1, "kpcount6": 0}, seen

    checked = []
    for mode in ("iptables", "nftables"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kpdiag",
                "trace",
                "--bundle",
                bundle,
                "--mode",
                mode,
                "--src",
                "fd00:50::2",
                "--dst",
                "[::1]:3999",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
        )
        if mode == "iptables" and proc.returncode == exitcodes.NO_DIAGNOSIS:
            continue  # no ip6tables-save in this namespace's bundle: nothing to trace in iptables mode
        out = json.loads(proc.stdout)
        assert proc.returncode == exitcodes.TRACE_DROPPED, proc.stderr
        (path,) = out["paths"]
        assert (
            path["verdict"] == "drop"
            and [s["hook"] for s in path["steps"]] == ["receive"]
            and path["rules_evaluated"] == 0
        )
        checked.append(mode)
    assert "nftables" in checked, checked


COUNT_FWD = """table ip kpfwd {
  chain pr { type filter hook prerouting priority 0; ip daddr 10.244.1.10 tcp dport 8080 counter; }
  chain fw { type filter hook forward priority -400; ip daddr 10.244.1.10 tcp dport 8080 counter; }
}
"""


@pytest.mark.parametrize("forward", ["0", "1"])
def test_a_dnatted_packet_is_not_forwarded_when_ip_forward_is_off(lab, tmp_path, forward):
    """A real SYN from the client to a ClusterIP is DNATed to a pod in PREROUTING; with net.ipv4.ip_forward = 0 the
    kernel drops it at the routing decision (it never reaches FORWARD). kpdiag, tracing a bundle recorded from the
    same namespace, must say the same: dropped (exit 4) with the reason, or forwarded to the pod."""
    k = KubeNodeLab.build(lab, pod_count=1)
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(k.pods["pod0"])])])
    )
    lab.sysctl("node", "net.ipv4.ip_forward", forward)
    bundle = bundle_from_ns(lab, "node", str(tmp_path / "bundle"))
    lab.sh("node", ["nft", "-f", "-"], input=COUNT_FWD)
    script = (
        "from scapy.all import IP, TCP, send, conf\nconf.verb = 0\n"
        f"send(IP(src='{k.client_ip}', dst='10.96.0.20')/TCP(sport=41000, dport=80, flags='S'))\n"
    )
    lab.sh("client", [sys.executable, "-c", script], timeout=120)
    doc = json.loads(lab.sh("node", ["nft", "-j", "list", "table", "ip", "kpfwd"]).stdout)
    seen = {
        i["rule"]["chain"]: next(e["counter"]["packets"] for e in i["rule"]["expr"] if "counter" in e)
        for i in doc["nftables"]
        if "rule" in i
    }
    assert seen["pr"] == 1, seen  # DNATed to the pod
    assert seen["fw"] == (1 if forward == "1" else 0), seen

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--bundle",
            bundle,
            "--src",
            k.client_ip,
            "--dst",
            "10.96.0.20:80",
            "--iif",
            "ext0",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    out = json.loads(proc.stdout)
    (path,) = out["paths"]
    assert path["dnat"] == f"{k.pods['pod0']}:8080" and not out["uncertain"]
    if forward == "1":
        assert (
            proc.returncode == exitcodes.TRACE_DELIVERED and path["verdict"] == "accept" and path["delivery"] != "local"
        )
    else:
        assert proc.returncode == exitcodes.TRACE_DROPPED and path["verdict"] == "drop"
        assert "FORWARD" not in [s["hook"] for s in path["steps"]]
        assert any("ip_forward = 0" in n for n in path["notes"]), path["notes"]
