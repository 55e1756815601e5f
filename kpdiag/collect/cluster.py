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
import threading
import time
from dataclasses import dataclass, field

from kpdiag import secrets
from kpdiag.parse.decode import load_json
from kpdiag.bundle import sources
from kpdiag.state.cluster import selector_matches

from .apierrors import api_reason
from .kubeconfig import api_client

API_TIMEOUT = 5.0  # seconds: the connect timeout and each wait for bytes of one call
CALL_SECONDS = 15.0  # seconds: one whole call — connect, headers and the whole body (docs/api-access.md)
SERVICE_LOOKUP = sources.SERVICE_LOOKUP


@dataclass
class ClusterData:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    api: str | None = None  # the server URL used


def _as_list(kind: str, items: list) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1).encode()


API_BUDGET = 60.0  # seconds for every API call of one command (svc, node, policy) together, credentials included


def api_budget() -> float:
    """The API budget of one command: $KPDIAG_API_BUDGET seconds (1 to 3600) when set, else API_BUDGET."""
    try:
        value = float(os.environ.get("KPDIAG_API_BUDGET") or API_BUDGET)
    except ValueError:
        return API_BUDGET
    return min(3600.0, max(1.0, value)) if value == value else API_BUDGET


def _retry_gets(api) -> None:
    """The reads of svc/node/policy retried by urllib3's own Retry (the library under the client), not by hand: a
    connection refused or reset before the request was sent, and a 429/502/503/504 answer — after its Retry-After, at
    most 2 s, or a short backoff — twice at most. Each call stays within its whole-call deadline (its worker is left
    behind at it), so no retry outlasts it. Set on the connection pools before the first request (the client sets
    ``configuration.retries`` to 0: kpdiag cluster retries its writes itself, within its own deadlines)."""
    from urllib3.util.retry import Retry

    api.rest_client.pool_manager.connection_pool_kw["retries"] = Retry(
        total=2,
        connect=2,
        read=0,
        other=0,
        redirect=0,
        status=2,
        status_forcelist=(429, 502, 503, 504),
        allowed_methods=frozenset({"GET"}),
        backoff_factor=0.2,
        retry_after_max=2,
        raise_on_status=False,
        raise_on_redirect=False,
    )


class ClusterCollector:
    """The API reads of one command, all within one wall-clock ``deadline`` (a monotonic time; by default ``budget``
    seconds from now): each call gets ``timeout`` (less when the deadline is nearer), its answer is read with a byte cap
    and checked for the shape kpdiag reads (kpdiag.state.cluster.object_problem) before anything uses it."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout: float = API_TIMEOUT,
        deadline: float | None = None,
        budget: float | None = None,
    ):
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout
        self.call_seconds = CALL_SECONDS
        self.budget = budget if budget is not None else api_budget()
        self._fixed = deadline is not None
        self.deadline = deadline if deadline is not None else time.monotonic() + self.budget
        self.out = ClusterData()
        self._api = None
        self.config_error: str | None = None
        self.service_status: int | None = None  # HTTP status of the Service GET (200, 404, 403 …); 0 = unreachable
        self.service_error: str | None = None
        self.context_namespace: str | None = None  # the kubeconfig context's namespace, when it sets one
        # one credential load and one GET of a Service however many threads ask (`kpdiag node --service` in IPVS
        # mode: the focused rules read needs the Service while service_view reads it ahead)
        self._once = threading.Lock()
        self._services: dict[tuple[str, str], dict | None] = {}

    def _err(self, source: str, error: str) -> None:
        self.out.errors.append({"source": source, "error": error})

    def connect(self) -> bool:
        """Load credentials: --kubeconfig / KUBECONFIG / ~/.kube/config, else in-cluster; False with a reason. Loaded
        once: a second call answers as the first did."""
        with self._once:
            if self._api is not None or self.config_error is not None:
                return self._api is not None
            return self._connect()

    def _connect(self) -> bool:
        if not self._fixed:  # the budget runs from when the client library is loaded (an import waits on no one)
            import kubernetes.client  # noqa: F401
            import kubernetes.config  # noqa: F401

            self.deadline = time.monotonic() + self.budget
            self._fixed = True
        found: dict = {}
        api, why = api_client(self.kubeconfig, self.context, deadline=self.deadline, found=found)
        self.context_namespace = found.get("namespace")
        if api is None:
            self.config_error = why
            self._err("cluster", why)
            return False
        self._api = api
        _retry_gets(api)
        self.out.api = secrets.shown_url(api.configuration.host)
        if not api.configuration.verify_ssl and str(api.configuration.host or "").lower().startswith("https"):
            self._err(
                sources.SERVICES,
                f"TLS verification is off for the API server {self.out.api} (insecure-skip-tls-verify in the "
                "kubeconfig): its certificate was not checked, yet kpdiag's credentials were sent to it — anyone on "
                "the path could have answered and kept them; set certificate-authority(-data) instead",
            )
        return True

    def _call_ends(self) -> float:
        """When a call started now must be over, whole: CALL_SECONDS from now, or the command's deadline if sooner. A
        per-read timeout alone does not bound a call: a server that sends one byte a second, or a chunked answer that
        stops before its last chunk, would hold each call until the command's budget was spent."""
        from .kubeapi import ApiDeadline

        left = self.deadline - time.monotonic()
        if left <= 0.05:
            raise ApiDeadline(f"the {self.budget:.0f} s given to the API were used up before this call")
        return time.monotonic() + min(left, self.call_seconds)

    def _timeouts(self, ends: float) -> tuple[float, float]:
        """The client's connect and per-read timeouts for a call that must be over at ``ends``: the per-read timeout,
        or a little past ``ends`` when that comes first — so the call's own deadline (:func:`kpdiag.collect.kubeapi.
        within`) always ends it, and says so, rather than a read timeout that races it to the same moment."""
        t = max(0.05, min(self.timeout, ends - time.monotonic() + 0.5))
        return (t, t)

    def _fetch(self, fn, args, kwargs):
        """One call for raw JSON, whole within its deadline (:meth:`_call_ends`): the body read in chunks (capped),
        then decoded (depth-bounded too: anyone who may create objects wrote them)."""
        from .kubeapi import read_body, within

        ends = self._call_ends()

        def go():
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeouts(ends), **kwargs)
            return load_json(read_body(resp, ends))

        return within(ends, go)

    def _call(self, source: str, what: str, fn, *args, kind: str | None = None, **kwargs):
        """Call an API method for raw JSON; None (with a recorded reason) on any failure. ``kind``: the answer must be a
        List of that kind (a dict whose ``items`` is a list; objects of the wrong shape are left out, each named) or,
        with "one:" before it, one such object."""
        try:
            doc = self._fetch(fn, args, kwargs)
        except Exception as exc:  # ApiException, urllib3 errors, JSON errors, a cap: all become a reason
            self._err(source, api_reason(exc, what, self.out.api))
            return None
        return self._shaped(source, what, doc, kind)

    def _shaped(self, source: str, what: str, doc, kind: str | None):
        from kpdiag.state.shapes import object_problem, read_list

        if kind is None:  # any JSON object
            if not isinstance(doc, dict):
                self._err(source, f"{what}: the API's answer is malformed: it is not an object")
                return None
            return doc
        if kind.startswith("one:"):
            bad = object_problem(doc, kind[4:])
            if bad:
                self._err(source, f"{what}: the API's answer is malformed: {bad}")
                return None
            return doc
        good, problems = read_list(doc, kind)
        if good is None:
            self._err(source, f"{what}: the API's answer is malformed: {problems[0]}")
            return None
        for line in problems:
            self._err(source, f"{what}: {line}")
        return dict(doc, items=good)

    def _get_service(self, api, namespace: str, name: str) -> dict | None:
        """The Service, GET once per collector (a second caller, in any thread, waits for the first one's answer)."""
        with self._once:
            if (namespace, name) not in self._services:
                self._services[(namespace, name)] = self._read_service(api, namespace, name)
            return self._services[(namespace, name)]

    def _read_service(self, api, namespace: str, name: str) -> dict | None:
        try:
            doc = self._fetch(api.read_namespaced_service, (name, namespace), {})
            self.service_status = 200
        except Exception as exc:
            self.service_status = int(getattr(exc, "status", 0) or 0)
            self.service_error = api_reason(exc, f"get service {namespace}/{name}", self.out.api)
            if self.service_status != 404:
                self._err(sources.SERVICES, self.service_error)
            return None
        doc = self._shaped(sources.SERVICES, f"get service {namespace}/{name}", doc, "one:Service")
        if doc is None:
            self.service_status = 0
            self.service_error = self.out.errors[-1]["error"]
        return doc

    def one_service(self, namespace: str, name: str) -> tuple[dict | None, str]:
        """The Service object alone (what a focused read of IPVS rules needs), or (None, why not)."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None, self.config_error or "no API credentials"
        doc = self._get_service(RawApi(self._api), namespace, name)
        if doc is None:
            return None, self.service_error or "no such Service"
        return doc, ""

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
            SERVICE_LOOKUP,
            f"list services in {namespace}",
            api.list_namespaced_service,
            namespace,
            limit=2000,
            kind="Service",
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
            kind="Service",
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
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None
        api = RawApi(self._api)
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
        self._service_slices(api, namespace, name)
        selector = ((svc or {}).get("spec") or {}).get("selector")
        if selector:
            label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods = self._call(
                sources.PODS,
                f"list pods in {namespace}",
                api.list_namespaced_pod,
                namespace,
                label_selector=label_selector,
                kind="Pod",
            )
            if pods is not None:
                items = pods.get("items", [])
                picked = [p for p in items if selector_matches(selector, p.get("metadata", {}).get("labels"))]
                # near misses help explain a selector that matches nothing: pods sharing at least one label
                if not picked:
                    everyone = self._call(
                        sources.PODS,
                        f"list pods in {namespace}",
                        api.list_namespaced_pod,
                        namespace,
                        limit=500,
                        kind="Pod",
                    )
                    items = (everyone or {}).get("items", [])
                    picked = [p for p in items if set((p.get("metadata", {}).get("labels") or {})) & set(selector)]
                self.out.files[sources.PODS] = _as_list("Pod", picked)
        node_name = node_name or os.environ.get("NODE_NAME") or os.environ.get("KUBERNETES_NODE_NAME")
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        cm = self._call(
            sources.KP_CONFIGMAP,
            "get configmap kube-system/kube-proxy",
            api.read_namespaced_config_map,
            "kube-proxy",
            "kube-system",
            kind="one:ConfigMap",
        )
        if cm is not None:
            self.out.files[sources.KP_CONFIGMAP] = json.dumps(cm, indent=1).encode()
        ds = self._call(
            sources.KP_DAEMONSET,
            "get daemonset kube-system/kube-proxy",
            api.read_namespaced_daemon_set,
            "kube-proxy",
            "kube-system",
            kind="one:DaemonSet",
        )
        if ds is not None:
            self.out.files[sources.KP_DAEMONSET] = json.dumps(ds, indent=1).encode()
        ver = self._call(sources.VERSION, "get /version", api.get_code, kind="one:Version")
        if ver is not None:
            self.out.files[sources.VERSION] = json.dumps(ver, indent=1).encode()
        return svc

    POD_BY_IP_LIMIT = 20

    def pods_with_ip(self, ip: str, namespace: str | None = None) -> tuple[list[dict] | None, int | None, str | None]:
        """The pods whose status.podIP is ``ip``, in all namespaces or in ``namespace`` (one list call, fieldSelector,
        at most POD_BY_IP_LIMIT): (pods, None, None), or (None, HTTP status or None, why) when the API refused or
        failed. Only pods that really carry the address are returned, whatever the server did with the selector."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None, None, self.config_error or "the Kubernetes API is not configured"
        where = f"namespace {namespace}" if namespace else "all namespaces"
        what = f"list pods in {where} with status.podIP={ip}"
        api = RawApi(self._api)
        call = (lambda **kw: api.list_namespaced_pod(namespace, **kw)) if namespace else api.list_pod_for_all_namespaces
        try:  # bounded like every read (deadline, body cap), then judged for shape
            doc = self._fetch(call, (), {"field_selector": f"status.podIP={ip}", "limit": self.POD_BY_IP_LIMIT})
        except Exception as exc:
            return None, int(getattr(exc, "status", 0) or 0) or None, api_reason(exc, what, self.out.api)
        from kpdiag.state.shapes import read_list

        items, problems = read_list(doc, "Pod")
        if items is None:
            return None, None, f"{what}: the API's answer is malformed: {problems[0]}"
        out = []
        for pod in items:
            status = pod.get("status") if isinstance(pod, dict) else None
            st: dict = status if isinstance(status, dict) else {}
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
        from .cni import collect_cni
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        nss = self._call(sources.NAMESPACES, "list namespaces", api.list_namespace, kind="Namespace")
        existing = None
        if nss is not None:
            items = nss.get("items", [])
            existing = {(n.get("metadata") or {}).get("name") for n in items}
            self.out.files[sources.NAMESPACES] = _as_list("Namespace", items)
        self._policies(api, sorted({n for n in namespaces if n} | ({"kube-system"} if dns else set())))
        collect_cni(self, api, existing)  # cluster/cni.json (kpdiag/collect/cni.py)
        if client_pod:
            self._client_pod(api, *client_pod)
        return True

    def _policies(self, api, wanted: list[str]) -> None:
        """The NetworkPolicies of the namespaces ``wanted`` → cluster/networkpolicies.json, only when every list
        answered."""
        policies, complete = [], True
        for ns in wanted:
            doc = self._call(
                sources.NETWORKPOLICIES,
                f"list networkpolicies in {ns}",
                api.list_namespaced_network_policy,
                ns,
                kind="NetworkPolicy",
            )
            if doc is None:
                complete = False  # the others are still asked: each failure is recorded
                continue
            policies += [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("namespace", ns) == ns]
        if complete:
            self.out.files[sources.NETWORKPOLICIES] = json.dumps(
                {"apiVersion": "v1", "kind": "List", "metadata": {"namespaces": wanted}, "items": policies}, indent=1
            ).encode()

    def _client_pod(self, api, ns: str, name: str) -> None:
        """The client pod ``ns/name`` (one list by fieldSelector, checked again) → cluster/client-pod.json."""
        doc = self._call(
            sources.CLIENT_POD,
            f"list pods in {ns}",
            api.list_namespaced_pod,
            ns,
            field_selector=f"metadata.name={name}",
            kind="Pod",
        )
        if doc is not None:
            mine = [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("name") == name]
            for p in mine:
                p.setdefault("kind", "Pod")
            self.out.files[sources.CLIENT_POD] = _as_list("Pod", mine)

    DNS_LOG_TAIL_LINES = 200
    DNS_LOG_LIMIT_BYTES = 64 * 1024
    DNS_LOG_PODS = 4

    def dns_objects(self) -> None:
        """The cluster DNS as the API shows it, in kube-system: the Service labelled k8s-app=kube-dns (else the one named
        kube-dns or coredns) → cluster/dns-service.json, its EndpointSlices → cluster/dns-endpointslices.json, the
        CoreDNS pods (k8s-app=kube-dns) → cluster/dns-pods.json (Lists), and the last 200 lines (at most 64 KiB) of
        the log of up to 4 of those pods — also the previous container's of a pod that restarted — as
        cluster/dns-logs.json: {"logs": [{"namespace", "pod", "container", "previous", "text" | "error", "truncated"}]}."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return
        ns, label = "kube-system", "k8s-app=kube-dns"
        api = RawApi(self._api)
        picked = self._dns_service(api, ns, label)
        if picked:
            self._service_slices(api, ns, picked[0]["metadata"]["name"], sources.DNS_ENDPOINTSLICES)
        pods = self._call(
            sources.DNS_PODS, "list pods in kube-system", api.list_namespaced_pod, ns, label_selector=label, kind="Pod"
        )
        if pods is None:
            return
        dns_pods = [
            p for p in pods.get("items", []) if (p.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        self.out.files[sources.DNS_PODS] = _as_list("Pod", dns_pods)
        logs = []
        for pod in dns_pods[: self.DNS_LOG_PODS]:
            logs += self._dns_pod_logs(api, ns, pod)
        self.out.files[sources.DNS_LOGS] = json.dumps({"logs": logs}, indent=1).encode()

    def _dns_service(self, api, ns: str, label: str) -> list[dict]:
        """The cluster DNS Service (by label, else by its usual names) → cluster/dns-service.json; [it] or []."""
        mark = len(self.out.errors)
        svcs = self._call(
            sources.DNS_SERVICE,
            "list services in kube-system",
            api.list_namespaced_service,
            ns,
            label_selector=label,
            kind="Service",
        )
        picked = [
            s
            for s in (svcs or {}).get("items", [])
            if (s.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        if not picked:  # unlabelled, or RBAC allows get but not list (deploy/rbac-svc.yaml): by its usual names
            for name in ("kube-dns", "coredns"):
                got = self._call(
                    sources.DNS_SERVICE,
                    f"get service kube-system/{name}",
                    api.read_namespaced_service,
                    name,
                    ns,
                    kind="one:Service",
                )
                if got is not None:
                    picked = [got]
                    del self.out.errors[mark:]  # found: the misses before are no failure
                    break
        if svcs is not None or picked:  # known: this Service, or (the list answered) none
            self.out.files[sources.DNS_SERVICE] = _as_list("Service", picked[:1])
        return picked

    def _dns_pod_logs(self, api, ns: str, pod: dict) -> list[dict]:
        """The log of one CoreDNS pod's container (and of the previous one when it restarted), each entry with its
        text or why not."""
        from .kubeapi import within

        pname = pod["metadata"]["name"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
        container = "coredns" if "coredns" in containers else (containers[0] if containers else None)
        restarted = any(s.get("name") == container and (s.get("restartCount") or 0) > 0 for s in statuses)
        logs = []
        for previous in (False, True) if restarted else (False,):
            entry = {"namespace": ns, "pod": pname, "container": container, "previous": previous}
            try:
                ends = self._call_ends()
                data = within(ends, self._log, api, pname, ns, container, previous, ends)
                entry["truncated"] = len(data) > self.DNS_LOG_LIMIT_BYTES
                lines = data[: self.DNS_LOG_LIMIT_BYTES].decode("utf-8", "replace").splitlines()
                entry["text"] = "\n".join(lines[-self.DNS_LOG_TAIL_LINES :])
            except Exception as exc:  # RBAC (pods/log), a container not started: a reason, the rest goes on
                entry["error"] = api_reason(
                    exc, f"get pods/log kube-system/{pname}{' (previous)' if previous else ''}", self.out.api
                )
            logs.append(entry)
        return logs

    def _log(self, api, pod: str, ns: str, container, previous: bool, ends: float) -> bytes:
        """At most DNS_LOG_LIMIT_BYTES + 1 bytes of a pod's log (the server is asked for the limit, and not trusted)."""
        from .kubeapi import read_body

        resp = api.read_namespaced_pod_log(
            pod,
            ns,
            container=container,
            tail_lines=self.DNS_LOG_TAIL_LINES,
            limit_bytes=self.DNS_LOG_LIMIT_BYTES,
            previous=previous or None,
            _preload_content=False,
            _request_timeout=self._timeouts(ends),
        )
        return read_body(resp, ends, limit=self.DNS_LOG_LIMIT_BYTES, truncate=True)

    def node_view(self, node_name: str | None, page: int = 500) -> bool:
        """What `kpdiag node` compares its rules with: every Service and EndpointSlice (paged lists, raw JSON) and this
        node's Node object (its zone). False, with a recorded reason, when the API cannot be used."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        services = self._paged(
            sources.SERVICES, "list services in all namespaces", api.list_service_for_all_namespaces, page, "Service"
        )
        if services is None:
            return False
        self.out.files[sources.SERVICES] = _as_list("Service", services)
        slices = self._paged(
            sources.ENDPOINTSLICES,
            "list endpointslices in all namespaces",
            api.list_endpoint_slice_for_all_namespaces,
            page,
            "EndpointSlice",
        )
        if slices is not None:
            self.out.files[sources.ENDPOINTSLICES] = _as_list("EndpointSlice", slices)
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        return True

    # what a focused `kpdiag node --service` holds of the API (the manifest's partial "holds"), by source
    SERVICE_VIEW_HOLDS = {
        sources.SERVICES: "only {svc} (get service): not every Service of the cluster",
        sources.ENDPOINTSLICES: "only {svc}'s EndpointSlices (list endpointslices in {ns}, labelSelector "
        "kubernetes.io/service-name={name})",
    }

    def service_view(self, namespace: str, name: str, node_name: str | None) -> bool:
        """What `kpdiag node --service NS/NAME` compares that Service's rules with: the Service (one GET), its
        EndpointSlices (one list in its namespace by label) and this node's Node object (its zone) — never the whole
        cluster's lists. A Service the API does not have is looked up by name (kpdiag svc's KP110 lookup: the
        namespace's Service names, the same name elsewhere). False, with a recorded reason, when the API cannot be
        used."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        svc = self._get_service(api, namespace, name)
        if svc is None and self.service_status != 404:
            return False
        self.out.files[sources.SERVICES] = _as_list("Service", [svc] if svc is not None else [])
        if svc is None:
            self._lookup(api, namespace, name)
        else:
            self.out.files[SERVICE_LOOKUP] = json.dumps(
                {"namespace": namespace, "name": name, "found": True, "status": 200}, indent=1
            ).encode()
        self._service_slices(api, namespace, name)
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        return True

    def _service_slices(self, api, namespace: str, name: str, source: str = sources.ENDPOINTSLICES) -> None:
        """The Service's EndpointSlices (listed by the label ``kubernetes.io/service-name``) → ``source``
        (cluster/endpointslices.json; the DNS Service's: cluster/dns-endpointslices.json); what the server sent is
        checked again: kpdiag never trusts a server's filtering."""
        slices = self._call(
            source,
            f"list endpointslices in {namespace}",
            api.list_namespaced_endpoint_slice,
            namespace,
            label_selector=f"kubernetes.io/service-name={name}",
            kind="EndpointSlice",
        )
        if slices is not None:
            mine = [
                s
                for s in slices.get("items", [])
                if (s.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name") == name
            ]
            self.out.files[source] = _as_list("EndpointSlice", mine)

    def _paged(self, source: str, what: str, fn, page: int, kind: str | None = None) -> list | None:
        """Every object of a paged List, or None (with the reason recorded) — never part of it: an incomplete list of
        Services would make every Service it left out look missing. Capped in pages and objects (kpdiag.collect.
        kubeapi.MAX_PAGES, MAX_OBJECTS), and a continue token that comes back is a loop."""
        from .kubeapi import MAX_OBJECTS, MAX_PAGES

        items: list = []
        token, seen = None, set()
        for pages in range(1, MAX_PAGES + 1):
            kwargs = {"limit": page}
            if token:
                kwargs["_continue"] = token
            doc = self._call(source, what, fn, kind=kind, **kwargs)
            if doc is None:
                return None
            items.extend(doc["items"])
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return items
            if len(items) > MAX_OBJECTS:
                self._err(
                    source,
                    f"{what}: more than {MAX_OBJECTS} objects (kpdiag's cap on one list): stopped after {pages} pages, "
                    "not used (an incomplete list would be read as missing objects)",
                )
                return None
            if token in seen:
                self._err(
                    source,
                    f"{what}: the API server sent the same continue token again after {pages} pages (a paging loop): "
                    "stopped, not used",
                )
                return None
            seen.add(token)
        self._err(
            source,
            f"{what}: still more after {MAX_PAGES} pages of {page} (kpdiag's cap on pages of one list): stopped, not used",
        )
        return None
