"""The child processes of a collection (iptables-save, nft, ipvsadm, conntrack, ip, ethtool, journalctl …): each in its
own process group, killed with its whole group on its time bound, on any exception, and when kpdiag is stopped by
SIGTERM, SIGINT, SIGHUP or SIGQUIT (then the run ends with 128 + signal); SIGKILL of kpdiag kills the child itself."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from types import FrameType

STOPS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1

# the children running now (in any thread): a signal kills every one's group
_LIVE: set[subprocess.Popen[bytes]] = set()
_LOCK = threading.Lock()


def run(
    argv: list[str],
    *,
    timeout: float,
    env: dict[str, str],
    stdout: int | object = subprocess.PIPE,
    stderr: int | object = subprocess.PIPE,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(argv)`` with stdin from /dev/null, in a process group of its own; on its time bound
    (``subprocess.TimeoutExpired``), an exception or a stopping signal the group is killed before the child is
    reaped (so its group id cannot have been reused) and the exception goes on. ``preexec`` runs in the child."""
    with _stops_raising():
        proc = _start(argv, env, stdout, stderr, preexec)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            _kill_group(proc)
            try:  # reap it: the kill closed the pipes its group held
                proc.communicate(timeout=5.0)
            except subprocess.TimeoutExpired:  # a grandchild that left the group still holds one
                proc.wait()
            raise
        finally:
            with _LOCK:
                _LIVE.discard(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _start(
    argv: list[str], env: dict[str, str], stdout: int | object, stderr: int | object, preexec: Callable[[], None] | None
) -> subprocess.Popen[bytes]:
    """Start the child with the stopping signals blocked until it is registered: a signal during the fork waits, else
    the parent would lose a child it never saw (and the forked child would run kpdiag's handler)."""
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # kpdiag killed by SIGKILL: the child dies too
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if preexec is not None:
            preexec()

    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOPS))
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,  # type: ignore[arg-type]
            stderr=stderr,  # type: ignore[arg-type]
            env=env,
            start_new_session=True,  # its own session and process group: killed as one, out of the terminal's reach
            preexec_fn=child,
        )
        with _LOCK:
            _LIVE.add(proc)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return proc


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the child's process group (its pid: it leads a session of its own), then to the child itself."""
    for kill, target in ((os.killpg, proc.pid), (os.kill, proc.pid)):
        try:
            kill(target, signal.SIGKILL)
        except OSError:  # gone already (a zombie's group can be empty)
            pass


def kill_all() -> None:
    """Kill the group of every child running now, in every thread (a stopping signal)."""
    with _LOCK:
        live = list(_LIVE)
    for proc in live:
        if proc.returncode is None:
            _kill_group(proc)


@contextlib.contextmanager
def _stops_raising() -> Iterator[None]:
    """While a child runs (main thread only: signals are handled there), a stopping signal kills every child's group,
    runs the handler that was there before when it is kpdiag's own, and raises Interrupted (128 + signal). SIGTERM's
    and SIGHUP's default action would end kpdiag on the spot and leave the children running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from kpdiag.errors import Interrupted

    saved: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        kill_all()
        previous = saved.get(signum)
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)
        raise Interrupted(signum)

    for stop in STOPS:
        saved[stop] = signal.signal(stop, handler)
    try:
        yield
    finally:
        for signum, old in saved.items():
            signal.signal(signum, old)
