"""One API call of `kpdiag cluster` within a deadline: the timeouts it gets from the time left, which failures are
retried (timeouts, 429 after its Retry-After, 5xx), the answer of a write read bounded, and the one line said for a
pod create the API server refused."""

from __future__ import annotations

import email.utils
import json
import time

from kpdiag.manifests import apply_command

from ..collect.apierrors import api_reason

API_TIMEOUT = 15.0  # the longest any one API call may take (less when the deadline is nearer)
RETRIES = 3  # for timeouts, 429 and 5xx answers
MIN_CALL = 0.05  # seconds: a call is not started with less time than this left


class DeadlineExceeded(Exception):
    """The time given to this step ran out (before or during an API call)."""


def transient(status) -> bool:
    return not status or status == 429 or status >= 500


def retry_after(exc: Exception) -> float | None:
    """Seconds a 429/503 answer asks the client to wait (Retry-After: seconds or an HTTP date), or None."""
    headers = getattr(exc, "headers", None)
    try:
        value = headers.get("Retry-After") if headers is not None else None
    except AttributeError:
        value = None
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return None if when is None else max(0.0, when.timestamp() - time.time())


def is_timeout(exc: BaseException) -> bool:
    """A connect or read timeout (urllib3 wraps it in MaxRetryError; the client may wrap that again)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 5:
        if isinstance(cur, TimeoutError) or cur.__class__.__name__ in (
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "TimeoutError",
        ):
            return True
        reason = getattr(cur, "reason", None)
        cur = reason if isinstance(reason, BaseException) else (cur.__cause__ or cur.__context__)
        seen += 1
    return False


def call_timeout(deadline: float, cap: float = API_TIMEOUT) -> tuple[float, float]:
    """(connect, read) timeouts for one API call from the time left before ``deadline``."""
    left = deadline - time.monotonic()
    if left < MIN_CALL:
        raise DeadlineExceeded()
    t = min(cap, left)
    return (t, t)


def discard(resp, deadline: float) -> None:
    """Read a write's answer (the object written: a few KB) bounded and let the connection go back to the pool."""
    from ..collect.kubeapi import read_body

    try:
        read_body(resp, max(deadline, time.monotonic() + MIN_CALL), limit=1 << 20, truncate=True)
    except Exception:
        pass  # the write was accepted (2xx): what its answer holds is not needed


def missing_service_account(exc: Exception, manifest: dict) -> bool:
    """Did the ServiceAccount admission refuse the pod because its service account does not exist? (403, "error looking
    up service account NS/NAME: serviceaccount \"NAME\" not found")"""
    account = (manifest.get("spec") or {}).get("serviceAccountName")
    if not account or getattr(exc, "status", None) != 403:
        return False
    try:
        body = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except (ValueError, AttributeError):
        return False
    return "service account" in body and f'serviceaccount "{account}" not found' in body


def create_reason(exc: Exception, namespace: str, server: str | None) -> str:
    status = getattr(exc, "status", None)
    body = ""
    try:
        body = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except (ValueError, AttributeError):
        pass
    if status == 404:
        return f"create pod: namespace {namespace!r} does not exist ({apply_command('cluster')} creates it)"
    if status == 403 and "PodSecurity" in body:
        return (
            f"create pod: PodSecurity admission rejects a privileged pod in {namespace!r} "
            f"(kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=privileged): {body[:200]}"
        )
    if status == 403:
        return f"create pod: 403 Forbidden — RBAC does not allow creating pods in {namespace!r} (kpdiag's grants: {apply_command('cluster')}){': ' + body[:160] if body else ''}"
    if status == 422:
        return f"create pod: 422 rejected by the API server: {body[:200]}"
    return api_reason(exc, "create pod", server)
