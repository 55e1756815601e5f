"""Dataplanes: what implements Services on a node — one class per kube-proxy mode (iptables, IPVS, nftables,
userspace) and per recognised replacement (Cilium's kube-proxy replacement, kube-router's service proxy, Calico's
eBPF dataplane) — registered like checks (``@dataplane``) and found by name with :func:`get`.

Each class owns what is particular to it: how the node shows it (``signs``: kube-proxy's rules of that mode, or a
replacement's interfaces, maps and processes), the programmed Service table it reads back (``service_table``), its
tracer, its words (where its Services live, the commands that show them) and its capabilities, which the rest of
kpdiag asks instead of comparing mode names (``state.dataplane.has_own_tracer``, ``.cluster_ips_stay_on_node`` …).
A new dataplane is one module in this package: it is found when the registry is first read. See
docs/architecture.md, "Adding a dataplane"."""

from __future__ import annotations

from kpdiag.dataplane.base import (
    UNKNOWN,
    Dataplane,
    Host,
    dataplane,
    get,
    kube_proxy_modes,
    registered,
    replacements,
)

__all__ = [
    "UNKNOWN",
    "Dataplane",
    "Host",
    "dataplane",
    "get",
    "kube_proxy_modes",
    "registered",
    "replacements",
]
