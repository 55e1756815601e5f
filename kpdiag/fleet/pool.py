"""The worker threads of `kpdiag cluster`: a fixed number, whatever ``--parallel`` asks, and a process that cannot start
them all (its limit on threads: RLIMIT_NPROC, a container's pids.max) runs with those that did start, and says so.

Each worker takes the next node from one queue and hands its result to the run loop (kpdiag/fleet/runner.py), which
polls the API, draws progress and decides when to stop. Nothing here talks to the API.
"""

from __future__ import annotations

import collections
import queue
import threading
from typing import Callable, Generic, TypeVar

MAX_WORKERS = 64  # threads, and so node pods at a time, at most: --parallel above it means this many

T = TypeVar("T")
R = TypeVar("R")

LIMIT = "the process's limit on threads: RLIMIT_NPROC, or its cgroup's pids.max"

_RETIRE = object()  # a worker that takes this ends: it leaves its thread to the API calls (kubeapi.within's threads)


def no_thread(exc: BaseException) -> bool:
    """Is this the error of a thread that could not start (pthread_create failed)?"""
    return isinstance(exc, RuntimeError) and "start new thread" in str(exc)


class WorkerPool(Generic[T, R]):
    """Run ``work(item)`` for each item on at most ``size`` threads (never more than MAX_WORKERS)."""

    def __init__(self, work: Callable[[T], R], items: list[T], size: int, name: str = "kpdiag-node"):
        self._work = work
        self._todo: collections.deque = collections.deque(items)
        self._done: queue.SimpleQueue[tuple[T, R]] = queue.SimpleQueue()
        self._go = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.name = name
        self.wanted = max(1, min(int(size), len(items), MAX_WORKERS)) if items else 0
        self.start_error: str | None = None  # why a thread could not start (then fewer run)

    @property
    def started(self) -> int:
        return len(self._threads)

    def start(self) -> int:
        """Start the workers; a thread that cannot start ends the starting (the process is at its limit), and one of
        those that did is let go again when several did, so that the run's own API calls can still get a thread.
        Returns how many work."""
        for i in range(self.wanted):
            thread = threading.Thread(target=self._loop, name=f"{self.name}-{i}", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # "can't start new thread": pthread_create failed (EAGAIN)
                self.start_error = str(exc) or exc.__class__.__name__
                break
            self._threads.append(thread)
        working = len(self._threads)
        if self.start_error is not None and working > 1:
            self._todo.appendleft(_RETIRE)
            working -= 1
        self._go.set()
        return working

    def _loop(self) -> None:
        self._go.wait()
        while not self._stop.is_set():
            try:
                item = self._todo.popleft()
            except IndexError:
                return
            if item is _RETIRE:
                return
            self._done.put((item, self._work(item)))

    def results(self, timeout: float) -> list[tuple[T, R]]:
        """The results that came in: waits up to ``timeout`` for the first, then takes what else is there."""
        out = []
        try:
            out.append(self._done.get(timeout=timeout))
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            return out

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """No item starts from now on; the workers finish the one they hold (each deletes its own pod) and end."""
        self._stop.set()
        self._go.set()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
