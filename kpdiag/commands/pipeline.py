"""The pipeline: a bundle → its state → the checks → a report, the same for a live run and an offline ``analyze``.

``analyze_bundle`` is what ``kpdiag analyze`` runs: a node bundle goes through :func:`kpdiag.commands.diagnose.analyze_state`;
one written by ``kpdiag svc --save`` is diagnosed as that Service again (:func:`kpdiag.commands.svc.service_report`).
It sits above both so that neither imports the other's caller (no import cycle; a test checks).
"""

from __future__ import annotations

from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.model import Report
from kpdiag.commands.svc import service_report
from kpdiag.state.node import NodeState


def analyze_bundle(path: str, select=(), ignore=()) -> Report:
    """Diagnose a bundle; one written by `kpdiag svc --save` is diagnosed as that Service again."""
    bundle = Bundle.open(path)
    focus = bundle.service_focus()  # the kind from the files: the manifest's "service" is only a claim
    if focus is not None:
        return service_report(bundle, *focus, select, ignore)
    return analyze_state(NodeState(bundle), select, ignore, subject=None)


def preflight_checks(mode: str) -> tuple[str, ...]:
    """The checks that declare themselves prerequisites of ``mode`` (``@check(..., preflight=("ipvs",))``)."""
    from kpdiag.checkapi import load_registry

    return tuple(c.id for c in load_registry().checks if mode in c.preflight)


def diagnose_node(
    host_root: str | None = None,
    *,
    service: str | None = None,
    trace_to: str | None = None,
    preflight: str | None = None,
    use_api: bool = True,
    kubeconfig: str | None = None,
    context: str | None = None,
    select=(),
    ignore=(),
    progress=None,
    all_rules: bool = False,
) -> Report:
    """`kpdiag node`: collect this node (read-only), with the API's Services and EndpointSlices when it can, then the
    same analysis as an offline bundle; ``service``/``trace_to`` add traces (kpdiag.commands.focus). With ``service``
    only the rules that Service's packets can meet are read (a partial bundle, kpdiag/collect/service_rules.py) unless
    ``all_rules`` or ``preflight``. ValueError: a bad focus."""
    import json

    from kpdiag.collect.node import collect_node
    from kpdiag.commands.focus import focus_report

    rules = None
    if service and not all_rules and not preflight:
        from kpdiag.collect.service_rules import focused_rules
        from kpdiag.commands.nodeapi import service_lookup

        rules = focused_rules(service, service_lookup(service, kubeconfig, context) if use_api else None)
    files, manifest = collect_node(host_root=host_root, progress=progress, rules=rules)
    if use_api and not preflight:
        from kpdiag.commands.nodeapi import api_files

        more, errors, api = api_files(manifest.get("node"), kubeconfig, context, progress=progress)
        files.update(more)
        manifest.setdefault("errors", []).extend(errors)
        manifest["api"] = api
    files["kpdiag.json"] = json.dumps(manifest).encode()
    state = NodeState(Bundle.from_files(manifest.get("node") or "node", files), preflight=preflight)
    if preflight:
        select = select or preflight_checks(preflight)
    subject = f"node {manifest.get('node')}" + (f" (preflight: {preflight})" if preflight else "")
    report = analyze_state(state, select, ignore, subject=subject)
    return focus_report(report, state, service=service, trace_to=trace_to)
