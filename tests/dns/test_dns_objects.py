"""ClusterCollector.dns_objects() against the real HTTP API server (tests.apiserver) with the real kubernetes client,
and the DNS checks on what it wrote."""

import json

from kpdiag.collect.cluster import ClusterCollector
from tests.apiserver import ApiServer
from tests.dns import objects as o
from tests.dns.dnslab import analyze_files


def _collect(objects, logs=None, fail=None, tmp_path=None):
    with ApiServer(objects, pod_logs=logs or {}, fail=fail) as api:
        cc = ClusterCollector(api.kubeconfig(tmp_path))
        cc.dns_objects()
        return cc.out, list(api.requests)


def _items(out, rel):
    return json.loads(out.files[rel])["items"]


def test_service_slices_pods_and_bounded_logs(tmp_path):
    other = o.coredns_pod("not-dns", "10.244.0.9")
    other["metadata"]["labels"] = {"k8s-app": "metrics"}  # the server's label filter is re-checked too
    objects = [
        o.kube_dns_service(),
        o.kube_dns_slice([("10.244.0.5", True, "coredns-a"), ("10.244.0.6", False, "coredns-b")]),
        o.coredns_pod("coredns-a", "10.244.0.5"),
        o.coredns_pod("coredns-b", "10.244.0.6", ready=False, restarts=7, waiting="CrashLoopBackOff", last="Error"),
        other,
    ]
    logs = {
        "kube-system/coredns-a": "".join(f"line {i}\n" for i in range(1000)),
        "kube-system/coredns-b#previous": ".:53\n" + o.LOOP_LINE + "\n",
    }
    out, requests = _collect(objects, logs, tmp_path=tmp_path)
    assert out.errors == []  # a log that cannot be read is noted in its entry (below), not as a collection error
    assert [s["metadata"]["name"] for s in _items(out, "cluster/dns-service.json")] == ["kube-dns"]
    assert len(_items(out, "cluster/dns-endpointslices.json")) == 1
    assert sorted(p["metadata"]["name"] for p in _items(out, "cluster/dns-pods.json")) == ["coredns-a", "coredns-b"]
    entries = json.loads(out.files["cluster/dns-logs.json"])["logs"]
    by = {(e["pod"], e["previous"]): e for e in entries}
    assert set(by) == {("coredns-a", False), ("coredns-b", False), ("coredns-b", True)}  # previous only after a restart
    a = by[("coredns-a", False)]["text"].splitlines()
    assert len(a) == 200 and a[-1] == "line 999"  # tailLines=200
    assert "plugin/loop" in by[("coredns-b", True)]["text"]
    assert "error" in by[("coredns-b", False)] and "pods/log" in by[("coredns-b", False)]["error"]
    assert ("GET", "/api/v1/namespaces/kube-system/pods/coredns-b/log") in requests
    # the checks on what was collected
    report = analyze_files(dict(out.files))
    fired = {f.id for f in report.findings}
    assert {"KP131", "KP132"} <= fired and "KP130" not in fired  # coredns-a is a ready endpoint


def test_service_found_by_name_when_unlabelled_and_logs_capped_in_bytes(tmp_path):
    svc = o.kube_dns_service()
    svc["metadata"]["labels"] = {}
    svc["metadata"]["name"] = "coredns"
    big = "x" * 300 + "\n"
    out, _ = _collect(
        [svc, o.coredns_pod("coredns-a", "10.244.0.5")], {"kube-system/coredns-a": big * 1000}, tmp_path=tmp_path
    )
    assert [s["metadata"]["name"] for s in _items(out, "cluster/dns-service.json")] == ["coredns"]
    assert not [e for e in out.errors if "404" in e["error"]]  # the miss of kube-dns before coredns is no error
    assert _items(out, "cluster/dns-endpointslices.json") == []
    text = json.loads(out.files["cluster/dns-logs.json"])["logs"][0]["text"]
    assert len(text.encode()) <= ClusterCollector.DNS_LOG_LIMIT_BYTES
    report = analyze_files(dict(out.files))
    kp130 = [f for f in report.findings if f.id == "KP130"]
    assert kp130 and kp130[0].severity.value == "error" and "no ready endpoint" in kp130[0].summary


def test_no_dns_service_and_rbac_denied_pods(tmp_path):
    out, _ = _collect([], fail={"pods": 403}, tmp_path=tmp_path)
    assert _items(out, "cluster/dns-service.json") == []
    assert "cluster/dns-pods.json" not in out.files and "cluster/dns-logs.json" not in out.files
    assert any(e["source"] == "cluster/dns-pods.json" and "403" in e["error"] for e in out.errors)
    report = analyze_files(dict(out.files))
    runs = {r.id: r for r in report.checks}
    assert runs["KP131"].status == "skipped" and "dns-pods.json" in runs["KP131"].reason
    kp130 = next(f for f in report.findings if f.id == "KP130")
    assert kp130.severity.value == "warning" and "no cluster DNS Service found" in kp130.summary


def test_services_get_but_not_list_finds_kube_dns_by_name(tmp_path):
    """deploy/rbac-svc.yaml grants get on services, not list: the Service is read by its usual name."""
    out, requests = _collect(
        [o.kube_dns_service(), o.coredns_pod("coredns-a", "10.244.0.5")],
        fail={"GET /api/v1/namespaces/kube-system/services$": 403},
        tmp_path=tmp_path,
    )
    assert ("GET", "/api/v1/namespaces/kube-system/services/kube-dns") in requests
    assert [s["metadata"]["name"] for s in _items(out, "cluster/dns-service.json")] == ["kube-dns"]
    assert not [e for e in out.errors if "services" in e["error"]]


def test_neither_list_nor_get_leaves_no_file_and_says_why(tmp_path):
    out, _ = _collect([o.kube_dns_service()], fail={"services": 403}, tmp_path=tmp_path)
    assert "cluster/dns-service.json" not in out.files  # not known: not written as "none"
    assert any(e["source"] == "cluster/dns-service.json" and "403" in e["error"] for e in out.errors)
