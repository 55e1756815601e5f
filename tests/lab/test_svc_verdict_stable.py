"""The `kpdiag svc` verdict does not depend on luck: the same half-broken lab, diagnosed 10 times, gives 10 identical,
correct verdicts — and a broken Service layer with healthy endpoints is blamed 10 times out of 10.

One lab for all 30 runs (built once: namespaces, kube-proxy's rules, an API server and a DNS server in pod0):

- shop/web: 2 endpoints, web-2 refuses (nothing listens) → works in part, web-2 named, about 1 in 2 fail (KP111);
- shop/five: 5 endpoints, web-2 refuses and web-4 drops → works in part, both named, about 2 in 5 fail (KP111, KP112);
- shop/api: 2 healthy endpoints, but kube-proxy's rules for it are missing on the node → the Service layer (KP113).

With one connect through the ClusterIP (before), web's verdict was KP113 whenever the connect landed on web-2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests import k8sobjects as k8s
from tests.synth import Endpoint, Port, Service, iptables_ruleset

from .netlab import KubeNodeLab

pytestmark = pytest.mark.lab
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = 10
VERDICT_IDS = {"KP111", "KP112", "KP113", "KP114"}


def _svc_objects(name: str, ip: str, pods: list[tuple[str, str]]) -> list[dict]:
    return [
        k8s.service("shop", name, ip, [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice("shop", name, [(a, True, "lab-node", p) for p, a in pods], [("http", 8080, "TCP")]),
    ]


@pytest.fixture(scope="module")
def half_broken(tmp_path_factory):
    from tests.conftest import lab_or_skip

    lab_or_skip()
    from tests.apiserver import write_kubeconfig
    from tests.lab.netlab import Lab

    tmp = tmp_path_factory.mktemp("verdict")
    with Lab() as lab:
        k = KubeNodeLab.build(lab, pod_count=6)
        ip = {f"web-{i}": k.pods[f"pod{i}"] for i in range(1, 6)}
        web = [("web-1", ip["web-1"]), ("web-2", ip["web-2"])]
        five = sorted(ip.items())
        api = [("web-1", ip["web-1"]), ("web-3", ip["web-3"])]
        objects = _svc_objects("web", "10.96.0.20", web) + _svc_objects("five", "10.96.0.30", five)
        objects += _svc_objects("api", "10.96.0.40", api)
        objects += [
            k8s.pod("shop", p, a, {"app": "web"}, node="lab-node", ports=[{"name": "http", "containerPort": 8080}])
            for p, a in five
        ] + [k8s.kube_proxy_configmap("iptables")]
        # kube-proxy's rules for web and five; api's are missing (the Service layer of this node is broken for it)
        k.load_iptables(
            iptables_ruleset(
                [
                    Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(a) for _, a in web]),
                    Service("shop", "five", "10.96.0.30", [Port("http", 80, 8080)], [Endpoint(a) for _, a in five]),
                ]
            )
        )
        for role in ("pod1", "pod3", "pod4", "pod5"):  # web-2 does not listen: it refuses
            lab.background(role, [sys.executable, "-m", "http.server", "8080", "--bind", "0.0.0.0"], subprocess.DEVNULL)
        lab.sh("pod4", ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"])  # web-4 drops
        (tmp / "objects.json").write_text(json.dumps(objects))
        env = ["env", f"PYTHONPATH={ROOT}", sys.executable]
        names = {f"{n}.shop.svc.cluster.local": a for n, a in (("web", "10.96.0.20"), ("five", "10.96.0.30"))}
        (tmp / "dns.json").write_text(json.dumps({**names, "api.shop.svc.cluster.local": "10.96.0.40"}))
        lab.set_resolv(
            "pod0", "nameserver 127.0.0.53\nsearch shop.svc.cluster.local\noptions ndots:5 timeout:1 attempts:1\n"
        )
        lab.background(
            "pod0", env + ["-m", "tests.lab.dnsserver", "127.0.0.53", str(tmp / "dns.json")], subprocess.DEVNULL
        )
        lab.background(
            "pod0", env + ["-m", "tests.apiserver", str(tmp / "objects.json"), str(tmp / "url")], subprocess.DEVNULL
        )
        for _ in range(150):
            if (tmp / "url").exists() and (tmp / "url").read_text():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        write_kubeconfig(str(tmp / "kubeconfig"), (tmp / "url").read_text())
        yield lab, k, str(tmp / "kubeconfig")


def _runs(half_broken, name: str) -> list[tuple]:
    """RUNS diagnoses of shop/NAME from pod0, one after the other in one process (tests/lab/svc_repeat.py: the library
    `kpdiag svc` calls, the imports paid once); each run probes afresh, from new source ports."""
    lab, k, kc = half_broken
    argv = ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "tests.lab.svc_repeat", "shop", name, kc, "lab-node"]
    proc = lab.sh("pod0", argv + [str(RUNS)], timeout=300)
    out = []
    for line in proc.stdout.splitlines():
        run = json.loads(line)
        report = run["report"]
        errors = sorted(f["id"] for f in report["findings"] if f["severity"] == "error" and f["id"] in VERDICT_IDS)
        out.append((run["code"], report["extra"]["status"], report["extra"]["verdict"][0], tuple(errors), report))
    assert len(out) == RUNS, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def _identical(runs: list[tuple]) -> tuple:
    first = runs[0][:4]
    assert all(r[:4] == first for r in runs), [r[:4] for r in runs]
    return first


def test_one_of_two_endpoints_refusing_is_the_same_verdict_ten_times(half_broken):
    lab, k, kc = half_broken
    code, status, head, errors = _identical(_runs(half_broken, "web"))
    web2 = k.pods["pod2"]
    assert (code, status, errors) == (1, "partial", ("KP111",)), (code, status, errors)
    assert head == (
        f"shop/web works in part: endpoint {web2}:8080 (web-2, node lab-node) refuses — "
        "about 1 in 2 connections fail (KP111)"
    ), head


def test_two_of_five_endpoints_failing_is_the_same_verdict_ten_times(half_broken):
    lab, k, kc = half_broken
    runs = _runs(half_broken, "five")
    code, status, head, errors = _identical(runs)
    assert (code, status, errors) == (1, "partial", ("KP111", "KP112")), (code, status, errors)
    assert head == (
        f"shop/five works in part: endpoint {k.pods['pod2']}:8080 (web-2, node lab-node) refuses; endpoint "
        f"{k.pods['pod4']}:8080 (web-4, node lab-node) does not answer — about 2 in 5 connections fail (KP111, KP112)"
    ), head
    report = runs[0][4]
    series = report["extra"]["probes"]["series"][0]
    assert (series["wanted"], series["sent"], series["stopped"]) == (39, 39, None), series
    assert any(line.strip(" »").startswith("confidence: 39 connect(s)") for line in report["extra"]["verdict"])


def test_a_broken_service_layer_with_healthy_endpoints_is_blamed_ten_times(half_broken):
    code, status, head, errors = _identical(_runs(half_broken, "api"))
    assert (code, status, errors) == (1, "fails", ("KP113",)), (code, status, errors)
    assert head.startswith("shop/api does NOT work: the Service layer on this client's node fails"), head
