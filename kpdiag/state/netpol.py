"""NetworkPolicy (networking.k8s.io/v1) semantics: the rules, the policies and pods as read, which CNI enforces them. A
flow is judged by them in netpol_eval.py. Pure: no I/O.

The rules implemented, as the API defines them:

- ``policyTypes`` defaults to ``[Ingress]``, plus ``Egress`` when the policy has at least one egress rule
  (the API server's defaulting looks at the number of rules: ``egress: []`` adds nothing). A policy only acts in
  the directions of its ``policyTypes``; rules of another direction are ignored.
- A pod selected by no policy of a direction is open in that direction (not isolated). A pod selected by at least
  one is isolated: only what some rule of some selecting policy admits passes. Policies are additive (a union).
- A flow pod A → pod B needs A's egress and B's ingress to admit it.
- A rule with no (or an empty) ``from``/``to`` admits every peer; with no (or empty) ``ports`` every port. A policy
  of a direction with no rules of it admits nothing (default deny).
- A peer is an ``ipBlock`` (cidr minus ``except``), or a ``podSelector`` and/or ``namespaceSelector``: podSelector
  alone picks pods of the policy's namespace; namespaceSelector alone every pod of the namespaces it picks; both
  in one peer must both match (AND). An empty selector ``{}`` matches everything.
- Label selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist), all ANDed.
  NotIn matches a pod without the key. Namespaces carry ``kubernetes.io/metadata.name`` (set by the API server).
- Ports: a number, a range (``endPort``), or a name resolved on the destination pod's containerPorts (name and
  protocol). Protocol TCP unless given (UDP, SCTP). A named port never matches an IP that is not a pod.
- Selector peers only ever match pods that are not host-network; a host-network pod or an IP client is its
  address, matched by ``ipBlock`` rules only. Policies never select host-network pods.
- Traffic to a pod from its own node (the pod's ``status.hostIP``: kubelet probes, host-network pods there) is
  allowed whatever the policies say.

A policy that cannot be read (an unknown operator, a bad CIDR, an ``except`` outside its ``cidr``, a peer with
nothing in it, ...) is reported as one problem naming it, and the others are evaluated.
"""

from __future__ import annotations

from typing import Any, Callable

import ipaddress
import re
from dataclasses import dataclass, field
from kpdiag.bundle import sources

PROTOCOLS = ("TCP", "UDP", "SCTP")
NS_NAME_LABEL = "kubernetes.io/metadata.name"


class PolicyError(ValueError):
    """A NetworkPolicy that cannot be read: the message says what and where (one line)."""


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _arr(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


# ------------------------------------------------------------------------------------------------ selectors
@dataclass(frozen=True)
class Selector:
    """A parsed LabelSelector. ``exprs``: (key, operator, values)."""

    labels: tuple[tuple[str, str], ...] = ()
    exprs: tuple[tuple[str, str, frozenset[str]], ...] = ()
    ordered_values: tuple[tuple[str, ...], ...] = ()  # the values of each expression as written (for text)

    @property
    def empty(self) -> bool:
        return not self.labels and not self.exprs

    def matches(self, labels: dict[str, Any]) -> bool:
        for k, v in self.labels:
            if labels.get(k) != v:
                return False
        for key, op, values in self.exprs:
            if op == "In":
                if labels.get(key) not in values:
                    return False
            elif op == "NotIn":
                if key in labels and labels[key] in values:
                    return False
            elif op == "Exists":
                if key not in labels:
                    return False
            elif key in labels:  # DoesNotExist
                return False
        return True

    def text(self) -> str:
        bits = [f"{k}={v}" for k, v in self.labels]
        for (key, op, _), vals in zip(self.exprs, self.ordered_values):
            if op == "In":
                bits.append(f"{key} in ({','.join(vals)})")
            elif op == "NotIn":
                bits.append(f"{key} notin ({','.join(vals)})")
            elif op == "Exists":
                bits.append(key)
            else:
                bits.append(f"!{key}")
        return ",".join(bits)


def parse_selector(doc: object, where: str) -> Selector:
    if doc is None:
        return Selector()
    if not isinstance(doc, dict):
        raise PolicyError(f"{where} is not a label selector")
    ml = doc.get("matchLabels") or {}
    if not isinstance(ml, dict):
        raise PolicyError(f"{where}.matchLabels is not a map")
    labels = []
    for k, v in ml.items():
        if not isinstance(v, str):
            raise PolicyError(f"{where}.matchLabels[{k}] is not a string")
        labels.append((str(k), v))
    exprs, ordered = [], []
    me = doc.get("matchExpressions") or []
    if not isinstance(me, list):
        raise PolicyError(f"{where}.matchExpressions is not a list")
    for i, e in enumerate(me):
        here = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise PolicyError(f"{here} has no key")
        op = e.get("operator")
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PolicyError(f"{here}.values is not a list of strings")
        if op in ("In", "NotIn"):
            if not values:
                raise PolicyError(f"{here}: operator {op} needs at least one value")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise PolicyError(f"{here}: operator {op} takes no values")
        else:
            raise PolicyError(f"{here}: invalid operator {op!r} (valid: In, NotIn, Exists, DoesNotExist)")
        exprs.append((e["key"], op, frozenset(values)))
        ordered.append(tuple(values))
    return Selector(tuple(sorted(labels)), tuple(exprs), tuple(ordered))


# ------------------------------------------------------------------------------------------------ pods, flow ends
@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    labels: dict[str, Any]
    ips: tuple[str, ...]
    host_network: bool = False
    ports: tuple[tuple[str, int, str], ...] = ()  # containerPorts: (name, number, protocol)
    node: str | None = None
    host_ip: str | None = None  # status.hostIP: the node it runs on

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ip(self) -> str | None:
        return self.ips[0] if self.ips else None

    def named_port(self, name: str, protocol: str) -> int | None:
        for n, number, proto in self.ports:
            if n == name and proto == protocol:
                return number
        return None

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> "Pod":
        """A pod as the API returns it; whatever is malformed in it is left out (never an exception)."""
        md, spec, status = (_obj(_obj(obj).get(k)) for k in ("metadata", "spec", "status"))
        ips = [
            p["ip"]
            for p in _arr(status.get("podIPs"))
            if isinstance(p, dict) and isinstance(p.get("ip"), str) and p["ip"]
        ]
        if not ips and isinstance(status.get("podIP"), str) and status["podIP"]:
            ips = [status["podIP"]]
        if status.get("phase") in ("Succeeded", "Failed"):
            ips = []  # a finished pod's address is released (and may be another pod's now)
        ports = []
        for c in _arr(spec.get("containers")) + _arr(spec.get("initContainers")):  # sidecars declare ports too
            for p in _arr(_obj(c).get("ports")):
                if (
                    isinstance(p, dict)
                    and isinstance(p.get("containerPort"), int)
                    and not isinstance(p["containerPort"], bool)
                ):
                    name = p["name"] if isinstance(p.get("name"), str) else ""
                    proto = p["protocol"] if isinstance(p.get("protocol"), str) else "TCP"
                    ports.append((name, p["containerPort"], proto.upper()))
        labels = {k: v for k, v in _obj(md.get("labels")).items() if isinstance(k, str) and isinstance(v, str)}
        return cls(
            _str(md.get("namespace")) or "default",
            _str(md.get("name")) or "?",
            labels,
            tuple(ips),
            spec.get("hostNetwork") is True,
            tuple(ports),
            _str(spec.get("nodeName")) or None,
            _str(status.get("hostIP")) or None,
        )


@dataclass(frozen=True)
class End:
    """One end of a flow: a pod (not host-network: selectable by policies), or an address (an IP client, a
    host-network pod, something outside the cluster)."""

    ip: str | None
    pod: Pod | None = None

    @property
    def is_pod(self) -> bool:
        return self.pod is not None and not self.pod.host_network

    @property
    def selectable(self) -> Pod | None:
        """Its pod when policies can select it (not host-network), else None."""
        return self.pod if self.pod is not None and not self.pod.host_network else None

    @property
    def namespace(self) -> str | None:
        return self.pod.namespace if self.pod else None

    def text(self) -> str:
        if self.pod is not None:
            return (
                f"{self.pod.key}"
                + (" (host network)" if self.pod.host_network else "")
                + (f" {self.ip}" if self.ip else "")
            )
        return self.ip or "?"

    def addresses(self) -> tuple[str, ...]:
        """The addresses this end uses in the flow: its pod's of the flow's IP version (the version of ``ip``)."""
        if self.pod is not None and self.pod.ips:
            if not self.ip:
                return self.pod.ips
            v6 = ":" in self.ip
            return tuple(dict.fromkeys((self.ip, *(a for a in self.pod.ips if (":" in a) == v6))))
        return (self.ip,) if self.ip else ()

    def in_family_of(self, other: "End") -> "End":
        """This end with the pod address of ``other``'s IP version (a dual-stack pod talks v4 to v4, v6 to v6)."""
        if self.pod is None or not other.ip or not self.pod.ips or (self.ip and (":" in self.ip) == (":" in other.ip)):
            return self
        same = next((a for a in self.pod.ips if (":" in a) == (":" in other.ip)), None)
        return End(same, self.pod) if same else self


# ------------------------------------------------------------------------------------------------ policies
@dataclass(frozen=True)
class Peer:
    pod_sel: Selector | None = None
    ns_sel: Selector | None = None
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    excepts: tuple[Any, ...] = ()

    def matches(self, other: End, policy_ns: str, ns_labels: Callable[[str], dict[str, Any]]) -> bool:
        if self.cidr is not None:
            for a in other.addresses():
                try:
                    addr = ipaddress.ip_address(a)
                except ValueError:
                    continue
                if addr.version == self.cidr.version and addr in self.cidr and not any(addr in e for e in self.excepts):
                    return True
            return False
        pod = other.selectable
        if pod is None:
            return False
        if self.ns_sel is None:
            if pod.namespace != policy_ns:
                return False
        elif not self.ns_sel.matches(ns_labels(pod.namespace)):
            return False
        return self.pod_sel is None or self.pod_sel.matches(pod.labels)

    def text(self, policy_ns: str) -> str:
        if self.cidr is not None:
            return f"ipBlock {self.cidr}" + (f" except {', '.join(map(str, self.excepts))}" if self.excepts else "")
        pods = "all pods" if self.pod_sel is None or self.pod_sel.empty else f"pods {self.pod_sel.text()}"
        if self.ns_sel is None:
            return f"{pods} in namespace {policy_ns}"
        if self.ns_sel.empty:
            return f"{pods} in every namespace"
        return f"{pods} in namespaces {self.ns_sel.text()}"


@dataclass(frozen=True)
class PortRule:
    protocol: str = "TCP"
    port: int | str | None = None
    end_port: int | None = None

    def matches(self, port: int, protocol: str, dst: End) -> bool:
        if protocol != self.protocol:
            return False
        if self.port is None:
            return True
        if isinstance(self.port, str):
            pod = dst.selectable
            return pod is not None and pod.named_port(self.port, protocol) == port
        if self.end_port is not None:
            return self.port <= port <= self.end_port
        return port == self.port

    def text(self) -> str:
        if self.port is None:
            return f"all {self.protocol} ports"
        if self.end_port is not None:
            return f"{self.port}-{self.end_port}/{self.protocol}"
        return f"{self.port}/{self.protocol}"


@dataclass(frozen=True)
class Rule:
    peers: tuple[Peer, ...]  # empty: every peer
    ports: tuple[PortRule, ...]  # empty: every port

    def peers_text(self, policy_ns: str) -> str:
        return "; ".join(p.text(policy_ns) for p in self.peers) if self.peers else "anyone"

    def ports_text(self) -> str:
        return ", ".join(p.text() for p in self.ports) if self.ports else "all ports"


@dataclass(frozen=True)
class Policy:
    namespace: str
    name: str
    pod_sel: Selector
    types: frozenset[str]
    ingress: tuple[Rule, ...]
    egress: tuple[Rule, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rules(self, direction: str) -> tuple[Rule, ...]:
        return self.ingress if direction == "ingress" else self.egress

    def peers_summary(self, direction: str) -> str:
        """What this policy lets through in ``direction``, short: 'pods app=frontend in namespace prod on 8080/TCP'."""
        rules = self.rules(direction)
        if not rules:
            return "nothing"
        return " or ".join(f"{r.peers_text(self.namespace)} on {r.ports_text()}" for r in rules)

    def admits_text(self, direction: str) -> str:
        rules = self.rules(direction)
        if not rules:
            return f"admits no {direction} at all (no {direction} rules: deny all)"
        word = "from" if direction == "ingress" else "to"
        return "; ".join(
            f"rule {i}: {word} {r.peers_text(self.namespace)} on {r.ports_text()}" for i, r in enumerate(rules)
        )


def _cidr(text: object, where: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(text, str) or "/" not in text:
        raise PolicyError(f"{where}: invalid CIDR {text!r} (ADDRESS/PREFIX expected)")
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise PolicyError(f"{where}: invalid CIDR {text!r}") from None


def _peer(doc: object, where: str) -> Peer:
    if not isinstance(doc, dict):
        raise PolicyError(f"{where} is not a peer")
    ipb = doc.get("ipBlock")
    has_sel = (
        "podSelector" in doc
        and doc["podSelector"] is not None
        or "namespaceSelector" in doc
        and doc["namespaceSelector"] is not None
    )
    if ipb is not None:
        if has_sel:
            raise PolicyError(f"{where}: ipBlock cannot be combined with a selector in one peer")
        if not isinstance(ipb, dict):
            raise PolicyError(f"{where}.ipBlock is not an object")
        cidr = _cidr(ipb.get("cidr"), f"{where}.ipBlock.cidr")
        excepts = []
        for i, e in enumerate(ipb.get("except") or []):
            net = _cidr(e, f"{where}.ipBlock.except[{i}]")
            inside = net.network_address in cidr and net.broadcast_address in cidr  # subnet_of, across both versions
            if net.version != cidr.version or not inside or net == cidr:
                raise PolicyError(f"{where}.ipBlock.except[{i}]: {e} is not inside {cidr}")
            excepts.append(net)
        return Peer(cidr=cidr, excepts=tuple(excepts))
    if not has_sel:
        raise PolicyError(f"{where}: a peer needs podSelector, namespaceSelector or ipBlock")
    pod_sel = parse_selector(doc["podSelector"], f"{where}.podSelector") if doc.get("podSelector") is not None else None
    ns_sel = (
        parse_selector(doc["namespaceSelector"], f"{where}.namespaceSelector")
        if doc.get("namespaceSelector") is not None
        else None
    )
    return Peer(pod_sel=pod_sel, ns_sel=ns_sel)


def _port(doc: object, where: str) -> PortRule:
    if not isinstance(doc, dict):
        raise PolicyError(f"{where} is not a port")
    proto = doc.get("protocol") or "TCP"
    if proto not in PROTOCOLS:
        raise PolicyError(f"{where}: invalid protocol {proto!r} (TCP, UDP or SCTP)")
    port = doc.get("port")
    end = doc.get("endPort")
    if isinstance(port, bool) or (port is not None and not isinstance(port, (int, str))):
        raise PolicyError(f"{where}.port is neither a number nor a name")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, int) and not 1 <= port <= 65535:
        raise PolicyError(f"{where}.port {port} is out of range")
    if isinstance(port, str) and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", port):
        raise PolicyError(f"{where}.port {port!r} is not a valid port name")
    if end is not None:
        if not isinstance(port, int) or not isinstance(end, int) or isinstance(end, bool):
            raise PolicyError(f"{where}.endPort needs a numeric port")
        if not port <= end <= 65535:
            raise PolicyError(f"{where}.endPort {end} is below port {port} or out of range")
    return PortRule(proto, port, end)


def _rules(docs: object, direction: str, where: str) -> tuple[Rule, ...]:
    if docs is None:
        return ()
    if not isinstance(docs, list):
        raise PolicyError(f"{where} is not a list")
    peer_key = "from" if direction == "ingress" else "to"
    out = []
    for i, r in enumerate(docs):
        here = f"{where}[{i}]"
        if r is None:
            r = {}
        if not isinstance(r, dict):
            raise PolicyError(f"{here} is not a rule")
        peers = r.get(peer_key) or []
        ports = r.get("ports") or []
        if not isinstance(peers, list) or not isinstance(ports, list):
            raise PolicyError(f"{here}: {peer_key} and ports must be lists")
        out.append(
            Rule(
                tuple(_peer(p, f"{here}.{peer_key}[{j}]") for j, p in enumerate(peers)),
                tuple(_port(p, f"{here}.ports[{j}]") for j, p in enumerate(ports)),
            )
        )
    return tuple(out)


def parse_policy(obj: dict[str, Any]) -> Policy:
    """One NetworkPolicy as the API returns it; :class:`PolicyError` when it cannot be read."""
    if not isinstance(obj, dict):
        raise PolicyError("not an object")
    md = obj.get("metadata") or {}
    if (
        not isinstance(md, dict)
        or not isinstance(md.get("name", ""), str)
        or not isinstance(md.get("namespace", ""), str)
    ):
        raise PolicyError("metadata (name, namespace) is not readable")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PolicyError("no spec")
    pod_sel = parse_selector(spec.get("podSelector") or {}, "spec.podSelector")
    types = spec.get("policyTypes")
    if types:
        if not isinstance(types, list) or any(t not in ("Ingress", "Egress") for t in types):
            raise PolicyError(f"spec.policyTypes {types!r}: only Ingress and Egress are valid")
        types = frozenset(types)
    else:
        egress_doc = spec.get("egress")
        types = frozenset(["Ingress", "Egress"] if isinstance(egress_doc, list) and egress_doc else ["Ingress"])
    ingress = _rules(spec.get("ingress"), "ingress", "spec.ingress") if "Ingress" in types else ()
    egress = _rules(spec.get("egress"), "egress", "spec.egress") if "Egress" in types else ()
    return Policy(md.get("namespace") or "default", md.get("name") or "?", pod_sel, types, ingress, egress)


def parse_policies(items: list[Any]) -> tuple[list[Policy], list[str]]:
    """(the readable policies, one line per unreadable one: 'NS/NAME (item N): why', controls shown escaped)."""
    from kpdiag.render.safe import term

    out, problems = [], []
    for i, obj in enumerate(items):
        md = _obj(_obj(obj).get("metadata"))
        try:
            out.append(parse_policy(obj))
        except PolicyError as exc:
            ns, name = term(_str(md.get("namespace")) or "?"), term(_str(md.get("name")) or "?")
            problems.append(f"NetworkPolicy {ns}/{name} (item {i}): {term(exc)} — not evaluated")  # one line, always
    return out, problems


# ------------------------------------------------------------------------------------------------ enforcement
@dataclass
class Enforcement:
    cni: str | None  # the recognised CNI(s), e.g. "calico", "flannel", "aws-vpc-cni + network policy agent"
    enforced: bool | None  # None: unknown
    evidence: list[str] = field(default_factory=list)

    def text(self) -> str:
        if self.enforced is None:
            return (
                "the CNI was not recognised"
                + (f" ({self.cni})" if self.cni else "")
                + ": NetworkPolicies are taken as enforced, which may not be so"
            )
        return f"CNI {self.cni}: NetworkPolicy {'is' if self.enforced else 'is NOT'} enforced"

    def to_dict(self) -> dict[str, Any]:
        return {"cni": self.cni, "enforced": self.enforced, "evidence": list(self.evidence)}


# name of the DaemonSet (or of its pods' prefix) → (CNI, enforces NetworkPolicy?)
_CNI: tuple[tuple[str, str, bool | None], ...] = (
    ("calico-node", "calico", True),
    ("canal", "canal", True),
    ("cilium", "cilium", True),
    ("weave-net", "weave-net", True),
    ("antrea-agent", "antrea", True),
    ("kube-router", "kube-router", True),
    ("kube-network-policies", "kube-network-policies", True),
    ("kube-flannel-ds", "flannel", False),
    ("kube-flannel", "flannel", False),
    ("flannel", "flannel", False),
    ("aws-node", "aws-vpc-cni", False),
)
_NOT_CNI = ("cilium-operator", "cilium-envoy", "calico-kube-controllers", "calico-typha", "antrea-controller")


def _workload(component: dict[str, Any]) -> str:
    owner = _str(component.get("owner"))
    if owner:
        return owner
    name = _str(component.get("name"))
    if component.get("kind") == "Pod" and "-" in name:
        return name.rsplit("-", 1)[0]  # a DaemonSet's pod: NAME-xxxxx
    return name


def _aws_policy_agent(containers: list[dict[str, Any]]) -> tuple[str, bool | None] | None:
    """aws-node with its network policy agent container: the agent enforces only when enabled (None: not said)."""
    agent = [c for c in containers if c.get("name") in ("aws-eks-nodeagent", "aws-network-policy-agent")]
    if not agent:
        return None
    agent_args = " ".join(" ".join(map(str, _arr(c.get("args")))) for c in agent)
    if "--enable-network-policy=true" in agent_args:
        return "aws-vpc-cni + network policy agent", True
    if "--enable-network-policy=false" in agent_args:
        return "aws-vpc-cni + network policy agent", False
    return "aws-vpc-cni + network policy agent", None


def _cni_of(comp: dict[str, Any], wl: str) -> tuple[str, bool | None] | None:
    """The CNI a workload is, and whether it enforces NetworkPolicy (None: not known), or None: not a CNI."""
    for prefix, cni, enforces in _CNI:
        if wl == prefix or (prefix != "flannel" and wl.startswith(prefix + "-")):
            containers = [c for c in _arr(comp.get("containers")) if isinstance(c, dict)]
            args = " ".join(" ".join(map(str, _arr(c.get("args")))) for c in containers)
            if cni == "aws-vpc-cni":
                cni, enforces = _aws_policy_agent(containers) or (cni, enforces)
            if cni == "kube-router" and "--run-firewall=false" in args:
                enforces = False
            return cni, enforces
    return None


def recognise_cni(components: list[dict[str, Any]] | None) -> Enforcement:
    """From the kube-system (kube-flannel, calico-system) DaemonSets or their pods: ``components`` items are
    ``{"kind": "DaemonSet"|"Pod", "namespace", "name", "owner", "containers": [{"name", "image", "args"}]}``."""
    if components is None:
        return Enforcement(None, None, [f"no CNI information collected ({sources.CNI})"])
    found: dict[str, bool | None] = {}
    evidence = []
    for comp in components:
        if not isinstance(comp, dict):
            continue
        wl = _workload(comp)
        recognised = None if wl in _NOT_CNI else _cni_of(comp, wl)
        if recognised is None:
            continue
        cni, enforces = recognised
        if cni not in found:
            evidence.append(
                f"{comp.get('kind') or 'DaemonSet'} {comp.get('namespace') or 'kube-system'}/{comp.get('name')}"
                + (f" (of {wl})" if wl != comp.get("name") else "")
                + f": {cni}"
            )
            found[cni] = enforces
        elif found[cni] is not True and enforces is not False:
            found[cni] = enforces
    if not found:
        return Enforcement(
            None, None, evidence or ["no known CNI DaemonSet in kube-system, kube-flannel or calico-system"]
        )
    names = " + ".join(sorted(found))
    values = list(found.values())
    enforced = True if True in values else None if None in values else False
    return Enforcement(names, enforced, evidence)


_KEPT_ARGS = ("--enable-network-policy", "--run-firewall")
_KEPT_ENV = ("AWS_VPC_K8S_CNI_",)  # aws-node's SNAT settings (KP641): plain settings, never a secret


def component(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A DaemonSet or pod API object reduced to what CNI recognition needs (names, images, two flags)."""
    if not isinstance(obj, dict):
        return None
    md = _obj(obj.get("metadata"))
    spec = _obj(obj.get("spec"))
    kind = (
        obj.get("kind") if obj.get("kind") in ("DaemonSet", "Pod") else ("DaemonSet" if "template" in spec else "Pod")
    )
    if kind == "DaemonSet":
        spec = _obj(_obj(spec.get("template")).get("spec"))
    owner = next(
        (
            o.get("name")
            for o in _arr(md.get("ownerReferences"))
            if isinstance(o, dict) and o.get("kind") == "DaemonSet" and isinstance(o.get("name"), str)
        ),
        None,
    )
    containers = []
    for c in _arr(spec.get("containers")) + _arr(spec.get("initContainers")):
        if isinstance(c, dict):
            args = [
                a
                for a in _arr(c.get("args")) + _arr(c.get("command"))
                if isinstance(a, str) and a.startswith(_KEPT_ARGS)
            ]
            entry: dict[str, Any] = {"name": _str(c.get("name")), "image": _str(c.get("image")), "args": args}
            env = {
                e["name"]: e["value"]
                for e in _arr(c.get("env"))
                if isinstance(e, dict) and _str(e.get("name")).startswith(_KEPT_ENV) and isinstance(e.get("value"), str)
            }
            if env:
                entry["env"] = env
            containers.append(entry)
    return {
        "kind": kind,
        "namespace": _str(md.get("namespace")) or None,
        "name": _str(md.get("name")),
        "owner": owner,
        "containers": containers,
    }
