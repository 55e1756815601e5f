"""Typed inputs of the API side (kpdiag/state/typed.py says what a typed input is): Services, EndpointSlices,
pods, Nodes, NetworkPolicies, cluster DNS, and the active probes of the Service in focus.
"""

from __future__ import annotations

import ipaddress
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.state.cluster import Svc
    from kpdiag.state.inputs import Inputs, SourceFile

from kpdiag.bundle import sources
from kpdiag.model import Evidence
from kpdiag.state.typed import Typed


@dataclass(frozen=True)
class ApiList:
    """One List file of the API side (``kubectl get -o json``): ``items()`` its objects, read on first use (None when
    the file was not collected; a file that is not a List is a problem of the source, and None)."""

    source: str  # how evidence names it
    _read: typing.Callable[[], Any] = field(repr=False, compare=False)
    _problem: typing.Callable[[str], None] = field(repr=False, compare=False)
    _text: typing.Callable[[], str | None] | None = field(repr=False, compare=False, default=None)

    def items(self) -> list[dict[str, Any]] | None:
        from kpdiag.bundle.store import list_items

        data = self._read()
        if data is None:
            return None
        items = list_items(data)
        if items is None:
            self._problem("not a List (kubectl get -o json)")
        return items

    def text(self) -> str | None:
        """The file as written (evidence finds an object's line in it), None when it was not collected."""
        return self._text() if self._text is not None else None

    @classmethod
    def of(cls, f: SourceFile) -> ApiList:
        """The List file ``f`` (a source of a check's view: kpdiag.state.inputs.SourceFile), read when first asked."""
        return cls(f.display, f.read, f.problem, lambda: f.text() if f.has() else None)


@dataclass(frozen=True)
class DnsService(Typed):
    """The cluster DNS Service (kube-dns, ``services``) and its EndpointSlices (``endpointslices``), as collected."""

    INPUT: ClassVar[str] = "dns-service"
    services: ApiList
    endpointslices: ApiList

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        if ctx.source(sources.DNS_SERVICE) is None:
            return None
        return cls(ApiList.of(ctx.file(sources.DNS_SERVICE)), ApiList.of(ctx.file(sources.DNS_ENDPOINTSLICES)))


@dataclass(frozen=True)
class DnsPods(Typed):
    """The CoreDNS pods (label k8s-app=kube-dns in kube-system), as collected."""

    INPUT: ClassVar[str] = "dns-pods"
    pods: ApiList

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return None if ctx.source(sources.DNS_PODS) is None else cls(ApiList.of(ctx.file(sources.DNS_PODS)))


@dataclass(frozen=True)
class DnsLogs(Typed):
    """The CoreDNS logs kpdiag collected (``{"logs": [{namespace, pod, previous, text | error}]}``)."""

    INPUT: ClassVar[str] = "dns-logs"
    source: str
    doc: object

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.DNS_LOGS)
        return None if doc is None else cls(ctx.display(sources.DNS_LOGS), doc)


@dataclass(frozen=True)
class DnsLookups(Typed):
    """The DNS probe (probes/dns.json of kpdiag.dns/v1: the pod's resolv.conf, the lookups and each query sent), as
    written; ``problem(msg)`` records what in it could not be read."""

    INPUT: ClassVar[str] = "dns-lookups"
    source: str
    doc: typing.Mapping[str, Any]
    _problem: typing.Callable[..., Any] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.dns
        if not isinstance(doc, dict):
            return None
        return cls(ctx.display(sources.PROBES_DNS), doc, lambda msg: ctx.problem(sources.PROBES_DNS, msg))

    def problem(self, message: str) -> None:
        self._problem(message)


@dataclass(frozen=True)
class NetworkPolicies(Typed):
    """The NetworkPolicies (and what judging them needs: namespaces, pods, the CNI): whether they were collected, and
    the data they are judged with (``data()``, kpdiag.state.policy, read on first use), and the files of its input
    that evidence cites (the policies, the pods, the client pod, the CNI: ``has``, ``text``, ``source``, ``display``)."""

    INPUT: ClassVar[str] = "networkpolicies"
    collected: bool
    _data: typing.Callable[[], Any] = field(repr=False, compare=False)
    # the files evidence cites, by path (each a kpdiag.state.inputs.SourceFile)
    _files: typing.Mapping[str, SourceFile] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        files = (
            ctx.file(sources.NETWORKPOLICIES),
            ctx.file(sources.PODS),
            ctx.file(sources.CLIENT_POD),
            ctx.file(sources.CNI),
        )
        return cls(ctx.has(sources.NETWORKPOLICIES), lambda: ctx.cluster.policy_data(), {f.rel: f for f in files})

    def data(self) -> Any:
        return self._data()

    def has(self, rel: str) -> bool:
        """Whether one of its files was collected."""
        return self._files[rel].has()

    def display(self, rel: str) -> str:
        """How evidence names one of its files."""
        return self._files[rel].display

    def text(self, rel: str) -> str | None:
        """One of its files as written (evidence finds an object's line in it), None when not collected."""
        return self._files[rel].text() if self.has(rel) else None

    def source(self, rel: str) -> Any:
        """One of its files as read (``cluster/networkpolicies.json``: the List), None when not collected."""
        return self._files[rel].read() if self.has(rel) else None


@dataclass(frozen=True)
class NodeCIDRs:
    """One Node's pod ranges (``spec.podCIDRs``, else ``spec.podCIDR``) as the API records them."""

    name: str
    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    invalid: tuple[str, ...] = ()  # values that are not CIDRs, kept to say so


@dataclass(frozen=True)
class NodePodCIDRs(Typed):
    """The Nodes from the API (``cluster/nodes.json``) with their pod CIDRs; nodes without one are left out."""

    INPUT: ClassVar[str] = str(sources.NODES)
    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#podCIDR",)  # a Node List without pod CIDRs carries no fact
    source: str  # how evidence names the file
    nodes: tuple[NodeCIDRs, ...]
    objects: tuple[dict[str, Any], ...] = ()  # every Node object of the List, as the API wrote it

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.NODES)
        if not isinstance(doc, dict):
            return None
        out = []
        for item in doc.get("items") or []:
            if not isinstance(item, dict):
                continue
            meta, spec = item.get("metadata"), item.get("spec")
            name = meta.get("name") if isinstance(meta, dict) else None
            spec = spec if isinstance(spec, dict) else {}
            raw: list[Any] = spec["podCIDRs"] if isinstance(spec.get("podCIDRs"), list) else [spec.get("podCIDR")]
            good, bad = [], []
            for c in raw:
                if not isinstance(c, str) or not c:
                    continue
                try:
                    good.append(ipaddress.ip_network(c.strip(), strict=False))
                except ValueError:
                    bad.append(c)
            if good or bad:
                out.append(NodeCIDRs(name if isinstance(name, str) else "?", tuple(good), tuple(bad)))
        objects = (
            tuple(i for i in doc.get("items") or [] if isinstance(i, dict))
            if isinstance(doc.get("items"), list)
            else ()
        )
        return cls(ctx.display(sources.NODES), tuple(out), objects)

    def evidence(self, node: NodeCIDRs) -> Evidence:
        return Evidence(self.source, f"node {node.name}: podCIDRs {', '.join(map(str, node.cidrs))}")


@dataclass(frozen=True)
class NodeObjects(Typed):
    """Every Node object of ``cluster/nodes.json``, as the API wrote it (with or without a podCIDR), and how to read
    the few fields the CNI checks compare: the name, the InternalIP, an annotation."""

    INPUT: ClassVar[str] = str(sources.NODES)
    source: str
    objects: tuple[dict[str, Any], ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.NODES)
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            return None
        return cls(ctx.display(sources.NODES), tuple(i for i in doc["items"] if isinstance(i, dict)))

    @staticmethod
    def name(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else "?"

    def named(self, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if self.name(o) == name), None)

    @staticmethod
    def annotation(obj: dict[str, Any], key: str) -> str | None:
        meta = obj.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        value = notes.get(key) if isinstance(notes, dict) else None
        return value if isinstance(value, str) else None

    @staticmethod
    def internal_ip(obj: dict[str, Any]) -> str | None:
        status = obj.get("status")
        for a in (status.get("addresses") if isinstance(status, dict) else None) or []:
            if isinstance(a, dict) and a.get("type") == "InternalIP" and isinstance(a.get("address"), str):
                return str(a["address"])
        return None

    @staticmethod
    def pod_cidrs(obj: dict[str, Any]) -> list[str]:
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        raw: list[Any] = spec["podCIDRs"] if isinstance(spec.get("podCIDRs"), list) else [spec.get("podCIDR")]
        return [c for c in raw if isinstance(c, str) and c]


@dataclass(frozen=True)
class FlannelNodes(NodeObjects):
    """The Nodes, for the checks of flannel's own record of each node (its ``flannel.alpha.coreos.com/*``
    annotations: public-ip, backend-data with the VtepMAC); a Node List without them carries no fact for those."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#flannel.alpha.coreos.com/",)


@dataclass(frozen=True)
class CalicoNodes(NodeObjects):
    """The Nodes, for the checks of Calico's record of each node (``projectcalico.org/IPv4Address``)."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#projectcalico.org/",)


@dataclass(frozen=True)
class ServiceLookup(Typed):
    """What ``kpdiag svc`` learnt asking the API for the Service (cluster/service-lookup.json): found or not, the
    names in its namespace, the namespaces holding one of that name."""

    INPUT: ClassVar[str] = "service-lookup"
    source: str
    doc: object

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.SERVICE_LOOKUP)
        return None if doc is None else cls(ctx.display(sources.SERVICE_LOOKUP), doc)


@dataclass(frozen=True)
class Focus(Typed):
    """The Service being diagnosed (``kpdiag svc``, ``kpdiag node --service``): (namespace, name), or None when every
    Service is. Always there."""

    INPUT: ClassVar[str] = "focus"
    service: tuple[str, str] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.focus)


@dataclass(frozen=True)
class Services(Typed):
    """The Services from the API (cluster/services.json), parsed (kpdiag.state.cluster.Svc: ports, selector,
    cluster_ips, traffic policies, and the endpoints of its EndpointSlices when those were read): ``focused`` the ones
    to diagnose (the focused one — none when the API has no such Service — else all), ``every`` all of them."""

    INPUT: ClassVar[str] = "services"
    source: str
    focused: tuple[Any, ...]  # of kpdiag.state.cluster.Svc
    every: tuple[Any, ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        every = ctx.cluster.services()
        if every is None:
            return None
        return cls(ctx.display(sources.SERVICES), tuple(ctx.services_in_focus()), tuple(every))

    def evidence(self, svc: Svc, what: str) -> Evidence:
        """A fact of Service ``svc`` (``what``: its spec as it bears on the finding)."""
        return Evidence(self.source, f"{svc.key}: {what}")


@dataclass(frozen=True)
class EndpointSlices(Typed):
    """The EndpointSlices from the API (cluster/endpointslices.json): ``items`` as read (None when not collected;
    their endpoints are joined to the Services, ``Svc.endpoints``), ``source`` how evidence about endpoints names the
    file. Always built, as a use too: evidence about a Service's (absent) endpoints cites it."""

    INPUT: ClassVar[str] = "endpointslices"
    source: str
    items: tuple[Any, ...] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        items = ctx.cluster.endpointslices()
        return cls(ctx.display(sources.ENDPOINTSLICES), None if items is None else tuple(items))

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class Pods(Typed):
    """The pods from the API (cluster/pods.json) as read, and ``selected(svc)``: those a Service's selector picks in
    its namespace."""

    INPUT: ClassVar[str] = "pods"
    source: str
    items: tuple[Any, ...]  # the Pod objects (dicts)
    _selected: typing.Callable[[Svc], list[dict[str, Any]]] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        items = ctx.cluster.pods()
        if items is None:
            return None
        return cls(ctx.display(sources.PODS), tuple(items), lambda svc: ctx.cluster.selected_pods(svc))

    def selected(self, svc: Svc) -> list[dict[str, Any]]:
        return self._selected(svc)

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class NodeObject(Typed):
    """This node as the API knows it: its name (the one Node of cluster/nodes.json, else the manifest's node) and
    zone (its topology.kubernetes.io/zone label, else the manifest's zone); None when not known. Always there."""

    INPUT: ClassVar[str] = "node-object"
    name: str | None
    zone: str | None
    source: str = ""  # how evidence names cluster/nodes.json
    _doc: typing.Callable[..., Any] = field(default=lambda: None, repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(
            ctx.cluster.node_name(),
            ctx.cluster.node_zone(),
            ctx.display(sources.NODES),
            lambda: ctx.source(sources.NODES) if ctx.has(sources.NODES) else None,
        )

    def names(self) -> list[str]:
        """The names of the Node objects in cluster/nodes.json (a List, or one Node), read on first use ([] without
        the file)."""
        from kpdiag.bundle.store import list_items

        doc = self._doc()
        if doc is None:
            return []
        listed = list_items(doc)
        items: list[Any] = listed if listed is not None else [doc]
        return [
            str((i.get("metadata") or {}).get("name"))
            for i in items
            if isinstance(i, dict) and isinstance(i.get("metadata"), dict) and (i.get("metadata") or {}).get("name")
        ]


@dataclass(frozen=True)
class Probes(Typed):
    """The active probes of the Service (probes/service.json, a kpdiag.probes/v1 document): ``doc`` as written,
    ``probe_results(kind, target_prefix)`` its results. kpdiag.state.probe_results.observations reads it as it reads
    the state (``probes``, ``probe_results``)."""

    INPUT: ClassVar[str] = "probes"
    source: str
    doc: typing.Mapping[str, Any]
    _results: typing.Callable[[str | None, str | None], list[dict[str, Any]]] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.probes
        if doc is None:
            return None
        return cls(ctx.display(sources.PROBES_SERVICE), doc, lambda kind, prefix: ctx.probe_results(kind, prefix))

    @property
    def probes(self) -> typing.Mapping[str, Any]:
        return self.doc

    def probe_results(self, kind: str | None = None, target_prefix: str | None = None) -> list[dict[str, Any]]:
        return self._results(kind, target_prefix)

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class DnsProbe(Typed):
    """A DNS lookup of the Service (probes/dns.json): the name asked, the result, the addresses, as written."""

    INPUT: ClassVar[str] = "dns"
    source: str
    doc: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.dns
        return None if doc is None else cls(ctx.display(sources.PROBES_DNS), doc)
