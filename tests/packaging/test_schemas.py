"""Every JSON document kpdiag prints has a JSON Schema under kpdiag/schemas, and what it prints validates:
traces (kpdiag.trace/v1, every fixture's trace case in each mode, ICMP, IPv6, from a pod and the node, rejects and
drops, and the traces a node report carries), the check catalogue (`checks -o json`). The report schema is
exercised by tests/checks/test_engine.py and tests/fleet, the policy schema by tests/netpol."""

import glob
import json
import os

import jsonschema
import pytest

from kpdiag.cli import main
from tests.conftest import FIXTURES, ROOT
from tests.schemas import report_validator

SCHEMAS = os.path.join(ROOT, "kpdiag", "schemas")


def _schema(name):
    with open(os.path.join(SCHEMAS, name)) as fh:
        return json.load(fh)


def _run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, out


def test_every_schema_is_a_valid_json_schema():
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SCHEMAS, "*.schema.json")))
    assert {"report.schema.json", "trace.schema.json", "checks.schema.json"} <= set(names)
    for name in names:
        jsonschema.Draft202012Validator.check_schema(_schema(name))


def _fixture_traces():
    cases = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*", "scenario.json"))):
        with open(path) as fh:
            t = json.load(fh).get("trace")
        if t:
            cases.append((os.path.basename(os.path.dirname(path)), t))
    return cases


@pytest.mark.parametrize("name,case", _fixture_traces(), ids=[n for n, _ in _fixture_traces()])
def test_fixture_traces_validate(capsys, name, case):
    validator = jsonschema.Draft202012Validator(_schema("trace.schema.json"))
    argv = [
        "trace",
        "--bundle",
        os.path.join(FIXTURES, name),
        "--src",
        case["src"],
        "--dst",
        case["dst"],
        "--proto",
        case.get("proto", "tcp"),
        "-o",
        "json",
    ]
    if case.get("dport") is not None:
        argv += ["--dport", str(case["dport"])]
    code, out = _run(capsys, *argv)
    doc = json.loads(out)
    validator.validate(doc)
    assert doc["paths"] and {p["verdict"] for p in doc["paths"]} == {case["expect"]["verdict"]}


@pytest.mark.parametrize(
    "argv",
    [
        [
            "--bundle",
            "healthy-iptables",
            "--src",
            "10.244.1.10",
            "--dst",
            "10.96.0.20",
            "--dport",
            "80",
            "--from",
            "pod",
        ],
        [
            "--bundle",
            "healthy-iptables",
            "--src",
            "192.168.50.1",
            "--dst",
            "10.96.0.20",
            "--dport",
            "80",
            "--from",
            "node",
        ],
        ["--bundle", "healthy-iptables", "--src", "192.168.50.2", "--dst", "10.96.0.20", "--proto", "icmp"],
        ["--bundle", "healthy-nftables", "--src", "192.168.50.2", "--dst", "10.96.0.99", "--dport", "80"],
        [
            "--bundle",
            "healthy-iptables",
            "--src",
            "192.168.50.2",
            "--dst",
            "10.96.0.20",
            "--proto",
            "udp",
            "--dport",
            "53",
        ],
        ["--bundle", "dual-stack", "--src", "fd00:50::2", "--dst", "fd00:10:96::20", "--dport", "80"],
    ],
)
def test_more_traces_validate(capsys, argv):
    argv = list(argv)
    argv[1] = os.path.join(FIXTURES, argv[1])
    code, out = _run(capsys, "trace", *argv, "-o", "json")
    assert out.strip(), f"no JSON (exit {code})"
    jsonschema.validate(json.loads(out), _schema("trace.schema.json"))


def test_node_report_traces_validate():
    """`kpdiag node --service` adds traces to the report's extra: each is a kpdiag.trace/v1 document too (the same
    code on a recorded bundle: analyze_state + focus_report, as `kpdiag node` calls them)."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.commands.diagnose import analyze_state
    from kpdiag.commands.focus import focus_report
    from kpdiag.state.node import NodeState

    state = NodeState(Bundle.open(os.path.join(FIXTURES, "healthy-iptables")))
    report = focus_report(analyze_state(state), state, service="shop/web").to_dict()
    report = json.loads(json.dumps(report))
    report_validator(report).validate(report)  # node-report.schema.json: each trace a kpdiag.trace/v1 document
    assert report["kind"] == "node"
    traces = report["extra"]["traces"]
    assert traces
    for t in traces:
        jsonschema.validate(t, _schema("trace.schema.json"))


def test_check_catalogue_validates(capsys):
    code, out = _run(capsys, "checks", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, _schema("checks.schema.json"))
    assert len(doc) > 20


def test_trace_schema_rejects_what_it_should():
    schema = _schema("trace.schema.json")
    good = {
        "schema": "kpdiag.trace/v1",
        "packet": {
            "src": "10.0.0.1",
            "dst": "10.96.0.1",
            "proto": "tcp",
            "dport": 80,
            "sport": 40000,
            "iif": None,
            "from": "pod",
        },
        "mode": "iptables",
        "paths": [],
        "rules_evaluated": 0,
        "uncertain": False,
        "notes": [],
        "sources": [],
    }
    jsonschema.validate(good, schema)
    for bad in (
        {**good, "schema": "kpdiag.trace/v2"},
        {**good, "packet": {**good["packet"], "from": "moon"}},
        {**good, "paths": [{"probability": 2}]},
        {**good, "surprise": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_bundle_manifests_of_the_fixtures_validate():
    schema = _schema("bundle.schema.json")
    paths = glob.glob(os.path.join(FIXTURES, "*", "kpdiag.json"))
    assert len(paths) > 50
    for path in paths:
        with open(path) as fh:
            jsonschema.validate(json.load(fh), schema)


@pytest.mark.lab
def test_collected_bundle_manifest_validates(lab, tmp_path):
    """`kpdiag collect` in a lab node namespace: its kpdiag.json follows bundle.schema.json, errors included."""
    import shutil
    import sys

    lab.add_ns("node")
    exe = shutil.which("kpdiag")
    argv = ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + [
        "collect",
        "-o",
        str(tmp_path / "b"),
        "--host-root",
        "/",
    ]
    proc = lab.sh("node", argv, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "b" / "kpdiag.json") as fh:
        manifest = json.load(fh)
    jsonschema.validate(manifest, _schema("bundle.schema.json"))
    assert manifest["errors"], "a lab namespace has no kube-proxy: its sources are named as not collected"


def test_probe_results_of_the_fixtures_validate():
    schema = _schema("probes.schema.json")
    paths = glob.glob(os.path.join(FIXTURES, "*", "probes", "service.json"))
    assert paths
    for path in paths:
        with open(path) as fh:
            jsonschema.validate(json.load(fh), schema)


def _recorded_docs():
    """Every fixture's probes/service.json and probes/dns.json, with broken copies of each."""
    import copy

    docs = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*", "probes", "*.json"))):
        name = "probes.schema.json" if path.endswith("service.json") else "dns.schema.json"
        with open(path) as fh:
            doc = json.load(fh)
        docs.append((name, doc))
        for key in list(doc)[:4]:  # one key missing, one of the wrong type
            broken = copy.deepcopy(doc)
            broken.pop(key)
            docs.append((name, broken))
            broken = copy.deepcopy(doc)
            broken[key] = [] if not isinstance(doc[key], list) else {}
            docs.append((name, broken))
        for key in ("results", "queries"):
            if isinstance(doc.get(key), list) and doc[key] and isinstance(doc[key][0], dict):
                broken = copy.deepcopy(doc)
                broken[key][0].pop(next(iter(broken[key][0])))
                docs.append((name, broken))
                broken = copy.deepcopy(doc)
                broken[key][0]["unexpected"] = 1
                docs.append((name, broken))
    return docs


def test_the_recorded_document_checker_agrees_with_jsonschema():
    """kpdiag.schemas.violation (no dependency; used before a report copies a bundle's probe and DNS documents) says
    what the jsonschema library says, on every fixture's documents and on broken copies of each."""
    from kpdiag import schemas
    from tests.schemas import validator

    docs = _recorded_docs()
    assert len(docs) > 100
    valid = invalid = 0
    for name, doc in docs:
        expected = validator(name).is_valid(doc)
        got = schemas.violation(doc, name)
        assert (got is None) == expected, (name, got, doc if len(json.dumps(doc)) < 400 else "…")
        valid += expected
        invalid += not expected
    assert valid >= 20 and invalid >= 80, (valid, invalid)


def test_a_service_report_of_a_bundle_with_broken_probe_documents_keeps_its_schema(tmp_path):
    """A svc bundle whose probes/service.json lacks a field, and whose probes/dns.json is not any known form: the
    report still conforms to service-report.schema.json — those sections are null — and says why in its problems."""
    import shutil

    from kpdiag.commands.pipeline import analyze_bundle
    from tests.schemas import report_validator

    d = tmp_path / "svc"
    shutil.copytree(os.path.join(FIXTURES, "svc-udp-fails"), d)
    probes = json.loads((d / "probes" / "service.json").read_text())
    probes["results"][0].pop(next(k for k in probes["results"][0] if k not in ("kind", "target", "result")))
    (d / "probes" / "service.json").write_text(json.dumps(probes))
    (d / "probes" / "dns.json").write_text(json.dumps({"schema": "kpdiag.dns/v1"}))
    report = json.loads(json.dumps(analyze_bundle(str(d)).to_dict()))
    report_validator(report).validate(report)
    assert report["kind"] == "service" and report["extra"]["probes"] is None and report["extra"]["dns"] is None
    errors = {p["source"]: p["error"] for p in report["problems"]}
    assert "not a kpdiag.probes/v1 document ($.results[0]" in errors["probes/service.json"]
    assert "not a kpdiag.dns/v1 document" in errors["probes/dns.json"]
    # the diagnosis went on, on what could be read: the probe results are not read at all (the verdict says so, and
    # does not claim --no-probe), and nothing is said of DNS from a document that holds no lookup
    assert report["extra"]["verdict"][1].startswith("the probe results (probes/service.json) could not be read")
    assert report["extra"]["status"] != "works"
    kp108 = next(c for c in report["checks"] if c["id"] == "KP108")
    assert kp108["status"] == "skipped" and "neither which name was asked" in kp108["reason"]


def test_the_checker_on_numbers_json_can_and_cannot_hold():
    """Infinity and NaN are not JSON (Python reads 1e999 as inf; a report holding it would not parse elsewhere): never
    a number. 5.0 is an integer, as JSON Schema says."""
    from kpdiag import schemas

    integer = {"type": "integer"}
    number = {"type": "number"}
    assert schemas._check(5.0, integer, integer, "$") is None
    assert schemas._check(5.5, integer, integer, "$") is not None
    assert schemas._check(True, integer, integer, "$") is not None
    for bad in (float("inf"), float("-inf"), float("nan")):
        assert schemas._check(bad, number, number, "$") is not None
        assert schemas._check(bad, integer, integer, "$") is not None
    probes = json.load(open(os.path.join(FIXTURES, "svc-backend-partial", "probes", "service.json")))
    key = next(k for k, v in probes["results"][0].items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    probes["results"][0][key] = float("inf")
    assert schemas.violation(probes, "probes.schema.json")
