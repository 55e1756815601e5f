"""NetworkPolicy evaluation (kpdiag/state/netpol.py holds the rules it implements and the parsed policies): one
flow through the policies that select its ends (:class:`PolicyIndex`), the answer direction by direction (:class:`Flow`,
:class:`Direction`), and for a denial the NetworkPolicy that would admit exactly that flow (:func:`patch_doc`). Pure:
no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from kpdiag.state.netpol import NS_NAME_LABEL, End, Policy, PolicyError, Pod, Rule


# ------------------------------------------------------------------------------------------------ results
@dataclass
class Admission:
    policy: str
    rule: int
    peer: str
    ports: str

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "rule": self.rule, "peer": self.peer, "ports": self.ports}


@dataclass
class Direction:
    direction: str  # ingress | egress
    subject: str  # the pod the policies would select, or the address
    applies: bool  # False: the subject is not a pod policies can select (an IP, a host-network pod)
    restricted: bool  # some policy of this direction selects the subject
    allowed: bool
    policies: list[str] = field(default_factory=list)  # the policies of this direction selecting the subject
    admitted_by: Admission | None = None
    admits: dict[str, str] = field(default_factory=dict)  # policy → what it admits (for a denial)
    missing: str | None = None  # for a denial: what peer/port rule is missing
    patch_args: tuple[Any, ...] | None = field(
        default=None, repr=False
    )  # for a denial: what :attr:`patch` is built from

    @property
    def patch(self) -> str | None:
        """For a denial: a NetworkPolicy (YAML) that would admit exactly this flow — built when asked for."""
        return patch_yaml(*self.patch_args) if self.patch_args else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "subject": self.subject,
            "applies": self.applies,
            "restricted": self.restricted,
            "allowed": self.allowed,
            "policies": list(self.policies),
            "admitted_by": self.admitted_by.to_dict() if self.admitted_by else None,
            "admits": dict(self.admits),
            "missing": self.missing,
            "patch": self.patch,
        }

    def reason(self) -> str:
        """One line: why this direction passes or not."""
        if not self.applies:
            return f"{self.direction}: {self.subject} is not a pod NetworkPolicy selects: not restricted"
        if not self.restricted:
            return f"{self.direction}: no NetworkPolicy selects {self.subject}: open"
        if self.admitted_by:
            a = self.admitted_by
            return f"{self.direction}: admitted by {a.policy} rule {a.rule} ({a.peer} on {a.ports})"
        return f"{self.direction}: denied — {self.missing}"


@dataclass
class Flow:
    src: End
    dst: End
    port: int
    protocol: str
    egress: Direction
    ingress: Direction
    port_name: str | None = None

    @property
    def allowed(self) -> bool:
        return self.egress.allowed and self.ingress.allowed

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.src.text(),
            "to": self.dst.text(),
            "port": self.port,
            "protocol": self.protocol,
            "allowed": self.allowed,
            "egress": self.egress.to_dict(),
            "ingress": self.ingress.to_dict(),
        }


# ------------------------------------------------------------------------------------------------ the index
class PolicyIndex:
    """Policies grouped by namespace with their selectors parsed once; pods by name and address; namespace labels.
    Build it once and ask as many flows as needed."""

    def __init__(
        self, policies: list[Policy], namespaces: list[dict[str, Any]] | None = None, pods: list[Pod] | None = None
    ):
        self.by_ns: dict[str, list[Policy]] = {}
        for p in policies:
            self.by_ns.setdefault(p.namespace, []).append(p)
        self.policies = policies
        self.ns_labels_known: dict[str, dict[str, Any]] = {}
        for ns in namespaces or []:
            md = (ns.get("metadata") or {}) if isinstance(ns, dict) else {}
            if md.get("name"):
                labels = dict(md.get("labels") or {})
                labels.setdefault(NS_NAME_LABEL, md["name"])
                self.ns_labels_known[md["name"]] = labels
        self.pods: dict[str, Pod] = {}
        self.by_ip: dict[str, Pod] = {}
        self._selecting: dict[tuple[Any, ...], list[Policy]] = {}
        for pod in pods or []:
            self.add_pod(pod)

    def add_pod(self, pod: Pod) -> None:
        self.pods[pod.key] = pod
        if not pod.host_network:
            for ip in pod.ips:
                self.by_ip.setdefault(ip, pod)

    def ns_labels(self, name: str) -> dict[str, Any]:
        labels = self.ns_labels_known.get(name)
        if labels is None:  # not listed: the one label the API server always sets
            labels = {NS_NAME_LABEL: name}
        return labels

    def policy(self, key: str) -> Policy | None:
        ns, _, name = key.partition("/")
        return next((p for p in self.by_ns.get(ns, ()) if p.name == name), None)

    def open_ports(self, pod: Pod, direction: str, port: int, protocol: str) -> list[tuple[Policy, int, Rule]] | None:
        """The rules of the policies selecting ``pod`` in ``direction`` that admit ``port``/``protocol`` to or from
        some peer (named ports count: they may resolve to it); None when no policy of that direction selects it."""
        pols = self.selecting(pod, direction)
        if not pols:
            return None
        out = []
        for p in pols:
            for i, rule in enumerate(p.rules(direction)):
                if not rule.ports or any(
                    x.protocol == protocol
                    and (
                        x.port is None
                        or isinstance(x.port, str)
                        or x.port == port
                        or (x.end_port is not None and x.port <= port <= x.end_port)
                    )
                    for x in rule.ports
                ):
                    out.append((p, i, rule))
        return out

    def pod(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get(f"{namespace}/{name}")

    def end_for_ip(self, ip: str) -> End:
        """An address: the pod that has it (when one is known), else just the address."""
        pod = self.by_ip.get(ip)
        return End(ip, pod) if pod else End(ip)

    def selecting(self, pod: Pod, direction: str) -> list[Policy]:
        if pod.host_network:
            return []
        key = (pod.namespace, direction, tuple(sorted(pod.labels.items())))  # pods of one workload share the answer
        hit = self._selecting.get(key)
        if hit is None:
            t = "Ingress" if direction == "ingress" else "Egress"
            hit = self._selecting[key] = [
                p for p in self.by_ns.get(pod.namespace, ()) if t in p.types and p.pod_sel.matches(pod.labels)
            ]
        return hit

    def _direction(self, direction: str, subject: End, other: End, port: int, protocol: str, dst: End) -> Direction:
        spod = subject.selectable
        if spod is None:
            return Direction(direction, subject.text(), False, False, True)
        pols = self.selecting(spod, direction)
        out = Direction(direction, spod.key, True, bool(pols), True, [p.key for p in pols])
        if not pols:
            return out
        if direction == "ingress" and not other.is_pod and spod.host_ip and spod.host_ip in other.addresses():
            # the API's rule: traffic from the pod's own node (kubelet probes, host-network pods there) is allowed
            out.admitted_by = Admission(
                "(node)",
                0,
                f"{spod.host_ip}: the node {spod.key} runs on (traffic from a pod's own node is always allowed)",
                "all ports",
            )
            return out
        near_peer, near_port = [], []
        for p in pols:
            for i, rule in enumerate(p.rules(direction)):
                peer = None
                if not rule.peers:
                    peer = "anyone"
                else:
                    hit = next((x for x in rule.peers if x.matches(other, p.namespace, self.ns_labels)), None)
                    peer = hit.text(p.namespace) if hit else None
                port_hit = not rule.ports or any(x.matches(port, protocol, dst) for x in rule.ports)
                if peer and port_hit:
                    out.admitted_by = Admission(p.key, i, peer, rule.ports_text())
                    return out
                if peer:
                    near_peer.append((p, i, rule))
                elif port_hit:
                    near_port.append((p, i, rule))
        out.allowed = False
        out.admits = {p.key: p.admits_text(direction) for p in pols}
        who = other.text()
        word = "from" if direction == "ingress" else "to"
        if near_peer:
            p, i, rule = near_peer[0]
            out.missing = (
                f"{p.key} rule {i} admits {who} only on {rule.ports_text()}, not {port}/{protocol}: "
                f"a port rule for {port}/{protocol} is missing"
            )
        elif near_port:
            p, i, rule = near_port[0]
            out.missing = (
                f"{p.key} rule {i} admits {port}/{protocol} only {word} {rule.peers_text(p.namespace)}; "
                f"{who} is not among them: a peer rule for it is missing"
            )
        elif all(not p.rules(direction) for p in pols):
            out.missing = f"{', '.join(p.key for p in pols)} select{'s' if len(pols) == 1 else ''} {spod.key} and admit{'s' if len(pols) == 1 else ''} no {direction} at all"
        else:
            out.missing = f"no rule of {', '.join(p.key for p in pols)} admits {who} on {port}/{protocol}"
        out.patch_args = (direction, spod, other, port, protocol)
        return out

    def evaluate(self, src: End, dst: End, port: int | str, protocol: str = "TCP") -> Flow:
        """Is ``src`` → ``dst``:``port``/``protocol`` allowed? A named ``port`` is resolved on the destination pod."""
        protocol = protocol.upper()
        name = None
        if isinstance(port, str) and not port.isdigit():
            name = port
            number = dst.pod.named_port(port, protocol) if dst.pod else None
            if number is None:
                raise PolicyError(f"{dst.text()} declares no {protocol} containerPort named {port!r}")
            port = number
        port = int(port)
        src = src.in_family_of(dst)
        egress = self._direction("egress", src, dst, port, protocol, dst)
        ingress = self._direction("ingress", dst, src, port, protocol, dst)
        return Flow(src, dst, port, protocol, egress, ingress, name)


# ------------------------------------------------------------------------------------------------ patches
# labels that identify one pod generation, not the workload: left out of the selectors of a suggested patch
_VOLATILE_LABELS = (
    "pod-template-hash",
    "controller-revision-hash",
    "pod-template-generation",
    "apps.kubernetes.io/pod-index",
)


def _stable_labels(pod: Pod) -> dict[str, Any]:
    labels = {k: v for k, v in pod.labels.items() if k not in _VOLATILE_LABELS}
    return labels


def _dns_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name[:63].rstrip("-")) or "allow"


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9./_-]*")


def _scalar(value: object) -> str:
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in (
            "true",
            "false",
            "yes",
            "no",
            "on",
            "off",
            "null",
            "y",
            "n",
        )
        return value if plain else json.dumps(value)
    return json.dumps(value)


def to_yaml(value: object, indent: int = 0) -> str:
    """A small block-style YAML emitter for the plain dicts, lists and scalars of a patch."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_scalar(k)}:")
                lines.append(to_yaml(v, indent + 2 if isinstance(v, dict) else indent).rstrip("\n"))
            else:
                lines.append(f"{pad}{_scalar(k)}: {'{}' if v == {} else '[]' if v == [] else _scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                body = to_yaml(item, indent + 2).rstrip("\n")
                lines.append(f"{pad}- {body[indent + 2 :]}")
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(pad + _scalar(value))
    return "\n".join(lines) + "\n"


def patch_doc(direction: str, subject: Pod, other: End, port: int, protocol: str) -> tuple[dict[str, Any], list[str]]:
    """A NetworkPolicy in the subject's namespace that admits exactly ``other`` → (ingress) or ← (egress) the
    subject on port/protocol — added next to the existing policies (they are additive), it opens nothing else.
    Returns (the object, notes on where it is wider or more brittle than that)."""
    notes = []
    mine = _stable_labels(subject)
    if not mine:
        notes.append(
            f"{subject.key} has no labels: podSelector {{}} selects every pod of {subject.namespace}; label the pod and select that"
        )
    other_pod = other.selectable
    other_name = other_pod.name if other_pod is not None else (other.ip or "peer")
    name = _dns_name(f"allow-{other_name}-{'to' if direction == 'ingress' else 'from'}-{subject.name}-{port}")
    labels = _stable_labels(other_pod) if other_pod is not None else {}
    if other_pod is not None and labels:
        peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(sorted(labels.items()))}}
        if other_pod.namespace != subject.namespace:
            peer = {"namespaceSelector": {"matchLabels": {NS_NAME_LABEL: other_pod.namespace}}, **peer}
    else:
        ip = other.ip or (other.pod.ip if other.pod else None) or "0.0.0.0"
        peer = {"ipBlock": {"cidr": f"{ip}{'/128' if ':' in ip else '/32'}"}}
        if other_pod is not None:
            notes.append(
                f"{other_pod.key} has no labels: admitted by its address, which changes when the pod is recreated"
            )
    doc = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": subject.namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(sorted(mine.items()))} if mine else {},
            "policyTypes": ["Ingress" if direction == "ingress" else "Egress"],
            direction: [
                {("from" if direction == "ingress" else "to"): [peer], "ports": [{"protocol": protocol, "port": port}]}
            ],
        },
    }
    return doc, notes


def patch_yaml(direction: str, subject: Pod, other: End, port: int, protocol: str) -> str:
    doc, notes = patch_doc(direction, subject, other, port, protocol)
    return "".join(f"# {n}\n" for n in notes) + to_yaml(doc)


def patch_oneline(doc: dict[str, Any]) -> str:
    """The patch as one shell command (JSON is YAML too), for places that print one line per step."""
    return "kubectl apply -f - <<< '" + json.dumps(doc, separators=(",", ":")).replace("'", "'\\''") + "'"
