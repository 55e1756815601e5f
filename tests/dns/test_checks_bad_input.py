"""The DNS checks on bad or odd input: a named problem or a skip with its reason, never an internal error."""

import json
import os

import pytest

from tests.conftest import FIXTURES
from tests.dns.dnslab import analyze_files

DNS_IDS = [f"KP13{i}" for i in range(10)]


def _fixture_files(name):
    root = os.path.join(FIXTURES, name)
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f != "scenario.json":
                path = os.path.join(d, f)
                out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def _runs(files):
    report = analyze_files(files)
    runs = {r.id: r for r in report.checks if r.id in DNS_IDS}
    assert not [r for r in runs.values() if r.status == "error"], [
        (r.id, r.reason) for r in runs.values() if r.status == "error"
    ]
    return report, runs


BAD_DOCS = {
    "types": {
        "schema": "kpdiag.dns/v1",
        "sent": True,
        "name": 5,
        "result": "timeout",
        "nameservers": "10.96.0.10",
        "resolv_conf": "nameserver 10.96.0.10",
        "lookups": {"short": 1},
        "queries": "none",
    },
    "items": {
        "schema": "kpdiag.dns/v1",
        "sent": True,
        "name": "web.shop.svc.cluster.local",
        "result": "timeout",
        "nameservers": ["10.96.0.10", 7],
        "resolv_conf": {
            "entries": [1, {"line": "x"}],
            "search": "a b",
            "problems": [None],
            "options": [],
            "ndots": "5",
        },
        "lookups": [
            None,
            {"name": "web", "purpose": "short", "candidates": {"glibc": "web"}, "outcome": {"glibc": "resolved"}},
        ],
        "queries": [
            None,
            {"server": "10.96.0.10", "qname": "web.shop.svc.cluster.local", "qtype": "A", "transport": "udp"},
            {
                "server": "10.96.0.10",
                "qname": "web.shop.svc.cluster.local",
                "qtype": "A",
                "transport": "udp",
                "result": "timeout",
                "addresses": "x",
            },
        ],
    },
}


@pytest.mark.parametrize("variant", sorted(BAD_DOCS))
def test_malformed_probe_document(variant):
    files = _fixture_files("dns-healthy")
    files["probes/dns.json"] = json.dumps(BAD_DOCS[variant]).encode()
    report, _ = _runs(files)
    assert any(
        "probes/dns.json" in p["source"] and "is not what kpdiag.dns/v1 holds" in p["error"] for p in report.problems
    ), report.problems


def test_invalid_json_is_a_could_not_read_line():
    files = _fixture_files("dns-healthy")
    files["probes/dns.json"] = b'{"schema": "kpdiag.dns/v1",\n "queries": [}'
    report, runs = _runs(files)
    assert any(p["source"] == "probes/dns.json:2" and "invalid JSON" in p["error"] for p in report.problems), (
        report.problems
    )
    assert runs["KP138"].status == "skipped" and runs["KP130"].status == "ran"  # the API side still judged


def test_malformed_api_objects():
    files = _fixture_files("dns-coredns-loop")
    files["cluster/dns-pods.json"] = json.dumps(
        {
            "kind": "List",
            "items": [
                1,
                {
                    "metadata": "x",
                    "status": {"conditions": "no", "containerStatuses": [3, {"state": 1, "restartCount": "many"}]},
                },
            ],
        }
    ).encode()
    files["cluster/dns-endpointslices.json"] = json.dumps(
        {"kind": "List", "items": [{"endpoints": [None, {"addresses": "10.0.0.1", "conditions": 5}]}]}
    ).encode()
    files["cluster/dns-service.json"] = json.dumps(
        {
            "kind": "List",
            "items": [{"metadata": {"name": "kube-dns"}, "spec": {"clusterIPs": "10.96.0.10", "ports": 53}}],
        }
    ).encode()
    files["cluster/dns-logs.json"] = json.dumps({"logs": "\x1b]0;owned\x07"}).encode()
    report, runs = _runs(files)
    assert runs["KP132"].status == "skipped" and "no CoreDNS log" in runs["KP132"].reason
    files["cluster/dns-pods.json"] = b"[1, 2]"
    report, runs = _runs(files)
    assert any("dns-pods.json" in p["source"] and "not a List" in p["error"] for p in report.problems)


def test_the_older_single_lookup_document_skips_with_its_reason():
    files = _fixture_files("dns-healthy")
    files["probes/dns.json"] = json.dumps(
        {
            "name": "web.shop.svc.cluster.local",
            "nameservers": ["10.96.0.10"],
            "addresses": ["10.96.0.20"],
            "result": "resolved",
            "error": None,
        }
    ).encode()
    _, runs = _runs(files)
    for cid in ("KP133", "KP134", "KP135", "KP136", "KP137", "KP138", "KP139"):
        assert runs[cid].status == "skipped" and "DNS probe" in runs[cid].reason, runs[cid]


def test_no_probe_document_skips_the_query_checks_but_reads_resolv_conf():
    files = _fixture_files("dns-search-limits")
    doc = json.loads(files["probes/dns.json"])
    doc.update(sent=False, result="not-probed", queries=[])
    files["probes/dns.json"] = json.dumps(doc).encode()
    report, runs = _runs(files)
    assert (
        runs["KP134"].status == "ran" and runs["KP134"].findings == 2
    )  # resolv.conf is judged without sending anything
    for cid in ("KP135", "KP136", "KP137", "KP138", "KP139"):
        assert runs[cid].status == "skipped" and "--no-probe" in runs[cid].reason


def test_log_lines_reach_the_terminal_escaped(tmp_path):
    import subprocess
    import sys

    from kpdiag.render.safe import term

    files = _fixture_files("dns-coredns-loop")
    logs = json.loads(files["cluster/dns-logs.json"])
    entry = next(e for e in logs["logs"] if "text" in e)
    entry["text"] = entry["text"].replace("[FATAL]", "\x1b[2J[FATAL]")
    files["cluster/dns-logs.json"] = json.dumps(logs).encode()
    report, _ = _runs(files)
    kp132 = next(f for f in report.findings if f.id == "KP132")
    line = next(e.text for e in kp132.evidence)
    assert "\x1b" in line and "\x1b" not in term(line)  # the renderer's one escaping point does it
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(tmp_path), "--fail-on", "never"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "plugin/loop" in proc.stdout and "\x1b[2J" not in proc.stdout, proc.stdout[-2000:]
