"""What a failed Kubernetes API call means, in one line: the call, the server, the cause (DNS, refused, TLS, a
timeout, 401/403 and what was denied, one of kpdiag's caps) and what to do — never a credential (kpdiag.secrets)."""

from __future__ import annotations

import json

from kpdiag import secrets
from kpdiag.manifests import apply_command


def _causes(exc: BaseException):
    """``exc`` and what it wraps: urllib3's MaxRetryError keeps the cause in ``reason``, others in __cause__/__context__
    or in their args."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 12:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        reason = getattr(e, "reason", None)
        todo += [reason] if isinstance(reason, BaseException) else []
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [e.__cause__, e.__context__]


def _endpoint(server: str | None) -> tuple[str, str]:
    """(host, host:port) of the server URL."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(server or "")
        host = u.hostname or ""
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return server or "?", server or "?"
    return host, f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"


def _can_i(what: str) -> str:
    """``kubectl auth can-i …`` for a call described as "list pods in shop", "get service shop/web", "get node n1"."""
    words = what.split()
    if len(words) < 2 or words[1].startswith("/"):
        return ""
    verb, res = words[0], words[1]
    plural = {"service": "services", "node": "nodes", "configmap": "configmaps", "daemonset": "daemonsets"}.get(
        res, res
    )
    ns = ""
    if len(words) >= 4 and words[2] == "in":
        ns = " -A" if words[3] == "all" else f" -n {words[3]}"
    elif len(words) >= 3 and "/" in words[2]:
        ns = f" -n {words[2].split('/', 1)[0]}"
    return f"kubectl auth can-i {verb} {plural}{ns}"


def _status_message(exc) -> str:
    """The API's own message from a Status body (``pods is forbidden: User "x" cannot list …``), whole, or ""."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip():
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    msg = doc.get("message") if isinstance(doc, dict) else None
    if not isinstance(msg, str):
        return ""
    msg = " ".join(msg.split())
    return msg if len(msg) <= 400 else ""


def api_reason(exc: Exception, what: str, server: str | None) -> str:
    """One whole line that says which call failed, against which server, why (DNS, refused, TLS, a timeout, 401/403
    and what was denied, a cap) and what to do — no credential in it (kpdiag.secrets.scrub)."""
    return secrets.scrub(_api_reason(exc, what, server))


def _api_reason(exc: Exception, what: str, server: str | None) -> str:
    from .kubeapi import ApiBound, ApiDeadline

    where = secrets.shown_url(server)
    status = getattr(exc, "status", None)
    if isinstance(exc, ApiDeadline):
        return f"{what}: the API server {where} did not answer in time ({exc}): stopped at kpdiag's deadline"
    if isinstance(exc, ApiBound):
        return f"{what}: {exc}"
    if isinstance(status, int) and status:
        return _status_reason(exc, status, what, where)
    causes = list(_causes(exc))
    why = _network_reason(causes, what, where, server)
    if why:
        return why
    if isinstance(exc, (ValueError, UnicodeDecodeError)):
        text = " ".join(str(exc).split()) or exc.__class__.__name__
        return f"{what}: the API server {where} answered something that is not Kubernetes JSON ({text})"
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    if len(text) > 300:
        text = text[:300].rsplit(" ", 1)[0] + " …"
    return f"{what}: {exc.__class__.__name__}: {text}"


def _status_reason(exc: Exception, status: int, what: str, where: str) -> str:
    """An HTTP answer that is not 2xx: 401 and 403 with what to do, 404, any other with the server's own message."""
    msg = _status_message(exc)
    said = f" ({msg})" if msg and msg.lower() not in ("unauthorized", "forbidden") else ""
    if status == 401:
        return (
            f"{what}: the API server {where} does not accept the credentials (401 Unauthorized){said} — the token "
            "or client certificate is expired or not this cluster's: refresh the kubeconfig or pick another --context"
        )
    if status == 403:
        check = _can_i(what)
        return (
            f"{what}: 403 Forbidden — RBAC does not allow it{said}; "
            + (f"check with: {check}; " if check else "")
            + f"kpdiag's read-only grants: {apply_command('svc')} (set its subjects and namespaces first)"
        )
    if status == 404:
        return f"{what}: 404 Not Found{said}"
    reason = getattr(exc, "reason", "") or ""
    reason = reason if isinstance(reason, str) else ""
    return f"{what}: the API server {where} answered HTTP {status} {reason}".rstrip() + said


def _network_reason(causes: list[BaseException], what: str, where: str, server: str | None) -> str | None:
    """No HTTP answer: the name does not resolve, TLS, refused, a timeout, a connection closed early — or None."""
    import socket

    host, hostport = _endpoint(server)
    names = {c.__class__.__name__ for c in causes}
    if any(isinstance(c, socket.gaierror) or c.__class__.__name__ == "NameResolutionError" for c in causes):
        why = next((x.strerror for x in causes if isinstance(x, socket.gaierror) and x.strerror), "") or "no address"
        return (
            f"{what}: the API server {where} is unreachable: its name {host!r} does not resolve (DNS: {why}) — "
            "check the server address in the kubeconfig and this host's DNS"
        )
    tls = _tls_reason(causes, what, where)
    if tls:
        return tls
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return (
            f"{what}: the API server {where} is unreachable: connection refused (nothing listens on {hostport}) — "
            "is the address right and the API server up?"
        )
    if "ConnectTimeoutError" in names:
        return (
            f"{what}: the API server {where} is unreachable: no connection within the timeout (a firewall, a wrong "
            "address or a network that drops the packets)"
        )
    if "ReadTimeoutError" in names or any(isinstance(c, (TimeoutError, socket.timeout)) for c in causes):
        return f"{what}: the API server {where} accepted the connection, then timed out (no answer within the timeout)"
    closed = ("ProtocolError", "RemoteDisconnected", "IncompleteRead")
    if any(isinstance(c, (ConnectionResetError, BrokenPipeError)) or c.__class__.__name__ in closed for c in causes):
        return f"{what}: the API server {where} closed the connection before a complete answer"
    for c in causes:
        if isinstance(c, OSError) and c.strerror:
            return f"{what}: the API server {where} is unreachable ({c.strerror})"
    return None


def _tls_reason(causes: list[BaseException], what: str, where: str) -> str | None:
    import ssl

    for c in causes:
        if isinstance(c, ssl.SSLCertVerificationError):
            detail = getattr(c, "verify_message", "") or "certificate verify failed"
            return (
                f"{what}: TLS: the certificate of the API server {where} is not trusted ({detail}) — the kubeconfig's "
                "certificate-authority is not the one that signed this server's certificate (wrong cluster or CA?)"
            )
    for c in causes:
        if isinstance(c, ssl.SSLError):
            detail = getattr(c, "reason", None) or c.__class__.__name__
            return f"{what}: TLS handshake with the API server {where} failed ({detail}) — is it an HTTPS endpoint?"
    return None
