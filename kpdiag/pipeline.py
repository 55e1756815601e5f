"""The pipeline: a bundle → its state → the checks → a report, the same for a live run and an offline ``analyze``.

``analyze_bundle`` is what ``kpdiag analyze`` runs: a node bundle goes through :func:`kpdiag.diagnose.analyze_state`;
one written by ``kpdiag svc --save`` is diagnosed as that Service again (:func:`kpdiag.service.service_report`).
It sits above both so that neither imports the other's caller (no import cycle; a test checks).
"""

from __future__ import annotations

from .bundle import Bundle
from .diagnose import analyze_state
from .model import Report
from .service import service_report
from .state import NodeState


def analyze_bundle(path: str, select=(), ignore=()) -> Report:
    """Diagnose a bundle; one written by `kpdiag svc --save` is diagnosed as that Service again."""
    state = NodeState(Bundle.open(path))
    focus = str(state.bundle.manifest.get("service") or "")
    if "/" in focus:
        ns, name = focus.split("/", 1)
        return service_report(state, ns, name, select, ignore)
    return analyze_state(state, select, ignore, subject=None)
