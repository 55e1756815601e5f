"""KP120–KP123 beyond the fixtures: who the client is (pod, pod IP, plain IP, none), DNS without DNS pods, DNS
stopped at the CoreDNS pods' ingress, and the analyze exit code."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kpdiag.commands.pipeline import analyze_bundle
from tests.conftest import FIXTURES
from tests.netpol.world import run_cli


def copy(tmp_path, name, manifest=None, drop=(), add=None):
    dst = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), dst)
    if manifest is not None:
        m = json.load(open(dst / "kpdiag.json"))
        m.pop("client", None)
        m.update(manifest)
        json.dump(m, open(dst / "kpdiag.json", "w"))
    for rel in drop:
        os.remove(dst / rel)
    for rel, doc in (add or {}).items():
        json.dump(doc, open(dst / rel, "w"))
    return str(dst)


def runs(report):
    return {r.id: r for r in report.checks}


def finding(report, check_id):
    hits = [f for f in report.findings if f.id == check_id]
    return hits[0] if hits else None


def test_ip_client_not_a_pod(tmp_path):
    rep = analyze_bundle(copy(tmp_path, "netpol-ingress-denied", {"client_ip": "192.168.50.7"}))
    f = finding(rep, "KP120")
    assert (
        f and "192.168.50.7 (not a pod)" in f.summary and "admits only pods app=frontend in namespace shop" in f.summary
    )
    assert "ipBlock" in " ".join(f.fix) and "192.168.50.7/32" in " ".join(f.fix)
    r = runs(rep)
    assert r["KP121"].status == "skipped" and "not a pod" in r["KP121"].reason
    assert r["KP122"].status == "skipped" and "not a pod" in r["KP122"].reason


def test_client_ip_of_a_pod_is_that_pod(tmp_path):
    rep = analyze_bundle(copy(tmp_path, "netpol-ingress-denied", {"client_ip": "10.244.1.50"}))
    assert "debug/client (10.244.1.50)" in finding(rep, "KP120").summary


def test_no_client_skips_and_says_what_is_admitted(tmp_path):
    rep = analyze_bundle(copy(tmp_path, "netpol-ingress-denied", {}))
    r = runs(rep)["KP120"]
    assert r.status == "skipped" and "neither 'client' nor 'client_ip'" in r.reason
    assert "shop/web-allow-frontend admits pods app=frontend in namespace shop on 8080/TCP" in r.reason
    assert not finding(rep, "KP120")


def test_client_pod_missing_from_data(tmp_path):
    rep = analyze_bundle(copy(tmp_path, "netpol-ingress-denied", drop=["cluster/client-pod.json"]))
    r = runs(rep)["KP120"]
    assert r.status == "skipped" and "debug/client" in r.reason and "is not in" in r.reason


def test_dns_without_dns_pods_no_port_53_anywhere(tmp_path):
    rep = analyze_bundle(
        copy(
            tmp_path,
            "netpol-dns-blocked",
            drop=["cluster/dns-pods.json", "cluster/dns-service.json", "cluster/dns-endpointslices.json"],
        )
    )
    f = finding(rep, "KP122")
    assert f and f.severity.value == "error" and "admit no port 53/UDP to any destination" in f.summary


def test_dns_without_dns_pods_but_a_rule_for_53(tmp_path):
    rep = analyze_bundle(
        copy(
            tmp_path,
            "netpol-egress-denied",
            drop=["cluster/dns-pods.json", "cluster/dns-service.json", "cluster/dns-endpointslices.json"],
        )
    )
    r = runs(rep)["KP122"]
    assert r.status == "skipped" and "admit 53/UDP only to: debug/default-deny-egress rule 0" in r.reason


def test_dns_stopped_at_the_coredns_pods(tmp_path):
    path = copy(tmp_path, "netpol-allowed")
    doc = json.load(open(os.path.join(path, "cluster", "networkpolicies.json")))
    doc["items"].append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "dns-from-shop", "namespace": "kube-system"},
            "spec": {
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "shop"}}}]}],
            },
        }
    )
    json.dump(doc, open(os.path.join(path, "cluster", "networkpolicies.json"), "w"))
    rep = analyze_bundle(path)
    f = finding(rep, "KP122")
    assert f and "ingress policies of the DNS pods kube-system/dns-from-shop" in f.summary
    assert {"KP120", "KP121"}.isdisjoint({x.id for x in rep.findings})


@pytest.mark.parametrize(
    "name, code", [("netpol-ingress-denied", 1), ("netpol-allowed", 0), ("netpol-not-enforced", 0)]
)
def test_analyze_exit_code(name, code):
    got, out, err = run_cli("analyze", os.path.join(FIXTURES, name), "-o", "json")
    assert got == code, err
    doc = json.loads(out)
    if name == "netpol-allowed":
        assert any("shop/broken" in p["error"] and "invalid operator 'Equals'" in p["error"] for p in doc["problems"])


def test_fixture_generator_is_current(tmp_path, monkeypatch):
    """fixtures/netpol-* are what tests/netpol/make_fixtures.py writes."""
    from tests.netpol import make_fixtures

    monkeypatch.setattr(make_fixtures, "FIXTURES", str(tmp_path))
    for name, sc in make_fixtures.SCENARIOS.items():
        make_fixtures.write(name, sc)
        for dirpath, _, files in os.walk(tmp_path / name):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), tmp_path)
                assert open(os.path.join(dirpath, f)).read() == open(os.path.join(FIXTURES, rel)).read(), rel
