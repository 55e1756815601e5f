"""The DNS probe for real: a client pod, kube-proxy's rules for kube-dns on the node, a DNS server in another pod that
answers over UDP and TCP — or drops one, refuses, or is not there. The checks judge what the probe saw and what the API
server (tests.apiserver, read with the real client) says about kube-dns and CoreDNS. Same scenarios as fixtures/dns-*."""

import pytest

from tests.dns.dnslab import SCENARIOS, analyze_files, run_scenario

pytestmark = pytest.mark.lab


def _q(doc, qname, qtype="A", transport="udp"):
    return next(
        q for q in doc["queries"] if q["qname"] == qname and q["qtype"] == qtype and q["transport"] == transport
    )


def _run(lab, tmp_path, name):
    doc, took, files, dl = run_scenario(lab, name, str(tmp_path))
    report = analyze_files(files)
    fired = {f.id for f in report.findings}
    assert fired == set(SCENARIOS[name].fires), (name, [f.summary for f in report.findings])
    assert not [r for r in report.checks if r.status == "error"]
    assert took < 6.0 + 6.0, (
        took
    )  # the probe's deadline (6 s) holds; the margin covers starting Python in a loaded namespace
    return doc, report, dl


def test_healthy_udp_tcp_and_the_search_path_through_kube_proxy(lab, tmp_path):
    doc, report, dl = _run(lab, tmp_path, "dns-healthy")
    assert doc["result"] == "resolved" and doc["addresses"] == ["10.96.0.20"] and doc["nameservers"] == ["10.96.0.10"]
    assert _q(doc, doc["name"], "A", "tcp")["result"] == "answer" and _q(
        doc, "kubernetes.default.svc.cluster.local", "A", "tcp"
    )["addresses"] == ["10.96.0.1"]
    seen = dl.server_log()
    # the server behind the ClusterIP saw what the pod's search path makes a resolver ask, over both transports
    for line in (
        "udp web.shop.svc.cluster.local 1 0",
        "udp web.svc.cluster.local 1 3",
        "udp web.shop.shop.svc.cluster.local 1 3",
        "tcp web.shop.svc.cluster.local 1 0",
        "udp web.shop.svc.cluster.local 28 0",
    ):
        assert line in seen, (line, seen)
    assert report.counts()["error"] == 0 and report.counts()["warning"] == 0


def test_short_name_from_another_namespace(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-other-namespace")
    assert doc["client_namespace"] == "debug"
    kp136 = next(f for f in report.findings if f.id == "KP136")
    assert (
        "10.96.7.7" in kp136.summary and "web.debug.svc.cluster.local" in kp136.summary and "shop/web" in kp136.summary
    )
    assert any("web.shop" in step for step in kp136.fix)


def test_ndots_one_musl_stops_glibc_searches(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-ndots-musl")
    lk = next(x for x in doc["lookups"] if x["purpose"] == "namespaced")
    assert (
        lk["outcome"]["musl"]["result"] == "nxdomain"
        and lk["outcome"]["glibc"]["qname"] == "web.shop.svc.cluster.local"
    )
    kp135 = next(f for f in report.findings if f.id == "KP135")
    assert "(musl)" in kp135.summary and "ndots:1" in kp135.summary


def test_tcp_dropped_udp_answers(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-tcp-blocked")
    assert _q(doc, doc["name"])["result"] == "answer" and _q(doc, doc["name"], "A", "tcp")["result"] == "timeout"
    kp137 = next(f for f in report.findings if f.id == "KP137")
    assert kp137.severity.value == "warning" and "over UDP but not over TCP" in kp137.summary


def test_udp_dropped_tcp_answers(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-udp-blocked")
    assert doc["result"] == "timeout" and _q(doc, doc["name"], "A", "tcp")["result"] == "answer"
    kp137 = next(f for f in report.findings if f.id == "KP137")
    assert kp137.severity.value == "error" and "over TCP but not over UDP" in kp137.summary


def test_timeout_names_what_was_ruled_out_and_what_remains(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-timeout")
    assert doc["result"] == "timeout" and {q["result"] for q in doc["queries"]} == {"timeout"}
    kp138 = next(f for f in report.findings if f.id == "KP138")
    assert "no answer from the nameserver 10.96.0.10" in kp138.summary
    assert "Ruled out from the data: kube-dns has 1 ready endpoint(s); 1 of 1 CoreDNS pod(s) ready" in kp138.explanation
    assert "NetworkPolicy" in kp138.explanation and "not checked" in kp138.explanation


def test_no_endpoints_kube_proxy_rejects_and_the_coredns_loop(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-coredns-loop")
    assert (
        _q(doc, doc["name"])["result"] == "port-unreachable"
        and _q(doc, doc["name"], "A", "tcp")["result"] == "port-unreachable"
    )
    kp138 = next(f for f in report.findings if f.id == "KP138")
    assert (
        "nothing listens on port 53 at 10.96.0.10" in kp138.summary
        and "kube-dns has 0 ready endpoint(s) (KP130)" in kp138.explanation
    )
    kp132 = next(f for f in report.findings if f.id == "KP132")
    assert "127.0.0.1:44359 -> :53" in kp132.summary and any(
        "resolvConf: /run/systemd/resolve/resolv.conf" in s for s in kp132.fix
    )


def test_refused(lab, tmp_path):
    doc, report, _ = _run(lab, tmp_path, "dns-refused")
    assert {q["result"] for q in doc["queries"]} == {"refused"}
    assert "answers REFUSED" in next(f for f in report.findings if f.id == "KP138").summary
