"""Who is asking (issue 25.1): with nothing naming its pod, kpdiag svc finds the client by the address its packets leave
from — one pod list with fieldSelector=status.podIP through the real kubernetes client against an API server on
loopback — accepts it only when unique, treats a hostNetwork client as its node, and says plainly when RBAC refuses."""

from __future__ import annotations

import json

from kpdiag.collect.cluster import ClusterCollector
from kpdiag.commands.svc import _client_by_address, _client_section
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer

ME = "10.244.1.50"


def _host_pod(ns, name, ip, node="lab-node"):
    p = k8s.pod(ns, name, ip, {"app": name}, node=node)
    p["spec"]["hostNetwork"] = True
    return p


def _lookup(objects, tmp_path, ip=ME, **server):
    with ApiServer(objects, **server) as api:
        cc = ClusterCollector(api.kubeconfig(str(tmp_path)))
        out = _client_by_address(cc, ip)
        return out, [p for m, p in api.requests if "/pods" in p]


def test_the_one_pod_with_the_address_is_the_client(tmp_path):
    objs = [
        k8s.pod("debug", "tool-7f9c", ME, {"run": "tool"}),
        k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}),
    ]
    out, calls = _lookup(objs, tmp_path)
    assert out["pod"]["metadata"]["namespace"] == "debug" and out["pod"]["metadata"]["name"] == "tool-7f9c"
    assert out["how"] == f"source address {ME}: the only pod with it"
    assert calls == ["/api/v1/pods"]  # one list in all namespaces, nothing per namespace


def test_two_pods_with_the_address_are_not_guessed_between(tmp_path):
    objs = [k8s.pod("debug", "a", ME, {}), k8s.pod("other", "b", ME, {})]
    out, _ = _lookup(objs, tmp_path)
    assert "pod" not in out and "2 pods have the address" in out["why"] and "--from" in out["why"]


def test_a_host_network_client_is_its_node(tmp_path):
    node_ip = "192.168.50.1"
    objs = [_host_pod("kube-system", "kube-proxy-x", node_ip), _host_pod("kube-system", "calico-node-y", node_ip)]
    out, _ = _lookup(objs, tmp_path, ip=node_ip)
    assert out == {"node_ip": node_ip, "how": f"source address {node_ip}: the node lab-node (hostNetwork)"}
    who = _client_section({"client_ip": node_ip, "client_how": out["how"]})
    assert who == {"ip": node_ip, "identified": True, "how": out["how"]}


def test_no_pod_with_the_address(tmp_path):
    out, _ = _lookup([k8s.pod("shop", "web-1", "10.244.1.11", {})], tmp_path)
    assert out == {"why": f"no pod has the address {ME} this host speaks from"}


def test_rbac_refusal_is_one_plain_line(tmp_path):
    out, _ = _lookup([k8s.pod("debug", "tool", ME, {})], tmp_path, fail={"GET /api/v1/pods": 403})
    assert "pod" not in out
    assert out["error"] == (
        f"looking up the client pod by its address {ME} was refused (403 Forbidden): grant 'list pods' "
        "cluster-wide to kpdiag's user or service account, or give --from NS/POD"
    )
    assert "\n" not in out["why"] and "403 Forbidden" in out["why"]
    assert _client_section({"client_unknown": out["why"]}) == {"identified": False, "how": out["why"]}


def test_refused_in_all_namespaces_the_services_namespace_is_asked(tmp_path):
    """deploy/rbac-svc.yaml grants "list pods" per namespace: the client may still be found in the Service's own."""
    objs = [k8s.pod("prod", "frontend-1", ME, {"app": "frontend"}), k8s.pod("prod", "web-1", "10.244.1.11", {})]
    with ApiServer(objs, fail={"GET /api/v1/pods": 403}) as api:
        cc = ClusterCollector(api.kubeconfig(str(tmp_path)))
        out = _client_by_address(cc, ME, "prod")
        missing = _client_by_address(cc, ME, "other")
        calls = [p for m, p in api.requests if "/pods" in p]
    assert out["pod"]["metadata"]["name"] == "frontend-1"
    assert (
        out["how"]
        == f"source address {ME}: the only pod with it in namespace prod (listing all namespaces was refused)"
    )
    assert calls[:2] == ["/api/v1/pods", "/api/v1/namespaces/prod/pods"]
    assert "pod" not in missing and "no pod of namespace other" in missing["why"] and "403" in missing["error"]


def test_a_report_says_how_its_client_was_found(tmp_path):
    """The whole svc path in-process (--no-probe: the lookup sends no packet, it only asks the API)."""
    import os

    from kpdiag.commands.svc import diagnose_service
    from kpdiag.collect.probes import _my_address

    me = _my_address("10.96.0.20") or "127.0.0.1"
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice("shop", "web", [("10.244.1.11", True, "lab-node", "web-1")], [("http", 8080, "TCP")]),
        k8s.pod("debug", "tool-7f9c", me, {"run": "tool"}),
    ]
    env = {k: os.environ.pop(k) for k in ("POD_NAMESPACE", "POD_NAME") if k in os.environ}
    try:
        with ApiServer(objs) as api:
            report = diagnose_service("shop", "web", kubeconfig=api.kubeconfig(str(tmp_path)), probe=False)
        with ApiServer(objs, fail={"GET /api/v1/pods": 403}) as api:
            denied = diagnose_service("shop", "web", kubeconfig=api.kubeconfig(str(tmp_path)), probe=False)
    finally:
        os.environ.update(env)
    assert report.extra["client"] == {
        "namespace": "debug",
        "pod": "tool-7f9c",
        "identified": True,
        "how": f"source address {me}: the only pod with it",
    }
    assert denied.extra["client"]["identified"] is False and "403" in denied.extra["client"]["how"]
    lines = [p["error"] for p in denied.problems if p["source"] == "cluster/client-pod.json"]
    assert len(lines) == 1 and f"looking up the client pod by its address {me} was refused (403 Forbidden)" in lines[0]
    from kpdiag.render.report import report_to_text

    text = report_to_text(denied, width=200)
    assert f"client (for NetworkPolicy): not identified — the client could not be found by its address {me}" in text
    json.dumps(report.to_dict())  # JSON-ready
