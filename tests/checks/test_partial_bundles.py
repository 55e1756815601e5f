"""Partial bundles (``kpdiag node --service``: only one Service's rules) over every check and every fixture.

For each iptables-mode node fixture and each of its Services (the API's, and those in kube-proxy's rules), the
focused read's walk (kpdiag/collect/service_rules.py ``chain_closure``) is run over the fixture's own rules — each chain
listed as ``iptables -S`` prints it — and the result written as a partial bundle. ``kpdiag analyze`` of that bundle
must judge the Service exactly as the whole bundle does (its findings, "missing" ones included), say nothing of any other
Service (no "missing" port that simply was not read), and skip, with the reason, every check that judges all rules.
The same walk against the kernel's own listing is tests/lab/test_focused_differential.py.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.schemas import validator

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle, write_bundle
from kpdiag.checkapi import load_registry
from kpdiag.collect.iptables_focused import chain_closure, save_text
from kpdiag.errors import NotFocused
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.state.node import NodeState

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")
MAX_SERVICES = 6
_NAME = re.compile(r'--comment "?([^ :"]+/[^ :"]+)[: ]')


def _fixtures() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        d = os.path.join(FIXTURES, name)
        rules = os.path.join(d, sources.IPTABLES_SAVE)
        if not os.path.isfile(rules) or "-A KUBE-SERVICES" not in open(rules).read():
            continue
        b = Bundle.open(d)
        if b.service_focus() is None and NodeState(b).proxy_mode[0] == "iptables":
            out.append(name)
    return out


FIXTURE_NAMES = _fixtures()


def _lister(text: str):
    """``iptables -t TABLE -S CHAIN`` of a saved ruleset: the chain's policy or declaration, then its rules."""
    rs = parse_iptables_save(text)

    def list_chain(table: str, chain: str) -> list[str]:
        c = rs.chain(table, chain)
        if c is None:
            raise NotFocused(f"iptables -t {table} -S {chain}: no chain by that name")
        return ([f"-P {chain} {c.policy}"] if c.builtin else [f"-N {chain}"]) + [
            re.sub(r"^\[\d+:\d+\] ", "", line) for line in c.lines
        ]

    return rs, list_chain


def _services(d: str, text: str) -> list[str]:
    names: list[str] = []
    doc = Bundle.open(d).read_json(sources.SERVICES)
    for svc in (doc or {}).get("items") or []:
        meta = svc.get("metadata") or {}
        names.append(f"{meta.get('namespace')}/{meta.get('name')}")
    for line in text.splitlines():
        m = _NAME.search(line) if line.startswith("-A KUBE-SERVICES ") else None
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names[:MAX_SERVICES]


# checks that judge the Services in focus (the API's): on a focused run they look at that Service only
SCOPED = {c.id for c in load_registry().checks if {"services", "focus"} & set((*c.needs, *c.uses))}


def _service(f) -> str | None:
    """The Service a finding is about: its data's, else — for a check that judges the Services in focus — a subject
    NS/NAME[:PORT]; None for the node's findings (KP207 names the port it sampled, and is about the node)."""
    svc = (f.data or {}).get("service")
    if isinstance(svc, str) and svc:
        return svc.split(":")[0]
    subject = f.subject or ""
    if f.id in SCOPED and "/" in subject and " " not in subject:
        return subject.split(":")[0]
    return None


def _key(f) -> tuple:
    return (f.id, f.subject, f.summary)


def _partial_bundle(d: str, out: str, svc: str) -> bool:
    """Write ``d`` with its rules replaced by the focused read for ``svc``; False when the walk cannot be made."""
    files = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), d)
            if rel != "scenario.json":
                files[rel] = open(os.path.join(dirpath, n), "rb").read()
    manifest = json.loads(files.pop("kpdiag.json"))
    chains = {}
    for source in (sources.IPTABLES_SAVE, sources.IP6TABLES_SAVE):
        if source not in files:
            continue
        text = files[source].decode()
        rs, list_chain = _lister(text)
        try:
            closure = chain_closure(list_chain, list(rs.tables), svc)
        except NotFocused:
            return False
        partial = save_text(closure, svc, "iptables").encode()
        if source == sources.IPTABLES_SAVE and files.get(sources.IPTABLES_NFT_SAVE) == files[source]:
            files[sources.IPTABLES_NFT_SAVE] = partial  # what the collector writes on the nf_tables backend
        files[source] = partial
        chains[str(source)] = {t: list(c) for t, c in closure.items()}
    manifest["partial"] = {
        "service": svc,
        "mode": "iptables",
        "holds": {k: "the chains this Service's packets can meet" for k in chains},
        "chains": chains,
    }
    validator("bundle.schema.json").validate(manifest)
    write_bundle(files, out, manifest)
    return True


def test_fixtures_found():
    assert len(FIXTURE_NAMES) >= 30, FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_partial_bundle_judges_its_service_only(name, tmp_path):
    d = os.path.join(FIXTURES, name)
    whole = analyze_bundle(d)
    compared = 0
    for n, svc in enumerate(_services(d, open(os.path.join(d, sources.IPTABLES_SAVE)).read())):
        out = str(tmp_path / f"b{n}")
        if not _partial_bundle(d, out, svc):
            continue  # a hand-written rule jumps to a chain the file does not declare: a live run reads it whole
        compared += 1
        part = analyze_bundle(out)
        assert part.extra["partial"]["service"] == svc
        validator("node-report.schema.json").validate(json.loads(json.dumps(part.to_dict())))
        # the Service's own findings, "missing" (KP202) and "mismatch" (KP203) included: word for word
        assert sorted(_key(f) for f in part.findings if _service(f) == svc) == sorted(
            _key(f) for f in whole.findings if _service(f) == svc
        ), (name, svc)
        # no finding about a Service whose rules were not read
        assert all(_service(f) in (None, svc) for f in part.findings), (name, svc)
        # the node's findings are the whole bundle's, or their check is skipped saying why
        assert {f.id for f in part.findings} <= {f.id for f in whole.findings}, (name, svc)
        skipped = {c.id: c.reason or "" for c in part.checks if c.status == "skipped"}
        have = {f.id for f in part.findings}
        for f in whole.findings:
            if _service(f) is None and f.id not in have and f.id not in SCOPED:
                assert "partial bundle" in skipped.get(f.id, ""), (name, svc, f.id, skipped.get(f.id))
    assert compared, f"{name}: no Service could be walked"


def test_whole_rules_checks_say_why(tmp_path):
    """Every check that needs the whole rules is skipped on a partial bundle with one reason, naming the Service's
    rules as the only ones read."""
    d = os.path.join(FIXTURES, "healthy-iptables")
    assert _partial_bundle(d, str(tmp_path / "b"), "shop/web")
    report = analyze_bundle(str(tmp_path / "b"))
    needing = {
        c.id for c in load_registry().checks if "whole-rules" in c.needs and (not c.modes or "iptables" in c.modes)
    }  # a check about another mode (KP404: nftables) is skipped for that reason first
    assert {"KP205", "KP601"} <= needing
    runs = {c.id: c for c in report.checks}
    for cid in needing:
        assert runs[cid].status == "skipped", cid
        assert "only one Service's rules were read" in runs[cid].reason
    from kpdiag.render.report import report_to_text

    text = report_to_text(report, width=300)
    assert "partial: only the rules shop/web's packets can meet were read (node/iptables-save.txt" in text
