"""The API side of a bundle: Services, EndpointSlices, pods, nodes — as small typed views."""

from __future__ import annotations

from dataclasses import dataclass, field

from .collect.cluster import selector_matches


@dataclass
class Endpoint:
    ip: str
    ready: bool
    serving: bool
    terminating: bool
    node: str | None
    pod: str | None
    ports: dict[str, tuple[int, str]]  # slice port name → (port, protocol)
    slice_name: str


@dataclass
class Svc:
    namespace: str
    name: str
    raw: dict
    endpoints: list[Endpoint] = field(default_factory=list)
    slices_seen: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def spec(self) -> dict:
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
    def ports(self) -> list[dict]:
        return self.spec.get("ports") or []

    @property
    def selector(self) -> dict:
        return self.spec.get("selector") or {}

    @property
    def etp_local(self) -> bool:
        return self.spec.get("externalTrafficPolicy") == "Local" and self.type in ("NodePort", "LoadBalancer")

    @property
    def itp_local(self) -> bool:
        return self.spec.get("internalTrafficPolicy") == "Local"

    def port_name(self, port: dict) -> str:
        return f"{self.key}:{port.get('name') or ''}".rstrip(":") if port.get("name") else f"{self.key}:{port.get('port')}"

    def kube_proxy_name(self, port: dict) -> str:
        """The name kube-proxy uses in its rule comments (its ServicePortName): ns/svc:portname, and plain ns/svc
        for a port without a name (kube-proxy adds ":name" only when the name is set)."""
        return f"{self.key}:{port['name']}" if port.get("name") else self.key

    def endpoints_for(self, port: dict, family: int | None = None) -> list[Endpoint]:
        """The endpoints serving ``port``; with ``family`` (4 or 6) only those of that IP version — a dual-stack
        Service has an EndpointSlice per family, and kube-proxy programs each family's rules from its own."""
        name = port.get("name") or ""
        eps = [e for e in self.endpoints if name in e.ports or (not name and len(e.ports) <= 1)]
        if family is not None:
            eps = [e for e in eps if _family(e.ip) == family]
        return eps

    def target_of(self, endpoint: Endpoint, port: dict) -> int | None:
        name = port.get("name") or ""
        if name in endpoint.ports:
            return endpoint.ports[name][0]
        if endpoint.ports:
            return next(iter(endpoint.ports.values()))[0]
        return None


def _items(doc) -> list[dict]:
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return [i for i in doc["items"] if isinstance(i, dict)]
    if isinstance(doc, dict) and doc.get("kind") and doc.get("metadata"):
        return [doc]
    return []


class ClusterView:
    def __init__(self, bundle):
        self.bundle = bundle
        self._services: list[Svc] | None = None

    def _list(self, rel: str) -> list[dict] | None:
        doc = self.bundle.read_json(rel)
        if doc is None:
            return None
        items = _items(doc)
        if not items and not (isinstance(doc, dict) and isinstance(doc.get("items"), list)):
            self.bundle.problem(rel, "not a Kubernetes List or object (expected {\"items\": [...]})")
            return None
        return items

    @property
    def available(self) -> bool:
        return self.services() is not None

    def services(self) -> list[Svc] | None:
        if self._services is None:
            items = self._list("cluster/services.json")
            if items is None:
                return None
            slices = self._list("cluster/endpointslices.json")
            out = []
            for raw in items:
                md = raw.get("metadata") or {}
                svc = Svc(md.get("namespace") or "default", md.get("name") or "?", raw)
                if slices is not None:
                    svc.slices_seen = True
                    for sl in slices:
                        smd = sl.get("metadata") or {}
                        if smd.get("namespace", svc.namespace) != svc.namespace:
                            continue
                        if (smd.get("labels") or {}).get("kubernetes.io/service-name") != svc.name:
                            continue
                        ports = {p.get("name") or "": (p.get("port"), (p.get("protocol") or "TCP").lower()) for p in sl.get("ports") or [] if isinstance(p, dict)}
                        for ep in sl.get("endpoints") or []:
                            cond = ep.get("conditions") or {}
                            ready = cond.get("ready")
                            for addr in ep.get("addresses") or []:
                                svc.endpoints.append(Endpoint(
                                    ip=addr, ready=ready is not False, serving=cond.get("serving", ready) is not False,
                                    terminating=bool(cond.get("terminating")), node=ep.get("nodeName"),
                                    pod=((ep.get("targetRef") or {}).get("name")), ports=ports, slice_name=smd.get("name", "?")))
                out.append(svc)
            self._services = out
        return self._services

    def pods(self) -> list[dict] | None:
        return self._list("cluster/pods.json")

    def selected_pods(self, svc: Svc) -> list[dict]:
        return [p for p in self.pods() or [] if (p.get("metadata") or {}).get("namespace", svc.namespace) == svc.namespace
                and selector_matches(svc.selector, (p.get("metadata") or {}).get("labels"))]

    def node_name(self) -> str | None:
        nodes = self._list("cluster/nodes.json")
        if nodes and len(nodes) == 1:
            return (nodes[0].get("metadata") or {}).get("name")
        return self.bundle.manifest.get("node") or None


def _family(ip: str) -> int | None:
    import ipaddress

    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return None  # an FQDN EndpointSlice's address: kube-proxy ignores those
