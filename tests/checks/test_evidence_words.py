"""Evidence never cuts a word or a quoted log line: a long text is cut at a blank and says " …"; klog's multi-line
values (err=<, indented lines, >) are one entry, quoted whole."""

from __future__ import annotations

import os

from kpdiag.evidence import clip
from tests.conftest import FIXTURES
from tests.given import fixture_report


def test_clip_cuts_at_a_blank_and_says_so():
    text = "exit status 2: iptables-restore v1.8.9 (nf_tables): line 12 failed"
    assert clip(text, 200) == text
    assert clip(text, 30) == "exit status 2: …"  # "iptables-restor" would be a cut word
    cut = clip(text, 30)
    assert cut.endswith(" …") and text.startswith(cut[:-2]) and len(cut) <= 32
    assert text.split()[len(cut[:-2].split()) - 1] == cut[:-2].split()[-1]  # the last word shown is whole
    assert clip("x" * 50 + " tail", 20) == "x" * 50 + " …"  # one long word: kept whole


def test_a_multi_line_klog_value_is_quoted_whole():
    from kpdiag.commands.pipeline import analyze_bundle

    report = analyze_bundle(os.path.join(FIXTURES, "kube-proxy-restore-rejected"))
    kp704 = next(f for f in report.findings if f.id == "KP704")
    first = kp704.evidence[0]
    assert first.line == 7 and first.text.endswith(
        "err=< exit status 2: Warning: Extension statistic revision 0 not "
        "supported, missing kernel module? iptables-restore v1.8.9 "
        "(nf_tables): line 12 failed >"
    ), first.text
    assert kp704.data["lines"] == 2  # entries, not the physical lines of one entry


def test_no_fixture_evidence_ends_inside_a_word():

    for name in sorted(os.listdir(FIXTURES)):
        path = os.path.join(FIXTURES, name)
        if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "node")):
            continue
        for f in fixture_report(name).findings:
            for e in f.evidence:
                assert not e.text.endswith("…") or e.text.endswith(" …"), (name, f.id, e.text[-40:])
                assert not e.text.rstrip().endswith("=<"), (name, f.id, e.text)
