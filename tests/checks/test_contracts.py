"""Contracts every fixture's findings keep: severities within what their check declares (what `kpdiag checks` shows),
and fix commands that are safe to paste (no truncation of an existing /etc file, no blind append)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from kpdiag.checkapi import load_registry

from ..conftest import FIXTURES

BUNDLES = sorted(d for d in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, d, "kpdiag.json")))
_REPORTS: dict = {}


def _report(name):
    from tests.given import fixture_report

    return fixture_report(name)


@pytest.mark.parametrize("name", BUNDLES)
def test_findings_stay_within_their_declared_severities(name):
    specs = {c.id: c for c in load_registry().checks}
    for f in _report(name).findings:
        spec = specs[f.id]
        assert f.severity in spec.may_emit, (
            f"{name}: {f.id} emitted {f.severity.value}, declares {[s.value for s in spec.may_emit]}"
        )


# a redirection that truncates an /etc file ("> /etc/x", "tee /etc/x" is fine only for kpdiag's own drop-ins)
TRUNCATE = re.compile(r"(?<![>0-9&])>\s*(/etc/\S+)")
APPEND = re.compile(r"(>>\s*/etc/\S+|tee\s+-a\s+/etc/\S+)")
TEE = re.compile(r"\btee\s+(?!-a)(/etc/\S+)")


def unsafe(step: str) -> str | None:
    """Why a fix line is not safe to paste, or None."""
    m = TRUNCATE.search(step)
    if m:
        return f"'>' truncates {m.group(1)}"
    m = TEE.search(step)
    if m and "kpdiag" not in m.group(1):
        return f"tee overwrites {m.group(1)}, not a kpdiag drop-in"
    if APPEND.search(step) and not re.search(r"grep -q\w*\s.*\|\|", step):
        return "appends without checking that the line is absent (runs twice → two lines)"
    return None


@pytest.mark.parametrize("name", BUNDLES)
def test_fix_commands_are_safe_to_paste(name):
    for f in _report(name).findings:
        for step in f.fix:
            why = unsafe(step)
            assert why is None, f"{name}: {f.id}: {why}: {step}"


def test_the_safety_rule_rejects_what_it_must():
    assert unsafe("echo 'net.ipv4.ip_forward = 1' > /etc/sysctl.d/99-kubernetes.conf")
    assert unsafe("echo br_netfilter > /etc/modules-load.d/k8s.conf")
    assert unsafe("echo 'x = 1' >> /etc/sysctl.d/99-kubernetes.conf")
    assert unsafe("printf 'x\\n' | tee /etc/modules-load.d/k8s.conf")
    assert unsafe("grep -qx 'x' /etc/f || echo 'x' >> /etc/f") is None
    assert unsafe("ss -ltnp 2>/dev/null > /tmp/out") is None


def test_kpdiag_dropin_commands_are_idempotent(tmp_path):
    """The persist commands really run (in a temp dir instead of /etc, without sudo): twice gives the same file."""
    from kpdiag.fixcmd import persist_modules, persist_sysctls

    for cmd in (
        persist_sysctls({"net.ipv4.ip_forward": 1, "net.bridge.bridge-nf-call-iptables": 1}, "t"),
        persist_modules(["br_netfilter"], "t"),
    ):
        local = (
            cmd.replace("sudo ", "")
            .replace("/etc/", f"{tmp_path}/")
            .replace("sysctl --system", "true")
            .replace("modprobe -a", "true")
        )
        os.makedirs(tmp_path / "sysctl.d", exist_ok=True)
        os.makedirs(tmp_path / "modules-load.d", exist_ok=True)
        for _ in range(2):
            subprocess.run(["sh", "-c", local], check=True)
    assert (
        tmp_path / "sysctl.d" / "99-zz-kpdiag-t.conf"
    ).read_text() == "net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n"
    assert (tmp_path / "modules-load.d" / "kpdiag-t.conf").read_text() == "br_netfilter\n"
