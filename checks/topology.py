"""Topology-aware routing and trafficDistribution as kube-proxy applies them on this node: a zone whose traffic all
goes to too few endpoints, and hints on some endpoints only (then kube-proxy ignores them all)."""

from __future__ import annotations

from typing import Any, Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.bundle import sources
from kpdiag.model import Evidence
from kpdiag.state.typed_api import EndpointSlices, Focus, NodeObject, NodeObjects, Services

from .service import in_focus, port_data

ZONE_LABEL = "topology.kubernetes.io/zone"
ANNOTATIONS = ("service.kubernetes.io/topology-mode", "service.kubernetes.io/topology-aware-hints")
# a zone's share of the endpoints below this fraction of its share of the nodes is "far below"
SHARE_FLOOR = 0.5


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _asked(svc) -> tuple[str, str] | None:
    """How the Service asks for zone-local routing: (what, the fix step that stops it), or None."""
    md = _dict(svc.raw.get("metadata"))
    notes = _dict(md.get("annotations"))
    for key in ANNOTATIONS:
        value = notes.get(key)
        if isinstance(value, str) and value.lower() == "auto":
            return f"annotation {key}={value}", f"kubectl -n {svc.namespace} annotate service {svc.name} {key}-"
    dist = svc.spec.get("trafficDistribution")
    if isinstance(dist, str) and dist in ("PreferClose", "PreferSameZone"):
        return (
            f"spec.trafficDistribution: {dist}",
            f"kubectl -n {svc.namespace} patch service {svc.name} --type=json "
            '-p \'[{"op":"remove","path":"/spec/trafficDistribution"}]\'',
        )
    return None


def _zone_nodes(nodes: NodeObjects | None) -> dict[str, int]:
    """Nodes per zone (their topology.kubernetes.io/zone label), from the Node objects the bundle has."""
    out: dict[str, int] = {}
    for obj in nodes.objects if nodes else ():
        zone = _dict(_dict(obj.get("metadata")).get("labels")).get(ZONE_LABEL)
        if isinstance(zone, str) and zone:
            out[zone] = out.get(zone, 0) + 1
    return out


def _hints(eps) -> str:
    by_zone: dict[str, list[str]] = {}
    for e in eps:
        for z in sorted(e.zone_hints) or ["(no hint)"]:
            by_zone.setdefault(z, []).append(e.ip)
    return "; ".join(f"{z} ← {', '.join(ips[:4])}{' …' if len(ips) > 4 else ''}" for z, ips in sorted(by_zone.items()))


@check(
    "KP161",
    "topology-too-few-endpoints",
    "Topology-aware routing sends this zone's traffic to too few endpoints",
    "warning",
    severities=("info", "warning"),
    symptom="One pod of a Service is overloaded (CPU, latency, 5xx) while the others idle; or cross-zone traffic "
    "although the Service asks for zone-local routing.",
    why=f"""
        With topology-aware routing (annotation service.kubernetes.io/topology-mode: Auto) or trafficDistribution
        (PreferClose), the EndpointSlice controller puts a zone hint on each endpoint and kube-proxy sends this
        node's traffic only to the endpoints hinted for its zone (topology.kubernetes.io/zone on the Node). When that
        zone has a single endpoint, or a share of the endpoints far below its share of the nodes (under
        {SHARE_FLOOR:.0%} of it), all the zone's clients pile onto those pods while the others idle: PreferClose
        hints every endpoint for its own zone whatever the load, so a zone with many clients and one replica gets
        no help from the rest. And when only some endpoints carry hints, kube-proxy ignores all of them: the
        zone-local routing the Service asks for is off and traffic crosses zones.
    """,
    fix="Remove the topology annotation or trafficDistribution, or run enough replicas in every zone (spread them "
    "with topologySpreadConstraints on topology.kubernetes.io/zone).",
)
def topology_too_few_endpoints(
    new,
    services: Services,
    slices: EndpointSlices,
    node: NodeObject,
    nodes: Optional[NodeObjects] = None,
    focus: Optional[Focus] = None,
):
    zones = _zone_nodes(nodes)
    found, unsure = [], None
    for svc in in_focus(services, focus):
        asked = _asked(svc)
        for port in svc.ports:
            for family in (4, 6):
                ready = [e for e in svc.endpoints_for(port, family=family) if e.ready]
                hinted = [e for e in ready if e.zone_hints]
                if not hinted:
                    continue
                if len(hinted) < len(ready):
                    found.append(_partial(new, services, slices, svc, port, ready, hinted, asked))
                elif node.zone is None:
                    unsure = unsure or svc.key
                else:
                    found.append(_too_few(new, services, slices, node, svc, port, ready, zones, asked))
    found = [f for f in found if f is not None]
    if not found and unsure:
        raise Skip(
            f"{unsure}'s endpoints carry zone hints and this node's zone is unknown (no {ZONE_LABEL} label on its "
            f"Node in {node.source or sources.NODES}, no zone in the manifest)"
        )
    yield from found


def _too_few(new, services, slices, node, svc, port, ready, zones: dict[str, int], asked):
    zone = node.zone
    mine = [e for e in ready if zone in e.zone_hints]
    if not mine:
        return None  # no endpoint for this zone: kube-proxy uses them all
    share_eps = len(mine) / len(ready)
    total = sum(zones.values())
    share_nodes = zones.get(zone, 0) / total if len(zones) > 1 and total else None
    single = len(mine) == 1 and len(ready) > 1
    low = share_nodes is not None and share_eps < SHARE_FLOOR * share_nodes
    if not (single or low):
        return None
    nodes_part = f"; the zone has {share_nodes:.0%} of the nodes ({zones[zone]} of {total})" if low else ""
    ev = [
        services.evidence(svc, asked[0] if asked else "no topology annotation or trafficDistribution"),
        slices.evidence(f"{svc.key} ready endpoints' hints: {_hints(ready)}"),
        Evidence(node.source or sources.NODES, f"node {node.name}: {ZONE_LABEL}={zone}"),
    ]
    stop = (
        asked[1]
        if asked
        else f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o yaml   # who writes the hints?"
    )
    sel = ",".join(f"{k}={v}" for k, v in sorted(svc.selector.items())) or "<selector>"
    return new(
        f"{svc.key} port {port.get('port')}: every connection from zone {zone} goes to {len(mine)} of its "
        f"{len(ready)} ready endpoint(s) ({', '.join(e.pod or e.ip for e in mine[:3])}){nodes_part} — "
        "the zone's hints leave the others idle",
        severity="warning",
        fix=(
            command(stop),
            command(f"kubectl -n {svc.namespace} get pods -l {sel} -o wide   # how the replicas spread over zones"),
            note(
                f"or keep it and add replicas in {zone}, spreading them with topologySpreadConstraints "
                f"(topologyKey: {ZONE_LABEL}, maxSkew: 1, whenUnsatisfiable: ScheduleAnyway)"
            ),
        ),
        evidence=ev,
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(
            svc,
            port,
            zone=zone,
            zone_endpoints=[e.ip for e in mine],
            ready_endpoints=len(ready),
            zone_node_share=None if share_nodes is None else round(share_nodes, 3),
        ),
    )


def _partial(new, services, slices, svc, port, ready, hinted, asked):
    bare = [e for e in ready if not e.zone_hints]
    return new(
        f"{svc.key} port {port.get('port')}: {len(bare)} of its {len(ready)} ready endpoint(s) carry no zone hint "
        f"({', '.join(e.pod or e.ip for e in bare[:3])}), so kube-proxy ignores every hint: traffic is spread over "
        "all zones" + (f" although the Service asks for zone-local routing ({asked[0]})" if asked else ""),
        severity="info",
        fix=(
            command(
                f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} "
                "-o custom-columns=NAME:.metadata.name,MANAGER:.metadata.labels.endpointslice\\.kubernetes\\.io/managed-by"
            ),
            command(f"kubectl -n {svc.namespace} get events --field-selector involvedObject.name={svc.name}"),
            note(
                "the EndpointSlice controller removes hints it cannot allocate safely (too few endpoints for the "
                "zones, a zone without nodes' CPU): add replicas, or remove the annotation if cross-zone traffic is fine"
            ),
        ),
        evidence=[
            services.evidence(svc, asked[0] if asked else "no topology annotation or trafficDistribution"),
            slices.evidence(f"{svc.key} ready endpoints' hints: {_hints(ready)}"),
        ],
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(svc, port, unhinted=[e.ip for e in bare], hinted=[e.ip for e in hinted]),
    )
