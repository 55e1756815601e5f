"""The API side of a bundle: Services, EndpointSlices, pods, nodes — as small typed views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING

from kpdiag.bundle import sources

if TYPE_CHECKING:
    import ipaddress

    from kpdiag.bundle.store import Bundle
    from kpdiag.state.policy import PolicyData


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, Any] | None) -> bool:
    """A Service selector (equality only) against a pod's labels; an empty selector matches nothing."""
    if not selector:
        return False
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass
class Endpoint:
    ip: str
    ready: bool
    serving: bool
    terminating: bool
    node: str | None
    pod: str | None
    ports: dict[str, tuple[int | None, str]]  # slice port name → (port, protocol); a slice port may omit its number
    slice_name: str
    zone_hints: frozenset[str] = frozenset()  # hints.forZones[].name (topology-aware routing / trafficDistribution)
    node_hints: frozenset[str] = frozenset()  # hints.forNodes[].name (trafficDistribution: PreferSameNode)
    zone: str | None = None

    @property
    def serving_terminating(self) -> bool:
        return self.serving and self.terminating


@dataclass
class Svc:
    namespace: str
    name: str
    raw: dict[str, Any]
    endpoints: list[Endpoint] = field(default_factory=list)
    slices_seen: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def spec(self) -> dict[str, Any]:
        return self.raw.get("spec") or {}

    @property
    def type(self) -> str:
        return self.spec.get("type") or "ClusterIP"

    @property
    def cluster_ips(self) -> list[str]:
        ips = self.spec.get("clusterIPs") or [self.spec.get("clusterIP")]
        return [ip for ip in ips if ip and ip != "None"]

    @property
    def headless(self) -> bool:
        return self.spec.get("clusterIP") == "None"

    @property
    def ports(self) -> list[dict[str, Any]]:
        return self.spec.get("ports") or []

    @property
    def selector(self) -> dict[str, Any]:
        return self.spec.get("selector") or {}

    @property
    def etp_local(self) -> bool:
        return self.spec.get("externalTrafficPolicy") == "Local" and self.type in ("NodePort", "LoadBalancer")

    @property
    def itp_local(self) -> bool:
        return self.spec.get("internalTrafficPolicy") == "Local"

    def port_name(self, port: dict[str, Any]) -> str:
        return (
            f"{self.key}:{port.get('name') or ''}".rstrip(":") if port.get("name") else f"{self.key}:{port.get('port')}"
        )

    def kube_proxy_name(self, port: dict[str, Any]) -> str:
        """The name kube-proxy uses in its rule comments (its ServicePortName): ns/svc:portname, and plain ns/svc
        for a port without a name (kube-proxy adds ":name" only when the name is set)."""
        return f"{self.key}:{port['name']}" if port.get("name") else self.key

    def endpoints_for(self, port: dict[str, Any], family: int | None = None) -> list[Endpoint]:
        """The endpoints serving ``port``; with ``family`` (4 or 6) only those of that IP version — a dual-stack
        Service has an EndpointSlice per family, and kube-proxy programs each family's rules from its own."""
        name = port.get("name") or ""
        eps = [e for e in self.endpoints if name in e.ports]
        if family is not None:
            eps = [e for e in eps if _family(e.ip) == family]
        return eps

    def target_of(self, endpoint: Endpoint, port: dict[str, Any]) -> int | None:
        name = port.get("name") or ""
        if name in endpoint.ports:
            return endpoint.ports[name][0]
        if endpoint.ports:
            return next(iter(endpoint.ports.values()))[0]
        return None


_ANY_NAMESPACE = object()  # an EndpointSlice whose metadata has no namespace


def _hint_names(ep: dict[str, Any], key: str) -> frozenset[str]:
    hints = ep["hints"] if isinstance(ep.get("hints"), dict) else {}
    return frozenset(h["name"] for h in hints.get(key) or [] if isinstance(h, dict) and isinstance(h.get("name"), str))


@dataclass
class Usable:
    """The endpoints kube-proxy on one node uses for one Service port — what it really programs.

    kube-proxy's rule (its topology code, KEP-1669 for terminating endpoints): *cluster* endpoints are the ready ones,
    narrowed by topology hints when every ready endpoint carries a hint and one is for this node (same node) or its zone;
    when none is ready anywhere it falls back to the serving-and-terminating ones. *Local* endpoints (a Local traffic
    policy) are this node's ready ones, else this node's serving-and-terminating ones. ``None`` in a field: it cannot be
    told from the data (node name or zone unknown)."""

    cluster: list[Endpoint] | None
    local: list[Endpoint] | None
    topology: str = ""  # "", "PreferSameZone" or "PreferSameNode": how the cluster endpoints were narrowed
    terminating_fallback: bool = False  # cluster endpoints are serving-terminating ones (none ready anywhere)
    local_terminating_fallback: bool = False
    unknown: str | None = None  # why the set cannot be told, when it cannot

    def internal(self, svc: "Svc") -> list[Endpoint] | None:
        """Where a ClusterIP's traffic from a pod on this node goes (internalTrafficPolicy decides)."""
        return self.local if svc.itp_local else self.cluster

    def external(self, svc: "Svc") -> list[Endpoint] | None:
        """Where external traffic (NodePort, LoadBalancer, externalIPs) arriving at this node goes."""
        return self.local if svc.etp_local else self.cluster


def _topology(ready: list[Endpoint], node: str | None, zone: str | None) -> tuple[str, str | None]:
    """Which topology hints kube-proxy follows (``PreferSameNode``, ``PreferSameZone``, "" for none: only when every
    ready endpoint has one, and one is for this node or zone), and why that cannot be told (None: it can)."""
    mode, unknown = "", None
    if ready and all(e.node_hints for e in ready):
        if node is None:
            unknown = (
                "the endpoints carry node hints (trafficDistribution: PreferSameNode) and this node's name is unknown"
            )
        elif any(node in e.node_hints for e in ready):
            mode = "PreferSameNode"
    if not mode and not unknown and ready and all(e.zone_hints for e in ready):
        if zone is None:
            unknown = "the endpoints carry zone hints (topology-aware routing / trafficDistribution) and this node's zone is unknown"
        elif any(zone in e.zone_hints for e in ready):
            mode = "PreferSameZone"
    return mode, unknown


def usable_endpoints(
    svc: "Svc", port: dict[str, Any], node: str | None = None, zone: str | None = None, family: int | None = None
) -> Usable:
    """The endpoints kube-proxy on ``node`` (in ``zone``) programs for ``port`` of ``svc`` (see :class:`Usable`)."""
    eps = svc.endpoints_for(port, family=family)
    ready = [e for e in eps if e.ready]
    serving_term = [e for e in eps if not e.ready and e.serving_terminating]
    out = Usable(cluster=None, local=None)
    # cluster endpoints: topology hints first (same node, then same zone), only when every ready endpoint has one
    mode, unknown = _topology(ready, node, zone)
    if mode == "PreferSameNode":
        cluster = [e for e in ready if node in e.node_hints]
    elif mode == "PreferSameZone":
        cluster = [e for e in ready if zone in e.zone_hints]
    else:
        cluster = list(ready)
    if not cluster and serving_term:
        cluster, out.terminating_fallback = list(serving_term), True
    out.cluster, out.topology = (None, mode) if unknown else (cluster, mode)
    out.unknown = unknown
    if svc.itp_local or svc.etp_local:
        if node is None:
            out.unknown = out.unknown or "a Local traffic policy and this node's name is unknown"
        else:
            local_ready = [e for e in ready if e.node == node]
            if local_ready:
                out.local = local_ready
            else:
                out.local = [e for e in serving_term if e.node == node]
                out.local_terminating_fallback = bool(out.local)
    return out


from kpdiag.state.shapes import SHAPES, list_problem, object_problem, read_list  # noqa: F401 (the shapes, re-exported)

# bundle files → the kind of their items
KIND_OF: dict[str, str] = {
    sources.SERVICES: "Service",
    sources.ENDPOINTSLICES: "EndpointSlice",
    sources.PODS: "Pod",
    sources.NODES: "Node",
    sources.NAMESPACES: "Namespace",
    sources.NETWORKPOLICIES: "NetworkPolicy",
    sources.CLIENT_POD: "Pod",
    sources.DNS_SERVICE: "Service",
    sources.DNS_ENDPOINTSLICES: "EndpointSlice",
    sources.DNS_PODS: "Pod",
}


class ClusterView:
    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._services: list[Svc] | None = None
        self._lists: dict[
            str, list[dict[str, Any]] | None
        ] = {}  # read and decoded once (checks ask for the node name per Service)

    def _list(self, rel: str) -> list[dict[str, Any]] | None:
        if rel in self._lists:
            return self._lists[rel]
        doc = self.bundle.read_json(rel)
        if isinstance(doc, dict) and "items" not in doc and doc.get("kind") and doc.get("metadata"):
            doc = {"items": [doc]}  # one object (`kubectl get svc x -o json`) reads as a List of it
        items, problems = (None, []) if doc is None else read_list(doc, KIND_OF.get(rel))
        if doc is not None and items is None:
            bad = problems[0] if isinstance(doc, dict) and "items" in doc else None
            self.bundle.problem(rel, bad or 'not a Kubernetes List or object (expected {"items": [...]})')
        for line in problems if items is not None else ():
            self.bundle.problem(rel, line)
        self._lists[rel] = items
        return items

    def endpointslices(self) -> list[dict[str, Any]] | None:
        return self._list(sources.ENDPOINTSLICES)

    @property
    def available(self) -> bool:
        return self.services() is not None

    def services(self) -> list[Svc] | None:
        if self._services is None:
            items = self._list(sources.SERVICES)
            if items is None:
                return None
            slices = self._list(sources.ENDPOINTSLICES)
            # slices by (namespace, service name), once: comparing every Service with every slice is quadratic (10,000
            # Services: 10^8 comparisons, most of kpdiag node's time); a slice without a namespace matches any
            by_owner: dict[tuple[Any, ...], list[int]] = {}
            for i, sl in enumerate(slices or []):
                smd = sl.get("metadata") or {}
                ns_key = smd["namespace"] if "namespace" in smd else _ANY_NAMESPACE
                by_owner.setdefault((ns_key, (smd.get("labels") or {}).get("kubernetes.io/service-name")), []).append(i)
            out = []
            for raw in items:
                md = raw.get("metadata") or {}
                svc = Svc(md.get("namespace") or "default", md.get("name") or "?", raw)
                if slices is not None:
                    svc.slices_seen = True
                    for i in sorted(
                        by_owner.get((svc.namespace, svc.name), []) + by_owner.get((_ANY_NAMESPACE, svc.name), [])
                    ):
                        sl = slices[i]
                        smd = sl.get("metadata") or {}
                        ports = {
                            p.get("name") or "": (p.get("port"), (p.get("protocol") or "TCP").lower())
                            for p in sl.get("ports") or []
                            if isinstance(p, dict)
                        }
                        for ep in sl.get("endpoints") or []:
                            cond = ep.get("conditions") or {}
                            ready = cond.get("ready")
                            for addr in ep.get("addresses") or []:
                                svc.endpoints.append(
                                    Endpoint(
                                        ip=addr,
                                        ready=ready is not False,
                                        serving=cond.get("serving", ready) is not False,
                                        terminating=bool(cond.get("terminating")),
                                        node=ep.get("nodeName"),
                                        pod=((ep.get("targetRef") or {}).get("name")),
                                        ports=ports,
                                        slice_name=smd.get("name", "?"),
                                        zone_hints=_hint_names(ep, "forZones"),
                                        node_hints=_hint_names(ep, "forNodes"),
                                        zone=ep.get("zone") if isinstance(ep.get("zone"), str) else None,
                                    )
                                )
                out.append(svc)
            self._services = out
        return self._services

    def pods(self) -> list[dict[str, Any]] | None:
        return self._list(sources.PODS)

    def policy_data(self) -> PolicyData | None:
        """The NetworkPolicy view (kpdiag.state.policy.load: policies, pods, namespaces, the CNI), read once; None
        without a readable cluster/networkpolicies.json."""
        if not hasattr(self, "_policy_data"):
            from kpdiag.state.policy import load

            self._policy_data = load(self.bundle) if self.bundle.exists(sources.NETWORKPOLICIES) else None
        return self._policy_data

    def selected_pods(self, svc: Svc) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods() or []
            if (p.get("metadata") or {}).get("namespace", svc.namespace) == svc.namespace
            and selector_matches(svc.selector, (p.get("metadata") or {}).get("labels"))
        ]

    def node_name(self) -> str | None:
        nodes = self._list(sources.NODES)
        if nodes and len(nodes) == 1:
            return (nodes[0].get("metadata") or {}).get("name")
        return self.bundle.manifest.get("node") or None

    def node_zone(self) -> str | None:
        """This node's topology.kubernetes.io/zone label (from cluster/nodes.json), or the manifest's "zone"."""
        nodes = self._list(sources.NODES)
        name = self.node_name()
        for n in nodes or []:
            md = n.get("metadata") or {}
            if md.get("name") == name:
                zone = (md.get("labels") or {}).get("topology.kubernetes.io/zone")
                if isinstance(zone, str) and zone:
                    return zone
        zone = self.bundle.manifest.get("zone")
        return zone if isinstance(zone, str) and zone else None


def _family(ip: str) -> int | None:
    import ipaddress

    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return None  # an FQDN EndpointSlice's address: kube-proxy ignores those


def apiserver_service_cidrs(pods: object) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The service CIDRs kube-apiserver was started with (``--service-cluster-ip-range=A[,B]`` in its pod's command or
    args, as a kubeadm static pod has it), from Pod objects; [] when no pod says so."""
    import ipaddress

    for pod in pods if isinstance(pods, (list, tuple)) else []:
        if not isinstance(pod, dict):
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            if not isinstance(c, dict):
                continue
            for arg in list(c.get("command") or []) + list(c.get("args") or []):
                if isinstance(arg, str) and arg.startswith("--service-cluster-ip-range="):
                    try:
                        nets = [
                            ipaddress.ip_network(x.strip(), strict=False)
                            for x in arg.split("=", 1)[1].split(",")
                            if x.strip()
                        ]
                    except ValueError:
                        continue
                    if nets:
                        return nets
    return []
