"""The field failures of issue 26 on the real kernel: what the checks claim is what the kernel does, and kpdiag's own
collector records what they read (bridge ports' hairpin mode, the overlay's UDP port, ethtool -k, node-cache)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab

CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(); s.settimeout(1.5)\n"
    "try:\n    s.connect(('10.96.0.20', 80)); print('connected')\n"
    "except OSError as e:\n    print('failed', e)\n"
)


def _self_service(lab):
    """pod0 is the only endpoint of shop/web (10.96.0.20:80 → 8080) and serves HTTP on 8080."""
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    pod0 = k.pods["pod0"]
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod0)])])
    )
    lab.background("pod0", [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    lab.sh("pod0", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    return k


def test_hairpin_off_drops_a_pod_reaching_itself_through_its_service(lab):
    """KP520's claim, on the kernel: with br_netfilter, hairpin off drops the pod's own Service connection; on, it works."""
    _self_service(lab)
    assert lab.sh("node", ["sysctl", "-n", "net.bridge.bridge-nf-call-iptables"]).stdout.strip() == "1"
    off = lab.sh("pod0", [sys.executable, "-c", CONNECT]).stdout
    lab.sh("node", ["ip", "link", "set", "veth0", "type", "bridge_slave", "hairpin", "on"])
    on = lab.sh("pod0", [sys.executable, "-c", CONNECT]).stdout
    assert off.startswith("failed") and on.startswith("connected"), (off, on)


def test_leftover_nodelocaldns_notrack_skips_kube_proxy_dnat(lab):
    """KP140's claim: node-cache's raw NOTRACK for the kube-dns ClusterIP takes queries out of kube-proxy's DNAT; with
    no interface holding the address they leave by the default route, untranslated."""
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset(
            [Service("kube-system", "kube-dns", "10.96.0.10", [Port("dns", 53, 53, "udp")], [Endpoint(ips[1])])]
        )
    )
    lab.sh(
        "client",
        ["nft", "-f", "-"],
        input="table ip seen {\n counter dns {\n }\n chain input {\n  type filter hook prerouting priority -500;\n"
        '  ip daddr 10.96.0.10 udp dport 53 counter name "dns"\n }\n}\n',
    )
    send = (
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'q' * 12, ('10.96.0.10', 53))"
    )

    def leaked() -> int:
        out = lab.sh("client", ["nft", "-j", "list", "counter", "ip", "seen", "dns"]).stdout
        return next(o["counter"]["packets"] for o in json.loads(out)["nftables"] if "counter" in o)

    lab.sh("pod0", [sys.executable, "-c", send])
    before = leaked()  # kube-proxy DNATs it to the CoreDNS pod: nothing reaches the gateway
    lab.sh(
        "node",
        [
            "iptables",
            "-t",
            "raw",
            "-I",
            "PREROUTING",
            "-p",
            "udp",
            "-d",
            "10.96.0.10",
            "--dport",
            "53",
            "-j",
            "NOTRACK",
        ],
    )
    lab.sh("pod0", [sys.executable, "-c", send.replace("s.sendto", "s.bind(('0.0.0.0', 40999)); s.sendto")])
    assert before == 0 and leaked() == 1


def test_collector_records_hairpin_overlay_port_and_offloads(lab, tmp_path):
    """kpdiag collect in a lab node keeps what KP520, KP521 and KP522 read, and the analysis reads them back."""
    _self_service(lab)
    lab.sh("node", ["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472", "dev", "ext0"])
    lab.sh("node", ["ip", "link", "set", "flannel.1", "up"])
    lab.sh("node", ["ip", "link", "set", "veth1", "type", "bridge_slave", "hairpin", "on"])
    out = str(tmp_path / "b")
    exe = shutil.which("kpdiag")
    argv = ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + ["collect", "-o", out, "--host-root", "/"]
    proc = lab.sh("node", argv, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    state = NodeState(Bundle.open(out))
    links = {link["ifname"]: link for link in state.ip_addr}
    assert links["veth0"]["linkinfo"]["info_slave_data"] == {"hairpin": False}
    assert links["veth1"]["linkinfo"]["info_slave_data"] == {"hairpin": True}
    assert links["flannel.1"]["linkinfo"]["info_data"] == {"port": 8472}
    offloads = state.source("node/ethtool-offload.txt")
    assert offloads is not None and "tx-checksum-ip-generic" in offloads.devices["flannel.1"]
    report = analyze_bundle(out)
    runs = {r.id: r for r in report.checks}
    assert runs["KP520"].status == "ran" and runs["KP520"].findings == 1  # veth0 (pod0, the endpoint) is off
    assert runs["KP522"].status == "ran" and runs["KP522"].findings == 0  # this kernel is ≥ 5.7
    kp520 = next(f for f in report.findings if f.id == "KP520")
    assert kp520.data["ports_hairpin_off"] == ["veth0"] and "10.244.1.10" in kp520.data["endpoints_on_bridge"]
    assert os.path.exists(os.path.join(out, "node", "ethtool-offload.txt"))


def test_firewalld_table_rejects_forwarded_pod_traffic(lab):
    """KP523's claim: firewalld's forward chain (as in fixtures/firewalld-forward-reject) rejects a pod's connection to
    a pod on another node with admin-prohibited (the pod sees 'No route to host'); with cni0 trusted it is let through."""
    from fixtures.make_fixtures import _ZONES, _ZONES_TRUSTED, FIREWALLD

    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "default", "via", k.client_ip)
    lab.sh("node", ["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472", "dev", "ext0"])
    lab.sh("node", ["ip", "link", "set", "flannel.1", "up"])
    lab.sh("node", ["ip", "addr", "add", "10.244.1.0/32", "dev", "flannel.1"])
    lab.sh("node", ["ip", "route", "add", "10.244.2.0/24", "via", "10.244.2.0", "dev", "flannel.1", "onlink"])
    connect = (
        "import errno, socket\ns = socket.socket(); s.settimeout(1.5)\n"
        "try:\n    s.connect(('10.244.2.5', 443)); print('connected')\n"
        "except socket.timeout:\n    print('timeout')\n"
        "except OSError as e:\n    print(errno.errorcode.get(e.errno, e.errno))\n"
    )
    lab.sh("node", ["nft", "-f", "-"], input=FIREWALLD)
    rejected = lab.sh("pod0", [sys.executable, "-c", connect]).stdout.strip()
    lab.sh("node", ["nft", "delete", "table", "inet", "firewalld"])
    lab.sh("node", ["nft", "-f", "-"], input=FIREWALLD.replace(_ZONES, _ZONES_TRUSTED))
    trusted = lab.sh("pod0", [sys.executable, "-c", connect]).stdout.strip()
    assert rejected == "EHOSTUNREACH" and trusted == "timeout", (rejected, trusted)  # no node-b behind flannel.1 here


def test_firewalld_rejects_other_nodes_pods_arriving_on_the_overlay_unless_it_is_trusted(lab):
    """KP523's inbound claim: with only cni0 trusted (fixtures/firewalld-pods-trusted), a connection from a pod on
    another node, arriving on the overlay device, is rejected with admin-prohibited; with flannel.1 trusted too
    (firewalld-overlay-trusted) it reaches the pod. The other node is a namespace behind a veth the node calls
    flannel.1 (firewalld matches the interface name; a VXLAN peer would add nothing to what is judged)."""
    from fixtures.make_fixtures import _ZONES, _ZONES_ALL_TRUSTED, _ZONES_TRUSTED, FIREWALLD

    k = KubeNodeLab.build(lab, pod_count=1)
    lab.route("node", "default", "via", k.client_ip)
    lab.add_ns("remote")
    lab.veth("remote", "eth0", "node", "flannel.1")
    lab.addr("remote", "eth0", "10.244.2.5/32")
    lab.addr("node", "flannel.1", "10.244.1.0/32")  # as flannel numbers its VTEP
    lab.route("remote", "10.244.1.0/24", "via", "10.244.1.0", "dev", "eth0", "onlink")
    lab.route("node", "10.244.2.0/24", "via", "10.244.2.5", "dev", "flannel.1", "onlink")
    lab.background("pod0", [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    lab.sh("pod0", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    connect = (
        "import errno, socket\ns = socket.socket(); s.settimeout(2)\n"
        "try:\n    s.connect(('10.244.1.10', 8080)); print('connected')\n"
        "except socket.timeout:\n    print('timeout')\n"
        "except OSError as e:\n    print(errno.errorcode.get(e.errno, e.errno))\n"
    )
    seen = {}
    for name, zones in (("bridge-trusted", _ZONES_TRUSTED), ("all-trusted", _ZONES_ALL_TRUSTED)):
        lab.sh("node", ["nft", "-f", "-"], input=FIREWALLD.replace(_ZONES, zones))
        seen[name] = lab.sh("remote", [sys.executable, "-c", connect]).stdout.strip()
        lab.sh("node", ["nft", "delete", "table", "inet", "firewalld"])
    assert seen == {"bridge-trusted": "EHOSTUNREACH", "all-trusted": "connected"}, seen


def test_hardened_host_firewall_drops_vxlan_from_another_node(lab):
    """KP521's claim: the host firewall of fixtures/overlay-port-blocked drops UDP 8472 arriving from another node
    before anything after it sees the packet; with 'udp dport 8472 accept' the packet gets through."""
    from fixtures.make_fixtures import HARDENED_FW

    KubeNodeLab.build(lab, pod_count=1)
    after = (
        "table inet seen {\n counter vxlan {\n }\n chain input {\n  type filter hook input priority 10;\n"
        '  udp dport 8472 counter name "vxlan"\n }\n}\n'
    )
    send = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'v' * 50, ('192.168.50.1', 8472))"

    def arrived() -> int:
        out = lab.sh("node", ["nft", "-j", "list", "counter", "inet", "seen", "vxlan"]).stdout
        return next(o["counter"]["packets"] for o in json.loads(out)["nftables"] if "counter" in o)

    lab.sh("node", ["nft", "-f", "-"], input=after)
    lab.sh("node", ["nft", "-f", "-"], input=HARDENED_FW)
    lab.sh("client", [sys.executable, "-c", send])
    dropped = arrived()
    lab.sh("node", ["nft", "delete", "table", "inet", "hostfw"])
    lab.sh("node", ["nft", "-f", "-"], input=HARDENED_FW.replace("accept; }", "accept; udp dport 8472 accept; }", 1))
    lab.sh("client", [sys.executable, "-c", send])
    assert dropped == 0 and arrived() == 1
