"""How kpdiag shows a URL, a token or a key to a human: the one place that does it.

A kubeconfig holds secrets in places a message can pick them up from: the server URL (``https://user:PASSWORD@host``),
a bearer token (echoed by the HTTP library when it refuses a header), a password, a client key (echoed by the
client library when it cannot parse a user entry). Every error line, progress line and the JSON headline that names
the API server or quotes a library's message passes through :func:`shown_url` or :func:`scrub`:

- credentials in a URL are dropped (``https://***@host``),
- a token, a password or a key kpdiag read from a kubeconfig (:func:`remember`) is never shown (``<hidden>``), nor is
  whatever follows ``Bearer``/``Basic`` or a mapping's ``token``/``password`` key,
- control characters are named (:func:`kpdiag.render.safe.term`), so a newline in a value cannot start a line.
"""

from __future__ import annotations

import re
import threading

HIDDEN = "<hidden>"
_MIN = 4  # a shorter "secret" would hide ordinary words

_LOCK = threading.Lock()
_KNOWN: set[str] = set()

# scheme://userinfo@ — userinfo is everything up to the last '@' before the host's end
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s?#]*@")
_AUTH = re.compile(r"(?i)\b(bearer|basic)(\s+|\\x20)([^\s'\",)}\]]+)")
_KEYED = re.compile(
    r"""(?ix)(['"]?(?:token|id-token|refresh-token|password|client-key-data|access-token)['"]?\s*[:=]\s*)
    (b?'[^']*'|b?"[^"]*"|[^\s,}]+)"""
)


def remember(*values) -> None:
    """Secrets read from a kubeconfig (a token, a password, a key's data): never shown by :func:`scrub`."""
    with _LOCK:
        for value in values:
            if not isinstance(value, str):
                continue
            for one in {value, value.strip()}:
                if len(one) >= _MIN:
                    _KNOWN.add(one)


def remember_kubeconfig(doc: dict) -> None:
    """Every secret a kubeconfig's users hold, and the passwords in its server URLs."""
    for entry in doc.get("users") or []:
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        remember(*(user.get(k) for k in ("token", "password", "client-key-data", "client-certificate-data")))
        provider = user.get("auth-provider")
        conf = provider.get("config") if isinstance(provider, dict) else None
        if isinstance(conf, dict):
            remember(*(conf.get(k) for k in ("id-token", "refresh-token", "access-token", "client-secret")))
    for entry in doc.get("clusters") or []:
        cluster = entry.get("cluster") if isinstance(entry, dict) else None
        server = cluster.get("server") if isinstance(cluster, dict) else None
        if isinstance(server, str):
            m = re.match(r"(?i)[a-z][a-z0-9+.-]*://([^/@\s?#]*)@", server)
            if m:
                remember(m.group(1), m.group(1).partition(":")[2])


def scrub(text) -> str:
    """``text`` without any credential: URL userinfo, what follows Bearer/Basic or a token/password key, and every
    secret :func:`remember` was given (as is, or as Python prints it in a repr). Control characters are kept (a
    caller that prints uses :func:`shown`)."""
    text = "" if text is None else str(text)
    text = _USERINFO.sub(lambda m: m.group(1) + "***@", text)
    text = _AUTH.sub(lambda m: f"{m.group(1)}{m.group(2)}{HIDDEN}", text)
    text = _KEYED.sub(lambda m: m.group(1) + HIDDEN, text)
    with _LOCK:
        known = sorted(_KNOWN, key=len, reverse=True)
    for secret in known:
        for form in (secret, repr(secret)[1:-1]):
            if form and form in text:
                text = text.replace(form, HIDDEN)
    return text


def shown(text) -> str:
    """:func:`scrub`, then every control character named: safe to print on one line."""
    from kpdiag.render.safe import term

    return term(scrub(text))


def shown_url(url) -> str:
    """A server URL for a message: its credentials dropped and its control characters named (None → "(no server
    address)")."""
    if not url:
        return "(no server address)"
    return shown(url)


def describe_control(value: str) -> str:
    """What is wrong with a value that holds control characters, in words that do not show the value: "ends in a
    newline", "holds a carriage return" …"""
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\0": "a NUL byte"}
    bad = [ch for ch in value if ord(ch) < 0x20 or ord(ch) == 0x7F]
    if not bad:
        return ""
    first = names.get(bad[0], f"the control character \\x{ord(bad[0]):02x}")
    stripped = value.rstrip("\r\n")
    if all(ch in "\r\n" for ch in bad) and stripped and not any(c in stripped for c in "\r\n"):
        return f"ends in {first}"
    return f"holds {first}"


# directories holding decoded key material (kpdiag.collect.cluster): removed on every way out, signals included
private_dirs: set[str] = set()
_SAVED: dict = {}


def private_dir() -> str:
    """A new directory only this user can enter (mode 0700), for key files a library insists on reading from a path.
    Until :func:`remove_private_dir`, a SIGTERM or SIGHUP (whose default action ends the process without any cleanup)
    removes it first, then ends the process as the signal would have."""
    import tempfile

    path = tempfile.mkdtemp(prefix="kpdiag-keys-")
    private_dirs.add(path)
    _guard_signals()
    return path


def _guard_signals() -> None:
    import signal
    import threading

    if _SAVED or threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        remove_private_dirs()
        previous = _SAVED.get(signum)
        _restore_signals()
        if callable(previous):
            previous(signum, frame)
        else:
            import os

            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            _SAVED[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


def _restore_signals() -> None:
    import signal

    for sig, old in list(_SAVED.items()):
        try:
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass
    _SAVED.clear()


def remove_private_dir(path: str) -> None:
    """Remove one private directory and forget the client library's cached names of the files in it (a later
    kubeconfig load writes them again instead of naming a file that is gone)."""
    import os
    import shutil
    import sys

    shutil.rmtree(path, ignore_errors=True)
    private_dirs.discard(path)
    kube_config = sys.modules.get("kubernetes.config.kube_config")
    cached = getattr(kube_config, "_temp_files", None)
    if isinstance(cached, dict):
        for key, name in list(cached.items()):
            if isinstance(name, str) and os.path.dirname(name) == path:
                cached.pop(key, None)
    if not private_dirs:
        _restore_signals()


def remove_private_dirs() -> None:
    """Remove every private directory still there (the process is about to leave, perhaps after a signal)."""
    for path in list(private_dirs):
        remove_private_dir(path)
