"""Declaring checks, finding them (built-in ``kpdiag.checks`` and the entry-point group), running them.

A check is a function decorated with :func:`check`. It receives its inputs (typed values named in its signature,
kpdiag/state/typed.py, each built from a view of the state that opens that one input, kpdiag/state/inputs.py) and a
``new`` function that builds a :class:`~kpdiag.model.Finding` carrying the check's id, slug,
title and severity, and yields findings. It never fetches data itself. If the data it needs
is missing, the runner reports it *skipped* with the reason; if it raises :class:`Skip`, the
same; if it raises anything else, it is reported as an internal error and the others run.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, TypeAlias, TypeVar

from .model import CheckRun, Evidence, Finding, Severity
from .registry import _REGISTRY  # check id → CheckSpec (shared with the root-cause pass, which must not import this)
from kpdiag.state import inputs as broker
from kpdiag.state import typed

if TYPE_CHECKING:
    from kpdiag.fleet.aggregate import FleetState
    from kpdiag.state.node import NodeState


State: TypeAlias = "NodeState | FleetState"  # what checks run on: one node, or the reports of many

F = TypeVar("F", bound=Callable[..., Any])

ENTRY_POINT_GROUP = "kpdiag.checks"
BUILTIN = "kpdiag.checks"  # the built-in checks' package, found by name as plugins are: it sits above the engine


class Skip(Exception):
    """Raised by a check that cannot decide: the message is the reason shown to the user."""


@dataclass(frozen=True)
class Docs:
    symptom: str
    why: str
    fix: str


@dataclass(frozen=True)
class CheckSpec:
    id: str
    slug: str
    title: str
    severity: Severity
    needs: tuple[str, ...]
    docs: Docs
    fn: Callable[..., Any] = field(compare=False, repr=False)
    references: tuple[str, ...] = ()
    origin: str = "kpdiag"
    scope: str = "node"  # node: runs on one node's state; cluster: on many node reports (kpdiag cluster)
    severities: tuple[Severity, ...] = ()  # every severity its findings may have (the contract shown by kpdiag checks)
    modes: tuple[
        str, ...
    ] = ()  # the kube-proxy modes it is about (empty: any); on a node in another mode it is skipped
    uses: tuple[
        str, ...
    ] = ()  # inputs it reads when they are there (kpdiag/state/inputs.py); needs: those it cannot lack
    # ids of the checks whose findings follow from this one's, or groups of them (kpdiag/rootcause.py GROUPS)
    explains_declared: tuple[str, ...] = ()
    shows: tuple[str, ...] = ()  # the groups its findings belong to ("stale-rules"), so others can explain them
    absent: tuple[str, ...] = ()  # components its findings say are not there (kpdiag/rootcause.py COMPONENTS)
    verdict: tuple[str, ...] = ()  # the parts it plays in the svc verdict (kpdiag/rootcause.py VERDICT_ROLES)
    advice_for: str | None = None  # "kube-proxy": skipped where a replacement implements Services
    preflight: tuple[str, ...] = ()  # the modes whose `--preflight MODE` runs it (a prerequisite of that mode)
    any_host: bool = False  # runs even where the host does not look like a Kubernetes node
    cni: tuple[str, ...] = ()  # the CNIs or routing models it judges (kpdiag/state/cni.py); elsewhere it is skipped
    # typed inputs (kpdiag/state/typed.py): (parameter, type, optional) — empty for a check written as (ctx, new)
    params: tuple[tuple[str, type[typed.Typed], bool], ...] = field(default=(), compare=False, repr=False)

    @property
    def explains(self) -> tuple[str, ...]:
        """The ids of the checks whose findings follow from this one's (its groups expanded over the registry)."""
        from .rootcause import expand

        return expand(self.explains_declared)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every input the check may read: what it needs, then what it uses."""
        return self.needs + self.uses

    @property
    def may_emit(self) -> tuple[Severity, ...]:
        return self.severities or (self.severity,)

    def new(
        self,
        summary: str,
        *,
        fix: Iterable[str] = (),
        evidence: Iterable[Evidence] = (),
        explanation: str | None = None,
        severity: Severity | str | None = None,
        subject: str | None = None,
        references: Iterable[str] = (),
        data: dict[str, Any] | None = None,
    ) -> Finding:
        return Finding(
            id=self.id,
            slug=self.slug,
            severity=Severity(severity) if severity else self.severity,
            title=self.title,
            summary=summary,
            explanation=explanation or self.docs.why,
            fix=tuple(fix) or (self.docs.fix,),
            evidence=tuple(evidence),
            references=tuple(references) or self.references,
            subject=subject,
            data=dict(data or {}),
        )


def _clean(text: str) -> str:
    return textwrap.dedent(text).strip()


class _Options(NamedTuple):
    """The options of one :func:`check`, checked."""

    severities: tuple[Severity, ...]  # by rank
    modes: tuple[str, ...]
    preflight: tuple[str, ...]
    cni: tuple[str, ...]
    needs: tuple[str, ...]
    uses: tuple[str, ...]
    explains: tuple[str, ...]
    absent: tuple[str, ...]
    shows: tuple[str, ...]
    verdict: tuple[str, ...]


def _validated(
    id: str,
    scope: str,
    severity: str,
    severities: Iterable[str],
    modes: Iterable[str],
    preflight: Iterable[str],
    cni: Iterable[str],
    advice_for: str | None,
    needs: Iterable[str],
    uses: Iterable[str],
    links: tuple[Iterable[str], Iterable[str], Iterable[str], Iterable[str]],
) -> _Options:
    """The options of :func:`check` that name something outside it (severities, modes, CNIs, inputs, checks and
    components), checked; ValueError naming the check and the option when one is wrong. ``links``: its ``explains``,
    ``absent``, ``shows`` and ``verdict`` (kpdiag/rootcause.py)."""
    if scope not in ("node", "cluster"):
        raise ValueError(f"check {id}: scope must be 'node' or 'cluster', not {scope!r}")
    declared = tuple(Severity(x) for x in severities)
    if declared and Severity(severity) not in declared:
        raise ValueError(f"check {id}: severities {severities} must include its severity {severity!r}")
    declared = tuple(sorted(declared, key=lambda x: x.rank))
    from .dataplane import kube_proxy_modes

    modes, preflight = tuple(modes), tuple(preflight)
    known = [d.name for d in kube_proxy_modes() if d.has_own_tracer]
    if set(modes) - set(known):
        raise ValueError(f"check {id}: modes must be among {', '.join(known)}, not {modes}")
    can_preflight = [d.name for d in kube_proxy_modes() if d.preflight]
    if set(preflight) - set(can_preflight):
        raise ValueError(f"check {id}: preflight must be among {', '.join(can_preflight)}, not {preflight}")
    cni = tuple(cni)
    from .state.cni import known_cnis

    if set(cni) - known_cnis():
        raise ValueError(f"check {id}: cni must be among {', '.join(sorted(known_cnis()))}, not {cni}")
    if advice_for not in (None, "kube-proxy"):
        raise ValueError(f"check {id}: advice_for must be 'kube-proxy' or None, not {advice_for!r}")
    needed, used = tuple(needs), tuple(uses)
    broker.validate(id, scope, needed, used)
    from .rootcause import validate_declaration

    explains, absent, shows, verdict = validate_declaration(id, *links)
    return _Options(declared, modes, preflight, cni, needed, used, explains, absent, shows, verdict)


def _typed_inputs(
    id: str, scope: str, fn: Callable[..., Any], needed: tuple[str, ...], used: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, type[typed.Typed], bool], ...] | None]:
    """(needs, uses, typed parameters): the check's typed inputs (kpdiag/state/typed.py) added to what it declared by
    name — a parameter typed T to needs, Optional[T] to uses."""
    needs, uses = needed, used
    params = typed.parameters(fn)
    if params:
        wrong = [name for name, t, _ in params if t.SCOPE != scope]
        if wrong:
            raise ValueError(f"check {id}: parameter(s) {', '.join(wrong)} are not {scope} inputs")
        # (two views of one input, Modules and ModulesOnDisk, declare it once)
        needs = needs + tuple(dict.fromkeys(t.INPUT for _, t, opt in params if not opt and t.INPUT not in needs))
        uses = uses + tuple(dict.fromkeys(t.INPUT for _, t, opt in params if opt and t.INPUT not in uses + needs))
        broker.validate(id, scope, needs, uses)
    return needs, uses, params


def _register(fn: F, spec: CheckSpec) -> F:
    """Put a declared check in the registry (the same id from another module is an error) and on its function."""
    existing = _REGISTRY.get(spec.id)
    if existing is not None and existing.origin != spec.origin:
        raise ValueError(f"check id {spec.id} declared twice ({existing.origin} and {spec.origin})")
    _REGISTRY[spec.id] = spec
    setattr(fn, "spec", spec)  # noqa: B010 (the declaration, found from the function)
    return fn


def check(
    id: str,
    slug: str,
    title: str,
    severity: str,
    *,
    needs: Iterable[str] = (),
    uses: Iterable[str] = (),
    symptom: str,
    why: str,
    fix: str,
    references: Iterable[str] = (),
    scope: str = "node",
    severities: Iterable[str] = (),
    modes: Iterable[str] = (),
    explains: Iterable[str] = (),
    absent: Iterable[str] = (),
    shows: Iterable[str] = (),
    verdict: Iterable[str] = (),
    advice_for: str | None = None,
    preflight: Iterable[str] = (),
    any_host: bool = False,
    cni: Iterable[str] = (),
) -> Callable[[F], F]:
    """Declare a check. A check says its inputs in its signature (kpdiag/state/typed.py): ``def f(new, rules:
    KubeProxyRules, config: Optional[KubeProxyConfig] = None)`` — a parameter typed T is a need, Optional[T] a use;
    a cluster check's types are those of the cluster inputs (``NodeReports``, ``ProgrammedTables``) — and receives
    plain values. The older way, which no built-in check uses (a plugin may): ``needs`` names the
    inputs (kpdiag/state/inputs.py) it cannot decide without: when one is missing, the check is skipped with the
    reason; ``uses`` names the inputs it reads when they are there; the check, written as ``f(ctx, new)``, receives
    a view of the state that opens those inputs and nothing else (:class:`kpdiag.state.inputs.Inputs`). A typed check
    keeps ``needs`` only for an input it reads nothing of (``whole-rules``). ``scope`` is
    "node" (one node's state) or "cluster" (the reports of many nodes, see :mod:`kpdiag.fleet`). ``severities`` lists
    every severity its findings may carry when that is more than ``severity`` (its usual one); a finding outside them
    is a defect, caught by the tests. ``modes`` names the kube-proxy modes the check is about (iptables, ipvs,
    nftables): on a node whose kube-proxy runs another mode (and no --preflight for one of them) it is skipped, saying so.
    ``explains`` names the checks whose findings are consequences of this one's (kube-proxy absent explains stale
    rules): in a report they are linked to it (``caused_by``), ranked under it, and their fixes say to fix it first.
    It may name a group (kpdiag/rootcause.py GROUPS) instead of ids: "stale-rules", the checks that declare
    ``shows=("stale-rules",)``, or "mode-checks", the checks that declare ``modes``.
    ``absent`` names the components (kpdiag/rootcause.py COMPONENTS) its findings say are not there: no other finding
    of the report then advises acting on them. ``verdict``: its parts in the svc verdict (rootcause.py VERDICT_ROLES).
    ``advice_for="kube-proxy"``: its advice is kube-proxy's, so it is skipped where a replacement implements Services.
    ``preflight`` names the modes whose ``kpdiag node --preflight MODE`` runs it (one of that mode's prerequisites).
    ``any_host``: it runs even where the host does not look like a Kubernetes node (every other node check is skipped
    there). ``cni`` names the CNIs ("flannel", "calico" …) or routing models ("node-podcidr", "ipam-blocks" …) of
    kpdiag/state/cni.py the check judges: on a node whose CNI is another, or is not recognised, it is skipped, saying
    which CNI the node has."""
    links = (explains, absent, shows, verdict)
    opt = _validated(id, scope, severity, severities, modes, preflight, cni, advice_for, needs, uses, links)

    def deco(fn: F) -> F:
        needs, uses, params = _typed_inputs(id, scope, fn, opt.needs, opt.uses)
        spec = CheckSpec(
            id,
            slug,
            title,
            Severity(severity),
            tuple(needs),
            Docs(_clean(symptom), _clean(why), _clean(fix)),
            fn,
            tuple(references),
            origin=fn.__module__,
            scope=scope,
            severities=opt.severities,
            modes=opt.modes,
            uses=uses,
            explains_declared=opt.explains,
            shows=opt.shows,
            absent=opt.absent,
            verdict=opt.verdict,
            advice_for=advice_for,
            preflight=opt.preflight,
            any_host=any_host,
            cni=opt.cni,
            params=params or (),
        )
        return _register(fn, spec)

    return deco


@dataclass
class Registry:
    checks: list[CheckSpec]
    load_errors: list[tuple[str, str]]  # (plugin, why)

    def get(self, key: str) -> CheckSpec | None:
        key_l = key.lower()
        for c in self.checks:
            if c.id.lower() == key_l or c.slug == key_l:
                return c
        return None


def load_registry(plugins: bool = True) -> Registry:
    """Import the built-in checks and the ``kpdiag.checks`` entry points; return them sorted by id."""
    errors: list[tuple[str, str]] = []
    for info in pkgutil.iter_modules(importlib.import_module(BUILTIN).__path__):
        importlib.import_module(f"{BUILTIN}.{info.name}")
    if plugins:
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):  # (Python >= 3.10: the group= API)
            try:
                ep.load()  # importing the module registers its @check functions
            except Exception as exc:  # a broken plugin must not break kpdiag
                errors.append((ep.name, f"{exc.__class__.__name__}: {exc}"))
    return Registry(sorted(_REGISTRY.values(), key=lambda c: c.id), errors)


def select_checks(checks: list[CheckSpec], select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[CheckSpec]:
    """``select``/``ignore`` entries are ids (KP501), id prefixes (KP5, KP50) or slugs (ip-forward-off)."""

    def hit(c: CheckSpec, pattern: str) -> bool:
        p = pattern.strip()
        return c.id.upper().startswith(p.upper()) or c.slug == p.lower()

    sel = [s for s in select if s]
    ign = [s for s in ignore if s]
    return [c for c in checks if (not sel or any(hit(c, s) for s in sel)) and not any(hit(c, s) for s in ign)]


def run_checks(ctx: State, checks: list[CheckSpec]) -> tuple[list[Finding], list[CheckRun]]:
    findings: list[Finding] = []
    runs: list[CheckRun] = []
    for spec in checks:
        try:  # whether it applies and its inputs are there: a failure here is this check's, not the run's
            not_in_charge = (
                _not_in_charge(ctx) if spec.advice_for else _not_a_node(ctx, spec)
            )  # a replacement implements Services; or this host is no Kubernetes node at all
            other_mode = _other_mode(ctx, spec) if spec.modes and not not_in_charge else None
            skipped = not_in_charge or other_mode
            missing = (
                [skipped]
                if skipped
                else [why for why in (broker.missing(ctx, spec.scope, need) for need in spec.needs) if why]
            )
            if not missing and spec.cni:
                missing = [why for why in (_other_cni(ctx, spec),) if why]
        except Exception as exc:
            runs.append(
                CheckRun(spec.id, spec.slug, "error", f"internal error: its inputs: {exc.__class__.__name__}: {exc}")
            )
            continue
        if missing:
            runs.append(CheckRun(spec.id, spec.slug, "skipped", "; ".join(missing)))
            continue
        inputs = broker.Inputs(ctx, spec.id, spec.inputs, spec.scope)  # exactly its declared inputs
        try:
            produced = list(
                (typed.call(spec.fn, spec.params, inputs, spec.new, Skip) if spec.params else spec.fn(inputs, spec.new))
                or ()
            )
        except Skip as exc:
            produced, outcome = None, ("skipped", str(exc))
        except Exception as exc:  # one broken check must not hide the others
            produced, outcome = None, ("error", f"internal error: {exc.__class__.__name__}: {exc}")
        if inputs.violations:  # even when the check caught the exception itself
            produced, outcome = None, ("error", f"internal error: {inputs.violations[0]}")
        elif produced:
            try:  # a finding's data is JSON values only: a report that cannot be written would lose every finding
                json.dumps([f.data for f in produced])
            except (TypeError, ValueError) as exc:
                produced, outcome = None, ("error", f"internal error: a finding's data is not JSON: {exc}")
        if produced is None:
            runs.append(CheckRun(spec.id, spec.slug, *outcome))
            continue
        findings.extend(produced)
        runs.append(CheckRun(spec.id, spec.slug, "ran", None, len(produced)))
    from .rootcause import link

    return link(findings, runs, running_mode(ctx))


def running_mode(ctx: Any) -> str | None:  # a State: what a node state has, asked of either
    """The mode kube-proxy runs here, for the root-cause pass (None: unknown, or a --preflight asks about a mode)."""
    try:
        mode: str | None = None if getattr(ctx, "preflight", None) else ctx.proxy_mode[0]
        return mode
    except Exception:  # a fleet state, or a state that cannot tell
        return None


def _other_cni(ctx: Any, spec: CheckSpec) -> str | None:
    """Why a check about some CNIs does not apply here: the node's CNI is another, or is not recognised."""
    why: str | None = ctx.cni.not_about(spec.cni)  # node checks only (a cluster check names no CNI)
    return why


def _other_mode(ctx: Any, spec: CheckSpec) -> str | None:
    """Why a check about some proxy modes does not apply here: kube-proxy runs another (known) mode and no --preflight
    asks about one of the check's modes. None when it applies, or when the mode is not known (the check decides)."""
    preflight = ctx.preflight
    if preflight in spec.modes:
        return None
    try:
        dp = ctx.dataplane
    except Exception:  # the state cannot tell: let the check decide
        return None
    if not dp.known or dp.name in spec.modes:
        return None
    why: str = dp.skip_reason(spec.modes)
    return why


def _not_a_node(ctx: State, spec: CheckSpec) -> str | None:
    """Why a node check does not apply: the host does not look like a Kubernetes node (state/service_proxy.py), so
    advice about its kernel settings or rules would change a host that is none of Kubernetes' business."""
    if spec.scope != "node" or spec.any_host:
        return None
    impl = getattr(ctx, "service_implementer", None)
    return impl.skip_reason if impl is not None and impl.not_a_node is not None else None


def _not_in_charge(ctx: State) -> str | None:
    """Why kube-proxy advice does not apply on this node (a replacement implements Services), or None."""
    impl = getattr(ctx, "service_implementer", None)
    return impl.skip_reason if impl is not None else None
