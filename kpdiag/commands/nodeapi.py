"""`kpdiag node` with the Kubernetes API: the Services, EndpointSlices and this Node, so that every rules-versus-API
check (KP105/106, KP202/203, KP302/303, KP402/403, KP504, KP602) runs on the node itself. Credentials: --kubeconfig /
--context, $KUBECONFIG or ~/.kube/config, else the pod's service account (the pods `kpdiag cluster` starts get a
read-only one: deploy/rbac-cluster.yaml). Without any, one line says so and the rules alone are read (KP115, KP116)."""

from __future__ import annotations

import os

NO_API = (
    "no Kubernetes API credentials ({why}): the rules-versus-API checks are skipped; what kube-proxy's rules alone "
    "show is reported (KP115, KP116) — give --kubeconfig, or run in a pod with kpdiag's service account"
)


def api_files(
    node_name: str | None,
    kubeconfig: str | None = None,
    context: str | None = None,
    progress=None,
    service: str | None = None,
    collector=None,
) -> tuple[dict, list[dict], str | None]:
    """(bundle files, errors, API server URL) — the errors say in one line each why something could not be read.
    ``service`` (NS/NAME): only what that Service's checks read (ClusterCollector.service_view; the bundle's
    partial "holds" say so: :func:`api_holds`), not every Service and EndpointSlice. ``collector``: the
    ClusterCollector to read with (one that :func:`service_lookup` shares), else a new one."""
    from kpdiag.collect.cluster import ClusterCollector

    cc = collector if collector is not None else ClusterCollector(kubeconfig, context)
    if not cc.connect():
        return {}, [{"source": "cluster", "error": NO_API.format(why=cc.config_error or "none found")}], None
    node = os.environ.get("NODE_NAME") or node_name or None
    if service:
        if progress:
            progress(f"reading Service {service} and its EndpointSlices from {cc.out.api}")
        namespace, _, name = service.partition("/")
        cc.service_view(namespace, name, node)
    else:
        if progress:
            progress(f"reading Services and EndpointSlices from {cc.out.api}")
        cc.node_view(node)
    return dict(cc.out.files), list(cc.out.errors), cc.out.api


def api_holds(service: str, files: dict) -> dict[str, str]:
    """The manifest's partial "holds" of a focused API read (the sources it wrote, and what each holds)."""
    from kpdiag.collect.cluster import ClusterCollector

    ns, name = service.split("/", 1)
    return {
        str(src): what.format(svc=service, ns=ns, name=name)
        for src, what in ClusterCollector.SERVICE_VIEW_HOLDS.items()
        if src in files
    }


def service_lookup(service: str, collector):
    """``lookup()`` for a focused read (kpdiag/collect/service_rules.py): the API's Service NS/NAME, as (object, "") or
    (None, why not); asked only when the mode's reader needs it. ``collector`` (a ClusterCollector) is the one the
    Service's API view is read with (:func:`api_files`, often at the same time in another thread): its credentials are
    loaded once and the Service is asked for once, whichever asks first."""

    def lookup():
        ns, name = service.split("/", 1)
        return collector.one_service(ns, name)

    return lookup
