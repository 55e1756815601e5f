"""A progress bar for long runs, on stderr: redrawn in place on a terminal, a line every 10 % otherwise (CI logs)."""

from __future__ import annotations

import time


class ProgressBar:
    def __init__(self, stream, label: str = "nodes", width: int = 30):
        self.stream = stream
        self.label = label
        self.width = width
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_step = -1
        self._last_draw = 0.0
        self._drawn = False

    def __call__(self, *, done: int, total: int, failed: int = 0, running: int = 0) -> None:
        total = max(total, 1)
        text = f"{done}/{total} {self.label} done, {failed} failed, {running} pod(s) running"
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < 0.2 and done < total:
                return
            self._last_draw = now
            filled = int(self.width * done / total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {text}\033[K")
            self._drawn = True
        else:
            step = int(10 * done / total)
            if step == self._last_step:
                return
            self._last_step = step
            self.stream.write(f"kpdiag: {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False  # the next message starts on a line of its own; a second close adds nothing
