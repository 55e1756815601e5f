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


class _Ahead:
    """``api_files(…, service=…)`` in a daemon thread (an interrupted run does not wait for it; its calls are bounded by
    the API deadline anyway): ``result()`` waits for it."""

    def __init__(self, node: str, fn):
        import threading

        self.node = node
        self.lookup = None  # the API's Service for the rules' focused read (_api_ahead)
        self._box: dict = {}
        self._thread = threading.Thread(target=lambda: self._box.update(out=fn()), name="kpdiag-api", daemon=True)
        self._thread.start()

    def result(self):
        self._thread.join()
        if "out" not in self._box:  # the thread failed: said as the API's error, as a failed call would be
            return {}, [{"source": "cluster", "error": "internal error: the API read did not finish"}], None
        return self._box["out"]


def _api_ahead(service: str, kubeconfig, context, progress) -> _Ahead:
    """The Service's API view read ahead; ``lookup`` (for the rules' focused read, IPVS mode's) shares its collector:
    one credential load, one GET of the Service."""
    import socket

    from kpdiag.collect.cluster import ClusterCollector
    from kpdiag.commands.nodeapi import api_files, service_lookup

    cc = ClusterCollector(kubeconfig, context)
    node = socket.gethostname()  # the manifest's node (kpdiag.collect.node.collect_node)
    ahead = _Ahead(node, lambda: api_files(node, progress=progress, service=service, collector=cc))
    ahead.lookup = service_lookup(service, cc)
    return ahead


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
    ahead = None
    if service and not all_rules and not preflight:
        from kpdiag.collect.service_rules import focused_rules

        if use_api:  # the Service's few API reads run while the rules are listed (both wait on others)
            ahead = _api_ahead(service, kubeconfig, context, progress)
        rules = focused_rules(service, ahead.lookup if ahead is not None else None)
    files, manifest = collect_node(host_root=host_root, progress=progress, rules=rules)
    if use_api and not preflight:
        from kpdiag.commands.nodeapi import api_files

        # a focused run (its rules read for one Service: manifest "partial") reads that Service from the API too;
        # when the rules were read whole after all, so is the API (what was read ahead is not used)
        focused = service if manifest.get("partial") else None
        if ahead is not None and focused and ahead.node == manifest.get("node"):
            more, errors, api = ahead.result()
        else:
            more, errors, api = api_files(manifest.get("node"), kubeconfig, context, progress=progress, service=focused)
        files.update(more)
        manifest.setdefault("errors", []).extend(errors)
        manifest["api"] = api
        if focused:
            from kpdiag.commands.nodeapi import api_holds

            manifest["partial"]["holds"].update(api_holds(focused, more))
    files["kpdiag.json"] = json.dumps(manifest).encode()
    state = NodeState(Bundle.from_files(manifest.get("node") or "node", files), preflight=preflight)
    if preflight:
        select = select or preflight_checks(preflight)
    subject = f"node {manifest.get('node')}" + (f" (preflight: {preflight})" if preflight else "")
    report = analyze_state(state, select, ignore, subject=subject)
    return focus_report(report, state, service=service, trace_to=trace_to)
