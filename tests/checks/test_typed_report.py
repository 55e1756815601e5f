"""Reports are typed both ways: every finding's fix is a list of steps whose kind (command to paste, note to read)
is in the data, decided once (kpdiag.fixcmd.step_kind, or the check's own command()/note()); the text renderer prints
what the data says; a report's JSON reads back into the same Report (Report.from_dict)."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.fixcmd import FixStep, command, note, step_kind
from kpdiag.model import Report
from kpdiag.render.report import report_to_text
from tests.schemas import report_validator, validator

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
BUNDLES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "kpdiag.json")))


@pytest.fixture(scope="module")
def reports():
    from tests.given import fixture_report

    return {n: fixture_report(n) for n in BUNDLES}


def test_every_fix_step_is_typed_and_reads_back(reports):
    envelope = validator("report.schema.json")
    steps, sections, kinds = 0, set(), set()
    for name, report in reports.items():
        data = report.to_dict()
        envelope.validate(data)
        report_validator(data).validate(data)  # its kind's schema: facts and sections typed, no other key
        kinds.add(data["kind"])
        sections |= set(data["extra"])
        for f in data["findings"]:
            assert [s["text"] for s in f["fix_steps"]] == f["fix"], (name, f["id"])
            assert {s["kind"] for s in f["fix_steps"]} <= {"command", "note"}
            steps += len(f["fix_steps"])
        again = Report.from_dict(json.loads(json.dumps(data)))
        assert again.to_dict() == data, name
    assert steps > 300
    assert kinds == {"node", "service"}, kinds  # cluster reports: tests/fleet
    assert {"programmed", "verdict", "status", "probes", "dns"} <= sections, (
        sections
    )  # traces: tests/packaging/test_schemas.py


@pytest.mark.parametrize(
    "fixture, fid, start, kind",
    [
        ("forward-drop", "KP207", "find who set the policy", "note"),  # the check marks it
        ("backend-mix", "KP601", "test a Service with its port", "note"),
        ("backend-mix", "KP601", "on the gateway", "note"),
    ],
)
def test_known_steps_have_the_right_kind(reports, fixture, fid, start, kind):
    if fixture not in reports:
        pytest.fail(f"fixture {fixture} is gone: pick another that shows {fid}")
    found = [s for f in reports[fixture].findings if f.id == fid for s in f.fix_steps() if s["text"].startswith(start)]
    assert found and all(s["kind"] == kind for s in found), found


def test_step_kind_rules():
    assert step_kind("cat /etc/resolv.conf   # search and options lines") == "command"
    assert step_kind("dig @10.96.0.10 web.shop.svc.cluster.local") == "command"
    assert step_kind("uname -r; nft --version") == "command"
    assert step_kind("find who set the policy: Docker …") == "note"
    assert step_kind("test a Service with its port") == "note"
    assert step_kind("upgrade the node image (kernel ≥ 5.13)") == "note"
    assert step_kind(note("kubectl is not a sentence here")) == "note"  # the check's choice wins
    assert step_kind(command("Deploy NodeLocal DNSCache")) == "command"
    with pytest.raises(ValueError):
        FixStep("x", "maybe")


def test_text_report_prints_the_kinds(reports):
    name = next(n for n in ("forward-drop",) if n in reports)
    text = report_to_text(reports[name], width=200)
    assert "$ iptables -I FORWARD" in text
    assert "- find who set the policy" in text


def test_dataplane_findings_carry_their_case_as_data(reports):
    seen = {}
    for report in reports.values():
        for f in report.findings:
            if f.id in ("KP202", "KP203", "KP302", "KP303", "KP402", "KP403"):
                seen.setdefault(f.id, f)
    assert set(seen) == {"KP202", "KP203", "KP302", "KP303", "KP402", "KP403"}
    for fid, f in seen.items():
        d = f.to_dict()["data"]
        assert d["service"] and d["cluster_ip"] and d["port"] > 0 and d["family"] in (4, 6)
        assert d["mode"] == {"2": "iptables", "3": "ipvs", "4": "nftables"}[fid[2]]
        if fid in ("KP203", "KP303", "KP403"):
            assert d["programmed"] and d["endpoints"] != d["expected"]
            assert set(d["stale"]) == set(d["endpoints"]) - set(d["expected"])
            assert set(d["missing"]) == set(d["expected"]) - set(d["endpoints"])
        else:
            assert d["programmed"] is False and d["ready_endpoints"] > 0


def test_observed_failures_carry_the_probes_as_data(reports):
    """KP111–KP114 (what the probes saw) give scripts the same facts as the summary: the port through the Service and
    each endpoint probed directly, with its pod, node, result and outcome."""
    f = next(f for f in reports["svc-backend-refuses"].findings if f.id == "KP111")
    d = f.to_dict()["data"]
    assert d["service"] == "shop/web" and d["port"] == 80 and d["status"] == "fails"
    assert d["through_service"]["outcome"] == "refused"
    assert d["endpoints"] and all(e["outcome"] == "refused" and e["pod"] for e in d["endpoints"])
    for e in d["endpoints"]:
        assert e["target"] in f.summary  # the data and the words say the same
    udp = next(f for f in reports["svc-udp-fails"].findings if f.id == "KP114").data
    assert udp["protocol"] == "udp" and udp["endpoints"] == [] and udp["through_service"]["from"] == "10.244.1.1"


def test_findings_carry_their_case_as_data(reports):
    """Findings carry structured data for scripts, consistent with what they say: the kernel settings (key, value seen,
    value the fix sets), conntrack counts, the Service port (the dataplane findings' keys), the DNS queries, the route."""
    by_id: dict[str, list] = {}
    total = with_data = 0
    for report in reports.values():
        for f in report.findings:
            total += 1
            with_data += bool(f.data)
            by_id.setdefault(f.id, []).append(f)
            for s in f.data.get("sysctls", []):  # every setting is the one the evidence shows, and the fix sets it
                seen = [e.text for e in f.evidence if e.text.startswith(s["key"] + " ")]
                assert s["value"] is None or not seen or seen[0].endswith(f"= {s['value']}"), (f.id, s, seen)
                assert any(
                    f"{s['key']}={s['want']}" in step or f"{s['key']} = {s['want']}" in step for step in f.fix
                ), (
                    f.id,
                    s,
                )
            if "service" in f.data and f.subject and f.id not in ("KP103",):
                assert f.subject.startswith(f.data["service"]), (f.id, f.subject, f.data["service"])
    assert with_data / total > 0.55, f"{with_data} of {total} findings carry data"
    kp501 = by_id["KP501"][0].data["sysctls"]
    assert kp501 == [{"key": "net.ipv4.ip_forward", "value": "0", "want": "1"}]
    kp503 = next(f for f in by_id["KP503"] if "count" in f.data).data
    assert kp503["count"] < kp503["max"] and kp503["percent_full"] == round(100 * kp503["count"] / kp503["max"], 1)
    kp601 = by_id["KP601"][0].data
    assert kp601["route"]["dev"] and 0 < kp601["leaving"] <= kp601["cluster_ips"]
    kp137 = by_id["KP137"][0].data
    assert {kp137["udp"]["transport"], kp137["tcp"]["transport"]} == {"udp", "tcp"}
    assert kp137["udp"]["result"] != kp137["tcp"]["result"]  # one answers, the other does not
    kp101 = by_id["KP101"][0].data
    assert kp101["endpoints"] == [] and kp101["protocol"] in ("tcp", "udp", "sctp") and kp101["cluster_ips"]
    kp102 = by_id["KP102"][0].data
    assert kp102["endpoints"] and not any(e["ready"] for e in kp102["endpoints"])
