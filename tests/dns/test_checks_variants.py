"""Severity and wording of the DNS checks where the same observation means different things (recorded fixtures, varied)."""

import json

from tests.dns.dnslab import analyze_files
from tests.dns.test_checks_bad_input import _fixture_files


def _finding(files, cid):
    return next(f for f in analyze_files(files).findings if f.id == cid)


def test_timeout_is_an_error_for_the_cluster_dns_and_a_warning_when_that_cannot_be_told():
    files = _fixture_files("dns-timeout")
    assert _finding(files, "KP138").severity.value == "error"
    del files["cluster/dns-service.json"]
    f = _finding(files, "KP138")
    assert f.severity.value == "warning" and "could not tell whether it is the cluster DNS" in f.summary
    assert "kube-dns's Service and endpoints (not collected)" in f.explanation  # not claimed as ruled out
    svc = json.loads(_fixture_files("dns-timeout")["cluster/dns-service.json"])
    svc["items"][0]["spec"]["clusterIP"] = svc["items"][0]["spec"]["clusterIPs"][0] = "10.96.0.53"
    files["cluster/dns-service.json"] = json.dumps(svc).encode()
    f = _finding(files, "KP138")
    assert f.severity.value == "warning" and "is not the cluster DNS (10.96.0.53, KP133)" in f.summary


def test_tcp_only_with_use_vc_is_a_warning():
    files = _fixture_files("dns-udp-blocked")
    assert _finding(files, "KP137").severity.value == "error"
    doc = json.loads(files["probes/dns.json"])
    doc["resolv_conf"]["options"]["use-vc"] = True
    doc["resolv_conf"]["entries"][-1]["text"] += " use-vc"
    files["probes/dns.json"] = json.dumps(doc).encode()
    f = _finding(files, "KP137")
    assert f.severity.value == "warning" and "use-vc" in f.summary and any("use-vc" in e.text for e in f.evidence)


def test_kubernetes_default_severity_follows_the_services_own_name():
    assert _finding(_fixture_files("dns-wrong-nameserver"), "KP139").severity.value == "error"  # the FQDN fails too
    f = _finding(_fixture_files("dns-no-cluster-search"), "KP139")
    assert f.severity.value == "warning" and "itself resolves" in f.summary


def test_networkpolicies_collected_are_named_as_judged_by_kp122():
    files = _fixture_files("dns-timeout")
    assert "not checked: no NetworkPolicies collected" in _finding(files, "KP138").explanation
    files["cluster/networkpolicies.json"] = json.dumps({"apiVersion": "v1", "kind": "List", "items": []}).encode()
    assert "KP122 judges the NetworkPolicies collected" in _finding(files, "KP138").explanation


def test_search_limits_glibc_and_musl_apart():
    from kpdiag.checks.dns import MUSL_LINE_MAX, _glibc_old_kept

    seven = [f"d{i}.example" for i in range(7)]
    assert _glibc_old_kept(seven) == seven[:6]
    long_ones = ["a" * 100 + ".example", "b" * 100 + ".example", "c" * 60 + ".example"]
    assert _glibc_old_kept(long_ones) == long_ones[:2]  # the third does not fit in 256 bytes
    files = _fixture_files("dns-search-limits")
    doc = json.loads(files["probes/dns.json"])
    rc = doc["resolv_conf"]
    rc["search"] = seven  # 7 short domains: only glibc < 2.26 loses one; the line is short enough for musl
    rc["search_chars"] = len(" ".join(seven))
    rc["search_line_chars"] = len("search " + " ".join(seven))
    files["probes/dns.json"] = json.dumps(doc).encode()
    f = _finding(files, "KP134")
    assert (
        "glibc before 2.26 uses only the first 6" in f.summary
        and "'d6.example'" in f.summary
        and "musl" not in f.summary
    )
    rc["search"] = [
        "shop.svc.cluster.local",
        "svc.cluster.local",
        "x" * 206 + ".example",
    ]  # 253 characters: glibc keeps them all
    assert _glibc_old_kept(rc["search"]) == rc["search"]
    rc["search_chars"] = len(" ".join(rc["search"]))
    rc["search_line_chars"] = len("search " + " ".join(rc["search"]))
    assert rc["search_line_chars"] > MUSL_LINE_MAX
    files["probes/dns.json"] = json.dumps(doc).encode()
    f = _finding(files, "KP134")
    assert "musl (Alpine images) ignores the whole search line" in f.summary and "glibc" not in f.summary


def test_restarts_long_before_the_collection_are_history():
    files = _fixture_files("dns-tcp-blocked")
    assert (
        "restarted 5 time(s) (last exit: OOMKilled)" in _finding(files, "KP131").summary
    )  # a minute before the collection
    pods = json.loads(files["cluster/dns-pods.json"])
    for p in pods["items"]:
        for cs in p["status"]["containerStatuses"]:
            if "lastState" in cs:
                cs["lastState"]["terminated"]["finishedAt"] = "2026-11-20T08:00:00Z"
    files["cluster/dns-pods.json"] = json.dumps(pods).encode()
    runs = {r.id: r for r in analyze_files(files).checks}
    assert runs["KP131"].status == "ran" and runs["KP131"].findings == 0
    files["kpdiag.json"] = b'{"format": "kpdiag-bundle/1"}'  # no collection time: the count alone decides
    assert _finding(files, "KP131").severity.value == "warning"
