"""`kpdiag node` with the Kubernetes API (a real API server in the node's namespace, the real client): every Service is
compared with this node's real rules — and without credentials it says so in one line and reads the rules alone."""

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


def _api(lab, role, objects, tmp_path) -> str:
    (tmp_path / "objects.json").write_text(json.dumps(objects))
    lab.background(
        role,
        [
            "env",
            f"PYTHONPATH={ROOT}",
            sys.executable,
            "-m",
            "tests.apiserver",
            str(tmp_path / "objects.json"),
            str(tmp_path / "url"),
        ],
        subprocess.DEVNULL,
    )
    for _ in range(150):
        if (tmp_path / "url").exists() and (tmp_path / "url").read_text():
            break
        time.sleep(0.1)
    from tests.apiserver import write_kubeconfig

    kc = str(tmp_path / "kubeconfig")
    write_kubeconfig(kc, (tmp_path / "url").read_text())
    return kc


def _node(lab, *args, env=()):
    argv = ["env", *env, sys.executable, "-m", "kpdiag", "node", "-o", "json", "--host-root", "/", *args]
    proc = lab.sh("node", argv, check=False, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


def test_node_compares_every_service_with_the_api(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=3)
    p0, p1, p2 = k.pods["pod0"], k.pods["pod1"], k.pods["pod2"]
    # the node's rules: shop/web → pod0, pod1 (unnamed port, as kube-proxy names it); shop/cart is not programmed at all
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("", 80, 8080)], [Endpoint(p0), Endpoint(p1)])])
    )
    objects = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080)], {"app": "web"}),
        k8s.endpointslice(
            "shop",
            "web",
            [(p0, True, "lab-node", "web-0"), (p1, True, "lab-node", "web-1"), (p2, True, "lab-node", "web-2")],
            [("", 8080, "TCP")],
        ),
        k8s.service("shop", "cart", "10.96.0.30", [k8s.port(80, 8080, "http")], {"app": "cart"}),
        k8s.endpointslice("shop", "cart", [(p2, True, "lab-node", "cart-0")], [("http", 8080, "TCP")]),
        k8s.node("lab-node", labels={"topology.kubernetes.io/zone": "zone-a"}),
    ]
    kc = _api(lab, "node", objects, tmp_path)
    proc, report = _node(lab, "--kubeconfig", kc, env=("NODE_NAME=lab-node",))
    assert proc.returncode == 1
    runs = {c["id"]: c for c in report["checks"]}
    assert runs["KP202"]["status"] == "ran" and runs["KP203"]["status"] == "ran", runs["KP202"]
    by_id = {}
    for f in report["findings"]:
        by_id.setdefault(f["id"], []).append(f)
    assert any("shop/cart" in f["summary"] for f in by_id.get("KP202", [])), report["findings"]
    assert not any("shop/web" in f["summary"] for f in by_id.get("KP202", []))  # the unnamed port is programmed
    assert any("misses" in f["summary"] and f"{p2}:8080" in f["summary"] for f in by_id.get("KP203", [])), by_id.get(
        "KP203"
    )
    assert "KP115" not in by_id  # the API is there: the rules-only inference stays silent
    assert not any(p["source"] == "cluster" for p in report["problems"]), report["problems"]


def test_node_without_credentials_says_so_in_one_line_and_reads_the_rules(lab, tmp_path):
    k = KubeNodeLab.build(lab, pod_count=1)
    k.load_iptables(iptables_ruleset([Service("shop", "cart", "10.96.0.30", [Port("http", 80, 8080)], [])]))
    proc, report = _node(lab, env=(f"HOME={tmp_path}", "KUBECONFIG="))
    lines = [p for p in report["problems"] if p["source"] == "cluster"]
    assert len(lines) == 1 and "no Kubernetes API credentials" in lines[0]["error"], report["problems"]
    kp115 = [f for f in report["findings"] if f["id"] == "KP115"]
    assert (
        kp115
        and "shop/cart:http has no endpoints" in kp115[0]["summary"]
        and "from the node's rules" in kp115[0]["summary"]
    )
    assert kp115[0]["evidence"][0]["source"].endswith("iptables-save.txt") and kp115[0]["evidence"][0]["line"]
    assert proc.returncode == 1


def _about(f) -> str | None:
    """The Service a finding is about (its data's, else a subject NS/NAME[:PORT]); None for the node's."""
    svc = (f.get("data") or {}).get("service") or f.get("subject") or ""
    return svc.split(":")[0] if isinstance(svc, str) and "/" in svc and " " not in svc else None


def test_node_service_reads_that_service_from_the_api(lab, tmp_path):
    """`kpdiag node --service NS/NAME` with the API: the rules and the API objects of that Service only (the manifest's
    partial says so for both), judged as a full run judges it — its endpoint the rules miss, or its port they lack —
    and nothing said of the other Service."""
    k = KubeNodeLab.build(lab, pod_count=3)
    p0, p1, p2 = k.pods["pod0"], k.pods["pod1"], k.pods["pod2"]
    k.load_iptables(
        iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("", 80, 8080)], [Endpoint(p0), Endpoint(p1)])])
    )
    objects = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080)], {"app": "web"}),
        k8s.endpointslice(
            "shop",
            "web",
            [(p0, True, "lab-node", "web-0"), (p1, True, "lab-node", "web-1"), (p2, True, "lab-node", "web-2")],
            [("", 8080, "TCP")],
        ),
        k8s.service("shop", "cart", "10.96.0.30", [k8s.port(80, 8080, "http")], {"app": "cart"}),
        k8s.endpointslice("shop", "cart", [(p2, True, "lab-node", "cart-0")], [("http", 8080, "TCP")]),
        k8s.node("lab-node", labels={"topology.kubernetes.io/zone": "zone-a"}),
    ]
    kc = _api(lab, "node", objects, tmp_path)
    _, full = _node(lab, "--kubeconfig", kc, env=("NODE_NAME=lab-node",))
    for svc in ("shop/web", "shop/cart"):
        proc, report = _node(lab, "--kubeconfig", kc, "--service", svc, env=("NODE_NAME=lab-node",))
        holds = report["extra"]["partial"]["holds"]
        assert {"cluster/services.json", "cluster/endpointslices.json", "node/iptables-save.txt"} <= set(holds)
        assert not any(p["source"] == "cluster" for p in report["problems"]), report["problems"]
        mine = sorted((f["id"], f["summary"]) for f in report["findings"] if _about(f) == svc)
        assert mine == sorted((f["id"], f["summary"]) for f in full["findings"] if _about(f) == svc), svc
        assert mine, svc  # web: KP203 misses pod2; cart: KP202 not programmed
        other = "shop/cart" if svc == "shop/web" else "shop/web"
        assert not any(other in f["summary"] for f in report["findings"]), report["findings"]
        skipped = {c["id"]: c["reason"] for c in report["checks"] if c["status"] == "skipped"}
        assert "only one Service was read from the API" in skipped["KP603"] or "partial bundle" in skipped["KP603"]
