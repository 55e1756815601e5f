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

from kpdiag.bundle.safeio import load_json
from kpdiag.bundle import sources

API_TIMEOUT = 5.0
SERVICE_LOOKUP = sources.SERVICE_LOOKUP


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
    if (
        "Max retries" in text
        or "Connection refused" in text
        or "timed out" in text.lower()
        or "NewConnectionError" in text
    ):
        return f"{what}: the API server {server or ''} is unreachable ({text[:160]})"
    return f"{what}: {exc.__class__.__name__}: {text[:200]}"


def api_client(kubeconfig: str | None = None, context: str | None = None):
    """(ApiClient, None) from --kubeconfig / $KUBECONFIG / ~/.kube/config, else in-cluster; (None, why) when none works."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path or os.path.exists(os.path.expanduser("~/.kube/config")):
            bad = _kubeconfig_problem(path or os.path.expanduser("~/.kube/config"))
            if bad:
                return None, bad
            configuration = client.Configuration()
            config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
        # no retries inside the client: urllib3 takes them when the ApiClient builds its connection pool (set on the
        # client afterwards they are ignored, and every timeout is tried 4 times); kpdiag retries what it means to
        # retry, within its own deadlines
        configuration.retries = 0
        api = client.ApiClient(configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        text = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
        return None, (
            f"no usable Kubernetes credentials ({text}): give --kubeconfig, or run in a pod with a service account"
        )
    return api, None


KUBECONFIG_MAX = 4 << 20


def _kubeconfig_problem(path: str) -> str | None:
    """Why ``path`` is not a usable kubeconfig, in one line — before the client library fails on it with an unreadable
    error (a file that is not YAML, a list, /etc/passwd …); None when it looks like one."""
    import yaml

    for one in path.split(os.pathsep):
        if not one:
            continue
        try:
            with open(one, "rb") as fh:
                data = fh.read(KUBECONFIG_MAX + 1)
        except OSError as exc:
            return f"kubeconfig {one}: cannot read it ({exc.strerror or exc})"
        if len(data) > KUBECONFIG_MAX:
            return f"kubeconfig {one}: larger than {KUBECONFIG_MAX >> 20} MiB, not a kubeconfig"
        try:
            from kpdiag.bundle.safeio import load_yaml

            doc = load_yaml(data)  # depth- and alias-bounded
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            where = getattr(exc, "problem_mark", None)
            return f"kubeconfig {one}: not valid YAML" + (f" (line {where.line + 1})" if where is not None else "")
        if not isinstance(doc, dict) or not any(k in doc for k in ("clusters", "contexts", "users", "current-context")):
            return (
                f"kubeconfig {one}: not a kubeconfig (expected a YAML mapping with clusters, contexts and users; "
                f"found {type(doc).__name__ if doc is not None else 'an empty file'})"
            )
    return None


class ClusterCollector:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout: float = API_TIMEOUT):
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout
        self.out = ClusterData()
        self._api = None
        self.config_error: str | None = None
        self.service_status: int | None = None  # HTTP status of the Service GET (200, 404, 403 …); 0 = unreachable
        self.service_error: str | None = None

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
            return load_json(resp.data)  # API objects are written by anyone who may create them: depth-bounded
        except Exception as exc:  # ApiException, urllib3 errors, JSON errors: all become a reason
            self._err(source, api_reason(exc, what, self.out.api))
            return None

    def _get_service(self, api, namespace: str, name: str) -> dict | None:
        try:
            resp = api.read_namespaced_service(name, namespace, _preload_content=False, _request_timeout=self.timeout)
            doc = load_json(resp.data)
            self.service_status = 200
            return doc
        except Exception as exc:
            self.service_status = int(getattr(exc, "status", 0) or 0)
            self.service_error = api_reason(exc, f"get service {namespace}/{name}", self.out.api)
            if self.service_status != 404:
                self._err(sources.SERVICES, self.service_error)
            return None

    def _lookup(self, api, namespace: str, name: str) -> None:
        """The Service is not there: which names are (nearest in the namespace, the same name elsewhere) —
        cluster/service-lookup.json, read by KP110."""
        doc = {
            "namespace": namespace,
            "name": name,
            "found": False,
            "status": 404,
            "listed": False,
            "names_in_namespace": [],
            "same_name_in": [],
        }
        listed = self._call(
            SERVICE_LOOKUP, f"list services in {namespace}", api.list_namespaced_service, namespace, limit=2000
        )
        if listed is not None:
            doc["listed"] = True
            doc["names_in_namespace"] = sorted(
                {str((i.get("metadata") or {}).get("name")) for i in listed.get("items") or [] if isinstance(i, dict)}
            )
        elsewhere = self._call(
            SERVICE_LOOKUP,
            "list services in all namespaces",
            api.list_service_for_all_namespaces,
            field_selector=f"metadata.name={name}",
            limit=200,
        )
        if elsewhere is not None:
            doc["same_name_in"] = sorted(
                {
                    str((i.get("metadata") or {}).get("namespace"))
                    for i in elsewhere.get("items") or []
                    if isinstance(i, dict)
                    and (i.get("metadata") or {}).get("name") == name
                    and (i.get("metadata") or {}).get("namespace") != namespace
                }
            )
        self.out.files[SERVICE_LOOKUP] = json.dumps(doc, indent=1).encode()

    def service(self, namespace: str, name: str, node_name: str | None = None) -> dict | None:
        from .kubeapi import ReadApi

        if self._api is None and not self.connect():
            return None
        api = ReadApi(self._api)
        svc = self._get_service(api, namespace, name)
        if svc is not None:
            self.out.files[sources.SERVICES] = _as_list("Service", [svc])
            self.out.files[SERVICE_LOOKUP] = json.dumps(
                {"namespace": namespace, "name": name, "found": True, "status": 200}, indent=1
            ).encode()
        elif self.service_status == 404:
            self._lookup(api, namespace, name)
            return None
        else:
            return None  # the API cannot be used: no point in asking it more
        slices = self._call(
            sources.ENDPOINTSLICES,
            f"list endpointslices in {namespace}",
            api.list_namespaced_endpoint_slice,
            namespace,
            label_selector=f"kubernetes.io/service-name={name}",
        )
        if slices is not None:
            mine = [
                s
                for s in slices.get("items", [])
                if (s.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name") == name
            ]
            self.out.files[sources.ENDPOINTSLICES] = _as_list("EndpointSlice", mine)
        selector = ((svc or {}).get("spec") or {}).get("selector")
        if selector:
            label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods = self._call(
                sources.PODS,
                f"list pods in {namespace}",
                api.list_namespaced_pod,
                namespace,
                label_selector=label_selector,
            )
            if pods is not None:
                items = pods.get("items", [])
                picked = [p for p in items if selector_matches(selector, p.get("metadata", {}).get("labels"))]
                # near misses help explain a selector that matches nothing: pods sharing at least one label
                if not picked:
                    everyone = self._call(
                        sources.PODS, f"list pods in {namespace}", api.list_namespaced_pod, namespace, limit=500
                    )
                    items = (everyone or {}).get("items", [])
                    picked = [p for p in items if set((p.get("metadata", {}).get("labels") or {})) & set(selector)]
                self.out.files[sources.PODS] = _as_list("Pod", picked)
        node_name = node_name or os.environ.get("NODE_NAME") or os.environ.get("KUBERNETES_NODE_NAME")
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name)
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        cm = self._call(
            sources.KP_CONFIGMAP,
            "get configmap kube-system/kube-proxy",
            api.read_namespaced_config_map,
            "kube-proxy",
            "kube-system",
        )
        if cm is not None:
            self.out.files[sources.KP_CONFIGMAP] = json.dumps(cm, indent=1).encode()
        ds = self._call(
            sources.KP_DAEMONSET,
            "get daemonset kube-system/kube-proxy",
            api.read_namespaced_daemon_set,
            "kube-proxy",
            "kube-system",
        )
        if ds is not None:
            self.out.files[sources.KP_DAEMONSET] = json.dumps(ds, indent=1).encode()
        ver = self._call(sources.VERSION, "get /version", api.get_code)
        if ver is not None:
            self.out.files[sources.VERSION] = json.dumps(ver, indent=1).encode()
        return svc

    POD_BY_IP_LIMIT = 20

    def pods_with_ip(self, ip: str, namespace: str | None = None) -> tuple[list[dict] | None, int | None, str | None]:
        """The pods whose status.podIP is ``ip``, in all namespaces or in ``namespace`` (one list call, fieldSelector,
        at most POD_BY_IP_LIMIT): (pods, None, None), or (None, HTTP status or None, why) when the API refused or
        failed. Only pods that really carry the address are returned, whatever the server did with the selector."""
        from .kubeapi import ReadApi

        if self._api is None and not self.connect():
            return None, None, self.config_error or "the Kubernetes API is not configured"
        where = f"namespace {namespace}" if namespace else "all namespaces"
        what = f"list pods in {where} with status.podIP={ip}"
        api = ReadApi(self._api)
        call = (lambda **kw: api.list_namespaced_pod(namespace, **kw)) if namespace else api.list_pod_for_all_namespaces
        try:
            resp = call(
                field_selector=f"status.podIP={ip}",
                limit=self.POD_BY_IP_LIMIT,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
            doc = load_json(resp.data)
        except Exception as exc:
            return None, int(getattr(exc, "status", 0) or 0) or None, api_reason(exc, what, self.out.api)
        items = doc.get("items") if isinstance(doc, dict) else None
        out = []
        for pod in items if isinstance(items, list) else []:
            st = pod.get("status") if isinstance(pod, dict) and isinstance(pod.get("status"), dict) else {}
            ips = {p.get("ip") for p in st.get("podIPs") or [] if isinstance(p, dict)} | {st.get("podIP")}
            if ip in ips and st.get("phase") not in ("Succeeded", "Failed"):
                pod.setdefault("kind", "Pod")
                out.append(pod)
        return out, None, None

    def policy_objects(self, namespaces, client_pod: tuple[str, str] | None = None, dns: bool = True) -> bool:
        """What NetworkPolicy evaluation needs, for the ``namespaces`` given (the Service's, the client's):

        - ``cluster/namespaces.json``: every namespace (their labels, for namespaceSelector);
        - ``cluster/networkpolicies.json``: the NetworkPolicies of those namespaces (and kube-system with ``dns``);
          its List metadata ``namespaces`` says which were listed — only written when every list succeeded, so a
          namespace whose policies could not be read is never taken as one without policies;
        - ``cluster/cni.json``: the DaemonSets of kube-system (and up to 20 pods of the kube-flannel and calico-system
          namespaces when they exist) reduced to names, owners, images and two flags (kpdiag.state.netpol.component), to
          tell whether the CNI enforces NetworkPolicy;
        - ``cluster/client-pod.json``: the client pod ``(namespace, name)`` when given.
        With ``dns``, kube-system's policies are listed too (they may stop the client's DNS at the CoreDNS pods); the
        DNS Service and pods themselves come from :meth:`dns_objects` (cluster/dns-service.json, dns-pods.json).
        Every failure is a recorded reason; False when nothing could be asked."""
        from .kubeapi import ReadApi

        from kpdiag.state.netpol import component

        if self._api is None and not self.connect():
            return False
        api = ReadApi(self._api)
        nss = self._call(sources.NAMESPACES, "list namespaces", api.list_namespace)
        existing = None
        if nss is not None:
            items = nss.get("items", [])
            existing = {(n.get("metadata") or {}).get("name") for n in items}
            self.out.files[sources.NAMESPACES] = _as_list("Namespace", items)
        wanted = sorted({n for n in namespaces if n} | ({"kube-system"} if dns else set()))
        policies, complete = [], True
        for ns in wanted:
            doc = self._call(
                sources.NETWORKPOLICIES, f"list networkpolicies in {ns}", api.list_namespaced_network_policy, ns
            )
            if doc is None:
                complete = False
                continue
            policies += [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("namespace", ns) == ns]
        if complete:
            self.out.files[sources.NETWORKPOLICIES] = json.dumps(
                {"apiVersion": "v1", "kind": "List", "metadata": {"namespaces": wanted}, "items": policies}, indent=1
            ).encode()
        comps, listed = [], []
        ds = self._call(sources.CNI, "list daemonsets in kube-system", api.list_namespaced_daemon_set, "kube-system")
        if ds is not None:
            listed.append("kube-system")
            for item in ds.get("items", []):
                c = component(dict(item, kind="DaemonSet"))
                if c:
                    comps.append(c)
        # flannel's and the Calico operator's own namespaces: a few of their pods tell which DaemonSet runs there
        for ns in ("kube-flannel", "calico-system"):
            if existing is not None and ns not in existing:
                continue
            doc = self._call(sources.CNI, f"list pods in {ns}", api.list_namespaced_pod, ns, limit=20)
            if doc is None:
                continue
            listed.append(ns)
            for item in doc.get("items", []):
                c = component(dict(item, kind="Pod"))
                if c:
                    comps.append(c)
        if "kube-system" in listed:
            self.out.files[sources.CNI] = json.dumps(
                {"apiVersion": "kpdiag/v1", "kind": "CNIComponents", "namespaces": listed, "items": comps}, indent=1
            ).encode()
        if client_pod:
            ns, name = client_pod
            doc = self._call(
                sources.CLIENT_POD,
                f"list pods in {ns}",
                api.list_namespaced_pod,
                ns,
                field_selector=f"metadata.name={name}",
            )
            if doc is not None:
                mine = [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("name") == name]
                for p in mine:
                    p.setdefault("kind", "Pod")
                self.out.files[sources.CLIENT_POD] = _as_list("Pod", mine)
        return True

    DNS_LOG_TAIL_LINES = 200
    DNS_LOG_LIMIT_BYTES = 64 * 1024
    DNS_LOG_PODS = 4

    def dns_objects(self) -> None:
        """The cluster DNS as the API shows it, in kube-system: the Service labelled k8s-app=kube-dns (else the one named
        kube-dns or coredns) → cluster/dns-service.json, its EndpointSlices → cluster/dns-endpointslices.json, the
        CoreDNS pods (k8s-app=kube-dns) → cluster/dns-pods.json (Lists), and the last 200 lines (at most 64 KiB) of
        the log of up to 4 of those pods — also the previous container's of a pod that restarted — as
        cluster/dns-logs.json: {"logs": [{"namespace", "pod", "container", "previous", "text" | "error", "truncated"}]}."""
        from .kubeapi import ReadApi

        if self._api is None and not self.connect():
            return
        ns, label = "kube-system", "k8s-app=kube-dns"
        api = ReadApi(self._api)
        mark = len(self.out.errors)
        svcs = self._call(
            sources.DNS_SERVICE, "list services in kube-system", api.list_namespaced_service, ns, label_selector=label
        )
        picked = [
            s
            for s in (svcs or {}).get("items", [])
            if (s.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        if not picked:  # unlabelled, or RBAC allows get but not list (deploy/rbac-svc.yaml): by its usual names
            for name in ("kube-dns", "coredns"):
                got = self._call(
                    sources.DNS_SERVICE, f"get service kube-system/{name}", api.read_namespaced_service, name, ns
                )
                if got is not None:
                    picked = [got]
                    del self.out.errors[mark:]  # found: the misses before are no failure
                    break
        if svcs is not None or picked:  # known: this Service, or (the list answered) none
            self.out.files[sources.DNS_SERVICE] = _as_list("Service", picked[:1])
        if picked:
            name = picked[0]["metadata"]["name"]
            slices = self._call(
                sources.DNS_ENDPOINTSLICES,
                "list endpointslices in kube-system",
                api.list_namespaced_endpoint_slice,
                ns,
                label_selector=f"kubernetes.io/service-name={name}",
            )
            if slices is not None:
                mine = [
                    s
                    for s in slices.get("items", [])
                    if (s.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name") == name
                ]
                self.out.files[sources.DNS_ENDPOINTSLICES] = _as_list("EndpointSlice", mine)
        pods = self._call(
            sources.DNS_PODS, "list pods in kube-system", api.list_namespaced_pod, ns, label_selector=label
        )
        if pods is None:
            return
        dns_pods = [
            p for p in pods.get("items", []) if (p.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        self.out.files[sources.DNS_PODS] = _as_list("Pod", dns_pods)
        logs = []
        for pod in dns_pods[: self.DNS_LOG_PODS]:
            pname = pod["metadata"]["name"]
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
            container = "coredns" if "coredns" in containers else (containers[0] if containers else None)
            restarted = any(s.get("name") == container and (s.get("restartCount") or 0) > 0 for s in statuses)
            for previous in (False, True) if restarted else (False,):
                entry = {"namespace": ns, "pod": pname, "container": container, "previous": previous}
                try:
                    resp = api.read_namespaced_pod_log(
                        pname,
                        ns,
                        container=container,
                        tail_lines=self.DNS_LOG_TAIL_LINES,
                        limit_bytes=self.DNS_LOG_LIMIT_BYTES,
                        previous=previous or None,
                        _preload_content=False,
                        _request_timeout=self.timeout,
                    )
                    data = resp.read(self.DNS_LOG_LIMIT_BYTES + 1) if hasattr(resp, "read") else resp.data
                    if hasattr(resp, "release_conn"):
                        resp.release_conn()
                    entry["truncated"] = len(data) > self.DNS_LOG_LIMIT_BYTES
                    lines = data[: self.DNS_LOG_LIMIT_BYTES].decode("utf-8", "replace").splitlines()
                    entry["text"] = "\n".join(lines[-self.DNS_LOG_TAIL_LINES :])
                except Exception as exc:  # RBAC (pods/log), a container not started: a reason, the rest goes on
                    entry["error"] = api_reason(
                        exc, f"get pods/log kube-system/{pname}{' (previous)' if previous else ''}", self.out.api
                    )
                logs.append(entry)
        self.out.files[sources.DNS_LOGS] = json.dumps({"logs": logs}, indent=1).encode()

    def node_view(self, node_name: str | None, page: int = 500) -> bool:
        """What `kpdiag node` compares its rules with: every Service and EndpointSlice (paged lists, raw JSON) and this
        node's Node object (its zone). False, with a recorded reason, when the API cannot be used."""
        from .kubeapi import ReadApi

        if self._api is None and not self.connect():
            return False
        api = ReadApi(self._api)
        services = self._paged(
            sources.SERVICES, "list services in all namespaces", api.list_service_for_all_namespaces, page
        )
        if services is None:
            return False
        self.out.files[sources.SERVICES] = _as_list("Service", services)
        slices = self._paged(
            sources.ENDPOINTSLICES,
            "list endpointslices in all namespaces",
            api.list_endpoint_slice_for_all_namespaces,
            page,
        )
        if slices is not None:
            self.out.files[sources.ENDPOINTSLICES] = _as_list("EndpointSlice", slices)
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name)
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        return True

    def _paged(self, source: str, what: str, fn, page: int, max_items: int = 200_000) -> list | None:
        items: list = []
        token = None
        while True:
            kwargs = {"limit": page}
            if token:
                kwargs["_continue"] = token
            doc = self._call(source, what, fn, **kwargs)
            if doc is None:
                return None
            items.extend(i for i in doc.get("items") or [] if isinstance(i, dict))
            token = (doc.get("metadata") or {}).get("continue")
            if not token or len(items) >= max_items:
                return items


def this_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()
