"""The data side of NetworkPolicy: policies, pods, namespaces, the kube-dns Service and the CNI read from a bundle
into one :class:`PolicyData` (for the checks KP120–KP123 through ``ClusterView.policy_data`` and for
``kpdiag policy``, kpdiag/commands/policy.py). Reading only: nothing here evaluates a flow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import dataclass, field

from kpdiag.bundle import sources
from kpdiag.bundle.store import list_items
from kpdiag.state.netpol import Enforcement, Pod, component, parse_policies, recognise_cni
from kpdiag.state.netpol_eval import PolicyIndex

if TYPE_CHECKING:
    from kpdiag.bundle.store import Bundle

NP_SRC = sources.NETWORKPOLICIES
CNI_NAMESPACES = ("kube-system", "kube-flannel", "calico-system")


def get_path(obj: object, *keys: str) -> Any:
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


@dataclass
class PolicyData:
    index: PolicyIndex
    problems: list[str] = field(default_factory=list)  # one line per unreadable policy
    enforcement: Enforcement = field(default_factory=lambda: Enforcement(None, None))
    covered: set[str] | None = None  # namespaces whose policies were listed; None: all
    namespaces_known: bool = False
    dns_service: dict[str, Any] | None = None  # the kube-dns Service (raw), when collected

    def coverage_gap(self, *namespaces: str | None) -> list[str]:
        if self.covered is None:
            return []
        return sorted({n for n in namespaces if n and n not in self.covered})


def load(bundle: Bundle) -> PolicyData | None:
    """The NetworkPolicy view of a bundle; None when it has no readable cluster/networkpolicies.json. Unreadable
    policies are recorded as problems of the bundle (one line each, naming the policy) and left out."""
    doc = bundle.read_json(NP_SRC)
    if doc is None:
        return None
    if list_items(doc) is None:
        bundle.problem(NP_SRC, 'not a Kubernetes List (expected {"items": [...]})')
        return None
    policies, problems = parse_policies(doc["items"])
    for line in problems:
        bundle.problem(NP_SRC, line)
    covered = get_path(doc, "metadata", "namespaces")
    pods_raw: list[dict[str, Any]] = []
    seen = set()
    dns_service = None
    for rel in (sources.PODS, sources.CLIENT_POD, sources.DNS_PODS):
        for obj in (list_items(bundle.read_json(rel)) or []) if bundle.exists(rel) else []:
            if obj.get("kind") not in (None, "Pod"):
                continue
            key = (get_path(obj, "metadata", "namespace"), get_path(obj, "metadata", "name"))
            if key not in seen:
                seen.add(key)
                pods_raw.append(obj)
    if bundle.exists(sources.DNS_SERVICE):
        dns_service = next(iter(list_items(bundle.read_json(sources.DNS_SERVICE)) or []), None)
    ns_doc = bundle.read_json(sources.NAMESPACES) if bundle.exists(sources.NAMESPACES) else None
    pods = [Pod.from_api(p) for p in pods_raw]
    index = PolicyIndex(policies, list_items(ns_doc) or [], pods)
    return PolicyData(
        index,
        problems,
        enforcement_of(bundle, pods_raw),
        set(covered) if isinstance(covered, list) else None,
        ns_doc is not None,
        dns_service,
    )


def enforcement_of(bundle: Bundle, pods_raw: list[dict[str, Any]]) -> Enforcement:
    cni = bundle.read_json(sources.CNI) if bundle.exists(sources.CNI) else None
    if list_items(cni) is not None:
        return recognise_cni(list_items(cni))
    daemonsets = list_items(bundle.read_json(sources.DAEMONSETS) if bundle.exists(sources.DAEMONSETS) else None)
    if daemonsets is not None:
        return recognise_cni([c for c in (component(dict(d, kind="DaemonSet")) for d in daemonsets) if c])
    system = [p for p in pods_raw if get_path(p, "metadata", "namespace") in CNI_NAMESPACES]
    if system:  # pods.json as `kubectl get pods -A` prints it: the CNI's own pods are in it
        found = recognise_cni([c for c in (component(dict(p, kind="Pod")) for p in system) if c])
        if found.cni:
            return found
    return recognise_cni(None)
