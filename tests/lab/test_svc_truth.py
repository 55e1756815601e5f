"""`kpdiag svc` tells the truth: what it observed drives the verdict, the findings and the exit code.

The lab: pod0 (the client, where kpdiag runs, with a Kubernetes API server on its loopback) → node (kube-proxy's rules
for shop/web, ClusterIP 10.96.0.20:80 → pod1, pod2 at 8080) → pod1, pod2. Each case breaks one thing for real —
nothing listens, the backend drops, the name has a typo, the API is down — and asserts the exit code, the error finding
naming the endpoint, and the first lines of the text output. Ctrl-C during the probes and --no-probe (zero packets,
counted by the kernel) too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests import k8sobjects as k8s

from .netlab import ENV, KubeNodeLab

pytestmark = pytest.mark.lab
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _objects(pod1: str, pod2: str, name: str = "web") -> list[dict]:
    return [
        k8s.service("shop", name, "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice(
            "shop",
            name,
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


def _build(lab, tmp_path, serve: bool = True, objects=None, lab_built=None, api_only: bool = False):
    """The lab with shop/web's rules on the node, an API server and a DNS server in pod0; (lab info, kubeconfig).
    ``lab_built``: the namespaces exist already; ``api_only``: only start another API server (other objects)."""
    k = lab_built or KubeNodeLab.build(lab, pod_count=3)
    pod1, pod2 = k.pods["pod1"], k.pods["pod2"]
    env = ["env", f"PYTHONPATH={ROOT}", sys.executable]
    (tmp_path / "objects.json").write_text(json.dumps(objects if objects is not None else _objects(pod1, pod2)))
    if not api_only:
        k.load_iptables(
            iptables_ruleset(
                [Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(pod1), Endpoint(pod2)])]
            )
        )
        if serve:
            for role in ("pod1", "pod2"):
                lab.background(
                    role, [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL
                )
        (tmp_path / "dns.json").write_text(
            json.dumps(
                {"web.shop.svc.cluster.local": "10.96.0.20", "kubernetes.default.svc.cluster.local": "10.96.0.1"}
            )
        )
        lab.set_resolv(
            "pod0",
            "nameserver 127.0.0.53\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:1 attempts:1\n",
        )
        lab.background(
            "pod0", env + ["-m", "tests.lab.dnsserver", "127.0.0.53", str(tmp_path / "dns.json")], subprocess.DEVNULL
        )
    lab.background(
        "pod0",
        env + ["-m", "tests.apiserver", str(tmp_path / "objects.json"), str(tmp_path / "url")],
        subprocess.DEVNULL,
    )
    for _ in range(150):
        if (tmp_path / "url").exists() and (tmp_path / "url").read_text():
            break
        time.sleep(0.1)
    time.sleep(0.5)
    from tests.apiserver import write_kubeconfig

    kc = str(tmp_path / "kubeconfig")
    write_kubeconfig(kc, (tmp_path / "url").read_text())
    return k, kc


def _svc(lab, kc, *args, name="web", output="json", env=()):
    argv = [
        "env",
        *env,
        sys.executable,
        "-m",
        "kpdiag",
        "svc",
        name,
        "-n",
        "shop",
        "--kubeconfig",
        kc,
        "--node",
        "lab-node",
        "-o",
        output,
        *args,
    ]
    proc = lab.sh("pod0", argv, check=False, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _both(lab, kc, *args, name="web", env=()):
    """(JSON report, text output lines, exit code) — two runs, one per output format."""
    pj = _svc(lab, kc, *args, name=name, env=env)
    assert pj.stdout, pj.stderr
    pt = _svc(lab, kc, *args, name=name, output="text", env=env)
    assert pt.returncode == pj.returncode, (pt.returncode, pj.returncode)
    return json.loads(pj.stdout), [line for line in pt.stdout.splitlines() if line.strip()], pj.returncode


def test_healthy_service_exits_0_and_says_so_first(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    report, text, code = _both(lab, kc)
    assert code == 0, report["findings"]
    assert report["extra"]["status"] == "works"
    assert text[0].strip(" »").startswith("shop/web works"), text[:3]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    assert report["extra"]["dns"]["result"] == "resolved"


def test_backend_refusing_names_each_endpoint_and_exits_1(lab, tmp_path):
    """The pods declare containerPort 8080, nothing listens there: KP111 (not KP104, which would blame the Service)."""
    k, kc = _build(lab, tmp_path, serve=False)
    pod1, pod2 = k.pods["pod1"], k.pods["pod2"]
    report, text, code = _both(lab, kc)
    assert code == 1
    ids = {f["id"] for f in report["findings"]}
    assert "KP111" in ids and "KP104" not in ids, ids
    kp111 = next(f for f in report["findings"] if f["id"] == "KP111")
    assert kp111["severity"] == "error"
    for ip, pod in ((pod1, "web-1"), (pod2, "web-2")):
        assert f"{ip}:8080 ({pod}, node lab-node)" in kp111["summary"], kp111["summary"]
    assert any("ss -ltnp" in step for step in kp111["fix"])
    assert report["extra"]["status"] == "fails"
    assert text[0].strip(" »").startswith("shop/web does NOT work"), text[:4]
    assert "nothing listens" in text[0] and "KP111" in text[0], text[:3]


def test_backend_dropping_is_an_error_that_says_what_remains(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    for role in ("pod1", "pod2"):  # the backends drop every new connection (what a NetworkPolicy or a firewall does)
        lab.sh(role, ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"])
    report, text, code = _both(lab, kc)
    assert code == 1
    kp112 = next(f for f in report["findings"] if f["id"] == "KP112")
    assert kp112["severity"] == "error"
    assert f"{k.pods['pod1']}:8080 (web-1, node lab-node): timeout" in kp112["summary"], kp112["summary"]
    assert "Not ruled out" in kp112["summary"] and "NetworkPolicy" in kp112["summary"]
    assert "KP113" not in {f["id"] for f in report["findings"]}  # the Service layer is not blamed
    assert text[0].strip(" »").startswith("shop/web does NOT work"), text[:4]
    assert "do not answer" in text[0] and "KP112" in text[0], text[:3]


def test_service_path_broken_while_endpoints_answer(lab, tmp_path):
    """The node's rules DNAT shop/web to a gone pod (stale): through the Service it times out, the endpoints answer."""
    k, kc = _build(lab, tmp_path)
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint("10.244.1.99")])])
    )
    report, text, code = _both(lab, kc)
    assert code == 1
    kp113 = next(f for f in report["findings"] if f["id"] == "KP113")
    assert "2 of 2 endpoint(s) answer directly" in kp113["summary"] and "kpdiag node --service shop/web" in " ".join(
        kp113["fix"]
    )
    assert not {"KP111", "KP112"} & {f["id"] for f in report["findings"]}


def test_typo_is_an_error_with_the_nearest_name(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    report, text, code = _both(lab, kc, name="webb")
    assert code == 1
    kp110 = next(f for f in report["findings"] if f["id"] == "KP110")
    assert "did you mean web?" in kp110["summary"]
    assert text[0].strip(" »").startswith("Service shop/webb does not exist: did you mean web?"), text[:3]


def test_api_unreachable_is_the_first_line_and_exit_3(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    from tests.apiserver import write_kubeconfig

    dead = str(tmp_path / "dead-kubeconfig")
    write_kubeconfig(dead, "http://127.0.0.1:9")  # nothing listens on the discard port
    proc = _svc(lab, dead, output="text")
    assert proc.returncode == 3
    first = (proc.stdout + proc.stderr).splitlines()[0]  # nothing else comes first: the reason is the first line
    assert first.startswith("kpdiag: error: could not diagnose shop/web") and "unreachable" in first, (
        proc.stdout[:500] + proc.stderr
    )
    report = json.loads(_svc(lab, dead).stdout)
    assert report["extra"]["headline"].startswith("kpdiag could not diagnose shop/web") and report["readable"] is False
    bad = _svc(lab, "/etc/passwd", output="text")
    assert bad.returncode == 3
    first = (bad.stdout + bad.stderr).splitlines()[0]
    assert "not a kubeconfig" in first, first
    assert "item assignment" not in bad.stdout + bad.stderr


def test_no_probe_sends_no_packet(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    lab.sh(
        "pod0",
        ["nft", "-f", "-"],
        input=(
            "table inet kpcount {\n"
            '  chain out { type filter hook output priority 0; oifname != "lo" meta l4proto { tcp, udp, icmp } counter; }\n'
            "}\n"
        ),
    )

    def sent() -> int:
        doc = json.loads(lab.sh("pod0", ["nft", "-j", "list", "table", "inet", "kpcount"]).stdout)
        return sum(x["rule"]["expr"][-1]["counter"]["packets"] for x in doc["nftables"] if "rule" in x)

    before = sent()
    report, text, code = _both(lab, kc, "--no-probe")
    assert sent() == before, "kpdiag svc --no-probe sent packets"
    assert report["extra"]["probes"] is None and report["extra"]["dns"] is None
    assert code == 0
    _svc(lab, kc)  # without --no-probe the same counter moves: it does count kpdiag's packets
    assert sent() > before


def test_ctrl_c_during_probes_exits_130_within_a_second_without_a_report(lab, tmp_path):
    k, kc = _build(lab, tmp_path)
    for role in ("pod1", "pod2"):
        lab.sh(role, ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"])
    lab.sh("node", ["iptables", "-I", "FORWARD", "-p", "icmp", "-j", "DROP"])  # every probe waits for its timeout
    argv = [
        "ip",
        "netns",
        "exec",
        lab.ns("pod0"),
        sys.executable,
        "-m",
        "kpdiag",
        "svc",
        "web",
        "-n",
        "shop",
        "--kubeconfig",
        kc,
        "-o",
        "json",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen += line
            if "probing" in line or not line:
                break
        assert "probing" in seen, seen
        time.sleep(0.4)  # inside the probes: each waits 1.5 s for an answer that never comes
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert took < 1.0, f"exit took {took:.2f} s after Ctrl-C"
    assert out.strip() == "", "a report was printed after Ctrl-C"
    assert "interrupted" in err and "Traceback" not in err


def _policy_objects(pod1: str, pod2: str, client_ip: str, with_policy: bool) -> list[dict]:
    objs = (
        _objects(pod1, pod2)
        + [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}},
            }
            for n in ("shop", "debug", "kube-system")
        ]
        + [
            k8s.pod("debug", "client", client_ip, {"app": "client"}, node="lab-node"),
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "calico-node", "namespace": "kube-system"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "calico-node", "image": "docker.io/calico/node:v3.28.0"}]}
                    }
                },
            },
        ]
    )
    if with_policy:
        objs.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "web-allow-frontend", "namespace": "shop"},
                "spec": {
                    "podSelector": {"matchLabels": {"app": "web"}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"podSelector": {"matchLabels": {"app": "frontend"}}}],
                            "ports": [{"port": 8080, "protocol": "TCP"}],
                        }
                    ],
                },
            }
        )
    return objs


def test_networkpolicy_that_admits_only_frontend_is_named_and_removing_it_heals(lab, tmp_path):
    """A policy admits only app=frontend to shop/web's pods, enforced in the lab the way a CNI would (a DROP in each
    backend's namespace for this client): kpdiag svc names the policy in an error finding and blames it on the first
    line, exit 1. Without the policy (and its DROP): healthy, exit 0."""
    k = KubeNodeLab.build(lab, pod_count=3)
    pod1, pod2, me = k.pods["pod1"], k.pods["pod2"], k.pods["pod0"]
    k, kc = _build(lab, tmp_path, objects=_policy_objects(pod1, pod2, me, True), lab_built=k)
    for role in ("pod1", "pod2"):
        lab.sh(role, ["iptables", "-A", "INPUT", "-s", me, "-p", "tcp", "--dport", "8080", "-j", "DROP"])
    # the client found the way it is in a real debug pod: the downward API's POD_NAMESPACE/POD_NAME, checked by its IP
    report, text, code = _both(lab, kc, env=("POD_NAMESPACE=debug", "POD_NAME=client"))
    assert code == 1, report["findings"]
    kp120 = next(f for f in report["findings"] if f["id"] == "KP120")
    assert kp120["severity"] == "error" and "shop/web-allow-frontend" in kp120["summary"], kp120["summary"]
    assert "app=frontend" in kp120["summary"] and "debug/client" in kp120["summary"]
    assert any("NetworkPolicy" in step or "kubectl apply" in step for step in kp120["fix"]), kp120["fix"]
    assert text[0].strip(" »").startswith("shop/web does NOT work") and "NetworkPolicy" in " ".join(text[:2]), text[:3]
    assert "backend is" not in " ".join(text[:6])  # the backend is not blamed: the policy is
    # the policy removed (a new API server without it), and the CNI's DROP with it
    (tmp_path / "v2").mkdir()
    k2, kc2 = _build(lab, tmp_path / "v2", objects=_policy_objects(pod1, pod2, me, False), lab_built=k, api_only=True)
    for role in ("pod1", "pod2"):
        lab.sh(role, ["iptables", "-D", "INPUT", "-s", me, "-p", "tcp", "--dport", "8080", "-j", "DROP"])
    report, text, code = _both(lab, kc2, "--from", "debug/client")
    assert code == 0, report["findings"]
    assert text[0].strip(" »").startswith("shop/web works"), text[:3]
    assert "KP120" not in {f["id"] for f in report["findings"]}
