"""`kpdiag node` on a live node (a namespace with real rules and sysctls), and collect → analyze parity."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab


def _kpdiag(lab, role, *args):
    exe = shutil.which("kpdiag")
    argv = [exe] if exe else [sys.executable, "-m", "kpdiag"]
    return lab.sh(role, argv + list(args), check=False, timeout=300)


def test_node_live_then_collect_and_analyze_agree(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset(
            [
                Service(
                    "shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0]), Endpoint("10.244.7.7")]
                ),
            ]
        )
    )
    lab.sysctl("node", "net.ipv4.ip_forward", "0")
    lab.sh("node", ["iptables", "-P", "FORWARD", "DROP"])
    lab.sh(
        "node",
        ["nft", "-f", "-"],
        input="table inet hostfw { chain input { type filter hook input priority 10; tcp dport 22 accept; }; }\n",
    )

    # --all-rules: the whole dump, as `collect` takes it (a focused run's partial bundle: test_focused_differential.py)
    live = _kpdiag(lab, "node", "node", "-o", "json", "--host-root", "/", "--service", "shop/web", "--all-rules")
    assert live.returncode == 1, live.stderr  # errors found
    report = json.loads(live.stdout)
    ids = {f["id"] for f in report["findings"]}
    assert {"KP501", "KP207"} <= ids, report["findings"]
    kp501 = next(f for f in report["findings"] if f["id"] == "KP501")
    assert kp501["evidence"][0]["text"] == "net.ipv4.ip_forward = 0"
    assert report["facts"]["iptables_rules"] > 10 and report["facts"]["service_ports_programmed"] == 1
    # kube-proxy is not running in the lab: said plainly, not hidden
    assert any("10249" in p["error"] for p in report["problems"])
    traces = report["extra"]["traces"]
    assert {t["target"] for t in traces} == {"shop/web:http"}
    assert any(p["dnat"] == f"{ips[0]}:8080" for t in traces for p in t["paths"])

    out = tmp_path / "bundle"
    col = _kpdiag(lab, "node", "collect", "-o", str(out), "--host-root", "/")
    assert col.returncode == 0, col.stderr
    assert (out / "kpdiag.json").exists() and (out / "node" / "iptables-save.txt").exists()
    nft_doc = json.loads((out / "node" / "nft-ruleset.json").read_text())
    tables = {(i["table"]["family"], i["table"]["name"]) for i in nft_doc["nftables"] if "table" in i}
    assert ("inet", "hostfw") in tables and ("ip", "nat") not in tables  # iptables-nft's tables: in iptables-save
    manifest = json.loads((out / "kpdiag.json").read_text())
    assert any("iptables-nft's own tables" in e["error"] for e in manifest["errors"])
    ana = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(out), "-o", "json"], capture_output=True, text=True
    )
    offline = json.loads(ana.stdout)
    assert ana.returncode == live.returncode
    assert [(f["id"], f["summary"]) for f in offline["findings"]] == [
        (f["id"], f["summary"]) for f in report["findings"]
    ]
    assert [(c["id"], c["status"]) for c in offline["checks"]] == [(c["id"], c["status"]) for c in report["checks"]]

    tgz = tmp_path / "bundle.tar.gz"
    assert _kpdiag(lab, "node", "collect", "-o", str(tgz)).returncode == 0
    ana2 = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(tgz), "-o", "json"], capture_output=True, text=True
    )
    assert [f["id"] for f in json.loads(ana2.stdout)["findings"]] == [f["id"] for f in offline["findings"]]


def test_node_live_dual_stack(lab, tmp_path):
    """A dual-stack node: kpdiag's own collector records ip6tables-save and the IPv6 routes, `--trace [v6]:port`
    goes through the IPv6 rules, and the node's programmed table carries both families' ClusterIPs."""
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    lab.sh("client", ["ip", "-6", "addr", "add", "fd00:50::2/64", "dev", "eth0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:50::1/64", "dev", "ext0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:244:1::1/64", "dev", "cni0", "nodad"])
    lab.sh("node", ["ip", "-6", "route", "add", "default", "via", "fd00:50::2"])
    lab.sysctl("node", "net.ipv6.conf.all.forwarding", "1")
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0])])])
    )
    lab.sh(
        "node",
        ["ip6tables-restore"],
        input=iptables_ruleset(
            [Service("shop", "web", "fd00:10:96::20", [Port("http", 80, 8080)], [Endpoint("fd00:244:1::a")])],
            cluster_cidr="fd00:244::/32",
        ),
    )

    live = _kpdiag(
        lab, "node", "node", "-o", "json", "--host-root", "/", "--trace", "[fd00:10:96::20]:80", "--fail-on", "never"
    )
    assert live.returncode == 0, live.stderr
    report = json.loads(live.stdout)
    traces = report["extra"]["traces"]
    assert traces and all(p["dnat"] == "[fd00:244:1::a]:8080" for t in traces for p in t["paths"]), traces
    assert {t["packet"]["src"] for t in traces} == {
        "fd00:244::4d",
        "2001:db8::77",
    }  # a pod of the IPv6 cluster CIDR; outside
    entries = report["extra"]["programmed"]["entries"]
    assert "10.96.0.20:80/tcp" in entries and "fd00:10:96::20:80/tcp" in entries

    out = tmp_path / "bundle"
    assert _kpdiag(lab, "node", "collect", "-o", str(out), "--host-root", "/").returncode == 0
    assert "fd00:10:96::20" in (out / "node" / "ip6tables-save.txt").read_text()
    routes = json.loads((out / "node" / "ip-route.json").read_text())
    assert any(r.get("dst") == "default" and r.get("gateway") == "fd00:50::2" for r in routes)
    trace = subprocess.run(
        [
            sys.executable,
            "-m",
            "kpdiag",
            "trace",
            "--bundle",
            str(out),
            "--src",
            "fd00:50::2",
            "--dst",
            "fd00:10:96::20",
            "--dport",
            "80",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert trace.returncode == 0, trace.stderr
    doc = json.loads(trace.stdout)
    assert [p["dnat"] for p in doc["paths"]] == ["[fd00:244:1::a]:8080"] and not doc["uncertain"]


def test_kp501_says_what_the_kernel_does_with_forwarding_off(lab):
    """KP501's claim checked on the kernel: with net.ipv4.ip_forward = 0 a Service's traffic from outside — and from a
    pod — does not reach even a pod on this node (a pod is another interface), while the node itself still does."""
    k = KubeNodeLab.build(lab, pod_count=2)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0])])])
    )
    lab.sysctl("node", "net.ipv4.ip_forward", "0")

    def reaches(role: str, ip: str) -> bool:
        return lab.sh(role, ["ping", "-c1", "-W1", ip], check=False).returncode == 0

    assert not reaches("client", ips[0]) and not reaches("pod1", "192.168.50.2") and reaches("node", ips[0])
    live = _kpdiag(lab, "node", "node", "-o", "json", "--host-root", "/", "--no-api")
    (kp501,) = [f for f in json.loads(live.stdout)["findings"] if f["id"] == "KP501"]
    assert "whether its endpoints are on this node or another" in kp501["summary"], kp501["summary"]
    lab.sysctl("node", "net.ipv4.ip_forward", "1")
    assert reaches("client", ips[0])  # the same path, forwarding on
