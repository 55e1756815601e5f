"""One Service as the API sees it: endpoints, readiness, selector, target ports, traffic policies, DNS."""

from __future__ import annotations

import ipaddress
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.parse.addr import hostport
from kpdiag.fixcmd import note
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_api import DnsProbe, EndpointSlices, Focus, NodeObject, Pods, Probes, Services
from kpdiag.state.typed_node import Manifest
from kpdiag.state.typed_proxy import KubeProxyRules

SVC_SRC = sources.SERVICES
EPS_SRC = sources.ENDPOINTSLICES
PODS_SRC = sources.PODS


def _pick(svcs, focus, allow_headless: bool):
    if focus and not svcs:
        raise Skip(f"Service {focus[0]}/{focus[1]} is not in the API data")
    return [s for s in svcs if allow_headless or (not s.headless and s.type != "ExternalName")]


def in_focus(services: Services, focus: Focus | None, allow_headless: bool = False):
    """The Services a check judges: the focused one (Skip when the API has no such Service), else every one;
    headless and ExternalName Services only with ``allow_headless``."""
    return _pick(services.focused, focus.service if focus else None, allow_headless)


def node_here(node: NodeObject | None, manifest: Manifest | None) -> str | None:
    """This node's name: the API's Node, else the manifest's (None: unknown)."""
    return (node.name if node else None) or (manifest.node if manifest else None) or None


def usable_here(svc, port, node: NodeObject | None, manifest: Manifest | None, family: int | None = None):
    """What kube-proxy on this node programs for ``port`` (kpdiag.state.cluster.usable_endpoints): ready endpoints,
    topology hints, the serving-terminating fallback, Local traffic policies."""
    from kpdiag.state.cluster import usable_endpoints

    return usable_endpoints(svc, port, node=node_here(node, manifest), zone=node.zone if node else None, family=family)


def port_data(svc, port: dict, **more) -> dict:
    """A Service port as a finding's data (the same keys as the dataplane findings')."""
    return {
        "service": svc.key,
        "port": port.get("port"),
        "protocol": (port.get("protocol") or "TCP").lower(),
        "port_name": port.get("name") or None,
        "cluster_ips": list(svc.cluster_ips),
        **more,
    }


def _endpoint_data(e) -> dict:
    return {
        "ip": e.ip,
        "pod": e.pod,
        "node": e.node,
        "ready": e.ready,
        "serving": e.serving,
        "terminating": e.terminating,
    }


def _probe(probes: Probes | None, target: str, kind: str) -> dict | None:
    for r in probes.probe_results(kind) if probes else []:
        if r.get("target") == target:
            return r
    return None


def _reject_rule(rules: KubeProxyRules | None, svc, port):
    progs = rules.programmed if rules is not None else None
    if not progs:
        return None
    prog = progs.get(svc.kube_proxy_name(port))
    return prog.no_endpoints_rule if prog else None


@check(
    "KP101",
    "no-endpoints",
    "Service has no endpoints",
    "error",
    verdict=("no-ready-endpoint",),
    symptom="Connections to the Service are refused at once ('connection refused'; ICMP port unreachable for UDP).",
    why="""
        A Service is only a name and a virtual IP; the traffic goes to its endpoints — the ready pods its selector
        picks, as listed in its EndpointSlices. With no endpoints at all, kube-proxy installs a rule that REJECTs
        the ClusterIP port ("has no endpoints"), so clients are refused immediately. The usual causes: the
        selector matches no pod (KP103), the pods do not exist yet or crashed, or a Service without selector whose
        EndpointSlices nobody created.
    """,
    fix="Make the selector match running pods (compare kubectl get pods --show-labels with the Service's selector), or create the EndpointSlice for a selector-less Service.",
)
def no_endpoints(
    new,
    services: Services,
    slices: EndpointSlices,
    focus: Optional[Focus] = None,
    rules: Optional[KubeProxyRules] = None,
    probes: Optional[Probes] = None,
):
    for svc in in_focus(services, focus):
        for port in svc.ports:
            if svc.endpoints_for(port):
                continue
            ev = [
                services.evidence(
                    svc, f"selector {svc.selector or '(none)'}; port {port.get('port')}/{port.get('protocol', 'TCP')}"
                ),
                slices.evidence(
                    f"no EndpointSlice with endpoints for {svc.key} port {port.get('name') or port.get('port')}"
                ),
            ]
            rule = _reject_rule(rules, svc, port)
            if rule is not None:
                ev.append(Evidence(rule.source, rule.text, rule.lineno))
            for ip in svc.cluster_ips[:1]:
                p = _probe(probes, f"{hostport(ip, port.get('port'))}/tcp", "tcp-connect")
                if p:
                    ev.append(Evidence("probe", f"TCP connect {p['target']}: {p['result']}"))
            named = _other_port_names(svc, port)
            if named:  # endpoints exist, listed under other port names: kube-proxy pairs ports by name only
                yield _port_name_mismatch(slices, new, svc, port, named, ev)
                continue
            cause = (
                "no selector: nobody creates its endpoints"
                if not svc.selector
                else "its selector picks no ready or unready pod"
            )
            yield new(
                f"{svc.key} port {port.get('port')} has no endpoints ({cause}): connections are refused",
                fix=(
                    f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o wide",
                    f"kubectl -n {svc.namespace} get pods -l {','.join(f'{k}={v}' for k, v in svc.selector.items())} -o wide"
                    if svc.selector
                    else f"kubectl -n {svc.namespace} apply -f <an EndpointSlice labelled kubernetes.io/service-name={svc.name}>",
                    f"kubectl -n {svc.namespace} get pods --show-labels   # compare with the selector {svc.selector}",
                ),
                evidence=ev,
                subject=f"{svc.key}:{port.get('port')}",
                data=port_data(svc, port, selector=dict(svc.selector), endpoints=[]),
            )


def _port_label(name: str) -> str:
    return f"'{name}'" if name else "(unnamed)"


def _other_port_names(svc, port) -> dict[str, list]:
    """The Service's endpoints that serve none of ``port``'s name, by the EndpointSlice port names they do list
    ({name: endpoints}); empty when it has no endpoints at all."""
    out: dict[str, list] = {}
    for e in svc.endpoints:
        for name in e.ports:
            out.setdefault(name, []).append(e)
    want = port.get("name") or ""
    return {} if want in out else out


def _port_name_mismatch(slices: EndpointSlices, new, svc, port, named: dict[str, list], ev: list):
    """KP101 when the EndpointSlices have endpoints, but under port names the Service port does not carry."""
    want = port.get("name") or ""
    eps = {e.ip: e for es in named.values() for e in es}
    ready = [e for e in eps.values() if e.ready]
    names = ", ".join(_port_label(n) for n in sorted(named))
    names_of_slices = sorted({e.slice_name for e in eps.values()})
    first = sorted(named)[0]
    mirrored = not svc.selector
    ev = (
        ev[:1]
        + [
            slices.evidence(
                f"EndpointSlice {s}: ports "
                + ", ".join(
                    f"{_port_label(n)} {es[0].ports[n][0]}/{es[0].ports[n][1].upper()}"
                    for n, es in sorted(named.items())
                    if any(e.slice_name == s for e in es)
                )
                + f"; {sum(1 for e in eps.values() if e.slice_name == s)} endpoint(s)",
            )
            for s in names_of_slices[:3]
        ]
        + ev[2:]
    )
    return new(
        f"{svc.key} port {port.get('port')} ({_port_label(want)}) has no endpoints: its EndpointSlice(s) list "
        f"{len(eps)} endpoint(s) ({len(ready)} ready) under port name(s) {names}, not {_port_label(want)} — kube-proxy "
        "pairs a Service port with EndpointSlice ports by name, so it programs this port with no endpoints and "
        "connections are refused",
        fix=(
            f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} "
            "-o custom-columns=SLICE:.metadata.name,PORT-NAMES:.ports[*].name",
            f"kubectl -n {svc.namespace} get service {svc.name} -o custom-columns=SERVICE:.metadata.name,PORT-NAMES:.spec.ports[*].name",
            note(
                f"rename the port {_port_label(first)} of the EndpointSlice (or of the Endpoints object it is mirrored "
                f"from) to {_port_label(want)}, or the Service port to {_port_label(first)}: the two names must be equal"
                if mirrored
                else "the Service's port names and its EndpointSlices' differ: check who writes EndpointSlices "
                f"labelled kubernetes.io/service-name={svc.name} besides the endpoint controller"
            ),
        ),
        evidence=ev,
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(
            svc,
            port,
            selector=dict(svc.selector),
            endpoints=[],
            endpoint_port_names=sorted(named),
            endpoints_under_other_names=[_endpoint_data(e) for e in list(eps.values())[:16]],
        ),
    )


def _not_ready_evidence(eps: list, slices: EndpointSlices, pods: Pods | None) -> list[Evidence]:
    """The endpoints' conditions, and the Ready condition of the first pods behind them."""
    by_name = {(p.get("metadata") or {}).get("name"): p for p in (pods.items if pods else ())}
    ev = [
        slices.evidence(
            f"{e.ip} ({e.pod or 'no pod'} on {e.node or '?'}): ready=false"
            + (f", serving={'true' if e.serving else 'false'}, terminating" if e.terminating else ""),
        )
        for e in eps[:5]
    ]
    if pods is None:
        return ev  # no pod conditions to cite
    for e in eps[:3]:
        pod = by_name.get(e.pod)
        for c in ((pod or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") != "True":
                ev.append(
                    pods.evidence(
                        f"{e.pod}: Ready={c.get('status')} {c.get('reason') or ''} {c.get('message') or ''}".strip()
                    )
                )
    return ev


def _not_ready_finding(new, svc, port: dict, eps: list, ev: list[Evidence]):
    """None of the port's endpoints is ready: a warning while kube-proxy falls back to terminating ones that
    still serve, an error otherwise."""
    fallback = [e for e in eps if e.serving_terminating]
    if fallback:
        return new(
            f"{svc.key} port {port.get('port')}: none of its {len(eps)} endpoint(s) is ready; kube-proxy falls back to the "
            f"{len(fallback)} that are terminating but still serving ({', '.join(e.pod or e.ip for e in fallback[:3])}) — "
            "traffic flows until they exit, then the Service has nothing",
            severity="warning",
            fix=(
                f"kubectl -n {svc.namespace} get pods -l {','.join(f'{k}={v}' for k, v in svc.selector.items()) or '<selector>'} -o wide   # are new pods coming up?",
                f"kubectl -n {svc.namespace} rollout status deployment/<name>   # a rollout whose new pods never get ready",
                f"kubectl -n {svc.namespace} describe pod <new pod>   # why the replacements are not ready",
            ),
            evidence=ev,
            subject=f"{svc.key}:{port.get('port')}",
            data=port_data(svc, port, endpoints=[_endpoint_data(e) for e in eps], fallback=True),
        )
    return new(
        f"{svc.key} port {port.get('port')}: {len(eps)} endpoint(s), none ready — kube-proxy sends no traffic to them",
        fix=(
            f"kubectl -n {svc.namespace} describe pod {eps[0].pod or '<pod>'}   # readiness probe failures are under Events",
            f"kubectl -n {svc.namespace} logs {eps[0].pod or '<pod>'}",
            f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o yaml | grep -A3 conditions",
        ),
        evidence=ev,
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(svc, port, endpoints=[_endpoint_data(e) for e in eps], fallback=False),
    )


@check(
    "KP102",
    "endpoints-not-ready",
    "Service has endpoints, none ready",
    "error",
    severities=("warning", "error"),
    verdict=("no-ready-endpoint",),
    symptom="Connections to the Service are refused or time out although its pods exist.",
    why="""
        kube-proxy only sends traffic to endpoints whose pods are *ready* (their readiness probe passes). When every
        endpoint is not ready — a failing readiness probe, a pod still starting — the Service behaves as if it had no
        endpoints: the pods are there, they just have not said they can take traffic. One exception (since
        Kubernetes 1.26): when none is ready but some are *terminating and still serving* (a rolling update, a node
        drain), kube-proxy falls back to those, so traffic keeps flowing until they exit — then a warning, not an error.
    """,
    fix="Look at why the pods are not ready: kubectl describe pod (readiness probe, events), kubectl logs.",
)
def not_ready(
    new, services: Services, slices: EndpointSlices, focus: Optional[Focus] = None, pods: Optional[Pods] = None
):
    for svc in in_focus(services, focus):
        for port in svc.ports:
            eps = svc.endpoints_for(port)
            if not eps or any(e.ready for e in eps):
                continue
            yield _not_ready_finding(new, svc, port, eps, _not_ready_evidence(eps, slices, pods))


@check(
    "KP103",
    "selector-matches-nothing",
    "Service selector matches no pod",
    "error",
    explains=("KP101",),
    symptom="The Service has no endpoints although the pods you meant are running.",
    why="""
        A Service finds its pods by label: every key=value of spec.selector must be on the pod, exactly (case and
        spelling). One typo — app: web vs app: webapp, a missing tier label, a selector copied from another
        Deployment — and the Service selects nothing, so it has no endpoints. kpdiag re-checks the selector itself
        against the pods in the namespace and shows the pods that come closest.
    """,
    fix="Fix either the Service's spec.selector or the pod template's labels so that every selector key=value is on the pods.",
)
def selector_nothing(new, services: Services, pods: Pods, focus: Optional[Focus] = None):
    for svc in in_focus(services, focus):
        if not svc.selector:
            continue
        if pods.selected(svc):
            continue
        near = []
        for p in pods.items:
            md = p.get("metadata") or {}
            if md.get("namespace", svc.namespace) != svc.namespace:
                continue
            labels = md.get("labels") or {}
            diff = [
                f"{k}: wants {v!r}, pod has {labels.get(k)!r}" for k, v in svc.selector.items() if labels.get(k) != v
            ]
            if set(labels) & set(svc.selector):  # shares a selector key: a near miss worth showing
                near.append((len(diff), md.get("name"), diff))
        near.sort()
        ev = [services.evidence(svc, f"spec.selector = {svc.selector}")]
        ev += [pods.evidence(f"pod {name}: {'; '.join(diff)}") for _, name, diff in near[:3]]
        hint = f" — closest: pod {near[0][1]} ({'; '.join(near[0][2])})" if near else ""
        yield new(
            f"{svc.key} selects pods with {','.join(f'{k}={v}' for k, v in svc.selector.items())}, and no pod in {svc.namespace} has all of them{hint}",
            fix=(
                f"kubectl -n {svc.namespace} get pods --show-labels",
                f"kubectl -n {svc.namespace} get pods -l {','.join(f'{k}={v}' for k, v in svc.selector.items())}   # empty: the selector matches nothing",
                f"kubectl -n {svc.namespace} edit service {svc.name}   # or fix the labels in the Deployment's pod template",
            ),
            evidence=ev,
            subject=svc.key,
            data={
                "service": svc.key,
                "selector": dict(svc.selector),
                "closest": [{"pod": name, "differs": diff} for _, name, diff in near[:3]],
            },
        )


def _container_ports(pod: dict) -> list[dict]:
    out: list[dict] = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        out.extend(p for p in c.get("ports") or [] if isinstance(p, dict))
    return out


def _named_target(new, svc, port: dict, tp: str, pods: list, declared: list, services: Services, pods_read: Pods):
    """A named targetPort no pod declares (the pods get no endpoint for it), or None when one does."""
    if any(cp.get("name") == tp for cp in declared):
        return None
    names = sorted({cp.get("name") for cp in declared if cp.get("name")})
    return new(
        f"{svc.key} port {port.get('port')} targets the named port {tp!r}, which none of its {len(pods)} pod(s) declares"
        + (f" (they name: {', '.join(names)})" if names else ""),
        fix=(
            f"kubectl -n {svc.namespace} patch service {svc.name} --type json -p "
            f'\'[{{"op":"replace","path":"/spec/ports/{svc.ports.index(port)}/targetPort","value":<port or name>}}]\'',
            f"kubectl -n {svc.namespace} get pod {(pods[0].get('metadata') or {}).get('name')} -o jsonpath='{{.spec.containers[*].ports}}'",
        ),
        evidence=[
            services.evidence(svc, f"port {port.get('port')} targetPort {tp!r}"),
            pods_read.evidence(f"containerPorts: {[(cp.get('name'), cp.get('containerPort')) for cp in declared][:6]}"),
        ],
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(svc, port, target_port=tp, container_port_names=names),
    )


def _numbered_target(new, svc, port: dict, tp, pods: list, declared: list, services: Services, pods_read: Pods, probes):
    """A numeric targetPort the pods' declared containerPorts do not include — an error when probes of it fail, a
    warning when it was not probed — or None."""
    number = int(tp)
    numbers = sorted({cp.get("containerPort") for cp in declared if cp.get("containerPort")})
    if not numbers or number in numbers:
        return None  # nothing declared (containerPorts are optional) or it agrees: a refusal there is KP111's case
    proto = (port.get("protocol") or "TCP").lower()
    direct = [
        r
        for r in (probes.probe_results("tcp-connect" if proto == "tcp" else "udp") if probes else [])
        if str(r.get("target", "")).endswith(f":{number}/{proto}")
        and r.get("target", "").rsplit(":", 1)[0].strip("[]") not in svc.cluster_ips
    ]
    if direct and all(r.get("result") in ("connected", "udp-reply") for r in direct):
        return None  # the app listens on targetPort after all: the declaration is only out of date
    failing = [r for r in direct if r.get("result") not in ("connected", "udp-reply", "skipped")]
    ev = [
        services.evidence(svc, f"port {port.get('port')} targetPort {number}"),
        pods_read.evidence(f"containerPorts declared: {numbers}"),
    ]
    ev += [
        Evidence(sources.PROBES_SERVICE, f"connect {r['target']} (the pod directly): {r['result']}")
        for r in failing[:3]
    ]
    return new(
        f"{svc.key} port {port.get('port')} sends to targetPort {number}, but its pods declare {', '.join(map(str, numbers))}"
        + (
            f" — and {len(failing)} endpoint(s) refuse or drop {number}"
            if failing
            else " (not probed: the app may still listen there)"
        ),
        severity="error" if failing else "warning",
        fix=(
            f"kubectl -n {svc.namespace} edit service {svc.name}   # targetPort: the port the container listens on",
            f"kubectl -n {svc.namespace} exec {(pods[0].get('metadata') or {}).get('name')} -- ss -ltnp   # what it really listens on",
        ),
        evidence=ev,
        subject=f"{svc.key}:{port.get('port')}",
        data=port_data(
            svc,
            port,
            target_port=number,
            container_ports=numbers,
            refused_by=[r["target"] for r in failing],
        ),
    )


@check(
    "KP104",
    "target-port-mismatch",
    "Service targetPort not exposed by its pods",
    "error",
    severities=("warning", "error"),
    symptom="Connections through the Service are refused or reset, while the pods are ready; or the Service has no endpoints for a named port.",
    why="""
        A Service forwards port → targetPort on the pods. A *named* targetPort (e.g. http) must match a
        containerPort name in the pods, or the pod gets no endpoint for that port. A *numeric* targetPort must be the
        port the application actually listens on; when the pods declare their containerPorts and none is the
        targetPort, the usual reason is a mistake (Service says 8080, the app listens on 80).
    """,
    fix="Set the Service's targetPort to the port (or port name) the container listens on.",
)
def target_port(
    new, services: Services, pods_read: Pods, focus: Optional[Focus] = None, probes: Optional[Probes] = None
):
    for svc in in_focus(services, focus):
        pods = pods_read.selected(svc)
        if not pods:
            continue
        for port in svc.ports:
            tp = port.get("targetPort", port.get("port"))
            declared = [cp for p in pods for cp in _container_ports(p)]
            if isinstance(tp, str) and not (tp.isascii() and tp.isdigit()):
                finding = _named_target(new, svc, port, tp, pods, declared, services, pods_read)
            else:
                finding = _numbered_target(new, svc, port, tp, pods, declared, services, pods_read, probes)
            if finding is not None:
                yield finding


def _local_check(services: Services, focus, here: NodeObject | None, manifest: Manifest | None, policy: str):
    node = node_here(here, manifest)
    if not node:
        raise Skip(f"the node kpdiag runs on is unknown ({sources.NODES} or the manifest's node)")
    for svc in in_focus(services, focus):
        wants = svc.etp_local if policy == "external" else svc.itp_local
        if not wants:
            continue
        ready = [e for e in svc.endpoints if e.ready]
        if not ready or any(e.node == node for e in ready):
            continue  # no endpoints at all is KP101's case
        yield svc, node, ready


@check(
    "KP105",
    "external-local-no-endpoints",
    "externalTrafficPolicy=Local and no endpoint on this node",
    "warning",
    symptom="The NodePort or LoadBalancer works through some nodes and times out through this one.",
    why="""
        With externalTrafficPolicy: Local, a node only forwards external traffic to endpoints *on that node* (to keep
        the client's source IP). A node without a local endpoint DROPs such traffic ("has no local endpoints"), and
        its health-check NodePort reports failure so that cloud load balancers skip it. Clients that reach this node
        directly — a NodePort, a load balancer without health checks — time out.
    """,
    fix="Send traffic only to nodes with endpoints (LB health checks), spread pods to every node (DaemonSet), or use externalTrafficPolicy: Cluster.",
)
def etp_local(
    new,
    services: Services,
    slices: EndpointSlices,
    focus: Optional[Focus] = None,
    rules: Optional[KubeProxyRules] = None,
    manifest: Optional[Manifest] = None,
    here: Optional[NodeObject] = None,
):
    for svc, node, ready in _local_check(services, focus, here, manifest, "external"):
        ev = [
            services.evidence(svc, f"type {svc.type}, externalTrafficPolicy Local"),
            slices.evidence(f"ready endpoints on: {', '.join(sorted({e.node or '?' for e in ready}))} — not on {node}"),
        ]
        rs = rules.ruleset if rules is not None else None
        if rs is not None:
            ext = rs.chain("filter", "KUBE-EXTERNAL-SERVICES")
            for r in ext.rules if ext is not None else []:
                if (r.comment or "").startswith((f"{svc.key}:", f"{svc.key} ")) and "no local endpoints" in (
                    r.comment or ""
                ):
                    ev.append(Evidence(r.source, r.text, r.lineno))
                    break
        nps = [str(p.get("nodePort")) for p in svc.ports if p.get("nodePort")]
        yield new(
            f"{svc.key} has externalTrafficPolicy=Local and no ready endpoint on node {node}: external traffic to this node"
            + (f" (NodePort {', '.join(nps)})" if nps else "")
            + " is dropped",
            fix=(
                f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o wide   # which nodes have endpoints",
                f"curl -s http://<node-ip>:{svc.spec.get('healthCheckNodePort', '<healthCheckNodePort>')}/healthz   # what the LB health check sees",
                f'kubectl -n {svc.namespace} patch service {svc.name} -p \'{{"spec":{{"externalTrafficPolicy":"Cluster"}}}}\'   # if the client IP need not be kept',
            ),
            evidence=ev,
            subject=svc.key,
        )


@check(
    "KP106",
    "internal-local-no-endpoints",
    "internalTrafficPolicy=Local and no endpoint on this node",
    "warning",
    symptom="Pods on this node cannot reach the Service (timeouts), pods on other nodes can.",
    why="""
        With internalTrafficPolicy: Local, traffic from pods goes only to endpoints on the *same node*. A node
        without one drops it. This is meant for per-node agents (a DaemonSet); on a normal Deployment it makes the
        Service work on some nodes only.
    """,
    fix="Run an endpoint on every node (DaemonSet) or set internalTrafficPolicy: Cluster.",
)
def itp_local(
    new,
    services: Services,
    slices: EndpointSlices,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    here: Optional[NodeObject] = None,
):
    for svc, node, ready in _local_check(services, focus, here, manifest, "internal"):
        yield new(
            f"{svc.key} has internalTrafficPolicy=Local and no ready endpoint on node {node}: pods here cannot reach it",
            fix=(
                f'kubectl -n {svc.namespace} patch service {svc.name} -p \'{{"spec":{{"internalTrafficPolicy":"Cluster"}}}}\'',
                f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o wide",
            ),
            evidence=[
                services.evidence(svc, "internalTrafficPolicy Local"),
                slices.evidence(
                    f"ready endpoints on: {', '.join(sorted({e.node or '?' for e in ready}))} — not on {node}"
                ),
            ],
            subject=svc.key,
        )


@check(
    "KP107",
    "no-cluster-ip",
    "Service has no ClusterIP",
    "info",
    symptom="There is no Service IP to ping, curl or trace; DNS returns pod IPs or another name.",
    why="""
        A headless Service (clusterIP: None) gets no virtual IP and no kube-proxy rules: its DNS name resolves straight
        to the ready pods' IPs, and clients connect to a pod directly. An ExternalName Service is only a DNS CNAME to
        another name. Neither goes through kube-proxy, so there is nothing of kube-proxy's to diagnose; test the pod
        IPs or the external name instead.
    """,
    fix="Test the pods (or the external name) directly; give the Service a ClusterIP if you need a stable virtual IP.",
)
def no_cluster_ip(new, services: Services, focus: Optional[Focus] = None):
    for svc in in_focus(services, focus, allow_headless=True):
        if svc.type == "ExternalName":
            yield new(
                f"{svc.key} is an ExternalName Service: a DNS alias for {svc.spec.get('externalName')!r}, no kube-proxy rules",
                fix=(f"nslookup {svc.name}.{svc.namespace}.svc   # a CNAME to {svc.spec.get('externalName')}",),
                evidence=[services.evidence(svc, f"type ExternalName, externalName {svc.spec.get('externalName')}")],
                subject=svc.key,
            )
        elif svc.headless:
            yield new(
                f"{svc.key} is headless (clusterIP: None): its name resolves to the pod IPs, there is no Service IP",
                fix=(
                    f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o wide   # the IPs DNS returns",
                ),
                evidence=[services.evidence(svc, "clusterIP: None")],
                subject=svc.key,
            )


@check(
    "KP108",
    "dns-mismatch",
    "Service name does not resolve to its ClusterIP",
    "error",
    severities=("warning", "error"),
    symptom="curl http://my-service fails with 'could not resolve host', or reaches something else, while the ClusterIP works.",
    why="""
        Pods find Services by DNS: <service>.<namespace>.svc.<cluster domain>, through the nameserver and search list
        in their /etc/resolv.conf (normally CoreDNS). If the name does not exist (wrong namespace, typo, the Service
        was recreated), the resolver cannot reach CoreDNS, or it answers an old address, the Service looks broken even
        though kube-proxy is fine.
    """,
    fix="Check the name and namespace; check CoreDNS (kubectl -n kube-system get pods -l k8s-app=kube-dns; its logs) and the pod's /etc/resolv.conf.",
)
def dns_mismatch(new, services: Services, dns: DnsProbe, focus: Optional[Focus] = None):
    doc = dns.doc
    if doc.get("sent") is False or doc.get("result") == "not-probed":
        raise Skip("no DNS query was sent (--no-probe)")
    if not isinstance(doc.get("result"), str) or not doc.get("name"):
        raise Skip(f"{sources.PROBES_DNS} says neither which name was asked nor what came back")
    for svc in in_focus(services, focus, allow_headless=True):
        if svc.type == "ExternalName":
            continue
        ev = Evidence(
            dns.source,
            f"{doc.get('name')}: {doc.get('result')} {doc.get('addresses') or doc.get('error') or ''}".strip(),
        )
        result = doc.get("result")
        if result == "resolved":
            want = set(svc.cluster_ips) if not svc.headless else {e.ip for e in svc.endpoints if e.ready}
            got = set(doc.get("addresses") or [])
            if not want or want & got:
                continue
            yield new(
                f"{doc.get('name')} resolves to {', '.join(sorted(got))}, not to {svc.key}'s {'endpoints' if svc.headless else 'ClusterIP'} {', '.join(sorted(want))}",
                fix=(
                    "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
                    f"kubectl -n {svc.namespace} get service {svc.name} -o wide",
                ),
                evidence=[ev, services.evidence(svc, f"clusterIPs {svc.cluster_ips}")],
                subject=svc.key,
            )
        elif result == "nxdomain":
            yield new(
                f"{doc.get('name')} does not exist in DNS although {svc.key} does",
                fix=(
                    "kubectl -n kube-system get pods -l k8s-app=kube-dns",
                    "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
                    "cat /etc/resolv.conf   # search list and nameserver of the pod",
                ),
                evidence=[ev],
                subject=svc.key,
            )
        elif result == "nodata":
            yield new(
                f"{doc.get('name')} exists in DNS but has no address record (A/AAAA), although {svc.key} has "
                f"{'ready endpoints' if svc.headless else 'a ClusterIP'}",
                fix=(
                    "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
                    f"kubectl -n {svc.namespace} get service {svc.name} -o wide",
                ),
                evidence=[ev],
                subject=svc.key,
            )
        else:
            yield new(
                f"DNS could not be asked about {svc.key}: {doc.get('error')}"
                + (" (KP138: which server, how)" if doc.get("schema") == "kpdiag.dns/v1" else ""),
                severity="warning",
                fix=(
                    "cat /etc/resolv.conf",
                    "kubectl -n kube-system get svc kube-dns -o wide   # is the nameserver the kube-dns ClusterIP?",
                    "kpdiag svc kube-dns -n kube-system   # is DNS itself reachable?",
                ),
                evidence=[ev],
                subject=svc.key,
            )


@check(
    "KP109",
    "source-range-drop",
    "Client outside the LoadBalancer's source ranges",
    "warning",
    symptom="The LoadBalancer IP times out from here but works from elsewhere.",
    why="""
        spec.loadBalancerSourceRanges lists the client networks allowed in. kube-proxy enforces it on the nodes
        (KUBE-PROXY-FIREWALL DROP for other sources) and many clouds also enforce it in their load balancer. A client
        whose address — as the node sees it, after any NAT — is outside every range is dropped silently.
    """,
    fix="Add the client's network to loadBalancerSourceRanges, or connect from an allowed network.",
)
def source_range(new, services: Services, probes: Probes, focus: Optional[Focus] = None):
    src = probes.doc.get("source")
    for svc in in_focus(services, focus):
        ranges = svc.spec.get("loadBalancerSourceRanges") or []
        if svc.type != "LoadBalancer" or not ranges or not src:
            continue
        try:
            addr = ipaddress.ip_address(src)
            inside = any(addr in ipaddress.ip_network(r, strict=False) for r in ranges)
        except ValueError:
            continue
        if inside:
            continue
        yield new(
            f"this client ({src}) is outside {svc.key}'s loadBalancerSourceRanges {ranges}: its traffic to the load balancer is dropped",
            fix=(
                f'kubectl -n {svc.namespace} patch service {svc.name} --type merge -p \'{{"spec":{{"loadBalancerSourceRanges":{ranges + [src + "/32"]}}}}}\''.replace(
                    "'", '"', 0
                ),
            ),
            evidence=[
                services.evidence(svc, f"loadBalancerSourceRanges {ranges}"),
                Evidence(sources.PROBES_SERVICE, f"source address {src}"),
            ],
            subject=svc.key,
        )
