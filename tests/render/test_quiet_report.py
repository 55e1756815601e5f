"""A node with nothing to act on gets a report a person reads at a glance: at most five lines at 80 columns — the
subject, its facts and one line saying that nothing was found and what -v adds (the informational findings by name,
the checks not run). Anything to act on (an error, a warning, an unreadable input, a failed check) brings back the
full report."""

from __future__ import annotations

import os
import re

import pytest

from kpdiag.render.report import report_to_text
from tests.conftest import FIXTURES
from tests.given import fixture_report

NODE_FIXTURES = sorted(
    d
    for d in os.listdir(FIXTURES)
    if os.path.isfile(os.path.join(FIXTURES, d, "scenario.json")) and not d.startswith("cluster-")
)


def _quiet(report) -> bool:
    """Nothing to act on in a node's report (a Service's report leads with its verdict, and keeps it)."""
    if report.extra.get("verdict") or report.extra.get("headline"):
        return False
    return not report.problems and all(f.severity.value == "info" for f in report.findings)


@pytest.mark.parametrize("name", NODE_FIXTURES)
def test_a_report_with_nothing_to_act_on_is_five_lines_at_most(name):
    report = fixture_report(name)
    text = report_to_text(report, width=80)
    lines = text.splitlines()
    if _quiet(report):
        assert len(lines) <= 5, text
        assert lines[-1].endswith("— -v shows them") or lines[-1].endswith("— -v shows it") or text.count("No problems")
        assert "No problems found by the" in text, text
        for f in report.findings:  # every informational finding is named, or said to be among more
            assert f.id in text or "…" in text, (f.id, text)
        # -v gives the whole report: each finding in full and each check not run with its reason
        full = report_to_text(report, width=80, verbose=True)
        assert all(f"{f.id} {f.slug}" in full for f in report.findings)
        assert all(f"{r.id} {r.slug}: " in full for r in report.checks if r.status not in ("ran", "error"))
    else:  # the full report: never the one-line summary
        assert not re.search(r"No problems found by the \d+ checks? that ran", text), text


def test_the_healthy_fixtures_are_quiet():
    """The healthy fixtures (and every node of the zoo) are among the quiet ones: the test above judges them."""
    healthy = [n for n in NODE_FIXTURES if n.startswith(("healthy-", "zoo-")) or n == "ipvs-healthy"]
    assert len(healthy) >= 10, healthy
    for name in healthy:
        report = fixture_report(name)
        assert _quiet(report), name
        assert len(report_to_text(report, width=80).splitlines()) <= 5, name
