"""Exit codes, decided here and only here (DESIGN §4)."""

from __future__ import annotations

OK = 0  # nothing at or above --fail-on
FINDINGS = 1  # findings at or above --fail-on
USAGE = 2  # the command line was wrong
NO_DIAGNOSIS = 3  # nothing readable: could not diagnose

SEVERITY_ORDER = {"info": 1, "warning": 2, "error": 3}


def for_findings(severities, fail_on: str = "error", anything_read: bool = True) -> int:
    """The exit code for a diagnosis that produced findings of ``severities``."""
    if not anything_read:
        return NO_DIAGNOSIS
    if fail_on == "never":
        return OK
    threshold = SEVERITY_ORDER[fail_on]
    return FINDINGS if any(SEVERITY_ORDER.get(s, 0) >= threshold for s in severities) else OK


def for_policy(allowed: bool | None) -> int:
    """kpdiag policy: 0 the flow is allowed, 1 denied, 3 it could not be evaluated."""
    if allowed is None:
        return NO_DIAGNOSIS
    return OK if allowed else FINDINGS


def for_error(exc: BaseException) -> int:
    from .errors import UsageError

    return USAGE if isinstance(exc, UsageError) else NO_DIAGNOSIS
