"""One dataplane model for every proxy mode: a Service port on one ClusterIP, and what this node programs for it.

kube-proxy writes the same thing three ways — a KUBE-SVC/KUBE-SVL chain (iptables), a virtual server with real
servers (IPVS), a service-/local- chain behind the service-ips map (nftables). Each mode's dataplane class
(kpdiag/dataplane/) reads its rules into :class:`~kpdiag.dataplane.base.PortView` (the API's Service port, whether the
mode programmed it, the endpoints it sends new connections to, and where that is written) and supplies the words of
its findings (``missing_words``, ``mismatch_words``). The two questions every mode asks are answered once, here:

* :func:`unprogrammed` — the port has ready endpoints in the API, and this node programmed nothing for it;
* :func:`drifted` — it is programmed, and its endpoints are not the ones kube-proxy should use here (ready, else
  serving-terminating; narrowed by topology hints; this node's own under internalTrafficPolicy: Local).

The findings keep their mode's id (KP202/KP203 iptables, KP302/KP303 IPVS, KP402/KP403 nftables): the ids are in
users' ``--select``/``--ignore`` lists and in their runbooks, and the fix commands are the mode's own. A check passes
its mode's class and its rules as a typed input (KubeProxyRules, Ipvs, Nft); a new mode is its class's methods.
"""

from __future__ import annotations

from kpdiag.checkapi import Skip
from kpdiag.parse.addr import hostport
from kpdiag.state.typed_api import Focus, NodeObject, Services
from kpdiag.state.typed_node import Manifest

from .service import in_focus, usable_here


def port_views(dp, table, services: Services, running, focus: Focus | None = None, preflight: str | None = None):
    """The ports of the Services to diagnose as ``dp`` programs them in ``table``, or Skip with why they cannot be
    judged (``running``: the dataplane kube-proxy runs; ``focus``: the Service being diagnosed, if any)."""
    why = dp.ports_skip(running, preflight, table)
    if why:
        raise Skip(why)
    return dp.port_views(in_focus(services, focus), table)


def missing(new, dp, table, services: Services, proxy, focus: Focus | None = None, preflight=None):
    """A mode's "missing" check (KP202, KP302, KP402): :func:`unprogrammed` over the ports of ``table``, as ``dp`` programs
    them (``proxy``: ProxyMode; ``preflight``: Preflight, when the mode can be asked about)."""
    views = port_views(dp, table, services, proxy.dataplane, focus, preflight.mode if preflight else None)
    yield from unprogrammed(new, dp, views, services)


def mismatch(new, dp, table, services: Services, slices, proxy, focus=None, node=None, manifest=None, preflight=None):
    """A mode's "mismatch" check (KP203, KP303, KP403): :func:`drifted` over the ports of ``table``, against the
    endpoints kube-proxy on this node should use (:func:`wanted`)."""
    views = port_views(dp, table, services, proxy.dataplane, focus, preflight.mode if preflight else None)
    yield from drifted(new, dp, views, wanted(node, manifest), slices)


def unprogrammed(new, dp, views, services):
    """Service ports with ready endpoints that this node's rules do not program at all."""
    for view in views:
        if view.ready and view.programmed is None:
            words = dp.missing_words(view)
            yield new(
                words.summary,
                fix=words.fix,
                evidence=[services.evidence(view.svc, _api_side(view, dp)), words.rules],
                subject=f"{view.svc.key}:{view.number}",
                data={**_data(view, dp.name), "programmed": False, "ready_endpoints": view.ready},
            )


def drifted(new, dp, views, wanted, slices):
    """Programmed Service ports whose endpoints differ from the ones kube-proxy should use on this node (``wanted(svc,
    port, family)``: those endpoints, None when that cannot be told; ``slices``: EndpointSlices, for evidence)."""
    for view in views:
        if view.programmed is None:
            continue
        want = wanted(view.svc, view.port, view.family)
        if not want:
            continue  # nothing usable (KP101/KP102 say so), or this node's name/zone is unknown: not judged
        have = set(view.endpoints)
        if have == want:
            continue
        gone, absent = sorted(have - want), sorted(want - have)
        text = f"{dp.ports_verb} {', '.join(gone) or 'no stale endpoint'}" + (
            f" and misses {', '.join(absent)}" if absent else ""
        )
        if gone and dp.counts_share:  # iptables' words have always said which share goes astray
            text += (
                f" (~{len(gone) / len(have) * 100:.0f}% of connections go to endpoints this node should not use: "
                "not ready, gone, or hinted for another zone)"
            )
        words = dp.mismatch_words(view, have, text)
        yield new(
            words.summary,
            fix=words.fix,
            evidence=[words.rules, slices.evidence(f"ready: {', '.join(sorted(want))}")],
            subject=f"{view.svc.key}:{view.number}",
            data={
                **_data(view, dp.name),
                "programmed": True,
                "endpoints": sorted(have),
                "expected": sorted(want),
                "stale": gone,
                "missing": absent,
            },
        )


def wanted(node: NodeObject | None = None, manifest: Manifest | None = None):
    """``wanted(svc, port, family)`` for :func:`drifted`: the DNAT targets kube-proxy on this node programs for a
    ClusterIP port in the rules of IP version ``family`` — its usable endpoints of that family (ready, else
    serving-terminating; narrowed by topology hints; only this node's under internalTrafficPolicy: Local); None when
    that cannot be told (this node's name or zone unknown)."""

    def targets(svc, port, family):
        eps = usable_here(svc, port, node, manifest, family).internal(svc)
        return None if eps is None else {hostport(e.ip, svc.target_of(e, port)) for e in eps}

    return targets


def _data(view, mode: str) -> dict:
    return {
        "service": view.svc.key,
        "port": view.number,
        "protocol": view.proto,
        "cluster_ip": view.ip,
        "family": view.family,
        "mode": mode,
    }


def _api_side(view, dp) -> str:
    if dp.counts_share:
        return f"clusterIP {view.ip} port {view.number}, {view.ready} ready endpoint(s)"
    return f"clusterIP {view.ip} port {view.number}/{view.proto}"
