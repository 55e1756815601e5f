"""NetworkPolicy on the path of a Service call: does a policy drop the client's traffic to the endpoints or to DNS,
and does the CNI enforce policies at all? (KP120–KP123)

Who the client is — the contract with the bundle's manifest (``kpdiag.json``):

- ``"client": {"namespace": NS, "pod": NAME}``: a pod; it must be in ``cluster/pods.json`` or
  ``cluster/client-pod.json`` (what ClusterCollector.policy_objects writes), with its labels and IPs.
- ``"client_ip": IP``: an address; when a pod read has that IP it is that pod, else it is an IP client (a node, a
  host-network pod, something outside): no egress policy applies to it, and ingress rules admit it only through
  ``ipBlock`` or a rule open to anyone.
Without either, KP120–KP122 are skipped, saying which sources the endpoints' policies admit.

Policies act after the Service's DNAT: each endpoint pod is judged at its targetPort.
"""

from __future__ import annotations

import re
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.state.netpol import End, Pod
from kpdiag.state.netpol_eval import patch_doc, patch_oneline
from kpdiag.bundle import sources
from kpdiag.bundle.store import MANIFEST
from kpdiag.state.typed_api import DnsPods, EndpointSlices, Focus, NetworkPolicies, Services
from kpdiag.state.typed_node import Manifest

from .service import in_focus

NP_SRC = sources.NETWORKPOLICIES
PODS_SRC = sources.PODS
CNI_SRC = sources.CNI


class _Files:
    """The files evidence cites: the networkpolicies input's, and the CoreDNS pods' (dns-pods)."""

    def __init__(self, policies: NetworkPolicies, dns_pods: DnsPods | None = None):
        self.policies, self.dns_pods = policies, dns_pods

    def text(self, rel: str) -> str | None:
        if rel == sources.DNS_PODS:
            return self.dns_pods.pods.text() if self.dns_pods is not None else None
        return self.policies.text(rel)

    def display(self, rel: str) -> str:
        return self.dns_pods.pods.source if rel == sources.DNS_PODS else self.policies.display(rel)


def _data(policies: NetworkPolicies):
    data = policies.data()
    if data is None:
        raise Skip(f"needs {NP_SRC}, which is missing or unreadable")
    return data


def _client(manifest: Manifest | None, data) -> tuple[End | None, str]:
    """(the client, how it was named) from the manifest; (None, why) without one."""
    m = manifest.doc if manifest is not None else {}
    c = m.get("client")
    if isinstance(c, dict) and c.get("namespace") and c.get("pod"):
        pod = data.index.pod(str(c["namespace"]), str(c["pod"]))
        if pod is None:
            raise Skip(
                f"the client pod {c['namespace']}/{c['pod']} (kpdiag.json 'client') is not in {PODS_SRC} or {sources.CLIENT_POD}"
            )
        return End(pod.ip, pod), "kpdiag.json client"
    ip = m.get("client_ip")
    if isinstance(ip, str) and ip:
        return data.index.end_for_ip(ip), "kpdiag.json client_ip"
    why = m.get("client_unknown")
    return None, "no client named (kpdiag.json has neither 'client' nor 'client_ip'" + (
        f"; {why}" if isinstance(why, str) and why else ""
    ) + ")"


def _judged(policies: NetworkPolicies, dns_pods: DnsPods | None, manifest: Manifest | None):
    """What a check of the client's traffic starts from: the policy data, the files evidence cites, the client and how
    it was named (None and why: no client named)."""
    data = _data(policies)
    client, how = _client(manifest, data)
    return data, _Files(policies, dns_pods), client, how


def _egress_client(policies: NetworkPolicies, dns_pods: DnsPods | None, manifest: Manifest | None):
    """``_judged`` for the checks of the client's egress: Skip when no client is named or it is not a pod; None when the
    CNI does not enforce policies (KP123 says so, and they are never blamed for a drop)."""
    data, files, client, how = _judged(policies, dns_pods, manifest)
    if client is None:
        raise Skip(how)
    if not client.is_pod:
        raise Skip(f"the client {_client_text(client)} is not a pod: no egress NetworkPolicy applies to it")
    return None if data.enforcement.enforced is False else (data, files, client)


def _client_text(end: End) -> str:
    if end.is_pod:
        return f"{end.pod.key} ({end.ip})" if end.ip else end.pod.key
    if end.pod is not None:
        return f"{end.pod.key} (host network, {end.ip})"
    return f"{end.ip} (not a pod)"


def _line_of(files: _Files, rel: str, namespace: str, name: str) -> int | None:
    """The line of ``"name": NAME`` closest to a ``"namespace": NS`` line in a kubectl-printed List (best effort)."""
    text = files.text(rel)
    if not text:
        return None
    lines = text.splitlines()
    name_re = re.compile(r'"name":\s*' + re.escape(_json_str(name)) + r"\s*,?\s*$")
    ns_re = re.compile(r'"namespace":\s*' + re.escape(_json_str(namespace)) + r"\s*,?\s*$")
    ns_lines = [i for i, line in enumerate(lines) if ns_re.search(line)]
    best = None
    for i, line in enumerate(lines):
        if name_re.search(line):
            dist = min((abs(i - j) for j in ns_lines), default=None)
            if dist is not None and dist <= 12 and (best is None or dist < best[0]):
                best = (dist, i)
    return best[1] + 1 if best else None


def _json_str(value: str) -> str:
    import json

    return json.dumps(value)


def _policy_ev(files: _Files, index, key: str, direction: str) -> Evidence:
    pol = index.policy(key)
    sel = pol.pod_sel.text() or "{} (every pod)"
    ns, _, name = key.partition("/")
    return Evidence(
        files.display(NP_SRC),
        f"NetworkPolicy {key}: podSelector {sel}; {direction}: {pol.admits_text(direction)}",
        _line_of(files, NP_SRC, ns, name),
    )


def _pod_ev(files: _Files, pod: Pod) -> Evidence:
    labels = ",".join(f"{k}={v}" for k, v in sorted(pod.labels.items())) or "no labels"
    rel, line = PODS_SRC, None
    for candidate in (PODS_SRC, sources.CLIENT_POD, sources.DNS_PODS):
        line = _line_of(files, candidate, pod.namespace, pod.name)
        if line:
            rel = candidate
            break
    return Evidence(files.display(rel), f"pod {pod.key} {pod.ip or 'no IP'}: {labels}", line)


def _enforcement_note(data) -> str:
    enf = data.enforcement
    return "" if enf.enforced else f" ({enf.text()})"


def _flows(services: Services, focus: Focus | None, data, client: End):
    """For each focused Service port: [(endpoint text, Flow)] — each endpoint pod at its targetPort."""
    out, unread = [], []
    for svc in in_focus(services, focus, allow_headless=True):
        if svc.headless and not svc.endpoints or svc.type == "ExternalName":
            continue
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").upper()
            eps = svc.endpoints_for(port)
            ready = [e for e in eps if e.ready] or eps
            flows = []
            for e in ready:
                target = svc.target_of(e, port)
                pod = (data.index.pod(svc.namespace, e.pod) if e.pod else None) or data.index.by_ip.get(e.ip)
                if pod is None or target is None:
                    unread.append(f"{e.ip} ({e.pod or 'no pod'})")
                    continue
                gap = data.coverage_gap(pod.namespace, client.namespace)
                if gap:
                    raise Skip(f"the NetworkPolicies of namespace {', '.join(gap)} were not collected ({NP_SRC})")
                flows.append(
                    (
                        f"{e.ip}:{target}" if ":" not in e.ip else f"[{e.ip}]:{target}",
                        data.index.evaluate(client, End(e.ip, pod), target, proto),
                    )
                )
            if flows:
                out.append((svc, port, flows))
    if not out:
        raise Skip(
            "no endpoint pod of the Service is in the pods read" + (f" ({', '.join(unread[:4])})" if unread else "")
        )
    return out


def _service_patch(svc, flow, direction: str, client: End) -> dict:
    """The patch for a Service: select the Service's pods by its selector (every replica), not one pod's labels."""
    if direction == "ingress":
        subject = Pod(svc.namespace, svc.name, dict(svc.selector) or dict(flow.dst.pod.labels), ())
        return patch_doc("ingress", subject, client, flow.port, flow.protocol)[0]
    dst_pod = flow.dst.pod
    other = End(flow.dst.ip, Pod(dst_pod.namespace, svc.name, dict(svc.selector) or dict(dst_pod.labels), dst_pod.ips))
    return patch_doc("egress", client.pod, other, flow.port, flow.protocol)[0]


def _apply(doc: dict) -> str:
    return patch_oneline(doc)


def _unknown_client_skip(services: Services, data, why: str):
    """No client: say what the endpoints' policies admit, and skip."""
    admits = []
    for svc in services.focused:
        for e in svc.endpoints:
            pod = (data.index.pod(svc.namespace, e.pod) if e.pod else None) or data.index.by_ip.get(e.ip)
            for pol in data.index.selecting(pod, "ingress") if pod else []:
                admits.append(f"{pol.key} admits {pol.peers_summary('ingress')}")
    raise Skip(why + (f"; the endpoints' policies: {'; '.join(sorted(set(admits)))}" if admits else ""))


@check(
    "KP120",
    "policy-denies-ingress",
    "NetworkPolicy denies the client at the endpoints",
    "error",
    explains=("KP112", "KP114"),
    verdict=("policy-drop",),
    symptom="Connections to the Service time out (the SYN is dropped, nothing answers) although the pods are ready and "
    "answer from other clients; kpdiag's direct probes of the endpoints time out too.",
    why="""
        A NetworkPolicy that selects a pod (its podSelector matches the pod's labels) isolates that pod for ingress:
        from then on only what one of the selecting policies admits reaches it — a peer (pods by label, namespaces by
        label, or an ipBlock) AND a port. Everything else is dropped silently by the CNI, which looks exactly like a
        broken backend. Policies act after the Service's DNAT: what counts is the endpoint pod and its targetPort,
        not the ClusterIP and Service port. A common case: a 'default deny' policy plus an allow rule for one app
        label (app=frontend) — any other client, including a debug pod, is dropped.
    """,
    fix="Add a NetworkPolicy that admits this client on the targetPort (policies are additive: a new policy opens "
    "only what it names), or give the client the labels an existing rule admits.",
)
def policy_denies_ingress(
    new,
    services: Services,
    slices: EndpointSlices,
    policies: NetworkPolicies,
    dns_pods: Optional[DnsPods] = None,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
):
    data, files, client, how = _judged(policies, dns_pods, manifest)
    if client is None:
        _unknown_client_skip(services, data, how)
    if data.enforcement.enforced is False:
        return  # KP123: present but not enforced — never blamed for a drop
    for svc, port, flows in _flows(services, focus, data, client):
        denied = [(ep, f) for ep, f in flows if not f.ingress.allowed]
        if not denied:
            continue
        first = denied[0][1].ingress
        pols = sorted({p for _, f in denied for p in f.ingress.policies})
        admits = "; ".join(
            f"NetworkPolicy {k} admits only {data.index.policy(k).peers_summary('ingress')}" for k in pols[:3]
        )
        who = _client_text(client)
        eps = ", ".join(ep for ep, _ in denied[:4]) + (" …" if len(denied) > 4 else "")
        ev = [_policy_ev(files, data.index, k, "ingress") for k in pols[:5]]
        ev += [_pod_ev(files, f.dst.pod) for _, f in denied[:3]]
        if client.pod is not None:
            ev.append(_pod_ev(files, client.pod))
        else:
            ev.append(Evidence(MANIFEST, f"client_ip {client.ip}: no pod read has this address"))
        yield new(
            f"{admits}; the client {who} is not admitted to {svc.key} port {port.get('port')} → targetPort "
            f"{denied[0][1].port}/{denied[0][1].protocol} ({len(denied)} of {len(flows)} endpoint(s) deny it: {eps}){_enforcement_note(data)}",
            fix=(
                f"missing: {first.missing}",
                "add this NetworkPolicy (it admits exactly this client on the targetPort; existing policies stay):",
                _apply(_service_patch(svc, denied[0][1], "ingress", client)),
                f"kubectl -n {svc.namespace} get networkpolicy {' '.join(k.split('/', 1)[1] for k in pols if k.startswith(svc.namespace + '/'))} -o yaml",
            ),
            evidence=ev,
            subject=f"{svc.key}:{port.get('port')}",
        )


@check(
    "KP121",
    "policy-denies-egress",
    "NetworkPolicy denies the client's egress to the endpoints",
    "error",
    explains=("KP112", "KP114"),
    verdict=("policy-drop",),
    symptom="Connections from this client to the Service time out, while other clients reach it.",
    why="""
        Egress policies isolate the pods they select: once a policy with policyTypes Egress selects the client pod,
        it may only send what one of those policies' egress rules admits — a destination (pods, namespaces, ipBlock)
        AND a port. Egress is judged after the Service's DNAT too: the rule must admit the endpoint pods on the
        targetPort, not the ClusterIP (an ipBlock of the Service CIDR does not help). A flow needs both the client's
        egress and the endpoint's ingress to admit it.
    """,
    fix="Add an egress rule (or a new egress NetworkPolicy selecting the client) that admits the Service's pods on the targetPort.",
)
def policy_denies_egress(
    new,
    services: Services,
    slices: EndpointSlices,
    policies: NetworkPolicies,
    dns_pods: Optional[DnsPods] = None,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
):
    judged = _egress_client(policies, dns_pods, manifest)
    if judged is None:
        return
    data, files, client = judged
    for svc, port, flows in _flows(services, focus, data, client):
        denied = [(ep, f) for ep, f in flows if not f.egress.allowed]
        if not denied:
            continue
        first = denied[0][1].egress
        pols = first.policies
        admits = "; ".join(
            f"NetworkPolicy {k} lets {client.pod.key} send only to {data.index.policy(k).peers_summary('egress')}"
            for k in pols[:3]
        )
        eps = ", ".join(ep for ep, _ in denied[:4]) + (" …" if len(denied) > 4 else "")
        ev = [_policy_ev(files, data.index, k, "egress") for k in pols[:5]] + [_pod_ev(files, client.pod)]
        ev += [_pod_ev(files, f.dst.pod) for _, f in denied[:2]]
        yield new(
            f"{admits}; {svc.key} port {port.get('port')} (endpoints {eps}, targetPort {denied[0][1].port}/{denied[0][1].protocol}) "
            f"is not among them: the client's egress is dropped{_enforcement_note(data)}",
            fix=(
                f"missing: {first.missing}",
                "add this NetworkPolicy (it lets exactly this client reach the Service's pods on the targetPort):",
                _apply(_service_patch(svc, denied[0][1], "egress", client)),
                f"kubectl -n {client.pod.namespace} get networkpolicy {' '.join(k.split('/', 1)[1] for k in pols)} -o yaml",
            ),
            evidence=ev,
            subject=f"{svc.key}:{port.get('port')}",
        )


def _dns_targets(data) -> tuple[list[tuple[Pod, int, str]], str]:
    """(kube-dns pod, targetPort, protocol) for 53/UDP and 53/TCP, and where the pods came from."""
    svc = data.dns_service
    selector = ((svc or {}).get("spec") or {}).get("selector") or {"k8s-app": "kube-dns"}
    ns = ((svc or {}).get("metadata") or {}).get("namespace") or "kube-system"
    pods = [
        p
        for p in data.index.pods.values()
        if p.namespace == ns and all(p.labels.get(k) == v for k, v in selector.items())
    ]
    targets = []
    for proto in ("UDP", "TCP"):
        sp = next(
            (
                p
                for p in ((svc or {}).get("spec") or {}).get("ports") or []
                if p.get("port") == 53 and (p.get("protocol") or "TCP").upper() == proto
            ),
            None,
        )
        tp = (sp or {}).get("targetPort", 53)
        for pod in pods:
            port = pod.named_port(tp, proto) if isinstance(tp, str) and not tp.isdigit() else int(tp)
            if port is not None:
                targets.append((pod, port, proto))
    return targets, f"{ns} pods {','.join(f'{k}={v}' for k, v in sorted(selector.items()))}"


@check(
    "KP122",
    "dns-egress-blocked",
    "NetworkPolicy blocks the client's DNS",
    "error",
    explains=("KP108", "KP135", "KP137", "KP138", "KP139"),
    symptom="Every name lookup from the pod times out ('connection timed out; no servers could be reached'), so "
    "calls by Service name fail while calls by IP work — typically right after a 'default deny' policy.",
    why="""
        A pod resolves names through the cluster DNS (the kube-dns Service, CoreDNS pods in kube-system) on port 53,
        over UDP and, for large answers, TCP. An egress policy that selects the pod and has no rule admitting port 53
        to the DNS pods (a 'default deny egress', or an allow-list that forgot DNS) drops every lookup; so does an
        ingress policy in kube-system that does not admit the client. Policies act after DNAT: the rule must admit
        the CoreDNS pods (namespaceSelector kubernetes.io/metadata.name=kube-system + podSelector k8s-app=kube-dns),
        not the kube-dns ClusterIP.
    """,
    fix="Add an egress rule to the client's policies admitting UDP and TCP 53 to the kube-dns pods in kube-system.",
)
def dns_egress_blocked(
    new, policies: NetworkPolicies, dns_pods: Optional[DnsPods] = None, manifest: Optional[Manifest] = None
):
    judged = _egress_client(policies, dns_pods, manifest)
    if judged is None:
        return
    data, files, client = judged
    idx = data.index
    targets, where = _dns_targets(data)
    if not targets:
        # no DNS pods read: judge the client's egress rules alone (a destination they might admit cannot be told)
        missing = []
        for proto in ("UDP", "TCP"):
            rules = idx.open_ports(client.pod, "egress", 53, proto)
            if rules is None:
                return  # no egress policy selects the client: DNS is not restricted by its egress
            if not rules:
                missing.append(proto)
            elif proto == "UDP":
                dests = "; ".join(f"{p.key} rule {i}: {r.peers_text(p.namespace)}" for p, i, r in rules[:4])
                skip = f"the kube-dns pods are not in the data read; the client's egress policies admit 53/UDP only to: {dests}"
        if not missing:
            raise Skip(skip)
        pols = [p.key for p in idx.selecting(client.pod, "egress")]
        yield new(
            f"the client {_client_text(client)} may not send DNS ({'/'.join(missing)} 53) anywhere: its egress policies "
            f"{', '.join(pols)} admit no port 53/{missing[0]} to any destination — every lookup is dropped{_enforcement_note(data)}",
            fix=(
                "add this egress rule (to the kube-dns pods in kube-system, UDP and TCP 53) to a policy selecting the client:",
                _apply(_dns_patch(client.pod)),
            ),
            evidence=[_policy_ev(files, idx, k, "egress") for k in pols[:5]] + [_pod_ev(files, client.pod)],
            subject=f"{client.pod.key}→dns",
        )
        return
    gap = data.coverage_gap(client.namespace, *(p.namespace for p, _, _ in targets))
    if gap:
        raise Skip(f"the NetworkPolicies of namespace {', '.join(gap)} were not collected ({NP_SRC})")
    denied = []
    for pod, port, proto in targets:
        flow = idx.evaluate(client, End(pod.ip, pod), port, proto)
        if not flow.allowed:
            denied.append(flow)
    if not denied:
        return
    protos = sorted({f.protocol for f in denied})
    eg = [f for f in denied if not f.egress.allowed]
    ing = [f for f in denied if f.egress.allowed and not f.ingress.allowed]
    parts, fix, ev = [], [], []
    if eg:
        pols = eg[0].egress.policies
        parts.append(
            f"the client's egress policies {', '.join(pols)} admit no DNS to the kube-dns pods ({eg[0].egress.missing})"
        )
        fix += [
            "add this egress rule (to the kube-dns pods in kube-system, UDP and TCP 53) to a policy selecting the client:",
            _apply(_dns_patch(client.pod)),
        ]
        ev += [_policy_ev(files, idx, k, "egress") for k in pols[:4]]
    if ing:
        pols = ing[0].ingress.policies
        parts.append(
            f"the ingress policies of the DNS pods {', '.join(pols)} do not admit the client ({ing[0].ingress.missing})"
        )
        dst = ing[0].dst.pod
        fix += [
            "admit the client at the DNS pods:",
            _apply(patch_doc("ingress", dst, client, ing[0].port, ing[0].protocol)[0]),
        ]
        ev += [_policy_ev(files, idx, k, "ingress") for k in pols[:4]]
    ev.append(_pod_ev(files, client.pod))
    ev += [_pod_ev(files, f.dst.pod) for f in denied[:2]]
    total = len({(p.key, proto) for p, _, proto in targets})
    yield new(
        f"DNS from {_client_text(client)} is dropped ({'/'.join(protos)} 53 to {len(denied)} of {total} kube-dns pod/protocol pairs, "
        f"{where}): {'; '.join(parts)}{_enforcement_note(data)}",
        fix=tuple(fix),
        evidence=ev,
        subject=f"{client.pod.key}→dns",
    )


def _dns_patch(client: Pod) -> dict:
    dns = Pod("kube-system", "kube-dns", {"k8s-app": "kube-dns"}, ())
    doc = patch_doc("egress", client, End(None, dns), 53, "UDP")[0]
    doc["metadata"]["name"] = doc["metadata"]["name"].replace("allow-kube-dns-from-", "allow-dns-from-", 1)
    doc["spec"]["egress"][0]["ports"].append({"protocol": "TCP", "port": 53})
    return doc


@check(
    "KP123",
    "policies-not-enforced",
    "NetworkPolicies exist but the CNI does not enforce them",
    "warning",
    symptom="NetworkPolicies that should block traffic have no effect; or a policy 'works' in one cluster and not in another.",
    why="""
        NetworkPolicy objects are only intentions: the CNI plugin enforces them. Some CNIs do not — plain flannel
        (without Calico, as in canal), the AWS VPC CNI without its network policy agent enabled, kube-router with its
        firewall off. There the API accepts the policies and nothing happens: traffic they 'deny' still flows, and
        they are not the cause of a drop (kpdiag does not blame them). If isolation is wanted, it is not there.
    """,
    fix="Install a policy engine next to the CNI (e.g. Calico in policy-only mode — canal — with flannel), or enable the "
    "CNI's own (AWS VPC CNI: enableNetworkPolicy=true); or delete the policies so nobody relies on them.",
)
def policies_not_enforced(
    new,
    policies: NetworkPolicies,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    services: Optional[Services] = None,
):
    data = _data(policies)
    files = _Files(policies)
    enf = data.enforcement
    if enf.enforced is not False or not data.index.policies:
        return
    keys = sorted(p.key for p in data.index.policies)
    would = ""
    try:
        client, _ = _client(manifest, data)
    except Skip:
        client = None
    if client is not None and services is not None:
        try:
            flows = [f for _, _, fl in _flows(services, focus, data, client) for _, f in fl]
        except Skip:
            flows = []
        denied = [f for f in flows if not f.allowed]
        if denied:
            d = denied[0].ingress if not denied[0].ingress.allowed else denied[0].egress
            would = f"; if enforced they would drop {_client_text(client)} → {denied[0].dst.text()}:{denied[0].port} ({d.missing})"
    ev = [Evidence(policies.display(CNI_SRC if policies.has(CNI_SRC) else PODS_SRC), e) for e in enf.evidence[:4]]
    ev += [
        _policy_ev(files, data.index, k, "ingress" if "Ingress" in data.index.policy(k).types else "egress")
        for k in keys[:3]
    ]
    yield new(
        f"{len(keys)} NetworkPolicy object(s) ({', '.join(keys[:4])}{' …' if len(keys) > 4 else ''}) exist, but the CNI ({enf.cni}) "
        f"does not enforce NetworkPolicy: they have no effect and are not the cause of any drop{would}",
        evidence=ev,
        subject="cluster",
    )
