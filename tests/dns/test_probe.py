"""dns_probe against real servers on loopback: the lab DNS server (UDP and TCP), a silent one, none at all.

Nothing here is timed for speed; the deadline test asserts the probe returns within its deadline plus a generous margin.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from kpdiag.collect import dns

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = {
    "web.shop.svc.cluster.local": ["10.96.0.20", "fd00:10:96::20"],
    "kubernetes.default.svc.cluster.local": "10.96.0.1",
}


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
        for _ in range(50):
            u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u2.bind((host, 0))
            port = u2.getsockname()[1]
            u2.close()
            try:
                t.bind((host, port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


@pytest.fixture
def server(tmp_path):
    """Start tests.lab.dnsserver on 127.0.0.X:PORT with flags; yields (host, port, log path)."""
    procs = []

    def start(*flags, host="127.0.0.61", records=None):
        port = _free_port(host)
        rec = tmp_path / "records.json"
        rec.write_text(json.dumps(records or RECORDS))
        log = tmp_path / "server.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.dnsserver", host, str(rec), "--port", str(port), *flags],
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        procs.append(proc)
        for _ in range(200):
            if "ready" in log.read_text():
                break
            if proc.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.05)
        return host, port, log

    yield start
    for p in procs:
        p.terminate()
        p.wait(5)


def _resolv(tmp_path, host, ns="shop", ndots=5):
    path = tmp_path / "resolv.conf"
    path.write_text(
        f"nameserver {host}\nsearch {ns}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:{ndots}\n"
    )
    return str(path)


def _q(doc, qname, qtype="A", transport="udp"):
    return next(
        q for q in doc["queries"] if q["qname"] == qname and q["qtype"] == qtype and q["transport"] == transport
    )


def test_probe_udp_tcp_search_path_and_the_fields_kp108_reads(server, tmp_path):
    host, port, log = server()
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert doc["schema"] == "kpdiag.dns/v1" and doc["sent"] is True
    # the fields KP108 (and older bundles) use
    assert doc["name"] == "web.shop.svc.cluster.local" and doc["result"] == "resolved" and doc["error"] is None
    assert doc["addresses"] == ["10.96.0.20", "fd00:10:96::20"] and doc["nameservers"] == [host]
    assert doc["cluster_domain"] == "cluster.local" and doc["client_namespace"] == "shop"
    lk = {x["purpose"]: x for x in doc["lookups"]}
    assert lk["short"]["candidates"]["glibc"] == [
        "web.shop.svc.cluster.local",
        "web.svc.cluster.local",
        "web.cluster.local",
        "web",
    ]
    assert lk["short"]["outcome"]["glibc"] == {
        "result": "resolved",
        "qname": "web.shop.svc.cluster.local",
        "addresses": ["10.96.0.20"],
        "error": None,
    }
    assert lk["namespaced"]["outcome"]["musl"]["qname"] == "web.shop.svc.cluster.local"
    assert lk["kubernetes"]["outcome"]["glibc"]["addresses"] == ["10.96.0.1"]
    assert _q(doc, "web.shop.shop.svc.cluster.local")["result"] == "nxdomain"
    assert _q(doc, "web.shop.svc.cluster.local", "A", "tcp")["result"] == "answer"
    assert _q(doc, "web.shop.svc.cluster.local", "AAAA")["addresses"] == ["fd00:10:96::20"]
    assert _q(doc, "kubernetes.default.svc.cluster.local", "A", "tcp")["addresses"] == ["10.96.0.1"]
    for q in doc["queries"]:
        assert q["server"] == host and q["port"] == port and isinstance(q["duration_ms"], float) and q["tries"] >= 1
    # the server really saw each name over the transport recorded
    seen = set(log.read_text().splitlines())
    assert (
        "tcp web.shop.svc.cluster.local 1 0" in seen
        and "udp web.svc.cluster.local 1 3" in seen
        and "udp web 1 3" in seen
    )
    json.dumps(doc)  # JSON-ready


def test_truncated_udp_answer_is_asked_again_over_tcp(server, tmp_path):
    host, port, _ = server("--truncate-udp", host="127.0.0.62")
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert (
        _q(doc, "web.shop.svc.cluster.local")["result"] == "truncated"
        and _q(doc, "web.shop.svc.cluster.local")["truncated"] is True
    )
    assert doc["result"] == "resolved" and "10.96.0.20" in doc["addresses"]  # as a resolver does: the TCP answer


def test_tcp_refused_udp_answers(server, tmp_path):
    host, port, _ = server("--no-tcp", host="127.0.0.63")
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert doc["result"] == "resolved"
    tcp = _q(doc, "web.shop.svc.cluster.local", "A", "tcp")
    assert tcp["result"] == "port-unreachable" and "53/tcp" in tcp["error"]


def test_refused_and_servfail_rcodes(server, tmp_path):
    host, port, _ = server("--servfail", host="127.0.0.64")
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert doc["result"] == "dns-failure" and _q(doc, doc["name"])["result"] == "servfail" and host in doc["error"]
    lk = {x["purpose"]: x for x in doc["lookups"]}
    assert lk["short"]["outcome"]["musl"]["result"] == "servfail"  # musl stops at the first SERVFAIL; glibc goes on
    assert lk["short"]["outcome"]["glibc"]["result"] == "servfail"


def test_nothing_listening_is_port_unreachable_not_a_timeout(tmp_path):
    host = "127.0.0.65"
    port = _free_port(host)
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert doc["result"] == "dns-failure"
    assert {q["result"] for q in doc["queries"]} == {"port-unreachable"}
    assert doc["error"].startswith(f"{host}: UDP port-unreachable")


def test_deadline_bounds_a_server_that_never_answers(tmp_path):
    host = "127.0.0.66"
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, 0))
    port = udp.getsockname()[1]
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind((host, port))
    tcp.listen(64)  # connections complete in the kernel; nothing ever answers
    try:
        start = time.monotonic()
        doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=30, deadline=1.0)
        took = time.monotonic() - start
    finally:
        udp.close()
        tcp.close()
    assert took < 1.0 + 2.0, (
        took
    )  # the deadline holds although each query would wait 30 s (margin for a loaded machine)
    assert doc["result"] == "timeout" and doc["addresses"] == []
    assert {q["result"] for q in doc["queries"]} == {"timeout"}
    assert (
        len(doc["queries"]) == 14
    )  # search-path names of web (4), web.shop (3 more), kubernetes.default (4); AAAA; TCP ×2
    assert all(o["result"] == "timeout" for lk in doc["lookups"] for o in lk["outcome"].values())


def test_send_false_sends_nothing(tmp_path):
    host = "127.0.0.67"
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, 0))
    port = udp.getsockname()[1]
    try:
        doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, send=False)
        udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            udp.recv(512)
    finally:
        udp.close()
    assert doc["sent"] is False and doc["result"] == "not-probed" and doc["queries"] == []
    assert (
        doc["resolv_conf"]["nameservers"] == [host]
        and doc["lookups"][0]["candidates"]["glibc"][0] == "web.shop.svc.cluster.local"
    )


def test_unreadable_resolv_conf_falls_back_to_the_resolver_defaults(tmp_path):
    doc = dns.dns_probe("shop", "web", resolv_conf=str(tmp_path), send=False)
    assert doc["resolv_conf"]["error"].endswith("not a regular file")
    assert doc["nameservers"] == ["127.0.0.1"] and doc["cluster_domain_from"] == "default"


def test_ctrl_c_stops_the_probe_at_once(tmp_path):
    """SIGINT while every query waits: the probe does not sit out its deadline (daemon threads, short waits)."""
    import signal

    host = "127.0.0.68"
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, 0))
    port = udp.getsockname()[1]
    code = (
        f"from kpdiag.collect.dns import dns_probe\nprint('start', flush=True)\n"
        f"dns_probe('shop', 'web', resolv_conf={_resolv(tmp_path, host)!r}, port={port}, timeout=60, deadline=60)\nprint('finished')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "start"
        udp.settimeout(10)
        udp.recv(512)  # a query arrived: the probe is waiting for answers now
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - sent
    finally:
        udp.close()
        if proc.poll() is None:
            proc.kill()
    assert "finished" not in out and "KeyboardInterrupt" in err
    assert took < 3.0, took  # far below the 60 s deadline (margin for a loaded machine)


def test_ipv6_only_names_exist_without_an_a_record(server, tmp_path):
    """An IPv6-only cluster: A queries get NODATA. The names exist; no check may call them missing."""
    from tests.dns.dnslab import analyze_files

    host, port, _ = server(
        host="127.0.0.69",
        records={
            "web.shop.svc.cluster.local": "fd00:10:96::20",
            "kubernetes.default.svc.cluster.local": "fd00:10:96::1",
        },
    )
    doc = dns.dns_probe("shop", "web", resolv_conf=_resolv(tmp_path, host), port=port, timeout=5, deadline=15)
    assert doc["result"] == "resolved" and doc["addresses"] == ["fd00:10:96::20"]
    assert {x["purpose"]: x["outcome"]["glibc"]["result"] for x in doc["lookups"]} == {
        "short": "nodata",
        "namespaced": "nodata",
        "fqdn": "nodata",
        "kubernetes": "nodata",
    }
    report = analyze_files(
        {"probes/dns.json": json.dumps(doc).encode(), "kpdiag.json": b'{"format": "kpdiag-bundle/1"}'}
    )
    runs = {r.id: r for r in report.checks}
    for cid in ("KP135", "KP136", "KP137", "KP138", "KP139"):
        assert runs[cid].status == "ran" and runs[cid].findings == 0, (cid, [f.summary for f in report.findings])
