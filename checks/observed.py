"""What the probes observed about one Service: the name that is not there, endpoints that refuse or drop, a Service path
that fails while its endpoints answer. Each reads kpdiag.state.probe_results — the same reading the verdict uses."""

from __future__ import annotations

import difflib
from typing import Optional

from kpdiag import DEFAULT_IMAGE as KPDIAG_IMAGE  # the image deploy/build-image.sh builds
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.state.probe_results import confidence, observations, share_line
from kpdiag.state.typed_api import Focus, NetworkPolicies, NodeObject, Pods, Probes, ServiceLookup, Services
from kpdiag.state.typed_node import Manifest
from kpdiag.state.typed_proxy import KubeProxyRules, Nft

from .service import in_focus, node_here, usable_here
from kpdiag.bundle import sources
from kpdiag.bundle.store import list_items

LOOKUP_SRC = sources.SERVICE_LOOKUP


def _declared_ports(pods: Pods | None, pod_name: str | None, namespace: str) -> list[int] | None:
    for p in pods.items if pods else ():
        md = p.get("metadata") or {}
        if md.get("name") == pod_name and md.get("namespace", namespace) == namespace:
            ports = [
                cp.get("containerPort")
                for c in (p.get("spec") or {}).get("containers") or []
                for cp in c.get("ports") or []
                if isinstance(cp, dict)
            ]
            return [x for x in ports if isinstance(x, int)]
    return None


# the layer(s) each verdict check reports a port for, by the judgement's blame (kpdiag/state/probe_results.py): one
# place, so KP113 ("the Service layer fails") never fires next to KP111/KP112 ("endpoints fail: it works in part") or
# KP114 ("cannot tell") on the same port
VERDICT_CHECKS: dict[str, tuple[str, ...]] = {
    "KP111": ("endpoints", "backend"),
    "KP112": ("endpoints", "backend"),
    "KP113": ("service-layer",),
    "KP114": ("unseen",),
}


@check(
    "KP110",
    "service-not-found",
    "The Service does not exist",
    "error",
    verdict=("not-found",),
    symptom="Clients get 'could not resolve host' (NXDOMAIN) for the Service's name; kubectl says 'NotFound'.",
    why="""
        The API server answered, and it has no Service of that name in that namespace. Most often the name or the namespace
        is mistyped, the Service lives in another namespace (a client in namespace A must use NAME.B to reach Service NAME in
        namespace B), or it was deleted. kpdiag lists the Services with the nearest names in that namespace and the
        namespaces that do have a Service of that name.
    """,
    fix="Use the right name and namespace (kubectl get svc -A | grep NAME), or create the Service.",
)
def service_not_found(new, lookup: ServiceLookup):
    doc = lookup.doc
    if not isinstance(doc, dict):
        raise Skip(f"{LOOKUP_SRC} is not a lookup document")
    if doc.get("found") is not False:
        return
    ns, name = str(doc.get("namespace") or "?"), str(doc.get("name") or "?")
    names = [n for n in doc.get("names_in_namespace") or [] if isinstance(n, str)]
    others = [n for n in doc.get("same_name_in") or [] if isinstance(n, str)]
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    bits = []
    if near:
        bits.append(f"did you mean {', '.join(near)}?")
    if others:
        bits.append(
            f"a Service named {name} exists in namespace{'s' if len(others) > 1 else ''} {', '.join(others[:5])}"
        )
    if not near and not others:
        bits.append(
            f"namespace {ns} has {len(names)} Service(s)" + (f": {', '.join(sorted(names)[:8])}" if names else "")
            if doc.get("listed")
            else "the other Services could not be listed"
        )
    ev = [Evidence(lookup.source, f"GET service {ns}/{name}: {doc.get('status', 404)} Not Found")]
    if doc.get("listed"):
        ev.append(Evidence(lookup.source, f"Services in {ns}: {', '.join(sorted(names)[:12]) or 'none'}"))
    fix = [f"kpdiag svc {near[0]} -n {ns}" for _ in [0] if near] + [f"kpdiag svc {name} -n {o}" for o in others[:2]]
    fix += [f"kubectl get services -A --field-selector metadata.name={name}", f"kubectl -n {ns} get services"]
    yield new(f"Service {ns}/{name} does not exist: " + "; ".join(bits), fix=fix, evidence=ev, subject=f"{ns}/{name}")


def _ruled_out(policies: NetworkPolicies | None, svc, d) -> tuple[list[str], list[str]]:
    """What a drop to endpoint ``d`` cannot be (checked) and what it still may be (not checked)."""
    out, remain = [], []
    ep = next((e for e in svc.endpoints if e.ip == d.ip), None)
    if ep is not None and ep.ready:
        out.append("the pod is Ready (its readiness probe passes)")
    pols = policies.source(sources.NETWORKPOLICIES) if policies else None
    listed = list_items(pols)
    if listed is not None:
        mine = [p for p in listed if (p.get("metadata") or {}).get("namespace") == svc.namespace]
        if not mine:
            out.append(f"NetworkPolicy (none in namespace {svc.namespace})")
        else:
            remain.append(
                f"NetworkPolicy ({len(mine)} in {svc.namespace}; KP120/KP121 say whether one denies this client)"
            )
    else:
        remain.append("a NetworkPolicy (not collected: kpdiag policy, or kubectl get networkpolicy -A)")
    remain += [
        f"a host firewall on node {d.node or '?'} (kpdiag node there)",
        "the pod itself (a hung process, a full accept queue, its own firewall)",
        "the CNI's path between the nodes (MTU, tunnel, routes)",
    ]
    return out, remain


@check(
    "KP111",
    "endpoint-refuses",
    "An endpoint refuses connections on its targetPort",
    "error",
    verdict=("endpoints-refuse",),
    symptom="Some or all connections to the Service are refused ('connection refused') or reset, although the pods are Ready.",
    why="""
        kpdiag connected to each endpoint directly, at the port the Service sends to, and the pod answered with a reset
        (or, for UDP, 'port unreachable'): nothing listens there. The pod's address is alive (the kernel answered), so the
        network is fine: the application is down or restarting, listens on another port, or listens on 127.0.0.1
        (localhost) only — which no one outside the pod can reach. A readiness probe that does not test this port lets such
        a pod stay Ready.
    """,
    fix="See what the container really listens on (kubectl exec POD -- ss -ltnp) and make the app listen on 0.0.0.0:targetPort.",
)
def endpoint_refuses(
    new, services: Services, probes: Probes, focus: Optional[Focus] = None, pods: Optional[Pods] = None
):
    for svc in in_focus(services, focus):
        for obs in observations(probes, svc):
            refused = [d for d in obs.direct if d.outcome == "refused"]
            if not refused or not obs.may_report(VERDICT_CHECKS["KP111"]):
                continue  # KP113 reports a port whose failed connects these endpoints do not explain
            declared_elsewhere = []
            for d in refused:
                declared = _declared_ports(pods, d.pod, svc.namespace)
                if declared and d.port not in declared:
                    declared_elsewhere.append(d)  # KP104's case: the declared ports disagree with targetPort
            refused = [d for d in refused if d not in declared_elsewhere]
            if not refused:
                continue
            n = len(obs.direct)
            through = {
                "works": "works through the Service for the other endpoints",
                "partial": f"works through the Service for the other endpoints: {share_line(obs)}",
                "unknown": "was not probed through the Service",
            }.get(obs.status, f"gets '{obs.service_result}' through the Service")
            pod = refused[0].pod or "<pod>"
            yield new(
                f"{svc.key} {obs.proto.upper()} {obs.port}: nothing listens on {', '.join(d.label() for d in refused)} "
                f"({len(refused)} of {n} endpoint(s) {'refuse' if obs.proto == 'tcp' else 'answer port-unreachable'}); the port {through}",
                fix=(
                    f"kubectl -n {svc.namespace} exec {pod} -- ss -ltnp   # or: cat /proc/net/tcp — is {refused[0].port} there, on 0.0.0.0 or 127.0.0.1?",
                    f"kubectl -n {svc.namespace} logs {pod} --tail=50   # did the app start, which port does it say?",
                    f"kubectl -n {svc.namespace} describe pod {pod}   # restarts; a readiness probe that does not test port {refused[0].port}",
                ),
                evidence=[
                    probes.evidence(
                        f"{'TCP connect' if obs.proto == 'tcp' else 'UDP'} {d.target} (the pod directly): {d.result}"
                    )
                    for d in refused[:5]
                ]
                + (
                    [probes.evidence(f"through the Service {obs.target}: {obs.service_result}")]
                    if obs.service_result
                    else []
                )
                + [probes.evidence(f"the verdict rests on: {confidence(obs)}")],
                subject=f"{svc.key}:{obs.port}",
                data=obs.data(),
            )


@check(
    "KP112",
    "endpoint-drops",
    "An endpoint does not answer at all (packets dropped)",
    "error",
    verdict=("endpoints-silent",),
    symptom="Connections to the Service hang and time out (all of them, or one in N), while the pods are Ready.",
    why="""
        kpdiag connected to the endpoint directly, from where it runs, and nothing came back — no answer, no reset — or an
        ICMP error said the way is blocked. A refused connection would mean the pod is reachable but nothing listens; silence
        means the packets are dropped on the way or by the pod: a NetworkPolicy that does not admit this client, a firewall
        on the pod's node, the pod itself (a hung process whose accept queue is full), or the network between the nodes.
        The finding lists what kpdiag ruled out and what remains.
    """,
    fix="Check, in this order: NetworkPolicies selecting the pod (kpdiag policy), the pod's node (kpdiag node), the pod itself (kubectl exec … ss -ltn).",
)
def endpoint_drops(
    new,
    services: Services,
    probes: Probes,
    focus: Optional[Focus] = None,
    policies: Optional[NetworkPolicies] = None,
):
    for svc in in_focus(services, focus):
        for obs in observations(probes, svc):
            silent = [d for d in obs.direct if d.outcome in ("dropped", "icmp-error", "error")]
            if not silent or not obs.may_report(VERDICT_CHECKS["KP112"]):
                continue  # KP113 reports a port whose failed connects these endpoints do not explain
            d0 = silent[0]
            out, remain = _ruled_out(policies, svc, d0)
            what = ", ".join(f"{d.label()}: {d.result}" for d in silent[:5])
            yield new(
                f"{svc.key} {obs.proto.upper()} {obs.port}: {len(silent)} of {len(obs.direct)} endpoint(s) do not answer ({what})"
                + (
                    f"; through the Service it works for the others: {share_line(obs)}"
                    if obs.status in ("works", "partial")
                    else f"; through the Service: {obs.service_result or 'not probed'}"
                )
                + (f". Ruled out: {'; '.join(out)}" if out else "")
                + f". Not ruled out: {'; '.join(remain)}",
                fix=(
                    f"kpdiag policy --to {svc.namespace}/{d0.pod or svc.name} --port {d0.port}/{obs.proto.upper()} --from <this pod NS/NAME>   # does a NetworkPolicy admit the client?",
                    f"kubectl -n {svc.namespace} get networkpolicy",
                    f"kubectl debug node/{d0.node or '<the pod node>'} -it --profile=sysadmin --image={KPDIAG_IMAGE} -- kpdiag node   # the pod's node: firewall, routes",
                    f"kubectl -n {svc.namespace} exec {d0.pod or '<pod>'} -- ss -ltn   # Recv-Q at its maximum: the app does not accept",
                ),
                evidence=[
                    probes.evidence(
                        f"{'TCP connect' if obs.proto == 'tcp' else 'UDP'} {d.target} (the pod directly): {d.result}"
                    )
                    for d in silent[:5]
                ]
                + (
                    [probes.evidence(f"through the Service {obs.target}: {obs.service_result}")]
                    if obs.service_result
                    else []
                )
                + [probes.evidence(f"the verdict rests on: {confidence(obs)}")],
                subject=f"{svc.key}:{obs.port}",
                data=obs.data(),
            )


@check(
    "KP113",
    "service-path-broken",
    "The Service fails although its endpoints answer directly",
    "error",
    verdict=("service-layer",),
    symptom="curl to the Service's name or ClusterIP fails, while curl to a pod IP works.",
    why="""
        kpdiag connected through the ClusterIP as often as it takes to reach every endpoint (from distinct source ports)
        and to each endpoint directly. Connects through the ClusterIP failed that no endpoint failing directly explains:
        they reached an endpoint that answers (when conntrack shows which), they fail in a way no endpoint does, or far
        more of them fail than the dead endpoints' share gives (chance below 1 in 1,000). What stands between
        is the Service layer on the client's own node: kube-proxy's rules (missing, stale, or not synced), conntrack entries
        pointing at old pods, or a host firewall. That node's rules decide, so the diagnosis continues there: kpdiag node on
        the client's node traces this exact packet through them.
    """,
    fix="Run kpdiag node --service NS/NAME on the client's node (kubectl debug node/NODE --profile=sysadmin).",
)
def service_path_broken(
    new,
    services: Services,
    probes: Probes,
    focus: Optional[Focus] = None,
    rules: Optional[KubeProxyRules] = None,
    manifest: Optional[Manifest] = None,
    nft: Optional[Nft] = None,
    here: Optional[NodeObject] = None,
):
    node = node_here(here, manifest) or "<the client's node>"
    on_node = rules is not None or nft is not None
    for svc in in_focus(services, focus):
        for obs in observations(probes, svc):
            if not obs.may_report(VERDICT_CHECKS["KP113"]):
                continue
            ok, j = obs.ok_direct, obs.judgement
            me = probes.doc.get("source")
            hairpin = any(d.ip == me for d in obs.direct)
            dead = obs.failing_direct
            yield new(
                f"{svc.key} {obs.proto.upper()} {obs.port} through {obs.target}: {obs.service_result}"
                + (f" from {obs.service_from}" if obs.service_from else "")
                + (
                    f" ({j.failed} of {j.connects} connects failed, {j.unexplained} that no dead endpoint explains)"
                    if j.connects > 1
                    else ""
                )
                + f" — yet {len(ok)} of {len(obs.direct)} endpoint(s) answer directly ({', '.join(d.label() for d in ok[:4])}): "
                + "the Service layer on the client's node is at fault, not the backend"
                + (
                    f" (besides, {', '.join(f'{d.label()}: {d.result}' for d in dead[:3])} fail(s) directly)"
                    if dead
                    else ""
                )
                + (
                    f" — this client ({me}) is itself an endpoint: its own connection must hairpin back to it (KP206)"
                    if hairpin
                    else ""
                )
                + (" (see the node findings above: KP2xx/KP3xx/KP4xx)" if on_node else ""),
                fix=(
                    f"kubectl debug node/{node} -it --profile=sysadmin --image={KPDIAG_IMAGE} -- kpdiag node --service {svc.key}",
                    f"kpdiag trace --dst {obs.cluster_ip}:{obs.port} --proto {obs.proto} --from pod --src <this pod IP>   # on that node",
                ),
                evidence=[probes.evidence(f"through the Service {obs.target}: {obs.service_result}")]
                + [probes.evidence(f"{d.target} (the pod directly): {d.result}") for d in obs.direct[:5]]
                + [probes.evidence(f"the verdict rests on: {confidence(obs)}")],
                subject=f"{svc.key}:{obs.port}",
                data=obs.data(),
            )


@check(
    "KP114",
    "service-port-fails",
    "The Service port does not answer",
    "error",
    verdict=("unexplained",),
    symptom="Connections to the Service are refused, reset or time out.",
    why="""
        Through the ClusterIP the Service port did not answer, and kpdiag could not compare with its endpoints (none was
        probed directly — e.g. UDP without raw sockets, or more endpoints than it probes). Without that comparison it cannot
        say whether the backend or the Service layer is at fault; the next step is to probe one endpoint by hand.
    """,
    fix="Probe an endpoint directly (nc -vz POD_IP TARGET_PORT) and run kpdiag node --service NS/NAME on the client's node.",
)
def service_port_fails(
    new,
    services: Services,
    probes: Probes,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    here: Optional[NodeObject] = None,
):
    for svc in in_focus(services, focus):
        for obs in observations(probes, svc):
            if not obs.may_report(VERDICT_CHECKS["KP114"]) or obs.status not in ("fails", "partial") or obs.direct:
                continue
            use = usable_here(svc, obs.port_spec, here, manifest, 6 if ":" in obs.cluster_ip else 4).internal(svc)
            if use is not None and not use:
                continue  # no usable endpoint: KP101/KP102/KP106 say why
            yield new(
                f"{svc.key} {obs.proto.upper()} {obs.port} through {obs.target}: {obs.service_result}; no endpoint was probed directly, "
                "so the backend and the Service layer cannot be told apart",
                fix=(
                    f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o wide   # then: nc -vz <endpoint IP> <port>",
                    f"kpdiag node --service {svc.key}   # on the client's node",
                ),
                evidence=[
                    probes.evidence(f"through the Service {obs.target}: {obs.service_result}"),
                    services.evidence(svc, f"{len(svc.endpoints)} endpoint(s)"),
                ],
                subject=f"{svc.key}:{obs.port}",
                data=obs.data(),
            )
