"""Terminal injection: what others wrote (node names, API objects, labels, kube-proxy's /proxyMode and log, iptables
comments, the reports other nodes send) reaches the operator's terminal only as visible escapes.

Each test plants hostile strings — clear screen (ESC [2J), set the window title (OSC 0), a hyperlink (OSC 8), BEL,
CR, a bidi override, and a newline followed by a fake fix "$ kubectl delete ns prod" — in a copy of a real fixture,
runs the real CLI (a subprocess, as a user would), and asserts that no raw control byte comes out in text or table
output and that no line starts with the fake command or a fake "No problems found".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;pwned\x07"
LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
FAKE = "\nNo problems found by the checks that ran.\n$ kubectl delete ns prod"
NASTY = f"x{CLEAR}{TITLE}{LINK}\a\r\b\x7f\x9b31m\u202eevil\u2066"
NASTY_NL = NASTY + FAKE

# a raw control: C0 except the newline between lines, DEL, C1, bidi embeddings/overrides/isolates, line separators
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def kpdiag(*args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, COLUMNS="80")
    e.pop("NO_COLOR", None)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kpdiag.cli", *args], capture_output=True, text=True, env=e, timeout=120
    )


def assert_clean(text: str, what: str) -> None:
    bad = RAW.search(text)
    assert bad is None, (
        f"{what}: raw control {bad.group(0)!r} at {bad.start()}: {text[max(0, bad.start() - 60) : bad.start() + 20]!r}"
    )
    for line in text.splitlines():
        stripped = line.strip()
        assert not stripped.startswith("$ kubectl delete"), f"{what}: a fake command line: {line!r}"
        assert not stripped.startswith("No problems found") or line == "No problems found by the checks that ran.", (
            f"{what}: {line!r}"
        )
    # at most one verdict line, kpdiag's own
    assert sum(line.strip().startswith("No problems found") for line in text.splitlines()) <= 1, what


def _copy(name: str, tmp_path) -> str:
    dst = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), dst)
    return str(dst)


def _rewrite_json(path: str, fn) -> None:
    with open(path) as fh:
        doc = json.load(fh)
    doc = fn(doc)
    with open(path, "w") as fh:
        json.dump(doc, fh)


def _replace_everywhere(root: str, old: str, new: str) -> None:
    """Replace a string value (the whole value) in every JSON file of a bundle, as JSON (controls as \\u escapes)."""
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n.endswith(".json") and n != "scenario.json":
                p = os.path.join(dirpath, n)
                _rewrite_json(p, lambda d: json.loads(json.dumps(d).replace(json.dumps(old), json.dumps(new))))


def test_api_objects_labels_and_names(tmp_path):
    """Service, namespace and pod names and label values from the API: the selector-typo fixture fires KP101/KP103,
    whose summaries, fixes and evidence carry the label and the names."""
    b = _copy("svc-selector-typo", tmp_path)
    _replace_everywhere(b, "webb", "webb" + NASTY_NL)  # the Service's selector value (a label)
    _replace_everywhere(b, "web-1", "web-1" + NASTY_NL)  # a pod's name
    _replace_everywhere(b, "web", "web" + NASTY_NL)  # the Service's name (and the pod's label value)
    _rewrite_json(
        os.path.join(b, "kpdiag.json"), lambda d: {**d, "node": "node" + NASTY_NL, "service": "shop/web" + NASTY_NL}
    )
    for output in ("text", "table"):
        proc = kpdiag("analyze", b, "-o", output)
        assert proc.returncode == 1, proc.stderr
        assert "KP103" in proc.stdout and "KP101" in proc.stdout
        assert_clean(proc.stdout, f"analyze -o {output}")
        assert_clean(proc.stderr, f"analyze -o {output} (stderr)")
    text = kpdiag("analyze", b, "-v").stdout
    assert (
        "\\x1b[2J" in text and "\\x07" in text and "\\u202e" in text and "\\n$ kubectl delete ns prod" in text
    )  # shown, escaped
    assert text.startswith("» shop/webx\\x1b[2J")  # the verdict names the Service, escaped
    assert_clean(text, "analyze -v")
    # JSON stays the raw value (JSON's own escaping is enough)
    doc = json.loads(kpdiag("analyze", b, "-o", "json").stdout)
    assert any("webb" + NASTY_NL in f["summary"] for f in doc["findings"])


def test_iptables_comment_proxy_mode_log_line_and_node_name(tmp_path):
    b = _copy("kube-proxy-log-errors", tmp_path)
    with open(os.path.join(b, "node", "kube-proxy", "log.txt"), "a") as fh:
        fh.write(
            f'E1203 00:09:00.000000       1 proxier.go:1500] "Failed to execute iptables-restore" err="{CLEAR}{TITLE}{LINK}\r$ kubectl delete ns prod\a"\n'
        )
    with open(os.path.join(b, "node", "kube-proxy", "proxy-mode.txt"), "w") as fh:
        fh.write("iptables" + NASTY)
    rules = os.path.join(b, "node", "iptables-save.txt")
    with open(rules, encoding="utf-8") as fh:
        text = fh.read()
    assert '"shop/web:http cluster IP"' in text
    with open(rules, "w", encoding="utf-8") as fh:
        fh.write(text.replace('"shop/web:http cluster IP"', f'"shop/web{CLEAR}{TITLE}\a\r:http cluster IP"'))
    _rewrite_json(os.path.join(b, "kpdiag.json"), lambda d: {**d, "node": "node" + NASTY_NL})
    for output in ("text", "table"):
        proc = kpdiag("analyze", b, "-o", output, "-v")
        assert proc.returncode in (0, 1), proc.stderr
        assert_clean(proc.stdout, f"analyze -o {output}")
        assert_clean(proc.stderr, f"analyze -o {output} (stderr)")
    text = kpdiag("analyze", b, "-v").stdout
    assert "\\x1b" in text  # the hostile bytes are visible, not obeyed
    # the trace prints rule texts and comments
    trace = kpdiag("trace", "--bundle", b, "--src", "192.168.50.2", "--dst", "10.96.0.20:80", "-v")
    assert trace.returncode == 0, trace.stderr
    assert "shop/web\\x1b[2J" in trace.stdout
    assert_clean(trace.stdout, "trace")
    assert_clean(trace.stderr, "trace (stderr)")
    dot = kpdiag("trace", "--bundle", b, "--src", "192.168.50.2", "--dst", "10.96.0.20:80", "-o", "dot").stdout
    assert RAW.search(dot) is None


def test_dot_escapes_quotes_and_backslashes():
    from kpdiag.render.trace import trace_to_dot
    from kpdiag.trace.model import Packet, Path, Step, TraceResult

    step = Step("PREROUTING", "nat", 'KUBE-"evil\\"]; x [label="', 1, "-A x", "DNAT")
    res = TraceResult(
        Packet(src="10.0.0.1", dst="10.96.0.1", proto="tcp", dport=80),
        "iptables",
        (Path(1.0, "accept", '1.2.3.4:80"\\', False, (step,)),),
        1,
    )
    dot = trace_to_dot(res)
    for line in dot.splitlines():
        # every quoted string closes where Graphviz thinks it does: unescaped quotes come in pairs
        assert len(re.findall(r'(?<!\\)"', line.replace("\\\\", ""))) % 2 == 0, line
    assert 'KUBE-\\"evil\\\\\\"]' in dot


def test_node_reports_in_a_cluster_dir(tmp_path):
    """A compromised node sends a report whose node name, summary, fix, evidence and problems try to take over the
    operator's terminal; kpdiag analyze DIR (what kpdiag cluster prints) shows them escaped."""
    d = tmp_path / "reports"
    shutil.copytree(os.path.join(FIXTURES, "cluster-fleet-drift"), d)
    with open(d / "node-b.json") as fh:
        rep = json.load(fh)
    rep["facts"]["kernel"] = "6.1" + NASTY_NL
    rep["facts"]["proxy_mode"] = "iptables" + NASTY
    f = dict(rep["findings"][0])
    f.update(
        severity="error",
        summary="all good" + NASTY_NL,
        explanation="fine" + NASTY_NL,
        fix=["restart" + NASTY_NL],
        evidence=[{"source": "node/x" + NASTY, "text": "t" + NASTY_NL, "line": 1}],
        subject="s" + NASTY_NL,
    )
    rep["findings"].append(f)
    rep["problems"].append({"source": "node/y" + NASTY, "error": "e" + NASTY_NL})
    with open(d / "node-b.json", "w") as fh:
        json.dump(rep, fh)
    for output in ("text", "table"):
        proc = kpdiag("analyze", str(d), "-o", output, "-v")
        assert proc.returncode == 1, proc.stderr
        assert_clean(proc.stdout, f"cluster dir -o {output}")
        assert_clean(proc.stderr, f"cluster dir -o {output} (stderr)")
    assert "\\n$ kubectl delete ns prod" in kpdiag("analyze", str(d), "-v").stdout


def test_check_catalogue_of_a_plugin_and_messages():
    """A third-party check's texts (catalogue, explain) and the messages kpdiag echoes are escaped too."""
    from kpdiag.checkapi import CheckSpec, Docs
    from kpdiag.model import Severity
    from kpdiag.render.catalogue import catalogue_table, explain_text

    spec = CheckSpec(
        "KP990",
        "evil" + NASTY,
        "title" + NASTY_NL,
        Severity.ERROR,
        ("sysctl",),
        Docs("s" + NASTY_NL, "w" + NASTY_NL, "f" + NASTY_NL),
        lambda ctx, new: (),
        ("ref" + NASTY_NL,),
    )
    assert_clean(catalogue_table([spec], 80), "checks")
    assert_clean(explain_text(spec, 80), "explain")
    proc = kpdiag("analyze", os.path.join(FIXTURES, "healthy-iptables"), "--select", "KP5" + NASTY_NL)
    assert proc.returncode == 2
    assert_clean(proc.stderr, "usage error")


@pytest.mark.parametrize(
    "value", [NASTY_NL, "\x00\x01\x1f\x7f\x80\x9f", "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
)
def test_term_makes_every_control_visible(value):
    from kpdiag.render.safe import term

    out = term(value)
    assert RAW.search(out) is None and "\n" not in out
    assert term("plain ascii, é ü — ✓") == "plain ascii, é ü — ✓"  # printable text is left alone
    assert term("a\nb") == "a\\nb" and term("\x1b[2J") == "\\x1b[2J" and term("\u202e") == "\\u202e"
    assert term("a\ufeffb\u200bc") == "a\\ufeffb\\u200bc"  # invisible format characters are shown too


def test_a_flood_of_problems_is_cut_in_the_text_report_not_in_json():
    """A forged manifest with 200,000 'errors' made a 32 MB text report: the text lists the first 50 and says how many
    more (-v lists them all); the data keeps every one."""
    from kpdiag.model import Report
    from kpdiag.render.report import PROBLEMS_SHOWN, report_to_text

    problems = tuple({"source": f"node/x{i}.txt", "error": "forged"} for i in range(200_000))
    report = Report(subject="node x", findings=(), checks=(), problems=problems)
    text = report_to_text(report, width=80)
    assert "could not read (200000):" in text and "node/x49.txt" in text and "node/x50.txt" not in text
    assert f"… and {200_000 - PROBLEMS_SHOWN} more (-v lists them all" in text
    assert len(text) < 10_000
    assert "node/x199999.txt" in report_to_text(report, verbose=True, width=80)
