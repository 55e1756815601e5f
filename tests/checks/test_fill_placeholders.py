"""Fixes name what kpdiag knows: ``<this node>`` becomes the node's name (the bundle's manifest), ``--bundle <bundle>``
the bundle's path — or, read live on the node, is dropped (the command traces that node live)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from kpdiag.fixcmd import FixStep, fill_known
from tests.conftest import FIXTURES
from tests.given import fixture_report


def _analyze(name: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", os.path.join(FIXTURES, name), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(proc.stdout)


def _fixes(report: dict, check: str) -> list[str]:
    return [s for f in report["findings"] if f["id"] == check for s in f["fix"]]


def test_this_node_is_the_node_of_the_bundle():
    fixes = _fixes(_analyze("backend-mix"), "KP204")
    assert "kubectl -n kube-system delete pod -l k8s-app=kube-proxy --field-selector spec.nodeName=lab-backend-mix" in (
        fixes
    ), fixes
    assert not any("<this node>" in s for s in fixes)


def test_the_bundle_is_named_and_the_fix_runs_as_printed():
    report = _analyze("firewall-drops-nodeports")
    (trace,) = [s for s in _fixes(report, "KP509") if s.startswith("kpdiag trace")]
    assert f"--bundle {os.path.join(FIXTURES, 'firewall-drops-nodeports')} " in trace, trace
    argv = shlex.split(trace.split("#", 1)[0])
    proc = subprocess.run([sys.executable, "-m", "kpdiag", *argv[1:]], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 4, 5) and "path" in proc.stdout, proc.stderr  # it traces: the fix works as given


def test_no_fixture_report_leaves_a_placeholder_it_knows():
    """Every fixture is a bundle on disk with a node named in its manifest: no fix says <this node> or <bundle>."""
    from kpdiag.fleet.aggregate import looks_like_report_dir

    seen = 0
    for name in sorted(os.listdir(FIXTURES)):
        path = os.path.join(FIXTURES, name)
        if not os.path.isdir(path) or looks_like_report_dir(path):
            continue
        report = fixture_report(name)
        for f in report.findings:
            for step in f.fix:
                assert "--bundle <bundle>" not in step, (name, f.id, step)
                if report.subject:
                    assert "<this node>" not in step, (name, f.id, step)
                seen += "--bundle " in step or "spec.nodeName=" in step
    assert seen >= 3


def test_fill_known_quotes_keeps_kinds_and_drops_the_bundle_when_live():
    steps = (
        FixStep("kubectl describe node <this node> | grep -i taint", "command"),
        FixStep("kpdiag trace --bundle <bundle> --src 1.2.3.4 --dst 10.0.0.1 --dport 80   # where it ends", "command"),
        "a note without placeholders",
    )
    on_disk = fill_known(steps, node="node-a; rm -rf /", bundle="/tmp/my bundle")
    assert on_disk[0] == "kubectl describe node 'node-a; rm -rf /' | grep -i taint" and on_disk[0].kind == "command"
    assert (
        on_disk[1].startswith("kpdiag trace --bundle '/tmp/my bundle' --src 1.2.3.4") and on_disk[1].kind == "command"
    )
    assert on_disk[2] is steps[2]
    live = fill_known(steps, node="", bundle=None)
    assert live[0] == steps[0]  # no name known: the placeholder stays
    assert live[1] == "kpdiag trace --src 1.2.3.4 --dst 10.0.0.1 --dport 80   # where it ends"
