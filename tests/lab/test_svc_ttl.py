"""The seed case, exactly as users meet it: ping to a ClusterIP answers "Time to live exceeded".

pod0 ──▶ node (kube-proxy rules; default route → router) ──▶ router (routes the service CIDR
back to the node). A real `ping` from the pod loops until its TTL runs out; `kpdiag svc`, run in
the pod against a Kubernetes API server in the same namespace (real HTTP, real client), reports
KP201 naming the router, shows TCP working through the Service, and explains and fixes it.
With the router's blackhole route, the TTL-exceeded evidence is gone.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests import k8sobjects as k8s

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start_api(lab, role, objects, tmp_path):
    objs = tmp_path / "objects.json"
    objs.write_text(json.dumps(objects))
    url_file = tmp_path / "url"
    env_cmd = ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "tests.apiserver", str(objs), str(url_file)]
    lab.background(role, env_cmd, subprocess.DEVNULL)
    for _ in range(100):
        if url_file.exists() and url_file.read_text():
            break
        time.sleep(0.1)
    url = url_file.read_text()
    from tests.apiserver import write_kubeconfig

    kc = tmp_path / "kubeconfig"
    write_kubeconfig(str(kc), url)
    return str(kc)


def _svc(lab, role, kc, *args):
    proc = lab.sh(
        role,
        [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", kc, "-o", "json", *args],
        check=False,
        timeout=120,
    )
    assert proc.stdout, proc.stderr
    return proc, json.loads(proc.stdout)


def test_ping_ttl_exceeded_reproduced_explained_and_fixed(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=3, router=True)
    lab.route("router", "10.96.0.0/12", "via", "192.168.60.2")  # the gateway routes the service CIDR back to the node
    lab.route("router", "10.244.0.0/16", "via", "192.168.60.2")
    pod1, pod2 = k.pods["pod1"], k.pods["pod2"]
    k.load_iptables(
        iptables_ruleset(
            [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod1), Endpoint(pod2)])]
        )
    )
    for role in ("pod1", "pod2"):
        lab.background(role, [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
    time.sleep(1.0)

    # 1. the symptom, with the real ping
    ping = lab.sh("pod0", ["ping", "-c", "1", "-W", "3", "10.96.0.20"], check=False)
    assert "Time to live exceeded" in ping.stdout, ping.stdout
    assert "From 192.168.60.1" in ping.stdout, ping.stdout

    objects = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice(
            "shop",
            "web",
            [(pod1, True, "lab-node", "web-1"), (pod2, True, "lab-node", "web-2")],
            [("http", 8080, "TCP")],
        ),
        k8s.pod(
            "shop", "web-1", pod1, {"app": "web"}, node="lab-node", ports=[{"name": "http", "containerPort": 8080}]
        ),
        k8s.pod(
            "shop", "web-2", pod2, {"app": "web"}, node="lab-node", ports=[{"name": "http", "containerPort": 8080}]
        ),
        k8s.kube_proxy_configmap("iptables"),
    ]
    kc = _start_api(lab, "pod0", objects, tmp_path)

    # 2. kpdiag explains it
    proc, report = _svc(lab, "pod0", kc)
    kp201 = [f for f in report["findings"] if f["id"] == "KP201"]
    assert kp201, report["findings"]
    f = kp201[0]
    assert f["severity"] == "warning"
    assert "Time to live exceeded" in f["summary"] and "192.168.60.1" in f["summary"]
    assert "TCP 80 works through the Service" in f["summary"]
    assert any("blackhole" in step and "192.168.60.1" in step for step in f["fix"])
    assert any("TTL walk" in e["text"] for e in f["evidence"])
    assert "ICMP" in f["explanation"] and "default gateway" in f["explanation"]
    verdict = report["extra"]["verdict"]
    assert any(line.startswith("TCP 80 works through the Service") for line in verdict), verdict
    assert any("does not and cannot work" in line for line in verdict), verdict
    results = {(r["kind"], r["target"]): r for r in report["extra"]["probes"]["results"]}
    assert results[("tcp-connect", "10.96.0.20:80/tcp")]["result"] == "connected"
    assert results[("tcp-syn", "10.96.0.20:80/tcp")]["result"] == "syn-ack"
    assert results[("tcp-connect", f"{pod1}:8080/tcp")]["result"] == "connected"
    walk = results[("ttl-walk", "10.96.0.20/icmp")]
    assert walk["detail"]["loop_between"] and "192.168.60.1" in walk["detail"]["loop_between"]
    assert report["extra"]["probes"]["packets_sent"] <= 64
    assert proc.returncode == 0  # a warning is below the default --fail-on error

    # 3. the fix: a blackhole route for the service CIDR on the router
    lab.sh("router", ["ip", "route", "replace", "blackhole", "10.96.0.0/12"])
    ping = lab.sh("pod0", ["ping", "-c", "1", "-W", "2", "10.96.0.20"], check=False)
    assert "Time to live exceeded" not in ping.stdout
    proc, report = _svc(lab, "pod0", kc)
    assert all(r["result"] != "time-exceeded" for r in report["extra"]["probes"]["results"])
    for f in report["findings"]:
        assert "Time to live exceeded" not in f["summary"] and not any(
            "time-exceeded" in e["text"] for e in f["evidence"]
        )
    kp201 = [f for f in report["findings"] if f["id"] == "KP201"]
    assert kp201 and kp201[0]["severity"] == "info" and "no answer" in kp201[0]["summary"]
    assert any(line.startswith("TCP 80 works") for line in report["extra"]["verdict"])
    assert any("gets no answer" in line for line in report["extra"]["verdict"])


def test_no_dns_is_one_clear_line(lab, tmp_path):
    KubeNodeLab.build(lab, pod_count=1)
    lab.set_resolv(
        "pod0",
        "nameserver 127.0.0.9\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions timeout:1 attempts:1\n",
    )
    objects = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice("shop", "web", [("10.244.1.10", True, "lab-node", "web-1")], [("http", 8080, "TCP")]),
    ]
    kc = _start_api(lab, "pod0", objects, tmp_path)
    proc, report = _svc(lab, "pod0", kc)  # DNS is a probe: --no-probe would not ask it
    assert report["extra"]["dns"]["result"] in ("dns-failure", "timeout")
    kp108 = next(f for f in report["findings"] if f["id"] == "KP108")
    assert kp108["severity"] == "warning" and kp108["summary"].startswith("DNS could not be asked about shop/web")
    assert "127.0.0.9" in kp108["summary"]
    assert "Traceback" not in proc.stderr


def test_ipv6_ping_hop_limit_exceeded_on_a_dual_stack_service(lab, tmp_path):
    """The seed case on IPv6: a dual-stack Service, the gateway routes both service CIDRs back to the node; ping -6
    to the IPv6 ClusterIP gets 'Time exceeded: Hop limit'. kpdiag svc probes both ClusterIPs (ICMPv6 with scapy),
    reports KP201 for each with the right family's fix, and says TCP works through both."""
    k = KubeNodeLab.build(lab, pod_count=3, router=True)
    lab.route("router", "10.96.0.0/12", "via", "192.168.60.2")
    lab.route("router", "10.244.0.0/16", "via", "192.168.60.2")
    for role in ["node", "router", *k.pods]:
        lab.sysctl(role, "net.ipv6.conf.all.disable_ipv6", "0")
    lab.sh("router", ["ip", "-6", "addr", "add", "fd00:60::1/64", "dev", "eth0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:60::2/64", "dev", "up0", "nodad"])
    lab.sh("node", ["ip", "-6", "addr", "add", "fd00:244:1::1/64", "dev", "cni0", "nodad"])
    pods6 = {}
    for i, role in enumerate(k.pods):
        pods6[role] = f"fd00:244:1::{10 + i:x}"
        lab.sh(role, ["ip", "-6", "addr", "add", f"{pods6[role]}/64", "dev", "eth0", "nodad"])
        lab.sh(role, ["ip", "-6", "route", "add", "default", "via", "fd00:244:1::1"])
    lab.sh("node", ["ip", "-6", "route", "add", "default", "via", "fd00:60::1"])
    lab.sh(
        "router", ["ip", "-6", "route", "add", "fd00:10:96::/112", "via", "fd00:60::2"]
    )  # the service CIDR, back to the node
    lab.sh("router", ["ip", "-6", "route", "add", "fd00:244::/32", "via", "fd00:60::2"])
    for role in ("node", "router"):
        lab.sysctl(role, "net.ipv6.conf.all.forwarding", "1")
        lab.sysctl(role, "net.ipv6.icmp.ratelimit", "0")  # every hop answers the TTL walk (the default is 1 error/s)
    pod1, pod2 = k.pods["pod1"], k.pods["pod2"]
    k.load_iptables(
        iptables_ruleset(
            [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod1), Endpoint(pod2)])]
        )
    )
    lab.sh(
        "node",
        ["ip6tables-restore"],
        input=iptables_ruleset(
            [
                Service(
                    "shop",
                    "web",
                    "fd00:10:96::20",
                    [Port("http", 80, 8080)],
                    [Endpoint(pods6["pod1"]), Endpoint(pods6["pod2"])],
                )
            ],
            cluster_cidr="fd00:244::/32",
        ),
    )
    for role in ("pod1", "pod2"):
        lab.background(role, [sys.executable, "-m", "http.server", "8080", "--bind", "::"], subprocess.DEVNULL)
    time.sleep(1.0)

    ping = lab.sh("pod0", ["ping", "-6", "-c", "1", "-W", "3", "fd00:10:96::20"], check=False)
    assert "Time exceeded" in ping.stdout, ping.stdout

    svc = k8s.service(
        "shop",
        "web",
        "10.96.0.20",
        [k8s.port(80, 8080, "http")],
        {"app": "web"},
        ipFamilies=["IPv4", "IPv6"],
        ipFamilyPolicy="RequireDualStack",
    )
    svc["spec"]["clusterIPs"] = ["10.96.0.20", "fd00:10:96::20"]
    six = k8s.endpointslice(
        "shop",
        "web",
        [(pods6["pod1"], True, "lab-node", "web-1"), (pods6["pod2"], True, "lab-node", "web-2")],
        [("http", 8080, "TCP")],
        name="web-v6",
    )
    six["addressType"] = "IPv6"
    objects = [
        svc,
        six,
        k8s.endpointslice(
            "shop",
            "web",
            [(pod1, True, "lab-node", "web-1"), (pod2, True, "lab-node", "web-2")],
            [("http", 8080, "TCP")],
        ),
        k8s.kube_proxy_configmap("iptables"),
    ]
    kc = _start_api(lab, "pod0", objects, tmp_path)
    proc, report = _svc(lab, "pod0", kc)
    kp201 = {f["subject"]: f for f in report["findings"] if f["id"] == "KP201"}
    assert set(kp201) == {"shop/web 10.96.0.20", "shop/web fd00:10:96::20"}, report["findings"]
    v6 = kp201["shop/web fd00:10:96::20"]
    assert "Time to live exceeded" in v6["summary"] and "TCP 80 works through the Service" in v6["summary"]
    assert any("ip -6 route add blackhole fd00:10:96::/112" in step for step in v6["fix"]), v6["fix"]
    assert any("ip route add blackhole 10.96.0.0/12" in step for step in kp201["shop/web 10.96.0.20"]["fix"])
    results = {(r["kind"], r["target"]): r for r in report["extra"]["probes"]["results"]}
    assert results[("tcp-connect", "[fd00:10:96::20]:80/tcp")]["result"] == "connected"
    assert results[("tcp-syn", "[fd00:10:96::20]:80/tcp")]["result"] == "syn-ack"
    assert results[("icmp-echo", "fd00:10:96::20/icmp")]["result"] == "time-exceeded"
    walk = results[("ttl-walk", "fd00:10:96::20/icmp")]
    assert walk["detail"]["loop_between"] and "fd00:60::1" in walk["detail"]["loop_between"], walk
    verdict = report["extra"]["verdict"]
    assert any(line.startswith("TCP 80 works through the Service to fd00:10:96::20") for line in verdict), verdict
    assert any(line.startswith("TCP 80 works through the Service to 10.96.0.20") for line in verdict), verdict
    assert not {"KP203", "KP202"} & {f["id"] for f in report["findings"]}  # each family compared with its own endpoints
