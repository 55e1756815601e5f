"""The check engine: selection, skips with reasons, internal errors isolated, JSON schema, exit codes, docs."""

import json
import os
import shutil
import subprocess
import sys


from kpdiag import exitcodes
from kpdiag.bundle.store import Bundle
from kpdiag.checkapi import Skip, check, load_registry, run_checks, select_checks
from kpdiag.cli import main
from kpdiag.commands.diagnose import analyze_state
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES, ROOT

HEALTHY = os.path.join(FIXTURES, "healthy-iptables")


def test_select_and_ignore_by_id_prefix_slug():
    checks = load_registry().checks
    ids = lambda sel=(), ign=(): [c.id for c in select_checks(checks, sel, ign)]  # noqa: E731
    assert ids(["KP501"]) == ["KP501"]
    assert set(ids(["KP50"])) == {f"KP50{i}" for i in range(1, 10)}
    assert set(ids(["KP51"])) >= {"KP510"} and not set(ids(["KP51"])) & set(ids(["KP50"]))
    assert ids(["forward-drop"]) == ["KP207"]
    assert "KP601" not in ids(ign=["KP6"]) and "KP501" in ids(ign=["KP6"])


def test_raising_check_is_isolated_and_skip_has_reason():
    @check("KP990", "test-boom", "boom", "error", symptom="s", why="w", fix="f")
    def boom(ctx, new):
        raise RuntimeError("kaboom")

    @check("KP991", "test-skip", "skip", "error", symptom="s", why="w", fix="f")
    def skip(ctx, new):
        raise Skip("no data for this")

    @check("KP992", "test-needs", "needs", "error", needs=("kube-proxy-log",), symptom="s", why="w", fix="f")
    def needs(ctx, new):
        yield new("never")

    from kpdiag.checkapi import _REGISTRY

    try:
        state = NodeState(Bundle.open(os.path.join(FIXTURES, "ip-forward-off")))
        specs = [boom.spec, skip.spec, needs.spec] + select_checks(load_registry().checks, ["KP501"])
        state_log = os.path.join(FIXTURES, "ip-forward-off", "node", "kube-proxy", "log.txt")
        assert os.path.exists(state_log)
        findings, runs = run_checks(state, specs)
        by = {r.id: r for r in runs}
        assert by["KP990"].status == "error" and "RuntimeError: kaboom" in by["KP990"].reason
        assert by["KP991"].status == "skipped" and by["KP991"].reason == "no data for this"
        assert by["KP992"].status == "ran" and by["KP992"].findings == 1  # the log is there
        assert by["KP501"].status == "ran" and "KP501" in [f.id for f in findings]
    finally:
        for k in ("KP990", "KP991", "KP992"):
            _REGISTRY.pop(k, None)


def test_missing_data_skips_with_reason(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(HEALTHY, b)
    os.unlink(b / "node" / "kube-proxy" / "log.txt")
    report = analyze_bundle(str(b))
    run = {r.id: r for r in report.checks}["KP704"]
    assert run.status == "skipped" and "node/kube-proxy/log.txt" in run.reason


def test_json_report_validates_against_schema():
    from tests.schemas import validator

    for name in ("healthy-iptables", "ipvs-fallback", "kube-proxy-log-errors"):
        data = analyze_bundle(os.path.join(FIXTURES, name)).to_dict()
        validator("report.schema.json").validate(data)
        validator("node-report.schema.json").validate(data)


def test_every_file_corrupt_still_reports(tmp_path):
    b = tmp_path / "broken"
    shutil.copytree(HEALTHY, b)
    for dirpath, _, files in os.walk(b):
        for f in files:
            if f != "kpdiag.json":
                with open(os.path.join(dirpath, f), "wb") as fh:
                    fh.write(b"\xff\xfe garbage \x00\x01")
    report = analyze_bundle(str(b))
    assert not report.readable
    assert all(r.status == "skipped" for r in report.checks)
    assert len(report.problems) >= 8 and all(
        "not text" in p["error"] or "not collected" in p["error"] for p in report.problems
    )
    assert main(["analyze", str(b)]) == exitcodes.NO_DIAGNOSIS
    # one readable file is enough to diagnose something: exit is not 3
    shutil.copy(os.path.join(HEALTHY, "node", "sysctl.txt"), b / "node" / "sysctl.txt")
    report = analyze_bundle(str(b))
    assert report.readable and {r.id for r in report.checks if r.status == "ran"} >= {"KP501", "KP502"}
    assert main(["analyze", str(b)]) == exitcodes.OK


def test_exit_codes_and_fail_on(capsys):
    assert main(["analyze", os.path.join(FIXTURES, "ip-forward-off")]) == exitcodes.FINDINGS
    assert main(["analyze", os.path.join(FIXTURES, "ip-forward-off"), "--fail-on", "never"]) == exitcodes.OK
    assert main(["analyze", HEALTHY]) == exitcodes.OK
    assert main(["analyze", HEALTHY, "--fail-on", "info"]) == exitcodes.FINDINGS  # KP601 is info
    assert main(["analyze", os.path.join(FIXTURES, "rule-scale"), "--fail-on", "warning"]) == exitcodes.FINDINGS
    assert main(["analyze", "/nonexistent/bundle"]) == exitcodes.NO_DIAGNOSIS
    assert main(["analyze", HEALTHY, "--fail-on", "bogus"]) == exitcodes.USAGE
    assert main(["explain", "KP999"]) == exitcodes.USAGE
    capsys.readouterr()


def test_text_renders_every_part_and_honours_no_color(monkeypatch):
    from kpdiag.render.report import report_to_table, report_to_text

    report = analyze_bundle(os.path.join(FIXTURES, "ip-forward-off"))
    text = report_to_text(report, colour=False)
    assert "KP501 ip-forward-off" in text and "why:" in text and "$ sudo sysctl -w net.ipv4.ip_forward=1" in text
    assert "node/sysctl.txt:" in text and "net.ipv4.ip_forward = 0" in text
    assert "\033[" not in text and "\033[" in report_to_text(report, colour=True)
    assert "KP501" in report_to_table(report)
    monkeypatch.setenv("NO_COLOR", "1")
    from kpdiag.render.report import use_colour

    class Tty:
        def isatty(self):
            return True

    assert use_colour(Tty()) is False


def test_docs_checks_md_is_current():
    from kpdiag.render.catalogue import catalogue_markdown

    with open(os.path.join(ROOT, "docs", "checks.md")) as fh:
        assert fh.read() == catalogue_markdown(load_registry().checks), (
            "docs/checks.md is stale: run 'kpdiag checks -o markdown > docs/checks.md'"
        )


def test_explain_and_checks_cli():
    out = subprocess.run([sys.executable, "-m", "kpdiag", "explain", "ip-forward-off"], capture_output=True, text=True)
    assert (
        out.returncode == 0
        and out.stdout.startswith("KP501 ip-forward-off")
        and "Symptom" in out.stdout
        and "Fix" in out.stdout
    )
    out = subprocess.run([sys.executable, "-m", "kpdiag", "checks", "-o", "json"], capture_output=True, text=True)
    data = json.loads(out.stdout)
    assert {d["id"] for d in data} >= {
        "KP204",
        "KP205",
        "KP207",
        "KP208",
        "KP301",
        "KP501",
        "KP502",
        "KP503",
        "KP505",
        "KP601",
        "KP701",
        "KP702",
        "KP703",
        "KP704",
        "KP705",
        "KP706",
    }


def test_analyze_tar_gz_equals_directory(tmp_path):
    import tarfile

    tgz = tmp_path / "b.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(os.path.join(FIXTURES, "ipvs-fallback"), arcname="ipvs-fallback")
    a = analyze_bundle(os.path.join(FIXTURES, "ipvs-fallback"))
    b = analyze_bundle(str(tgz))
    assert [f.id for f in a.findings] == [f.id for f in b.findings]
    assert [f.summary for f in a.findings] == [f.summary for f in b.findings]


def test_analyze_state_from_memory_files():
    files = {}
    for dirpath, _, names in os.walk(HEALTHY):
        for n in names:
            p = os.path.join(dirpath, n)
            files[os.path.relpath(p, HEALTHY)] = open(p, "rb").read()
    report = analyze_state(NodeState(Bundle.from_files("mem", files)))
    assert {f.id for f in report.findings} == {"KP601"}


def test_kp201_in_ipvs_mode_explains_the_reject():
    """IPVS mode, newer kube-proxy: ping to a ClusterIP is rejected by KUBE-IPVS-FILTER — said so, with the rule."""
    import json as _json

    from kpdiag.commands.svc import service_report

    files = {}
    for dirpath, _, names in os.walk(os.path.join(FIXTURES, "svc-ipvs-ping")):
        for n in names:
            p = os.path.join(dirpath, n)
            files[os.path.relpath(p, os.path.join(FIXTURES, "svc-ipvs-ping"))] = open(p, "rb").read()
    probes = _json.loads(files["probes/service.json"])
    probes["results"][0].update(result="port-unreachable", **{"from": "10.96.0.20"})
    files["probes/service.json"] = _json.dumps(probes).encode()
    report = service_report(Bundle.from_files("x", files), "shop", "web")
    kp201 = [f for f in report.findings if f.id == "KP201"]
    assert kp201 and "KUBE-IPVS-FILTER rejects" in kp201[0].summary and "TCP 80 works" in kp201[0].summary
