"""`kpdiag policy`: is the flow FROM → TO:PORT allowed by NetworkPolicy, and by which policy? Also the data side
of the NetworkPolicy checks (KP120–KP123): reading policies, pods, namespaces and the CNI from a bundle.

Data (a bundle's ``cluster/``, v1 Lists as ``kubectl get … -o json`` prints them):

- ``networkpolicies.json`` (required). When its List ``metadata.namespaces`` is set (kpdiag's collector writes it),
  only those namespaces' policies were listed: a flow touching another namespace cannot be evaluated.
- ``pods.json``, ``client-pod.json`` and ``dns-pods.json``: the pods (labels, IPs, containerPorts).
- ``namespaces.json``: namespace labels (without it only ``kubernetes.io/metadata.name`` is known).
- ``services.json`` and ``endpointslices.json`` for a Service destination; ``dns-service.json``'s Service too.
- ``cni.json`` (kpdiag's reduced DaemonSets), else ``daemonsets.json``, else the CNI pods in ``pods.json``: whether
  the CNI enforces NetworkPolicy.

Live (``--kubeconfig``), the same files are read from the API first (only the namespaces the flow touches).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from kpdiag.errors import KpdiagError, UsageError
from kpdiag.state.netpol import End, Enforcement, Pod, PolicyError, component, recognise_cni
from kpdiag.state.netpol_eval import PolicyIndex
from kpdiag.bundle.store import list_items
from kpdiag.state.policy import CNI_NAMESPACES, NP_SRC, PolicyData, enforcement_of, get_path, load  # noqa: F401 (re-exported)
from kpdiag.bundle import sources
from kpdiag.commands.listscan import _ListFile

SCHEMA = "kpdiag.policy/v1"


class CannotEvaluate(KpdiagError):
    """The flow cannot be judged from the data at hand (exit 3): the message says what is missing."""


SCAN_LOOKUPS = 8  # pod look-ups answered by searching the files; past that they are read whole, once


def _serving_ips(o: dict) -> set:
    """The pod's addresses as a destination or source of pod traffic: none for a finished pod (its address is
    released, maybe reused by the pod we are after) or a hostNetwork one (its address is the node's)."""
    st: dict = o["status"] if isinstance(o.get("status"), dict) else {}
    if st.get("phase") in ("Succeeded", "Failed") or get_path(o, "spec", "hostNetwork"):
        return set()
    ips = {st.get("podIP"), *(i.get("ip") for i in st.get("podIPs") or [] if isinstance(i, dict))}
    ips.discard(None)
    return ips


class FlowSource:
    """What one flow needs from a bundle, read as it is asked for: the pods at both ends, the policies of their
    namespaces, the namespaces, the CNI. Large List files are searched (ListScan), not parsed whole."""

    def __init__(self, bundle):
        self.bundle = bundle
        self.np = _ListFile.open(bundle, NP_SRC)
        if self.np is None:
            raise CannotEvaluate(
                f"{bundle.display(NP_SRC)}: missing or unreadable: the NetworkPolicies are needed "
                "(kubectl get networkpolicies -A -o json)"
            )
        covered = self.np.meta.get("namespaces")
        self.covered = set(covered) if isinstance(covered, list) else None
        self.pod_files = [
            f
            for f in (_ListFile.open(bundle, rel) for rel in (sources.PODS, sources.CLIENT_POD, sources.DNS_PODS))
            if f is not None
        ]
        ns_doc = bundle.read_json(sources.NAMESPACES) if bundle.exists(sources.NAMESPACES) else None
        self.namespaces_known = ns_doc is not None
        self.ns_items = list_items(ns_doc) or []
        self.pods: dict[str, Pod] = {}
        self.raw_pods: dict[str, dict] = {}
        self._lookups = 0  # pod look-ups so far: past SCAN_LOOKUPS the pod files are read whole, once
        self._by_ip: dict[str, Pod] | None = None
        self.problems: list[str] = []
        self.dns_service = None
        if bundle.exists(sources.DNS_SERVICE):
            self.dns_service = next(iter(list_items(bundle.read_json(sources.DNS_SERVICE)) or []), None)

    def coverage_gap(self, *namespaces) -> list[str]:
        if self.covered is None:
            return []
        return sorted({n for n in namespaces if n and n not in self.covered})

    def _keep(self, obj: dict) -> Pod:
        pod = Pod.from_api(obj)
        self.pods.setdefault(pod.key, pod)
        self.raw_pods.setdefault(pod.key, obj)
        return self.pods[pod.key]

    def _find(self, key: str, value: str, check) -> list[Pod]:
        out = []
        for f in self.pod_files:
            for _, obj in f.where(key, value, lambda o: o.get("kind") in (None, "Pod") and check(o)):
                out.append(self._keep(obj))
        return out

    def _indexed(self) -> bool:
        """After SCAN_LOOKUPS look-ups, every pod file is decoded whole, once, and indexed by name and address: a
        search per look-up is fast for one flow, but a Service of thousands of endpoints would search the file once
        per endpoint (quadratic: 30 s on a 2.4 MB pods.json)."""
        if self._by_ip is not None:
            return True
        self._lookups += 1
        if self._lookups <= SCAN_LOOKUPS:
            return False
        from kpdiag.parse.decode import load_json

        by_ip: dict[str, Pod] = {}
        for f in self.pod_files:
            if f.scan is None:
                items = f.items
            else:
                try:
                    doc = load_json(f.scan.raw)
                except (ValueError, UnicodeDecodeError):
                    return False  # not JSON as a whole: keep searching it item by item
                items = list_items(doc) or []
            for obj in items:
                if not isinstance(obj, dict) or obj.get("kind") not in (None, "Pod"):
                    continue
                if not isinstance(obj.get("metadata"), dict):
                    continue
                pod = self._keep(obj)
                for ip in _serving_ips(obj):
                    by_ip.setdefault(ip, pod)
        self._by_ip = by_ip
        return True

    def pod(self, namespace: str, name: str) -> Pod | None:
        key = f"{namespace}/{name}"
        if key not in self.pods and not self._indexed():
            self._find(
                "name",
                name,
                lambda o: (
                    get_path(o, "metadata", "name") == name
                    and (get_path(o, "metadata", "namespace") or "default") == namespace
                ),
            )
        return self.pods.get(key)

    def pod_by_ip(self, ip: str) -> Pod | None:
        if self._indexed():
            return (self._by_ip or {}).get(ip)

        def has(o):
            return ip in _serving_ips(o)

        found = self._find("podIP", ip, has) or self._find("ip", ip, has)
        return found[0] if found else None

    def end_for_ip(self, ip: str) -> End:
        pod = self.pod_by_ip(ip)
        return End(ip, pod) if pod else End(ip)

    def pods_in(self, namespace: str) -> list[Pod]:
        return self._find(
            "namespace", namespace, lambda o: (get_path(o, "metadata", "namespace") or "default") == namespace
        )

    def policies(self, namespaces) -> list:
        from kpdiag.state.netpol import parse_policy

        out = []
        for ns in sorted(n for n in namespaces if n):
            for where, obj in self.np.where(
                "namespace", ns, lambda o, ns=ns: (get_path(o, "metadata", "namespace") or "default") == ns
            ):
                try:
                    out.append(parse_policy(obj))
                except PolicyError as exc:
                    line = f"NetworkPolicy {ns}/{get_path(obj, 'metadata', 'name') or '?'} ({self.np.where_text(where)}): {exc} — not evaluated"
                    self.problems.append(line)
                    self.bundle.problem(NP_SRC, line)
        return out

    def enforcement(self) -> Enforcement:
        bundle = self.bundle
        cni = bundle.read_json(sources.CNI) if bundle.exists(sources.CNI) else None
        if list_items(cni) is not None:
            return recognise_cni(list_items(cni))
        daemonsets = list_items(bundle.read_json(sources.DAEMONSETS) if bundle.exists(sources.DAEMONSETS) else None)
        if daemonsets is not None:
            return recognise_cni([c for c in (component(dict(d, kind="DaemonSet")) for d in daemonsets) if c])
        system = [self.raw_pods[p.key] for ns in CNI_NAMESPACES for p in self.pods_in(ns)]
        if system:  # pods.json as `kubectl get pods -A` prints it: the CNI's own pods are in it
            found = recognise_cni([c for c in (component(dict(p, kind="Pod")) for p in system) if c])
            if found.cni:
                return found
        return recognise_cni(None)

    def index(self, namespaces) -> PolicyIndex:
        return PolicyIndex(self.policies(namespaces), self.ns_items, list(self.pods.values()))


# ------------------------------------------------------------------------------------------------ the command line
def parse_port(spec: str) -> tuple[int | str, str | None]:
    """'80', '80/tcp', 'http', 'dns/UDP' → (port or name, protocol or None)."""
    text = (spec or "").strip()
    port, _, given = text.partition("/")
    proto = given.upper() or None
    if proto is not None and proto not in ("TCP", "UDP", "SCTP"):
        raise UsageError(f"--port {spec}: the protocol must be tcp, udp or sctp")
    if port.isdigit():
        number = int(port)
        if not 1 <= number <= 65535:
            raise UsageError(f"--port {spec}: out of range 1-65535")
        return number, proto
    if not port or not port.replace("-", "").isalnum():
        raise UsageError(f"--port {spec}: give PORT[/PROTO], a number or a port name")
    return port, proto


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def parse_from(spec: str) -> tuple[str, ...]:
    ip = _ip(spec)
    if ip:
        return ("ip", ip)
    parts = spec.split("/")
    if len(parts) == 2 and all(parts):
        return ("pod", parts[0], parts[1])
    raise UsageError(f"--from {spec}: give NS/POD or an IP address")


def parse_to(spec: str) -> tuple[str, ...]:
    ip = _ip(spec)
    if ip:
        return ("ip", ip)
    parts = spec.split("/")
    if len(parts) == 2 and all(parts):
        return ("any", parts[0], parts[1])
    if len(parts) == 3 and all(parts) and parts[1] in ("svc", "service", "services", "pod", "pods", "po"):
        return ("svc" if parts[1].startswith("s") else "pod", parts[0], parts[2])
    raise UsageError(f"--to {spec}: give NS/POD, NS/SERVICE (NS/svc/NAME, NS/pod/NAME to say which) or an IP address")


def _services(bundle, data):
    from kpdiag.state.cluster import ClusterView, Svc

    out = list(ClusterView(bundle).services() or []) if bundle.exists(sources.SERVICES) else []
    if data.dns_service is not None:
        key = (
            get_path(data.dns_service, "metadata", "namespace") or "kube-system",
            get_path(data.dns_service, "metadata", "name") or "kube-dns",
        )
        if not any((s.namespace, s.name) == key for s in out):
            out.append(Svc(key[0], key[1], data.dns_service))
    return out


def _merged_patches(rows: list[dict], service, notes: list[str]) -> dict[int, str | None]:
    """The NetworkPolicy to propose for each denied direction of a Service's endpoint flows, by id() of the Direction:
    endpoints that need the same policy (the same namespace and spec: the same pod labels, peer and port) get it once —
    on the first of them, named after the Service — and None on the others, with a note; not one per endpoint pod."""
    from kpdiag.state.netpol_eval import _dns_name, patch_doc, to_yaml

    groups: dict[tuple, list] = {}
    for row in rows:
        for d in (row["flow"].egress, row["flow"].ingress):
            if d.allowed or not d.patch_args:
                continue
            doc, why = patch_doc(*d.patch_args)
            key = (d.direction, doc["metadata"]["namespace"], json.dumps(doc["spec"], sort_keys=True))
            groups.setdefault(key, []).append((row["endpoint"], d, doc, why))
    out: dict[int, str | None] = {}
    for (direction, _, _), members in groups.items():
        if len(members) == 1 or service is None:
            for _, d, doc, why in members:
                out[id(d)] = "".join(f"# {n}\n" for n in why) + to_yaml(doc)
            continue
        first_label, first, doc, why = members[0]
        _, _, other, port, _ = first.patch_args
        other_name = other.pod.name if other.is_pod else (other.ip or "peer")
        way = "to" if direction == "ingress" else "from"
        doc = dict(
            doc, metadata=dict(doc["metadata"], name=_dns_name(f"allow-{other_name}-{way}-{service.name}-{port}"))
        )
        head = f"one policy for the {len(members)} endpoints of Service {service.key} that need it"
        out[id(first)] = "".join(f"# {n}\n" for n in [head, *dict.fromkeys(why)]) + to_yaml(doc)
        for _, d, _, _ in members[1:]:
            out[id(d)] = None
        notes.append(
            f"{direction}: the {len(members)} denied endpoints need the same NetworkPolicy: it is proposed once "
            f"(endpoint {first_label})"
        )
    return out


def _flow_dict(flow, proposals: dict[int, str | None]) -> dict:
    """Flow.to_dict with the proposals already made (not one NetworkPolicy built per endpoint)."""
    import dataclasses

    doc = dataclasses.replace(
        flow,
        egress=dataclasses.replace(flow.egress, patch_args=None),
        ingress=dataclasses.replace(flow.ingress, patch_args=None),
    ).to_dict()
    for key, d in (("egress", flow.egress), ("ingress", flow.ingress)):
        if id(d) in proposals:
            doc[key]["patch"] = proposals[id(d)]
    return doc


def _direction_summary(direction: str, flows: list, proposals: dict | None = None) -> dict:
    """One direction over every endpoint of a Service."""
    parts = [getattr(f, direction) for f in flows]
    denied = [d for d in parts if not d.allowed]
    admitted = {d.admitted_by.policy: d.admitted_by.to_dict() for d in parts if d.admitted_by}
    admits: dict = {}
    for d in parts:
        admits.update(d.admits)
    return {
        "direction": direction,
        "subject": ", ".join(sorted({d.subject for d in parts})),
        "applies": any(d.applies for d in parts),
        "restricted": any(d.restricted for d in parts),
        "allowed": not denied,
        "policies": sorted({p for d in parts for p in d.policies}),
        "admitted_by": next(iter(admitted.values())) if len(admitted) == 1 and not denied else None,
        "admits": admits,
        "missing": denied[0].missing if denied else None,
        "patch": (
            (proposals.get(id(denied[0])) if proposals is not None and id(denied[0]) in proposals else denied[0].patch)
            if denied
            else None
        ),
    }


def evaluate(bundle, from_spec: str, to_spec: str, port_spec: str) -> dict:
    """The ``kpdiag.policy/v1`` document for one flow (to a Service: one flow per endpoint, after DNAT)."""
    src_spec, dst_spec = parse_from(from_spec), parse_to(to_spec)
    port, proto = parse_port(port_spec)
    source = FlowSource(bundle)
    notes: list[str] = []
    src = _source_end(source, src_spec, notes)
    targets, service = _targets(bundle, source, dst_spec, port, proto, notes)
    involved = {src.namespace, *(t[1].namespace for t in targets if t[1] is not None)} - {None}
    idx = _policy_index(bundle, source, involved, notes)
    flows, results, unknown = _evaluate_targets(idx, src, targets)
    proposals = _merged_patches([r for r in results if r.get("flow") is not None], service, notes)
    for r in results:
        flow = r.pop("flow", None)
        if flow is not None:
            r.update(_flow_dict(flow, proposals), error=None)
    if not flows or (unknown and all(f.allowed for f in flows)):
        why = "; ".join(r["error"] for r in results if r.get("error")) or "no endpoint to evaluate"
        raise CannotEvaluate(f"cannot evaluate {from_spec} → {to_spec}: {why}")
    allowed = all(f.allowed for f in flows) and not unknown
    _ipblock_notes(flows, notes)
    notes = list(dict.fromkeys(notes))
    enf = source.enforcement()
    if enf.enforced is False and not allowed:
        notes.append(
            f"{enf.text()}: the policies deny this flow, but the CNI does not enforce them — they do not drop it"
        )
    elif enf.enforced is None:
        notes.append(enf.text())
    doc = {
        "schema": SCHEMA,
        "allowed": allowed,
        "from": src.text(),
        "to": to_spec if service is None else f"Service {service.key}",
        "port": f"{port}/{proto or (flows[0].protocol if flows else 'TCP')}",
        "egress": (flows[0].egress.to_dict() if service is None else _direction_summary("egress", flows, proposals)),
        "ingress": (flows[0].ingress.to_dict() if service is None else _direction_summary("ingress", flows, proposals)),
        "enforcement": enf.to_dict(),
        "notes": notes,
        "problems": [str(p) for p in bundle.problems],  # unreadable policies (one line each), files not read
    }
    if service is not None:
        doc["service"] = service.key
        doc["endpoints"] = results
    return doc


def _source_end(source: FlowSource, src_spec: tuple[str, ...], notes: list[str]) -> End:
    """The flow's source: a pod (NS/POD, which must be in the pods read) or an address (a pod's, if one has it)."""
    if src_spec[0] == "ip":
        src = source.end_for_ip(src_spec[1])
        if src.pod is None:
            notes.append(
                f"{src_spec[1]} is no pod kpdiag knows of: taken as an address (only ipBlock rules and rules "
                "open to anyone admit it)"
            )
        return src
    pod = source.pod(src_spec[1], src_spec[2])
    if pod is None:
        raise CannotEvaluate(f"pod {src_spec[1]}/{src_spec[2]} is not in the pods read ({sources.PODS})")
    if not pod.ips and not pod.host_network:
        notes.append(f"{pod.key} has no IP yet (not running?): ipBlock rules cannot match it")
    return End(pod.ip, pod)


def _targets(bundle, source: FlowSource, dst_spec: tuple[str, ...], port, proto, notes: list[str]):
    """The flow's destinations, as (label, End or None, port, protocol) each, and the Service when the destination is
    one (a ClusterIP or NS/SERVICE: its endpoints, after DNAT)."""
    service = None
    if dst_spec[0] == "ip":
        end = source.end_for_ip(dst_spec[1])
        if end.pod is None:  # a ClusterIP is not where policies act: its endpoints are (after DNAT)
            service = next((s for s in _services(bundle, source) if dst_spec[1] in s.cluster_ips), None)
        if service is None:
            return [(dst_spec[1], end, port, proto or "TCP")], None
        notes.append(f"{dst_spec[1]} is the ClusterIP of Service {service.key}: judged at its endpoints")
        targets, svc_notes = _service_targets(service, source, port, proto)
        notes += svc_notes
        return targets, service
    kind, ns, name = dst_spec
    pod = source.pod(ns, name) if kind in ("pod", "any") else None
    if pod is not None:
        return [(pod.key, End(pod.ip, pod), port, proto or "TCP")], None
    if kind in ("svc", "any"):
        service = next((s for s in _services(bundle, source) if s.namespace == ns and s.name == name), None)
    if service is None:
        what = {"pod": "pod", "svc": "Service"}.get(kind, "pod or Service")
        raise CannotEvaluate(f"no {what} {ns}/{name} in the data read ({sources.PODS}, {sources.SERVICES})")
    targets, svc_notes = _service_targets(service, source, port, proto)
    notes += svc_notes
    return targets, service


def _policy_index(bundle, source: FlowSource, involved: set, notes: list[str]):
    """The policies of the namespaces involved, indexed — or CannotEvaluate when some were not collected; a note for
    each namespace whose labels are not known."""
    gap = source.coverage_gap(*involved)
    if gap:
        raise CannotEvaluate(
            f"the NetworkPolicies of namespace {', '.join(gap)} were not collected "
            f"({bundle.display(NP_SRC)} lists only {', '.join(sorted(source.covered))})"
        )
    idx = source.index(involved)
    if not source.namespaces_known:
        notes.append(
            f"{sources.NAMESPACES} missing: namespace labels unknown (only kubernetes.io/metadata.name is assumed)"
        )
        return idx
    for n in sorted(involved):
        if n not in idx.ns_labels_known:
            notes.append(f"namespace {n} is not in {sources.NAMESPACES}: only kubernetes.io/metadata.name is assumed")
    return idx


def _evaluate_targets(idx, src: End, targets: list) -> tuple[list, list[dict], list[str]]:
    """Each target's flow from ``src``: (the flows, one result per target, the targets that could not be judged)."""
    flows, results, unknown = [], [], []
    for label, end, p, pr in targets:
        if end is None:
            unknown.append(label)
            results.append(
                {
                    "endpoint": label,
                    "pod": None,
                    "allowed": None,
                    "error": "the endpoint's pod is not in the pods read: its ingress policies cannot be evaluated",
                }
            )
            continue
        try:
            flow = idx.evaluate(src, end, p, pr)
        except PolicyError as exc:
            unknown.append(label)
            results.append(
                {"endpoint": label, "pod": end.pod.key if end.pod else None, "allowed": None, "error": str(exc)}
            )
            continue
        flows.append(flow)
        results.append({"endpoint": label, "pod": end.pod.key if end.pod else None, "flow": flow, "error": None})
    return flows, results, unknown


def _ipblock_notes(flows: list, notes: list[str]) -> None:
    """A note for each pod admitted by its pod IP through an ipBlock (CNIs differ on that)."""
    for f in flows:
        for d, other in ((f.egress, f.dst), (f.ingress, f.src)):
            if d.admitted_by and d.admitted_by.peer.startswith("ipBlock") and other.is_pod:
                notes.append(
                    f"{d.admitted_by.policy} admits {other.pod.key} by its pod IP through an ipBlock: CNIs differ on "
                    "whether ipBlock applies to pod traffic (it is meant for addresses outside the cluster)"
                )


def _service_port(svc, port, proto) -> dict:
    """The Service port the flow's port names (by number or name; TCP first when the protocol is not given)."""
    cands = [p for p in svc.ports if (p.get("port") == port or (p.get("name") and p.get("name") == port))]
    if proto:
        cands = [p for p in cands if (p.get("protocol") or "TCP").upper() == proto]
    if not cands:
        have = ", ".join(
            f"{p.get('name') + '=' if p.get('name') else ''}{p.get('port')}/{p.get('protocol') or 'TCP'}"
            for p in svc.ports
        )
        raise CannotEvaluate(
            f"Service {svc.key} has no port {port}{'/' + proto if proto else ''} (it has: {have or 'none'})"
        )
    return next((p for p in cands if (p.get("protocol") or "TCP").upper() == "TCP"), cands[0])


def _service_targets(svc, source: FlowSource, port, proto) -> tuple[list, list[str]]:
    """(label, End or None, targetPort, protocol) for each endpoint of the Service port: policies act after DNAT."""
    notes: list[str] = []
    sp = _service_port(svc, port, proto)
    protocol = (sp.get("protocol") or "TCP").upper()
    out = []
    eps = svc.endpoints_for(sp)
    if not eps:
        return _selected_targets(svc, source, sp, protocol, notes), notes
    ready = [e for e in eps if e.ready]
    if not ready:
        notes.append(f"Service {svc.key} has no ready endpoint: its not-ready endpoints are evaluated")
    for e in ready or eps:
        target = svc.target_of(e, sp)
        pod = (source.pod(svc.namespace, e.pod) if e.pod else None) or source.pod_by_ip(e.ip)
        label = f"{e.ip}:{target}" if ":" not in e.ip else f"[{e.ip}]:{target}"
        out.append((label, End(e.ip, pod) if pod else None, target, protocol))
    return out, notes


def _selected_targets(svc, source: FlowSource, sp: dict, protocol: str, notes: list[str]) -> list:
    """A Service without EndpointSlices read: its endpoints are the pods its selector picks, at the targetPort."""
    if not svc.selector:
        raise CannotEvaluate(
            f"Service {svc.key} has no endpoints in the data read ({sources.ENDPOINTSLICES}) and no selector"
        )
    from kpdiag.state.cluster import selector_matches

    pods = [p for p in source.pods_in(svc.namespace) if selector_matches(svc.selector, p.labels)]
    if not pods:
        raise CannotEvaluate(f"Service {svc.key}: no EndpointSlice read and its selector picks no pod read")
    notes.append(f"no EndpointSlice read for {svc.key}: its endpoints are the pods its selector picks")
    tp: Any = sp.get("targetPort", sp.get("port"))
    out = []
    for pod in pods:
        target = pod.named_port(tp, protocol) if isinstance(tp, str) and not tp.isdigit() else int(tp)
        if target is None:
            notes.append(f"{pod.key} declares no containerPort named {tp!r}: not an endpoint")
            continue
        out.append((f"{pod.ip}:{target}", End(pod.ip, pod), target, protocol))
    if not out:
        raise CannotEvaluate(f"Service {svc.key}: no pod it selects has the targetPort {tp!r}")
    return out


# ------------------------------------------------------------------------------------------------ live
def collect_live(from_spec: str, to_spec: str, kubeconfig=None, context=None) -> tuple[dict[str, bytes], list[dict]]:
    """Read from the API what the flow needs, as bundle files: the two ends' pods (or the Service, its
    EndpointSlices and pods), every namespace, the NetworkPolicies of the namespaces involved, the CNI."""
    from kpdiag.collect.cluster import ClusterCollector, _as_list
    from kpdiag.collect.kubeapi import RawApi

    src_spec, dst_spec = parse_from(from_spec), parse_to(to_spec)
    cc = ClusterCollector(kubeconfig, context)
    if not cc.connect():
        raise CannotEvaluate(cc.config_error or "no Kubernetes credentials")
    api = RawApi(cc._api)
    pods: list[dict] = []
    services: list[dict] = []
    slices: list[dict] = []
    namespaces: set[str | None] = set()
    if src_spec[0] == "pod":
        namespaces.add(src_spec[1])
        p = _one_pod(cc, api, src_spec[1], src_spec[2])
        if p:
            pods.append(p)
    else:
        for p in _pods_with_ip(cc, api, src_spec[1]):
            pods.append(p)
            namespaces.add((p.get("metadata") or {}).get("namespace"))
    if dst_spec[0] != "ip":
        kind, ns, name = dst_spec
        namespaces.add(ns)
        p = _one_pod(cc, api, ns, name) if kind in ("pod", "any") else None
        if p:
            pods.append(p)
        elif kind in ("svc", "any"):
            _live_service(cc, api, ns, name, services, slices, pods)
    cc.policy_objects(sorted(n for n in namespaces if n), dns=False)
    files = dict(cc.out.files)
    files[sources.PODS] = _as_list("Pod", pods)
    if services:
        files[sources.SERVICES] = _as_list("Service", services)
        files[sources.ENDPOINTSLICES] = _as_list("EndpointSlice", slices)
    return files, cc.out.errors


def _one_pod(cc, api, ns: str, name: str) -> dict | None:
    doc = cc._call(
        sources.PODS,
        f"list pods in {ns}",
        api.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        kind="Pod",
    )
    return next((p for p in (doc or {}).get("items", []) if (p.get("metadata") or {}).get("name") == name), None)


def _pods_with_ip(cc, api, ip: str) -> list[dict]:
    """The pods that have the address ``ip`` (any namespace)."""
    doc = cc._call(
        sources.PODS,
        "list pods",
        api.list_pod_for_all_namespaces,
        field_selector=f"status.podIP={ip}",
        kind="Pod",
    )
    out = []
    for p in (doc or {}).get("items", []):
        st = p.get("status") or {}
        if ip in {st.get("podIP"), *(i.get("ip") for i in st.get("podIPs") or [] if isinstance(i, dict))}:
            out.append(p)
    return out


def _live_service(cc, api, ns: str, name: str, services: list, slices: list, pods: list) -> None:
    """The Service NS/NAME, its EndpointSlices and the pods its selector picks, read from the API."""
    from kpdiag.state.cluster import selector_matches

    svc = cc._call(
        sources.SERVICES, f"get service {ns}/{name}", api.read_namespaced_service, name, ns, kind="one:Service"
    )
    if svc is None:
        return
    svc.setdefault("kind", "Service")
    services.append(svc)
    sl = cc._call(
        sources.ENDPOINTSLICES,
        f"list endpointslices in {ns}",
        api.list_namespaced_endpoint_slice,
        ns,
        label_selector=f"kubernetes.io/service-name={name}",
        kind="EndpointSlice",
    )
    slices += [
        s
        for s in (sl or {}).get("items", [])
        if ((s.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name") == name
    ]
    selector = (svc.get("spec") or {}).get("selector")
    if selector:
        doc = cc._call(
            sources.PODS,
            f"list pods in {ns}",
            api.list_namespaced_pod,
            ns,
            label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
            kind="Pod",
        )
        pods += [
            p
            for p in (doc or {}).get("items", [])
            if selector_matches(selector, (p.get("metadata") or {}).get("labels"))
        ]
