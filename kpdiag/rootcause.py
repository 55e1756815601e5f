"""Root cause and consequences: which finding of a report follows from which, decided in one place.

A check declares the checks whose findings are consequences of its own (``@check(..., explains=("KP203",))``: kube-proxy
absent explains stale rules) and the components its findings say are not there (``absent=("kube-proxy",)``). After the
checks ran, :func:`link` turns those declarations into the report's shape:

- a finding of a declared consequence gets ``caused_by`` = the nearest cause present in the same report (its id and
  subject). Two findings that each name a Service (``data["service"]``) are related only when it is the same Service;
- findings are ordered cause first, each followed by its consequences, so the first finding (and the first error) of a
  report is a root cause;
- a consequence's fix starts with "fix the cause first", and no finding's fix keeps a step that acts on a component the
  report itself says is absent (kube-proxy not running → no "delete the kube-proxy pod");
- a check skipped because kube-proxy runs another mode says which finding explains that (KP701).

See docs/architecture.md, "Root cause and consequences".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from .fixcmd import FixStep
from .registry import _REGISTRY

_ID = re.compile(r"^KP[0-9]{3}$")


@dataclass(frozen=True)
class Component:
    """Something a report can say is not there, and how to recognise a fix step that acts on it."""

    label: str
    acts_on: re.Pattern
    hint: str  # a word every such step contains, in lower case (a cheap test before the pattern)


COMPONENTS: dict[str, Component] = {
    # its pod, DaemonSet, log, restart, --cleanup, ConfigMap-then-restart: every step that needs kube-proxy to run here
    "kube-proxy": Component("kube-proxy", re.compile(r"kube-proxy", re.I), "kube-proxy"),
    # running ipvsadm (installing the package is not acting on IPVS)
    "ipvs": Component("IPVS", re.compile(r"\bipvsadm\s+-"), "ipvsadm"),
}


# what ``explains`` may name besides check ids: a group, whose members say so on themselves (no id list here)
GROUPS: dict[str, str] = {
    # the dataplane findings of every mode (missing, stale) and the ones read from the rules alone (KP115/KP116):
    # what a node's Service rules show when nobody keeps them up to date
    "stale-rules": 'the checks whose findings show Service rules nobody keeps up to date (they declare shows=("stale-rules",))',
    # skipped on a node that runs another mode (a finding that explains that says so)
    "mode-checks": "the checks about some proxy modes (they declare modes=...)",
}


# the parts a check can play in `kpdiag svc`'s verdict (kpdiag/commands/svc.py `verdict`): a check declares the ones it
# plays on itself (``@check(..., verdict=("endpoints-refuse",))``) and the verdict names whichever checks declare a
# part — it keeps no id list of its own
VERDICT_ROLES: dict[str, str] = {
    "not-found": "its finding says the Service does not exist: the verdict is that finding",
    "policy-drop": "its finding says a NetworkPolicy drops the client's packets: the cause of a port that fails while "
    "its endpoints were probed",
    "endpoints-refuse": "nothing listens on the endpoints: the backend is down",
    "endpoints-silent": "the endpoints do not answer: the backend is unreachable",
    "service-layer": "the Service layer on the client's node fails while the endpoints answer",
    "hairpin": "the client is one of the endpoints and its connection cannot hairpin back to it",
    "no-ready-endpoint": "the Service has no ready endpoint",
    "unexplained": "a port fails and no endpoint was probed directly: no check could name the layer",
    "ping": "what a ping to a ClusterIP shows",
}


def playing(role: str) -> tuple[str, ...]:
    """The ids of the registered checks that declare ``role`` (VERDICT_ROLES) in the verdict, sorted."""
    return tuple(sorted(c for c, spec in _REGISTRY.items() if role in getattr(spec, "verdict", ())))


def members(group: str) -> tuple[str, ...]:
    """The ids of the registered checks in ``group`` (GROUPS), as each declares it."""
    if group == "mode-checks":
        return tuple(sorted(c for c, spec in _REGISTRY.items() if spec.modes))
    return tuple(sorted(c for c, spec in _REGISTRY.items() if group in spec.shows))


def expand(explains: tuple[str, ...]) -> tuple[str, ...]:
    """``explains`` as check ids: each group replaced by its members (in declaration order, each id once)."""
    if not any(x in GROUPS for x in explains):
        return explains
    return _expand(explains, len(_REGISTRY))


@functools.lru_cache(maxsize=256)
def _expand(explains: tuple[str, ...], _registered: int) -> tuple[str, ...]:  # keyed by the registry's size too
    out: list[str] = []
    for x in explains:
        for c in members(x) if x in GROUPS else (x,):
            if c not in out:
                out.append(c)
    return tuple(out)


def validate_declaration(
    check_id: str, explains, absent, shows=(), verdict=()
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The ``explains`` / ``absent`` / ``shows`` / ``verdict`` of a check declaration, checked: ids of checks or groups
    (GROUPS), known components, groups a check can join by saying so, parts of the svc verdict (VERDICT_ROLES)."""
    explains, absent, shows, verdict = tuple(explains), tuple(absent), tuple(shows), tuple(verdict)
    if set(verdict) - set(VERDICT_ROLES):
        raise ValueError(f"check {check_id}: verdict must be among {sorted(VERDICT_ROLES)}, not {verdict}")
    bad = [x for x in explains if not isinstance(x, str) or not (_ID.match(x) or x in GROUPS)]
    if bad:
        raise ValueError(f"check {check_id}: explains must name check ids (KPnnn) or {sorted(GROUPS)}, not {bad}")
    joinable = [g for g in GROUPS if g != "mode-checks"]  # that one is joined by declaring modes=
    if set(shows) - set(joinable):
        raise ValueError(f"check {check_id}: shows must be among {joinable}, not {shows}")
    if check_id in explains:
        raise ValueError(f"check {check_id}: a check cannot explain itself")
    unknown = [x for x in absent if x not in COMPONENTS]
    if unknown:
        raise ValueError(f"check {check_id}: absent must be among {sorted(COMPONENTS)}, not {unknown}")
    return explains, absent, shows, verdict


def _spec(check_id: str):
    return _REGISTRY.get(check_id)


def _specs(findings) -> dict:
    """The declaration of each check that produced one of ``findings``, looked up once per id."""
    return {f.id: _REGISTRY.get(f.id) for f in findings}


def _service(f) -> str | None:
    s = (f.data or {}).get("service")
    return s if isinstance(s, str) and s else None


def related(cause, consequence) -> bool:
    """Whether ``cause`` can explain ``consequence`` (its check declares it does): not when both name a Service and the
    Services differ (KP103 on shop/web explains KP101 on shop/web, not on shop/cart)."""
    a, b = _service(cause), _service(consequence)
    return not (a and b and a != b)


def ref(f) -> dict:
    return {"id": f.id, "subject": f.subject}


def _key(f) -> tuple:
    return (-f.severity.rank, f.id, f.subject or "")


def _parents(findings: list) -> list[int | None]:
    """For each finding, the index of its nearest cause in ``findings`` (None: a root)."""
    n = len(findings)
    causes_of: dict[str, list[int]] = {}  # consequence id → the findings whose check declares it (linear, not n²)
    specs = _specs(findings)
    for j, f in enumerate(findings):
        spec = specs[f.id]
        if getattr(f.severity, "value", f.severity) == "info":
            continue  # a note (what kpdiag cannot see, KP640 without a loss observed) is no fault: it explains nothing
        for x in spec.explains if spec is not None else ():
            causes_of.setdefault(x, []).append(j)
    cands = [
        [j for j in causes_of.get(findings[i].id, ()) if j != i and related(findings[j], findings[i])] for i in range(n)
    ]

    def ancestors(i: int) -> set[int]:
        seen: set[int] = set()
        todo = list(cands[i])
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(cands[j])
        return seen

    if not any(cands):
        return [None] * n  # nothing here explains anything else (most reports)
    anc = [ancestors(i) if cands[i] else set() for i in range(n)]
    parent: list[int | None] = [None] * n
    for i in range(n):
        # the nearest: a candidate that is not (transitively) a cause of another candidate of i
        near = [j for j in cands[i] if not any(j in anc[k] and k not in anc[j] for k in cands[i] if k != j)]
        if near:
            parent[i] = min(near, key=lambda j: _key(findings[j]))
    linked = [i for i in range(n) if parent[i] is not None]
    for i in sorted(linked, key=lambda i: _key(findings[i])):  # declarations may form a loop: break it
        seen: set[int] = {i}
        up = parent[i]
        while up is not None:
            if up in seen:
                parent[i] = None
                break
            seen.add(up)
            up = parent[up]
    return parent


def _root(parent: list, i: int) -> int:
    while parent[i] is not None:
        i = parent[i]
    return i


def _order(findings: list, parent: list) -> list[int]:
    """Causes first, each followed by its consequences; a tree ranks by its most severe finding."""
    n = len(findings)
    children: dict[int | None, list[int]] = {}
    for i in range(n):
        children.setdefault(parent[i], []).append(i)
    rank: dict[int, int] = {}
    keys = [_key(f) for f in findings]

    def tree_rank(i: int) -> int:
        if i not in rank:
            rank[i] = max([-keys[i][0]] + [tree_rank(c) for c in children.get(i, ())])
        return rank[i]

    out: list[int] = []

    def walk(i: int) -> None:
        out.append(i)
        for c in sorted(children.get(i, ()), key=lambda c: (-tree_rank(c),) + keys[c]):
            walk(c)

    for r in sorted(children.get(None, ()), key=lambda r: (-tree_rank(r),) + keys[r]):
        walk(r)
    return out


def _absent(findings: list, parent: list, mode: str | None) -> dict[str, tuple[str, set[int]]]:
    """Components the report says are not there: {name: (why, the findings that may still name it)}."""
    out: dict[str, tuple[str, set[int]]] = {}
    specs = _specs(findings)
    for i, f in enumerate(findings):
        spec = specs[f.id]
        said = (f.data or {}).get("absent")  # one finding of the check may say otherwise (crash-looping: it is there)
        comps = said if isinstance(said, list) else (spec.absent if spec is not None else ())
        for comp in (c for c in comps if c in COMPONENTS):
            why, exempt = out.get(comp, (f"{f.id} {f.slug}", set()))
            j = i
            while j is not None:  # the finding that says so and its causes
                exempt.add(j)
                j = parent[j]
            out[comp] = (why, exempt)
    from kpdiag.dataplane import get

    for comp in get(mode).not_in_use:  # iptables and nftables mode: IPVS is not in use
        if comp not in out:
            out[comp] = (f"kube-proxy runs in {mode} mode", set())
    return out


class _Added(FixStep):
    """A note this pass added to a fix: a second pass over the same findings replaces it instead of adding another."""

    def __reduce__(self):
        return (_Added, (str(self), self.kind))


def _fix(f, cause, root, absent: dict, i: int) -> tuple:
    added = [s for s in f.fix if isinstance(s, _Added)]
    if cause is None and not absent and not added:
        return f.fix  # nothing to say and nothing to leave out (most findings of most reports)
    steps = [s for s in f.fix if not isinstance(s, _Added)] if added else list(f.fix)
    head = []
    if cause is not None:
        via = f", itself a consequence of {root.id} {root.slug}" if root is not cause else ""
        head.append(
            _Added(
                f"this follows from {cause.id} {cause.slug}"
                + (f" ({cause.subject})" if cause.subject else "")
                + f"{via}: fix {root.id} first — this finding may then clear by itself",
                "note",
            )
        )
    for comp, (why, exempt) in absent.items():
        if i in exempt:
            continue
        c = COMPONENTS[comp]
        kept = [s for s in steps if c.hint not in s.lower() or not c.acts_on.search(str(s))]
        said = f"steps that act on {c.label} are left out"
        if len(kept) != len(steps) or any(s.startswith(said) for s in added):
            steps = kept
            head.append(
                _Added(f"steps that act on {c.label} are left out: it is not there on this node ({why})", "note")
            )
    return tuple(head + steps) if head or len(steps) != len(f.fix) else f.fix


def link(findings: list, runs: list, mode: str | None = None) -> tuple[list, list]:
    """The findings linked to their causes, ordered cause first, their fixes made consistent with the root cause; the
    runs with the skipped ones that a present finding explains saying so. Linking findings again (after a command
    added one) gives the same result as linking them once. ``mode`` is the proxy mode kube-proxy runs
    (None when unknown or when a --preflight asks about another): a mode other than ipvs means IPVS is not in use."""
    findings = list(findings)
    parent = _parents(findings)
    absent = _absent(findings, parent, mode)
    linked = []
    for i, f in enumerate(findings):
        up = parent[i]
        cause = findings[up] if up is not None else None
        root = findings[_root(parent, i)]
        link_to = ref(cause) if cause is not None else None
        fix = _fix(f, cause, root, absent, i)
        linked.append(f if (link_to == f.caused_by and fix is f.fix) else replace(f, caused_by=link_to, fix=fix))
    if any(p is not None for p in parent):
        ordered = [linked[i] for i in _order(linked, parent)]
    else:  # nothing explains anything here: the plain order (severity, id, subject)
        ordered = sorted(linked, key=_key)
    return ordered, _explain_skips(ordered, list(runs))


def order(findings: list) -> list:
    """Findings already linked (``caused_by`` set), ordered again cause first — after a command added one."""
    findings = list(findings)
    index = {(f.id, f.subject): i for i, f in enumerate(findings)}
    parent = [index.get((f.caused_by["id"], f.caused_by["subject"])) if f.caused_by else None for f in findings]
    return [findings[i] for i in _order(findings, parent)]


def _explain_skips(findings: list, runs: list) -> list:
    """A check skipped because kube-proxy runs another mode, when a present finding explains it (KP701: not the mode it
    is configured for): its reason says so."""
    out = []
    specs = _specs(findings)
    causes = [f for f in findings if getattr(specs[f.id], "explains", ())]  # few: not every finding per run
    for r in runs:
        if r.status == "skipped" and "this check is about" in (r.reason or ""):
            modes = getattr(_spec(r.id), "modes", ()) or ()
            by = next(
                (
                    f
                    for f in causes
                    if r.id in (getattr(_spec(f.id), "explains", ()) or ())
                    and any(re.search(rf"\b{m}\b", f.summary) for m in modes)  # it names the mode the check is about
                ),
                None,
            )
            if by is not None:
                root = root_of(findings, by)
                r = replace(r, reason=f"{r.reason} — {root.id} {root.slug} explains why: {root.summary}")
        out.append(r)
    return out


def index_of(findings) -> dict:
    """The findings by (id, subject), as ``caused_by`` names them: for :func:`root_of` over many findings."""
    return {(x.id, x.subject): x for x in findings}


def root_of(findings, f, index: dict | None = None):
    """The root cause of ``f`` among ``findings`` (``f`` itself when it has no cause); ``index``: :func:`index_of`."""
    index = index if index is not None else index_of(findings)
    seen = set()
    while f.caused_by and (f.id, f.subject) not in seen:
        seen.add((f.id, f.subject))
        up = index.get((f.caused_by["id"], f.caused_by["subject"]))
        if up is None:
            break
        f = up
    return f
