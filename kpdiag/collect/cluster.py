"""Read what one Service needs from the Kubernetes API, through the official client.

Only that Service, its EndpointSlices, the pods its selector picks, the node kpdiag runs on,
kube-proxy's ConfigMap and DaemonSet, and the server version — never every object of a big
cluster. Each object is kept as the API's own JSON and written in the bundle's ``cluster/``
files as a v1 List (what ``kubectl get … -o json`` prints). Every failure (no credentials,
RBAC denied, API unreachable, not found) is a recorded reason, and the rest goes on.

Label selectors are sent to the server *and* re-checked here: kpdiag never trusts a server's
filtering (some servers and proxies ignore ``labelSelector``).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field

API_TIMEOUT = 5.0


@dataclass
class ClusterData:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    api: str | None = None  # the server URL used


def selector_matches(selector: dict | None, labels: dict | None) -> bool:
    """A Service selector (equality only) against a pod's labels; an empty selector matches nothing."""
    if not selector:
        return False
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _as_list(kind: str, items: list) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1).encode()


def api_reason(exc: Exception, what: str, server: str | None) -> str:
    """One line that says why an API call failed, and what to do."""
    status = getattr(exc, "status", None)
    if status == 401:
        return f"{what}: 401 Unauthorized — the credentials in the kubeconfig / service account are not accepted"
    if status == 403:
        return f"{what}: 403 Forbidden — RBAC does not allow it (apply deploy/rbac-svc.yaml, or: kubectl auth can-i get {what.split()[1] if ' ' in what else what})"
    if status == 404:
        return f"{what}: 404 Not Found"
    if status is not None and status != 0:
        body = getattr(exc, "reason", "") or ""
        return f"{what}: HTTP {status} {body}".strip()
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    if "Max retries" in text or "Connection refused" in text or "timed out" in text.lower() or "NewConnectionError" in text:
        return f"{what}: the API server {server or ''} is unreachable ({text[:160]})"
    return f"{what}: {exc.__class__.__name__}: {text[:200]}"


def api_client(kubeconfig: str | None = None, context: str | None = None):
    """(ApiClient, None) from --kubeconfig / $KUBECONFIG / ~/.kube/config, else in-cluster; (None, why) when none works."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path or os.path.exists(os.path.expanduser("~/.kube/config")):
            api = config.new_client_from_config(config_file=path, context=context)
        else:
            config.load_incluster_config()
            api = client.ApiClient()
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        return None, (f"no usable Kubernetes credentials ({str(exc).splitlines()[0][:200]}): give --kubeconfig, "
                      "or run in a pod with a service account")
    api.configuration.retries = 0
    return api, None


class ClusterCollector:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout: float = API_TIMEOUT):
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout
        self.out = ClusterData()
        self._api = None
        self.config_error: str | None = None

    def _err(self, source: str, error: str) -> None:
        self.out.errors.append({"source": source, "error": error})

    def connect(self) -> bool:
        """Load credentials: --kubeconfig / KUBECONFIG / ~/.kube/config, else in-cluster; False with a reason."""
        api, why = api_client(self.kubeconfig, self.context)
        if api is None:
            self.config_error = why
            self._err("cluster", why)
            return False
        self._api = api
        self.out.api = api.configuration.host
        return True

    def _call(self, source: str, what: str, fn, *args, **kwargs):
        """Call an API method for raw JSON; None (with a recorded reason) on any failure."""
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            return json.loads(resp.data)
        except Exception as exc:  # ApiException, urllib3 errors, JSON errors: all become a reason
            self._err(source, api_reason(exc, what, self.out.api))
            return None

    def service(self, namespace: str, name: str, node_name: str | None = None) -> dict | None:
        from kubernetes import client

        if self._api is None and not self.connect():
            return None
        core = client.CoreV1Api(self._api)
        disc = client.DiscoveryV1Api(self._api)
        svc = self._call("cluster/services.json", f"get service {namespace}/{name}", core.read_namespaced_service, name, namespace)
        if svc is not None:
            self.out.files["cluster/services.json"] = _as_list("Service", [svc])
        slices = self._call("cluster/endpointslices.json", f"list endpointslices in {namespace}", disc.list_namespaced_endpoint_slice,
                            namespace, label_selector=f"kubernetes.io/service-name={name}")
        if slices is not None:
            mine = [s for s in slices.get("items", []) if (s.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name") == name]
            self.out.files["cluster/endpointslices.json"] = _as_list("EndpointSlice", mine)
        selector = ((svc or {}).get("spec") or {}).get("selector")
        if selector:
            label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods = self._call("cluster/pods.json", f"list pods in {namespace}", core.list_namespaced_pod, namespace, label_selector=label_selector)
            if pods is not None:
                items = pods.get("items", [])
                picked = [p for p in items if selector_matches(selector, p.get("metadata", {}).get("labels"))]
                # near misses help explain a selector that matches nothing: pods sharing at least one label
                if not picked:
                    everyone = self._call("cluster/pods.json", f"list pods in {namespace}", core.list_namespaced_pod, namespace, limit=500)
                    items = (everyone or {}).get("items", [])
                    picked = [p for p in items if set((p.get("metadata", {}).get("labels") or {})) & set(selector)]
                self.out.files["cluster/pods.json"] = _as_list("Pod", picked)
        node_name = node_name or os.environ.get("NODE_NAME") or os.environ.get("KUBERNETES_NODE_NAME")
        if node_name:
            node = self._call("cluster/nodes.json", f"get node {node_name}", core.read_node, node_name)
            if node is not None:
                self.out.files["cluster/nodes.json"] = _as_list("Node", [node])
        cm = self._call("cluster/kube-proxy-configmap.json", "get configmap kube-system/kube-proxy", core.read_namespaced_config_map, "kube-proxy", "kube-system")
        if cm is not None:
            self.out.files["cluster/kube-proxy-configmap.json"] = json.dumps(cm, indent=1).encode()
        apps = client.AppsV1Api(self._api)
        ds = self._call("cluster/kube-proxy-daemonset.json", "get daemonset kube-system/kube-proxy", apps.read_namespaced_daemon_set, "kube-proxy", "kube-system")
        if ds is not None:
            self.out.files["cluster/kube-proxy-daemonset.json"] = json.dumps(ds, indent=1).encode()
        ver = self._call("cluster/version.json", "get /version", client.VersionApi(self._api).get_code)
        if ver is not None:
            self.out.files["cluster/version.json"] = json.dumps(ver, indent=1).encode()
        return svc


def this_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()
