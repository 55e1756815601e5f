"""Read-only Kubernetes API calls for raw JSON, through the official client's ApiClient.

kpdiag reads every object as raw JSON (``_preload_content=False``): it never needs the client's generated model
classes. Yet importing the generated API classes (CoreV1Api …) imports their models too — about 1.2 s of a
`kpdiag svc` run that is over in 2. :class:`ReadApi` offers the same method names and arguments for the GETs kpdiag
makes, and sends them through the same ApiClient: the kubeconfig's or the service account's credentials (bearer
tokens, exec plugins and their refresh, client certificates), TLS verification, proxies and timeouts, and the same
:class:`kubernetes.client.exceptions.ApiException` on a non-2xx answer. Writes (kpdiag cluster's pods) keep using
the generated classes.
"""

from __future__ import annotations

from urllib.parse import quote

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
}


def _seg(value: str) -> str:
    return quote(str(value), safe="")


class ReadApi:
    """GET requests by path, with the generated API classes' method names (those kpdiag uses) and calling convention:
    ``_preload_content=False`` returns the urllib3 response (``.data``, ``.read``), ``_request_timeout`` bounds the call."""

    def __init__(self, api_client):
        self.api_client = api_client

    def get(self, path: str, _request_timeout=None, _preload_content: bool = False, **query):
        params = []
        for key, value in query.items():
            if value is None:
                continue
            name = _QUERY.get(key)
            if name is None:
                raise TypeError(f"ReadApi: unknown query parameter {key!r}")
            params.append((name, ("true" if value else "false") if isinstance(value, bool) else value))
        api = self.api_client
        if hasattr(api, "param_serialize"):  # kubernetes >= 31: serialize (auth applied), then send
            from kubernetes.client.exceptions import ApiException

            method, url, headers, _body, _post = api.param_serialize(
                "GET", path, query_params=params, header_params=dict(_ACCEPT), auth_settings=["BearerToken"]
            )
            resp = api.call_api(method, url, header_params=headers, _request_timeout=_request_timeout)
            if not 200 <= resp.status <= 299:
                resp.read()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            return resp.response
        # older clients: one call that serializes, authenticates, sends and raises on a non-2xx answer
        return api.call_api(
            path,
            "GET",
            query_params=params,
            header_params=dict(_ACCEPT),
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
