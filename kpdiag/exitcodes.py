"""Exit codes, decided here and only here (docs/architecture.md §4)."""

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


def for_fleet(nodes_failed: int, pods_left: int, not_saved: bool = False) -> int:
    """kpdiag cluster, beside the code of its findings (the larger one wins): 3 when the --save-dir it was asked for
    could not be written; 1 when a node could not be diagnosed (KP806 names it) or a pod was left behind — whatever
    --fail-on says: the run did not do all it was asked."""
    if not_saved:
        return NO_DIAGNOSIS
    return FINDINGS if nodes_failed or pods_left else OK


# kpdiag trace: what happens to the packet (2 and 3 as for every command: usage, nothing readable)
TRACE_DELIVERED = 0  # every path accepts it: delivered to the node itself or forwarded
TRACE_DROPPED = 4  # at least one path drops it (silently: the client times out)
TRACE_REJECTED = 5  # at least one path rejects it (the client gets an error at once), none drops it


def for_trace(verdicts, complete: bool = True) -> int:
    """The exit code of a trace from the verdicts of its paths: a drop anywhere wins over a reject, a reject over
    delivery; a packet some of whose paths are delivered and others dropped is 'dropped' (it will be, sometimes).
    A trace that could not follow every path (``complete`` False: its work budget, a loop) answers only what it saw
    for certain — a drop or a reject on a traced path — and otherwise 3: delivery cannot be claimed."""
    verdicts = set(verdicts)
    if not complete and not verdicts & {"drop", "reject"}:
        return NO_DIAGNOSIS
    if "drop" in verdicts or not verdicts:
        return TRACE_DROPPED
    if "reject" in verdicts:
        return TRACE_REJECTED
    return TRACE_DELIVERED


# Stopped by a signal (after cleaning up what the run created): 128 + the signal's number, as a shell reports a
# process that signal ended, so scripts read the same code whether kpdiag caught the signal or not.
SIGNAL_BASE = 128
HANGUP = SIGNAL_BASE + 1  # SIGHUP: the terminal went away (a closed ssh session)
INTERRUPTED = SIGNAL_BASE + 2  # SIGINT: Ctrl-C
QUIT = SIGNAL_BASE + 3  # SIGQUIT: Ctrl-backslash
TERMINATED = SIGNAL_BASE + 15  # SIGTERM: kill, timeout(1), a service manager


def for_signal(signum: int | None) -> int:
    """The exit code of a run a signal stopped: 129 SIGHUP, 130 SIGINT, 131 SIGQUIT, 143 SIGTERM (128 + number);
    an unknown or missing number is taken as Ctrl-C (130)."""
    if not isinstance(signum, int) or isinstance(signum, bool) or not 0 < signum < 65:
        return INTERRUPTED
    return SIGNAL_BASE + signum


def for_error(exc: BaseException) -> int:
    from .errors import UsageError

    return USAGE if isinstance(exc, UsageError) else NO_DIAGNOSIS
