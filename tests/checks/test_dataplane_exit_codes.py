"""Exit codes follow the dataplane (issue 37): kube-proxy that no longer syncs (its restores rejected, no sync since)
and pods whose MTU the overlay cannot carry are errors — `kpdiag node && deploy` must stop — while the same log
errors followed by a successful sync, and a tunnel too large with pods small enough, stay warnings."""

from __future__ import annotations

import os
import shutil

from kpdiag.commands.pipeline import analyze_bundle

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")
SYNCED = 'I1203 00:07:14.000101       1 proxier.go:805] "SyncProxyRules complete" elapsed="38.0ms"\n'


def _kp704(path: str):
    return next(f for f in analyze_bundle(path).findings if f.id == "KP704" and f.data["cause"] == "restore-rejected")


def test_rejected_restores_with_no_sync_since_are_an_error(tmp_path):
    stuck = _kp704(os.path.join(FIXTURES, "kube-proxy-restore-rejected"))
    assert stuck.severity == "error" and stuck.data["syncing"] is False
    copy = tmp_path / "b"
    shutil.copytree(os.path.join(FIXTURES, "kube-proxy-restore-rejected"), copy)
    with open(copy / "node" / "kube-proxy" / "log.txt", "a") as fh:
        fh.write(SYNCED)  # the next sync went through: the node is current again
    recovered = _kp704(str(copy))
    assert recovered.severity == "warning" and recovered.data["syncing"] is True


def test_pods_larger_than_the_overlay_carries_are_an_error():
    findings = [f for f in analyze_bundle(os.path.join(FIXTURES, "mtu-vxlan-mismatch")).findings if f.id == "KP508"]
    pods = next(f for f in findings if "pod interface" in f.summary)
    tunnel = next(f for f in findings if f.summary.startswith("tunnel"))
    assert pods.severity == "error" and tunnel.severity == "warning"
