"""How a Service's established connections are spread over its endpoints (conntrack): kube-proxy balances connections,
not requests, so a few long-lived HTTP/2 or gRPC connections can pin all the load on one pod."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import note
from kpdiag.model import Evidence
from kpdiag.state.typed_api import EndpointSlices, Services
from kpdiag.state.typed_node import ConntrackEntries
from kpdiag.state.typed_proxy import KubeProxyRules

MIN_CONNECTIONS = 4  # established connections to one Service port before their spread says anything


def _service_ports(services: Services | None, slices: EndpointSlices | None, rules: KubeProxyRules | None):
    """(ClusterIP, port) → (name, endpoint IPs), from the API when read, else from kube-proxy's rules; and the file
    they come from."""
    out: dict = {}
    svcs = services.every if services is not None else None
    if svcs:
        for svc in svcs:
            for port in svc.ports:
                eps = sorted({e.ip for e in svc.endpoints_for(port) if e.ready})
                for ip in svc.cluster_ips:
                    out[(ip, int(port.get("port") or 0))] = (
                        f"{svc.key}:{svc.port_name(port) or port.get('port')}",
                        eps,
                    )
        return out, slices.source if slices is not None else ""
    if rules is None:
        return out, ""
    for p in rules.programmed.values():
        if p.cluster_ip and p.port and (p.proto or "tcp").lower() == "tcp":
            out[(p.cluster_ip, int(p.port))] = (p.name, sorted({t.rpartition(":")[0] for t in p.endpoints}))
    return out, rules.ruleset.source


@check(
    "KP612",
    "connections-pinned",
    "A Service's established connections are pinned to few of its endpoints",
    "info",
    symptom="One pod of a Service is busy (CPU, latency) while its replicas idle — typically gRPC or HTTP/2 clients, "
    "database pools, WebSockets; scaling out the Deployment does not move the load.",
    why="""
        kube-proxy picks an endpoint once per connection (iptables: a random rule per new connection; IPVS and
        nftables alike), and every packet of that connection then follows its conntrack entry to the same pod. It
        balances connections, not requests. Clients that open a few long-lived connections and multiplex many
        requests over them (gRPC and HTTP/2 do by design; connection pools too) put all their requests on whichever
        pods those few connections landed on, and pods added later get none until the clients reconnect. This is
        how Services work, not a fault: the node's conntrack entries show the spread.
    """,
    fix="Balance requests, not connections: a client-side load balancer (gRPC's round_robin policy over a headless "
    "Service), a proxy or service mesh that understands HTTP/2, or clients that recycle connections (max connection "
    "age, e.g. gRPC's MaxConnectionAge on the server).",
)
def connections_pinned(
    new,
    table: ConntrackEntries,
    services: Optional[Services] = None,
    slices: Optional[EndpointSlices] = None,
    rules: Optional[KubeProxyRules] = None,
):
    text = table.text
    if not text:
        return  # an empty connection table: no connection is pinned anywhere
    ports, where = _service_ports(services, slices, rules)
    if not ports:
        raise Skip("no TCP Service port known (neither the API's Services nor kube-proxy's rules)")
    from .snat import conntrack_summary

    seen: dict = {}
    for (dst, dport, ep), n in conntrack_summary(text)[3].items():
        key = (dst, dport)
        if key in ports and ep != dst:
            seen.setdefault(key, Counter())[ep] += n
    src = table.source
    for key, counts in sorted(seen.items()):
        name, eps = ports[key]
        eps = sorted(set(eps) | set(counts))
        total = sum(counts.values())
        if total < MIN_CONNECTIONS or len(eps) < 2:
            continue
        top, n = counts.most_common(1)[0]
        idle = [e for e in eps if counts.get(e, 0) == 0]
        if n / total < min(1.0, 2.0 / len(eps)) or not idle:
            continue  # spread well enough: at least every endpoint got some, or none holds twice its share
        spread = ", ".join(f"{e}: {counts.get(e, 0)}" for e in eps[:6])
        yield new(
            f"{name} ({key[0]}:{key[1]}): {n} of its {total} established connections go to {top} and {len(idle)} of its "
            f"{len(eps)} endpoints have none ({spread}) — kube-proxy balances connections, not requests: long-lived "
            "HTTP/2 or gRPC connections stay on the pod they were given",
            fix=(
                note(
                    "gRPC: a headless Service (clusterIP: None) and the client's round_robin load-balancing policy, or "
                    "MaxConnectionAge on the server so clients reconnect and spread"
                ),
                note(
                    "HTTP/2 or pooled clients: a proxy or service mesh that balances requests, or a connection max age"
                ),
                note(
                    f"conntrack -L -p tcp --orig-dst {key[0]} --orig-port-dst {key[1]} | grep -c ESTABLISHED   # watch the spread"
                ),
            ),
            evidence=[Evidence(src, f"ESTABLISHED to {key[0]}:{key[1]} answered by {spread}")]
            + ([Evidence(where, f"{name}: endpoints {', '.join(eps[:6])}")] if where else []),
            subject=name,
            data={"service": name, "cluster_ip": key[0], "port": key[1], "connections": dict(counts), "endpoints": eps},
        )
