"""Kubernetes API calls for raw JSON, through the official client's ApiClient, with every answer read bounded.

kpdiag reads every object as raw JSON (``_preload_content=False``): it never needs the client's generated model
classes. Yet importing the generated API classes (CoreV1Api …) imports their models too — about 1.2 s of a
`kpdiag svc` run that is over in 2 — and they read an error answer's body whole, however large. :class:`RawApi`
offers the same method names and arguments for the calls kpdiag makes (the GETs, and the pod and ConfigMap writes of
`kpdiag cluster`), and sends them through the same ApiClient: the kubeconfig's or the service account's credentials
(bearer tokens, exec plugins and their refresh, client certificates), TLS verification, proxies and timeouts, and the
same :class:`kubernetes.client.exceptions.ApiException` on a non-2xx answer, with at most 64 KiB of its body read.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import quote

# ------------------------------------------------------------------ bounds (docs/api-access.md)
MAX_BODY = 64 << 20  # bytes of one API answer (a List page of 500 big pods is a few MB)
MAX_ERROR_BODY = 64 << 10  # bytes of an error answer's body (a Status object is a few hundred)
ERROR_BODY_SECONDS = 10.0  # at most this long to read an error answer's body (never longer than the call's timeout)
MAX_PAGES = 400  # pages of one paged List (500 objects a page: 200,000 objects)
MAX_OBJECTS = 200_000  # objects of one paged List
CHUNK = 256 << 10


class ApiBound(Exception):
    """An API read stopped at one of kpdiag's bounds (a cap or the deadline); the message names it."""


class CredentialRefresh(ApiBound):
    """The exec credential plugin, run again mid-command to refresh an expired token, did not finish in time (it
    was stopped); the message says so."""


class ApiDeadline(ApiBound):
    """The time given to the API ran out before the answer was complete."""


def read_body(resp, deadline: float, limit: int = MAX_BODY, truncate: bool = False) -> bytes:
    """The body of a urllib3 response, read in chunks: at most ``limit`` bytes and never past ``deadline`` (each wait
    for bytes ends at the deadline, so a server that trickles one byte a second cannot hold the read). Past ``limit``:
    :class:`ApiBound`, or with ``truncate`` the first ``limit`` + 1 bytes (the caller sees it was cut)."""
    chunks: list[bytes] = []
    size, done, start = 0, False, time.monotonic()
    read = getattr(resp, "read1", None) or resp.read
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApiDeadline(f"{size} bytes of the answer in {time.monotonic() - start:.0f} s, not all of it")
            sock = getattr(getattr(resp, "connection", None), "sock", None) or getattr(
                getattr(getattr(resp, "_fp", None), "fp", None), "raw", None
            )
            settimeout = getattr(sock, "settimeout", None) or getattr(getattr(sock, "_sock", None), "settimeout", None)
            if settimeout is not None:
                try:
                    settimeout(max(0.01, left))
                except OSError:
                    pass
            try:
                chunk = read(min(CHUNK, limit + 1 - size))
            except Exception as exc:
                if isinstance(exc, TimeoutError) or "timed out" in str(exc).lower():
                    raise ApiDeadline(
                        f"{size} bytes of the answer in {time.monotonic() - start:.0f} s, not all of it"
                    ) from None
                raise
            if not chunk:
                done = True
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                if truncate:
                    return b"".join(chunks)[: limit + 1]
                raise ApiBound(f"the answer is larger than {_size(limit)} (kpdiag's cap on one API answer): not read")
    finally:
        try:
            resp.release_conn() if done else resp.close()  # a half-read connection is never reused
        except Exception:
            pass


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


_CALL = threading.local()


def call_deadline() -> float | None:
    """The deadline of the bounded call (:func:`within`) this thread runs, or None outside one."""
    return getattr(_CALL, "deadline", None)


def within(deadline: float, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with a wall-clock bound: it runs in a worker thread and is left behind (a daemon that
    ends with the process) when ``deadline`` passes — name resolution, a TLS handshake or headers sent one byte a
    second, an exec credential plugin: nothing in the client can hold the caller past it."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise ApiDeadline("no time left")
    box: dict = {}

    def run():
        _CALL.deadline = deadline  # what a credential refresh inside the call may take (call_deadline())
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="kpdiag-api", daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise ApiDeadline(
            f"no complete answer within {left:.0f} s" if left >= 1 else "no complete answer in the time left"
        )
    if "error" in box:
        raise box["error"]
    return box["value"]


_ACCEPT = {"Accept": "application/json"}
# the client's keyword → the API's query parameter
_QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "tail_lines": "tailLines",
    "limit_bytes": "limitBytes",
    "container": "container",
    "previous": "previous",
    "timeout_seconds": "timeoutSeconds",
    "grace_period_seconds": "gracePeriodSeconds",
    "propagation_policy": "propagationPolicy",
}


def _seg(value: str) -> str:
    return quote(str(value), safe="")


class RawApi:
    """GET requests by path, with the generated API classes' method names (those kpdiag uses) and calling convention:
    ``_preload_content=False`` returns the urllib3 response (``.data``, ``.read``), ``_request_timeout`` bounds the call."""

    def __init__(self, api_client):
        self.api_client = api_client

    def get(self, path: str, _request_timeout=None, _preload_content: bool = False, **query):
        return self.request("GET", path, _request_timeout=_request_timeout, **query)

    def request(
        self, method: str, path: str, body=None, _request_timeout=None, _preload_content: bool = False, **query
    ):
        """One request; the urllib3 response of a 2xx answer (its body unread: the caller reads it, bounded). Any
        other answer raises :class:`ApiException` with at most ``MAX_ERROR_BODY`` bytes of its body read — the
        generated API classes read an error body whole, however large."""
        params = []
        for key, value in query.items():
            if value is None:
                continue
            name = _QUERY.get(key)
            if name is None:
                raise TypeError(f"RawApi: unknown query parameter {key!r}")
            params.append((name, ("true" if value else "false") if isinstance(value, bool) else value))
        headers = dict(_ACCEPT)
        if body is not None:
            headers["Content-Type"] = "application/json"
        api = self.api_client
        if hasattr(api, "param_serialize"):  # kubernetes >= 31: serialize (auth applied), then send
            from kubernetes.client.exceptions import ApiException

            method, url, headers, body, _post = api.param_serialize(
                method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=_request_timeout)
            if not 200 <= resp.status <= 299:
                raw = resp.response
                # an error answer's body is a small Status object: read no more than that, and not past the call's
                # read timeout (a body sent a byte at a time would otherwise hold the read for hours)
                wait = _request_timeout[-1] if isinstance(_request_timeout, (tuple, list)) else _request_timeout
                try:
                    text = read_body(
                        raw,
                        time.monotonic() + min(float(wait or ERROR_BODY_SECONDS), ERROR_BODY_SECONDS),
                        MAX_ERROR_BODY,
                        truncate=True,
                    )[:MAX_ERROR_BODY]
                except Exception:
                    text = b""
                exc = ApiException(status=resp.status, reason=resp.reason, body=text.decode("utf-8", "replace"))
                exc.headers = raw.headers
                raise exc
            return resp.response
        # older clients: one call that serializes, authenticates, sends and raises on a non-2xx answer
        return api.call_api(
            path,
            method,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=_request_timeout,
        )

    # ------------------------------------------------------------ core/v1
    def read_namespaced_service(self, name, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/services/{_seg(name)}", **kw)

    def list_namespaced_service(self, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/services", **kw)

    def list_service_for_all_namespaces(self, **kw):
        return self.get("/api/v1/services", **kw)

    def list_namespaced_pod(self, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/pods", **kw)

    def list_pod_for_all_namespaces(self, **kw):
        return self.get("/api/v1/pods", **kw)

    def read_namespaced_pod_log(self, name, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(name)}/log", **kw)

    def create_namespaced_pod(self, namespace, body, **kw):
        return self.request("POST", f"/api/v1/namespaces/{_seg(namespace)}/pods", body=body, **kw)

    def delete_namespaced_pod(self, name, namespace, **kw):
        return self.request("DELETE", f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(name)}", **kw)

    def list_namespaced_config_map(self, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/configmaps", **kw)

    def create_namespaced_config_map(self, namespace, body, **kw):
        return self.request("POST", f"/api/v1/namespaces/{_seg(namespace)}/configmaps", body=body, **kw)

    def delete_namespaced_config_map(self, name, namespace, **kw):
        return self.request("DELETE", f"/api/v1/namespaces/{_seg(namespace)}/configmaps/{_seg(name)}", **kw)

    def list_node(self, **kw):
        return self.get("/api/v1/nodes", **kw)

    def read_node(self, name, **kw):
        return self.get(f"/api/v1/nodes/{_seg(name)}", **kw)

    def list_namespace(self, **kw):
        return self.get("/api/v1/namespaces", **kw)

    def read_namespaced_config_map(self, name, namespace, **kw):
        return self.get(f"/api/v1/namespaces/{_seg(namespace)}/configmaps/{_seg(name)}", **kw)

    # ------------------------------------------------------------ other groups
    def list_namespaced_endpoint_slice(self, namespace, **kw):
        return self.get(f"/apis/discovery.k8s.io/v1/namespaces/{_seg(namespace)}/endpointslices", **kw)

    def list_endpoint_slice_for_all_namespaces(self, **kw):
        return self.get("/apis/discovery.k8s.io/v1/endpointslices", **kw)

    def read_namespaced_daemon_set(self, name, namespace, **kw):
        return self.get(f"/apis/apps/v1/namespaces/{_seg(namespace)}/daemonsets/{_seg(name)}", **kw)

    def list_namespaced_daemon_set(self, namespace, **kw):
        return self.get(f"/apis/apps/v1/namespaces/{_seg(namespace)}/daemonsets", **kw)

    def list_namespaced_network_policy(self, namespace, **kw):
        return self.get(f"/apis/networking.k8s.io/v1/namespaces/{_seg(namespace)}/networkpolicies", **kw)

    def get_code(self, **kw):
        return self.get("/version/", **kw)
