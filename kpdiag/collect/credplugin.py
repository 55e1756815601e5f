"""The kubeconfig's exec credential plugin, bounded: started in a session of its own (marked in its environment), so
that at a deadline it is killed with everything it started, orphans included; its refresh mid-command bounded the
same way; the program names a running plugin shows."""

from __future__ import annotations

import os
import threading
import time

REFRESH_MARGIN = 0.5  # seconds: a token refresh ends this much before the command's deadline
CONFIG_TIMEOUT = (
    20.0  # seconds to load credentials (the kubeconfig read, an exec credential plugin), or to refresh them
)

PLUGIN_MARK = "KPDIAG_CREDENTIAL_PLUGIN"  # in the environment of a credential plugin kpdiag started, and its children
# Run by the client library in place of an exec credential plugin: a new session (its process group and all it starts
# can be killed at once, orphans included), killed when the thread of kpdiag that started it ends (kpdiag killed),
# then the plugin itself in place; a command that cannot run says so in one line, as the client would have.
_OWN_SESSION = (
    "import os, sys\n"
    "os.setsid()\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL\n"
    "except Exception:\n"
    "    pass\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'{sys.argv[1]}: {exc.strerror}\\n')\n"
    "    os._exit(127)\n"
)


def in_own_session(user: dict) -> dict:
    """A kubeconfig ``users[]`` entry whose exec credential plugin, when the client library runs it, starts in a
    session of its own marked with PLUGIN_MARK (a copy; the entry itself is not changed): at a deadline the plugin and
    everything it started, even what it left behind and no longer waits for, are found and killed
    (:func:`stop_children`)."""
    import sys

    body = user.get("user")
    exec_ = body.get("exec") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(exec_, dict)
        or not isinstance(exec_.get("command"), str)
        or not exec_["command"]
    ):
        return user
    args = exec_["args"] if isinstance(exec_.get("args"), list) else []
    env = exec_["env"] if isinstance(exec_.get("env"), list) else []
    wrapped = dict(
        exec_,
        command=sys.executable,
        args=["-I", "-S", "-c", _OWN_SESSION, exec_["command"], *args],
        env=[*env, {"name": PLUGIN_MARK, "value": "1"}],
    )
    return dict(user, user=dict(body, exec=wrapped))


ENV_OPTIONS_WITH_VALUE = frozenset(("-u", "--unset", "-C", "--chdir", "-S", "--split-string"))


def plugin_names(argv: list[str]) -> set[str]:
    """The program names a running credential plugin can show in its command line: the command's, and when the command
    is ``env`` (``env [-i] [-u NAME] [VAR=value]… PROGRAM …``, which replaces itself by PROGRAM) the program's."""
    if not argv or not argv[0]:
        return set()
    names = {os.path.basename(argv[0])}
    if os.path.basename(argv[0]) != "env":
        return names
    rest = list(argv[1:])
    while rest:
        word = rest.pop(0)
        if word.startswith("--split-string="):  # the attached forms: --split-string=STRING, -SSTRING
            rest = word.split("=", 1)[1].split() + rest
        elif word.startswith("-S") and len(word) > 2:
            rest = word[2:].split() + rest
        elif word in ("-S", "--split-string") and rest:
            rest = rest.pop(0).split() + rest
        elif word in ENV_OPTIONS_WITH_VALUE:
            rest = rest[1:]
        elif word.startswith("-") or "=" in word:
            continue
        else:
            names.add(os.path.basename(word))
            break
    return names


class Said:
    """Collects what the client logs on the root logger while credentials load (instead of Python's last-resort
    handler printing it to stderr)."""

    def __init__(self):
        import logging

        self.messages: list[str] = []
        outer = self

        class _H(logging.Handler):
            def emit(self, record):
                try:
                    outer.messages.append(str(record.getMessage()))
                except Exception:
                    pass

        self._handler = _H(logging.WARNING)
        logging.getLogger().addHandler(self._handler)

    def close(self) -> None:
        import logging

        logging.getLogger().removeHandler(self._handler)


def children() -> set[int]:
    """The pids of this process's children now (from /proc)."""
    me, out = os.getpid(), set[int]()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().rsplit(b")", 1)[1].split()
                if int(stat[1]) == me:
                    out.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def bound_refresh(configuration, plugin: str, deadline: float | None, names: set[str] | None = None) -> None:
    """Bound the client's token refresh: when the exec plugin's token expires the client runs the plugin again, from
    inside whichever API call comes next, and waits for it without a timeout. Each refresh now ends before the
    deadline of the command or of the API call it runs in (at most CONFIG_TIMEOUT); a plugin still running then is
    killed with its children and the call fails with a plain line. One refresh at a time (kpdiag cluster's workers call in parallel)."""
    from .kubeapi import CredentialRefresh, call_deadline

    hook = configuration.refresh_api_key_hook
    lock = threading.Lock()

    def refresh(conf) -> None:
        now = time.monotonic()
        # ends a little before the deadline of the command or of the call it runs in (whichever comes first), so
        # that the call reports it (not a bare timeout) and nothing is left running
        ends = [d for d in (deadline, call_deadline()) if d is not None]
        left = (min(ends) - now - REFRESH_MARGIN) if ends else CONFIG_TIMEOUT
        bound = min(CONFIG_TIMEOUT, left)
        why = (
            f"the credential plugin {plugin!r} did not finish refreshing the token in {max(bound, 0):.0f} s and was "
            "stopped — run it by hand to see what it waits for (a login prompt, a network call)"
        )
        if bound <= 0 or not lock.acquire(timeout=bound):
            raise CredentialRefresh(why)
        try:
            before = children()
            box: dict = {}
            said = Said()  # the client logs a failing plugin (and goes on without credentials): kept, not printed

            def run() -> None:
                try:
                    hook(conf)
                except BaseException as exc:  # handed to the caller
                    box["error"] = exc
                finally:
                    said.close()

            worker = threading.Thread(target=run, name="kpdiag-credential-refresh", daemon=True)
            worker.start()
            worker.join(max(0.0, bound - (time.monotonic() - now)))
            if worker.is_alive():
                stop_children(before, names=names or plugin_names([plugin]))
                raise CredentialRefresh(why)
            if "error" in box:
                raise box["error"]
            failed = next((m for m in said.messages if m.startswith("exec: ")), None)
            if failed:
                raise CredentialRefresh(
                    f"the credential plugin {plugin!r} failed when run again to refresh the token "
                    f"({' '.join(failed[6:].split())}) — run it by hand to see why (an expired login?)"
                )
        finally:
            lock.release()

    configuration.refresh_api_key_hook = refresh


def stop_children(before: set[int], names: set[str] | None = None) -> None:
    """Stop the children started since ``before`` (a credential plugin the client started and still waits for) and
    whatever they started in turn. With ``names`` (:func:`plugin_names`), only the children running one of them (a
    name is one of the first words of the command line: argv[0], or a later one under a script's interpreter and its
    options): another thread's children (a node collector's commands) are left alone."""
    import signal

    procs = _procs()
    parents = {pid: ppid for pid, (ppid, _) in procs.items()}
    me = os.getpid()
    new = {pid for pid, ppid in parents.items() if ppid == me and pid not in before}
    _stop_sessions(procs, new)
    doomed = new
    if names:
        doomed = {pid for pid in doomed if names & {os.path.basename(a) for a in _argv(pid)[:8]}}
    grown = True
    while grown:
        more = {pid for pid, ppid in parents.items() if ppid in doomed and pid not in doomed}
        doomed |= more
        grown = bool(more)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _procs() -> dict[int, tuple[int, int]]:
    """Every process now: pid → (parent pid, session id), from /proc."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                out[int(entry)] = (int(fields[1]), int(fields[3]))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _stop_sessions(procs: dict[int, tuple[int, int]], new: set[int]) -> None:
    """Kill the sessions of the credential plugins among the children ``new`` (:func:`in_own_session`): a child that
    leads a session of its own, one of whose members carries PLUGIN_MARK — every member, the ones the plugin left
    behind (reparented, no longer its children) and the plugin itself even when it has exited and only its children
    still run."""
    import signal

    mine = os.getsid(0)
    for leader in new:
        if procs[leader][1] != leader or leader == mine:
            continue
        members = {pid for pid, (_, sid) in procs.items() if sid == leader}
        if not any(_marked(pid) for pid in members):
            continue
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(leader, signal.SIGKILL)  # one started since the list was taken
        except OSError:
            pass


def _marked(pid: int) -> bool:
    """Whether the process carries PLUGIN_MARK in its environment (a credential plugin kpdiag started, or its child)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"\0{PLUGIN_MARK}=1\0".encode() in b"\0" + fh.read(1 << 20) + b"\0"
    except OSError:
        return False


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read(4096).split(b"\0") if a]
    except OSError:
        return []
