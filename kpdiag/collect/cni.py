"""Which CNI runs, read from the API with no more than it needs (``cluster/cni.json``).

A DaemonSet's pod template carries every container's environment, values included: listing kube-system's DaemonSets
shows other workloads' settings and secrets. So kube-system's DaemonSets are listed only where the opt-in
``kpdiag rbac svc-kube-system`` grants it (a list also finds a CNI DaemonSet under another name); otherwise
(403) each DaemonSet kpdiag knows by name (:data:`KNOWN_DAEMONSETS`) is read with ``get`` — and a one-line note says
that a renamed one cannot be recognised when none of those names is there. A few pods of the kube-flannel and
calico-system namespaces are listed where those namespaces exist (a RoleBinding there grants it). Everything is
reduced to what recognition needs (:func:`kpdiag.state.netpol.component`) before it is kept."""

from __future__ import annotations

import json
from typing import Any, Callable

from kpdiag.bundle import sources
from kpdiag.manifests import apply_command
from kpdiag.state.netpol import _CNI as CNI_WORKLOADS  # (DaemonSet name, CNI, enforces?): one list
from kpdiag.state.netpol import component

NAMESPACE = "kube-system"
# the DaemonSet names kpdiag recognises a CNI by (kpdiag.state.netpol), read one by one with `get`
KNOWN_DAEMONSETS: tuple[str, ...] = tuple(dict.fromkeys(name for name, _, _ in CNI_WORKLOADS))
OWN_NAMESPACES = ("kube-flannel", "calico-system")  # flannel's and the Calico operator's own namespaces
OPT_IN = "svc-kube-system"  # the manifest that grants `list daemonsets` in kube-system


class _Status:
    """Wraps an API method and remembers the HTTP status of each failure, so that a refusal the caller expects (403 on
    the opt-in list, 404 of a name that is not there) is told from a real failure."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.failed: list[int] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.fn(*args, **kwargs)
        except Exception as exc:
            self.failed.append(int(getattr(exc, "status", 0) or 0))
            raise


def collect_cni(coll: Any, api: Any, existing: set | None) -> None:
    """Write ``cluster/cni.json`` into ``coll.out.files`` (a :class:`kpdiag.collect.cluster.ClusterCollector`, whose
    ``_call`` records every failure as a reason): kube-system's DaemonSets — listed, or read by name — and up to 20
    pods of each of :data:`OWN_NAMESPACES` that exists (``existing``: the namespaces listed, None when unknown)."""
    daemonsets = _daemonsets(coll, api)
    comps: list[dict] = []
    listed: list[str] = []
    if daemonsets is not None:
        listed.append(NAMESPACE)
        comps += [c for c in (component(dict(item, kind="DaemonSet")) for item in daemonsets) if c]
    for ns in OWN_NAMESPACES:
        if existing is not None and ns not in existing:
            continue
        doc = coll._call(sources.CNI, f"list pods in {ns}", api.list_namespaced_pod, ns, limit=20, kind="Pod")
        if doc is None:
            continue
        listed.append(ns)
        comps += [c for c in (component(dict(item, kind="Pod")) for item in doc.get("items", [])) if c]
    if NAMESPACE in listed:
        coll.out.files[sources.CNI] = json.dumps(
            {"apiVersion": "kpdiag/v1", "kind": "CNIComponents", "namespaces": listed, "items": comps}, indent=1
        ).encode()


def _daemonsets(coll: Any, api: Any) -> list[dict] | None:
    """kube-system's DaemonSets: the list where it is granted, else those of :data:`KNOWN_DAEMONSETS` that exist;
    None when neither could be read (the reason recorded)."""
    mark = len(coll.out.errors)
    listing = _Status(api.list_namespaced_daemon_set)
    doc = coll._call(sources.CNI, f"list daemonsets in {NAMESPACE}", listing, NAMESPACE, kind="DaemonSet")
    if doc is not None:
        return list(doc.get("items", []))
    if listing.failed != [403]:
        return None  # not a refusal: the reason is recorded, and reading by name would fail the same way
    del coll.out.errors[mark:]  # the list is opt-in: its refusal is expected, the gets below take its place
    found = []
    for name in KNOWN_DAEMONSETS:
        mark = len(coll.out.errors)
        get = _Status(api.read_namespaced_daemon_set)
        one = coll._call(sources.CNI, f"get daemonset {NAMESPACE}/{name}", get, name, NAMESPACE, kind="one:DaemonSet")
        if one is not None:
            found.append(one)
        elif get.failed == [404]:
            del coll.out.errors[mark:]  # not this CNI: no failure
        else:
            return None  # refused or failed: recorded; the names after it would fail the same way
    if not found:
        coll._err(
            sources.CNI,
            f"no DaemonSet kpdiag knows by name in {NAMESPACE} ({', '.join(KNOWN_DAEMONSETS)}) and listing them is not "
            f"granted: a CNI DaemonSet under another name is not recognised (opt-in: {apply_command(OPT_IN)})",
        )
    return found
