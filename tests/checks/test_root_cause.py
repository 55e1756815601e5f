"""Root cause first (kpdiag/rootcause.py): over every fixture, consequences point at a cause in the same report and rank
under it, and no fix step acts on a component the report itself says is absent; the declared pairs, shown on the
fixtures where cause and consequence meet; the mechanism on synthetic findings."""

import os
import re

import pytest

from kpdiag.checkapi import check, load_registry
from kpdiag.model import Finding, Report, Severity
from kpdiag.render.report import report_to_text
from kpdiag.rootcause import link, order, related, root_of
from tests.checks.test_fixtures import SCENARIOS

_REPORTS: dict = {}


def _report(name):
    from tests.given import fixture_report

    return fixture_report(name)


# Written independently of the mechanism's own patterns: what acting on kube-proxy or IPVS looks like in a fix step.
ACTS_ON_KUBE_PROXY = re.compile(
    r"kube-proxy pod|k8s-app=kube-proxy|(?:ds|daemonset)[ /]kube-proxy|restart\b.*kube-proxy|kube-proxy --cleanup"
)
RUNS_IPVSADM = re.compile(r"\bipvsadm\s+-")


def _absent(report: Report) -> dict[str, set[str]]:
    """What the report itself says is not there: {component: ids of the findings that say so (and may name it)}."""
    out: dict[str, set[str]] = {}
    ids = {f.id for f in report.findings}
    said = ids & {"KP707", "KP708"}  # kube-proxy not running / replaced
    if said:
        out["kube-proxy"] = said
    mode = report.facts.get("proxy_mode")
    if mode in ("iptables", "nftables"):  # IPVS is not in use
        out["ipvs"] = set()
    return out


def _ancestors(report: Report, f: Finding) -> set[str]:
    out, seen = set(), set()
    while f.caused_by and (f.id, f.subject) not in seen:
        seen.add((f.id, f.subject))
        up = next(x for x in report.findings if (x.id, x.subject) == (f.caused_by["id"], f.caused_by["subject"]))
        out.add(up.id)
        f = up
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_fix_acts_on_what_the_report_says_is_absent(name):
    report = _report(name)
    for comp, sayers in _absent(report).items():
        # the findings that say it is absent, and what caused that, tell how to bring it back; no other may act on it
        exempt = sayers | _causes_of(report, sayers)
        pattern = ACTS_ON_KUBE_PROXY if comp == "kube-proxy" else RUNS_IPVSADM
        for f in report.findings:
            bad = [s for s in f.fix if pattern.search(str(s))] if f.id not in exempt else []
            assert not bad, (name, f.id, comp, bad)


def _causes_of(report: Report, sayers: set[str]) -> set[str]:
    out: set[str] = set()
    for f in report.findings:
        if f.id in sayers:
            out |= _ancestors(report, f)
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_cause_is_in_the_report_and_ranks_first(name):
    report = _report(name)
    findings = list(report.findings)
    keys = [(f.id, f.subject) for f in findings]
    for i, f in enumerate(findings):
        if f.caused_by is None:
            continue
        cause = (f.caused_by["id"], f.caused_by["subject"])
        assert cause in keys, (name, f.id, f.caused_by)
        assert keys.index(cause) < i, (name, "a consequence is listed before its cause", f.id, f.caused_by)
        spec = load_registry().get(f.caused_by["id"])
        assert f.id in spec.explains, (name, f.id, "linked to a check that does not declare it", spec.id)
        assert "fix" in str(f.fix[0]) and f.caused_by["id"] in str(f.fix[0]) or root_of(findings, f).id in str(f.fix[0])
    if findings:
        assert findings[0].caused_by is None, (name, "the first finding is not a root cause")
        errors = [f for f in findings if f.severity is Severity.ERROR]
        if errors:  # the first error is a root cause, or its root (a warning) is listed before it
            first = errors[0]
            assert first.caused_by is None or findings.index(root_of(findings, first)) < findings.index(first)
    # the JSON keeps the links: read back, the same report
    assert Report.from_dict(report.to_dict()) == report


def test_kube_proxy_absent_explains_its_stale_rules():
    report = _report("kube-proxy-absent-stale")
    ids = [f.id for f in report.findings]
    assert ids[0] == "KP707", ids  # before KP203, though KP203 sorts first by id
    stale = next(f for f in report.findings if f.id == "KP203")
    assert stale.caused_by == {"id": "KP707", "subject": "node"}
    fix = [str(s) for s in stale.fix]
    assert "fix KP707 first" in fix[0]
    assert not any("delete pod" in s or "kube-proxy pod" in s for s in fix), fix
    assert any("left out" in s and "kube-proxy" in s for s in fix), fix
    # the same fixture without kube-proxy's absence: the fix keeps its kube-proxy steps (nothing says it is absent)
    drift = next(f for f in _report("cluster-node-drift").findings if f.id == "KP203")
    assert drift.caused_by is None and any("kube-proxy pod" in str(s) for s in drift.fix)
    text = report_to_text(report, width=100)
    errors = text.split("ERRORS", 1)[1].split("INFO", 1)[0]
    assert errors.index("KP707 kube-proxy-absent") < errors.index("↳ KP203 stale-endpoints")
    assert "(follows from KP707" in errors
    js = report.to_dict()
    assert next(f for f in js["findings"] if f["id"] == "KP203")["caused_by"] == {"id": "KP707", "subject": "node"}
    assert "caused_by" not in next(f for f in js["findings"] if f["id"] == "KP707")


@pytest.mark.parametrize(
    "name, chain",
    [
        ("svc-selector-typo", [("KP103", None), ("KP101", "KP103")]),
        ("dns-coredns-loop", [("KP132", None), ("KP131", "KP132"), ("KP130", "KP131"), ("KP138", "KP130")]),
        ("ipvs-fallback", [("KP301", None), ("KP701", "KP301")]),
        ("userspace-mode", [("KP702", None), ("KP701", "KP702")]),
    ],
)
def test_declared_pairs_on_the_fixtures_where_they_meet(name, chain):
    findings = _report(name).findings
    by = {f.id: f for f in findings}
    for fid, cause in chain:
        assert (by[fid].caused_by or {}).get("id") == cause, (name, fid, by[fid].caused_by)
    ids = [f.id for f in findings]
    assert [i for i in ids if i in dict(chain)] == [fid for fid, _ in chain]


def test_the_service_verdict_names_the_root_cause():
    report = _report("svc-selector-typo")
    first = report.extra["verdict"][0]
    assert "(KP103)" in first and "app=webb" in first, first


def test_skipped_mode_checks_name_what_explains_them():
    runs = {r.id: r for r in _report("ipvs-fallback").checks}
    for cid in ("KP302", "KP305", "KP310"):
        assert runs[cid].status == "skipped"
        assert "KP301 ipvs-unavailable explains why" in runs[cid].reason, runs[cid].reason
    # not claimed for the checks of a mode the cause does not name
    assert "explains why" not in runs["KP402"].reason


def _finding(fid, subject, service=None, severity="error", fix=("do x",)):
    return Finding(
        fid,
        f"t-{fid.lower()}",
        Severity(severity),
        "t",
        f"{fid} here",
        "w",
        fix=fix,
        subject=subject,
        data={"service": service} if service else {},
    )


@pytest.fixture
def declared():
    from kpdiag.checkapi import _REGISTRY

    @check(
        "KP981",
        "t-cause",
        "cause",
        "warning",
        explains=("KP982", "KP983"),
        absent=("kube-proxy",),
        symptom="s",
        why="w",
        fix="f",
    )
    def cause(ctx, new):
        return ()

    @check("KP982", "t-middle", "middle", "error", explains=("KP983", "KP981"), symptom="s", why="w", fix="f")
    def middle(ctx, new):
        return ()

    @check("KP983", "t-leaf", "leaf", "error", symptom="s", why="w", fix="f")
    def leaf(ctx, new):
        return ()

    yield
    for k in ("KP981", "KP982", "KP983"):
        _REGISTRY.pop(k, None)


def test_link_nearest_cause_loops_and_services(declared):
    a = _finding("KP981", "node", severity="warning")
    b = _finding("KP982", "shop/web:80", "shop/web")
    c = _finding("KP983", "shop/web:80", "shop/web", fix=("kubectl -n kube-system delete pod <kube-proxy pod>", "ls"))
    other = _finding("KP983", "shop/cart:80", "shop/cart")
    out, _ = link([other, c, b, a], [])
    by = {(f.id, f.subject): f for f in out}
    # KP981 and KP982 explain each other (a declared loop): it is broken, one of them stays the root
    roots = [f for f in out if f.caused_by is None]
    assert len(roots) == 1 and roots[0] is out[0]
    # the nearest cause: KP983 on shop/web follows from KP982 (itself explained), not straight from the root
    assert by[("KP983", "shop/web:80")].caused_by == {"id": "KP982", "subject": "shop/web:80"}
    # a consequence about another Service is not linked to a cause about shop/web
    assert by[("KP983", "shop/cart:80")].caused_by != {"id": "KP982", "subject": "shop/web:80"}
    # an error under a warning root: the tree ranks by its most severe finding, the root still comes first
    assert out[0].severity is Severity.WARNING or out[0].caused_by is None
    leaf = [str(s) for s in by[("KP983", "shop/web:80")].fix]
    assert "kube-proxy pod" not in " ".join(leaf[1:]) and leaf[-1] == "ls"
    # linking twice (a command added a finding) adds no second note
    again, _ = link(out, [])
    assert [list(map(str, f.fix)) for f in again] == [list(map(str, f.fix)) for f in out]
    assert order(list(reversed(out))) == out


def test_a_finding_may_say_its_component_is_there_after_all(declared):
    """A check declares absent=("kube-proxy",); one of its findings (kube-proxy crash-looping: its pod exists) says
    data["absent"] = []: the consequences keep their kube-proxy steps, and still say to fix the cause first."""
    leaf = ("kubectl -n kube-system logs <kube-proxy pod on this node>", "ls")
    for said, kept in ((None, ["ls"]), ([], list(leaf))):
        cause = _finding("KP981", "node", severity="warning")
        if said is not None:
            cause = Finding(**{**cause.__dict__, "data": {"absent": said}})
        out, _ = link([cause, _finding("KP983", "x", fix=leaf)], [])
        steps = [str(s) for s in out[1].fix]
        assert "fix KP981 first" in steps[0] and [s for s in steps if s in leaf] == kept, steps


def test_related_only_by_the_same_service():
    assert related(_finding("KP103", "shop/web", "shop/web"), _finding("KP101", "shop/web:80", "shop/web"))
    assert not related(_finding("KP103", "shop/web", "shop/web"), _finding("KP101", "shop/cart:80", "shop/cart"))
    assert related(_finding("KP707", "node"), _finding("KP203", "shop/cart:80", "shop/cart"))


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="check ids"):
        check("KP984", "t-bad", "t", "error", explains=("stale",), symptom="s", why="w", fix="f")
    with pytest.raises(ValueError, match="itself"):
        check("KP984", "t-bad", "t", "error", explains=("KP984",), symptom="s", why="w", fix="f")
    with pytest.raises(ValueError, match="absent must be among"):
        check("KP984", "t-bad", "t", "error", absent=("kubelet",), symptom="s", why="w", fix="f")
    with pytest.raises(ValueError, match="shows must be among"):
        check("KP984", "t-bad", "t", "error", shows=("mode-checks",), symptom="s", why="w", fix="f")


def test_groups_are_declared_by_their_members_not_listed():
    """``explains=("stale-rules",)`` / ``("mode-checks",)`` name groups whose members declare themselves
    (``shows=("stale-rules",)``, ``modes=``): a new dataplane finding joins by one line on itself, and no id list of
    them is kept in the engine."""
    import ast
    import glob

    from kpdiag import checkapi
    from kpdiag.rootcause import members

    registry = load_registry(plugins=False)
    stale = {c.id for c in registry.checks if "stale-rules" in c.shows}
    assert len(stale) >= 8 and set(members("stale-rules")) == stale  # every mode's missing/stale findings, at least
    assert set(members("mode-checks")) == {c.id for c in registry.checks if c.modes}
    for cause in ("KP703", "KP707"):  # kube-proxy unhealthy / absent explain all of them, and no list says so
        spec = registry.get(cause)
        assert "stale-rules" in spec.explains_declared and stale <= set(spec.explains)
    assert set(registry.get("KP701").explains) == set(members("mode-checks"))

    @check("KP983", "t-new-mode", "t", "error", modes=("ipvs",), shows=("stale-rules",), symptom="s", why="w", fix="f")
    def new_mode(ctx, new):
        return ()

    try:
        assert "KP983" in registry.get("KP701").explains and "KP983" in registry.get("KP707").explains
    finally:
        checkapi._REGISTRY.pop("KP983", None)
    assert "KP983" not in registry.get("KP707").explains

    root = os.path.join(os.path.dirname(__file__), "..", "..", "kpdiag")
    for path in [
        "rootcause.py",
        "checkapi.py",
        "registry.py",
        "state/*.py",
        "commands/pipeline.py",
        "commands/diagnose.py",
    ]:
        for p in glob.glob(os.path.join(root, path)):
            with open(p, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            lists = [
                ast.unparse(n)[:60]
                for n in ast.walk(tree)
                if isinstance(n, (ast.Tuple, ast.List, ast.Set))
                and len(n.elts) >= 2
                and all(isinstance(e, ast.Constant) and re.fullmatch(r"KP\d{3}", str(e.value)) for e in n.elts)
            ]
            assert not lists, (p, lists)
