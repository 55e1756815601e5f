"""How `kpdiag cluster` meets the terminating signals: raised as Interrupted while no pod exists (noted in PENDING, so
that one swallowed on its way still stops the run), and output that must not stop the cleanup once the terminal is
gone. While pods exist the runner traps the same signals itself (kpdiag/fleet/runner.py)."""

from __future__ import annotations

import contextlib
import signal
import threading

from ..errors import Interrupted

# every terminating signal a process can catch; a repeated Ctrl-C or Ctrl-backslash quits at once
TERMINATING = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
INSISTING = (signal.SIGINT, signal.SIGQUIT)


# signals raised as Interrupted while no pod existed: kept, so that one swallowed on its way (raised inside a finalizer
# or a library's catch-all) still stops the run at its start (FleetRunner.run reads it)
PENDING: list[int] = []


@contextlib.contextmanager
def raising_on_signals():
    """SIGHUP, SIGINT, SIGQUIT and SIGTERM raise Interrupted at once while no pod exists: the command ends with
    128 + signal and its one line instead of dying silently (SIGHUP) or dumping core (SIGQUIT). Each is also noted in
    PENDING: FleetRunner.run stops before its first pod when one was noted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        PENDING.append(signum)
        raise Interrupted(signum)

    PENDING.clear()
    saved = {sig: signal.signal(sig, handler) for sig in TERMINATING}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        PENDING.clear()


def best_effort(fn):
    """Progress and messages after a hangup: the terminal is gone (EIO), and that must not stop the cleanup."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (OSError, ValueError):
            return None

    return call
