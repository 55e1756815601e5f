"""Errors that carry their source: a file (and line) or a cause, printable on one line."""

from __future__ import annotations


class KpdiagError(Exception):
    """Base class: str() is a single line a user can act on."""


class InputError(KpdiagError):
    """Bad input: names the source (file) and, where known, the line."""

    def __init__(self, source: str, message: str, line: int | None = None):
        self.source = source
        self.line = line
        self.message = " ".join(str(message).split())  # always one line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class UsageError(KpdiagError):
    """The user asked for something that cannot be done (exit 2)."""


class NotFocused(Exception):
    """A focused read (``kpdiag node --service``, kpdiag/collect/service_rules.py) is not possible here: the whole rules
    are read instead (the message says why)."""


class Interrupted(KeyboardInterrupt):
    """Stopped by a signal after cleaning up (``forced``: a second signal cut the cleanup short)."""

    def __init__(self, signum: int, forced: bool = False):
        super().__init__(signum)
        self.signum = signum
        self.forced = forced
