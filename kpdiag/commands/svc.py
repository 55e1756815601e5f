"""`kpdiag svc`: one Service end to end — API view, DNS, active probes, the node's rules when visible."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace

from kpdiag.bundle.store import FORMAT, Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.state.node import NodeState
from kpdiag.bundle import sources
from kpdiag.manifests import apply_command


PROBE_ENDPOINTS_MAX = 16
ICMP_FIRST_MAX = 4.0  # seconds DNS waits for the ICMP probes at most


def _probe_endpoints(files: dict[str, bytes], namespace: str, name: str) -> tuple[list[tuple[str, int, str]], dict]:
    """(ip, targetPort, proto) of the endpoints to probe directly: those kube-proxy sends to — the ready ones, else
    (KEP-1669) the serving-and-terminating ones — from the EndpointSlices collected; at most PROBE_ENDPOINTS_MAX. And
    {(Service port, proto): how many of them kube-proxy chooses among} (all, not only the ones probed directly)."""
    from kpdiag.state.cluster import ClusterView

    view = ClusterView(Bundle.from_files("svc", files))
    out: list[tuple[str, int, str]] = []
    spread: dict = {}
    for svc in view.services() or []:
        if svc.namespace != namespace or svc.name != name:
            continue
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").lower()
            eps = svc.endpoints_for(port)
            use = [e for e in eps if e.ready] or [e for e in eps if e.serving_terminating]
            targets = {(e.ip, int(t), proto) for e in use for t in [svc.target_of(e, port)] if t}
            out.extend(targets)
            if isinstance(port.get("port"), int):
                spread[(port["port"], proto)] = len(targets)
    return sorted(set(out))[:PROBE_ENDPOINTS_MAX], spread


def _api_headline(namespace: str, name: str, status: int | None, why: str | None) -> str:
    """The first line when the API could not tell kpdiag about the Service: in plain words, with what to do."""
    what = f"kpdiag could not diagnose {namespace}/{name}"
    if status == 401:
        return f"{what}: the Kubernetes API refused the credentials (401 Unauthorized) — renew the kubeconfig's token or certificate"
    if status == 403:
        return (
            f"{what}: RBAC forbids reading Services in namespace {namespace} (403 Forbidden) — grant kpdiag's read-only "
            f"RBAC to this user or service account: {apply_command('svc')} (set its subjects and namespaces first; "
            f"check: kubectl auth can-i get services -n {namespace})"
        )
    if status == 0 or status is None:
        return f"{what}: {why or 'the Kubernetes API could not be reached'}"
    return f"{what}: the Kubernetes API answered HTTP {status} ({why or 'error'})"


SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _client_guess(client: str | None) -> tuple[tuple[str, str] | None, str]:
    """The pod kpdiag runs in, as (namespace, name) to look up: --from NS/POD, else $POD_NAMESPACE/$POD_NAME (the
    downward API), else the service account's namespace and the hostname (a pod's hostname is its name)."""
    import os
    import socket

    if client:
        given_ns, _, given_pod = client.partition("/")
        if given_ns and given_pod:
            return (given_ns, given_pod), "--from"
        return None, f"--from {client!r} is not NS/POD"
    ns: str | None = os.environ.get("POD_NAMESPACE")
    if not ns:
        try:
            with open(SA_NAMESPACE, "rb") as fh:  # a small regular file the kubelet writes; bounded read
                ns = fh.read(256).decode("ascii", "replace").strip() or None
        except OSError:
            ns = None
    pod = os.environ.get("POD_NAME") or socket.gethostname()
    if not ns:
        return None, "not in a pod (no $POD_NAMESPACE, no service account namespace): give --from NS/POD"
    return (ns, pod), "this pod"


def _named_by_downward_api() -> bool:
    """$POD_NAMESPACE and $POD_NAME set (the downward API, kpdiag's own manifests): the pod is named for sure."""
    import os

    return bool(os.environ.get("POD_NAMESPACE") and os.environ.get("POD_NAME"))


def _client_by_address(cc, ip: str, namespace: str | None = None) -> dict:
    """The client found by the address kpdiag's packets leave from: {"pod": the one pod that has it, "how"}; for a
    hostNetwork client {"node_ip": ip, "how"}; else {"why": why not (none, several, refused), "error": a line for the
    report's problems when the API refused or failed}. Accepted only when unique. Listing pods in all namespaces
    refused (RBAC grants "list pods" per namespace), the Service's ``namespace`` is asked instead."""
    pods, status, why = cc.pods_with_ip(ip)
    where = ""
    if pods is None and status == 403 and namespace:
        pods, _, _ = cc.pods_with_ip(ip, namespace)
        where = f" in namespace {namespace} (listing all namespaces was refused)"
        if not pods:  # not there either (or refused too): say what was refused
            pods = None
    if pods is None:
        if status == 403:
            return {
                "why": f"the client could not be found by its address {ip}: RBAC forbids listing pods in all namespaces "
                "(403 Forbidden)" + (f" and it is no pod of namespace {namespace}" if namespace else ""),
                "error": f"looking up the client pod by its address {ip} was refused (403 Forbidden): grant 'list pods' "
                "cluster-wide to kpdiag's user or service account, or give --from NS/POD",
            }
        return {
            "why": f"the client could not be found by its address {ip}",
            "error": f"looking up the client pod by its address {ip} failed: {why}",
        }
    pod_net = [p for p in pods if not (p.get("spec") or {}).get("hostNetwork")]
    if len(pod_net) == 1:
        md = pod_net[0].get("metadata") or {}
        if md.get("namespace") and md.get("name"):
            return {"pod": pod_net[0], "how": f"source address {ip}: the only pod with it{where}"}
    if len(pod_net) > 1:
        names = ", ".join(
            f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}" for p in pod_net[:3]
        )
        return {"why": f"{len(pod_net)} pods have the address {ip} ({names}): give --from NS/POD"}
    if pods:  # only hostNetwork pods have it: the client is their node
        node = (pods[0].get("spec") or {}).get("nodeName")
        return {"node_ip": ip, "how": f"source address {ip}: the node {node or '?'} (hostNetwork)"}
    return {"why": f"no pod has the address {ip} this host speaks from"}


def _client_pod(files: dict[str, bytes], want: tuple[str, str], my_ip: str | None) -> dict | None:
    """The client pod read back from cluster/client-pod.json — only when it really is this host (its IP is the one the
    probes leave from, when that is known); a wrong guess must not make kpdiag judge policies for someone else."""
    try:
        items = json.loads(files.get(sources.CLIENT_POD) or b"{}").get("items") or []
    except ValueError:
        return None
    for pod in items:
        md = pod.get("metadata") or {}
        if (md.get("namespace"), md.get("name")) != want:
            continue
        ips = {p.get("ip") for p in (pod.get("status") or {}).get("podIPs") or [] if isinstance(p, dict)} | {
            (pod.get("status") or {}).get("podIP")
        }
        if my_ip is None or my_ip in ips:
            return pod
    return None


def collect_service(
    namespace: str | None,
    name: str,
    kubeconfig=None,
    context=None,
    probe: bool = True,
    node: str | None = None,
    host_root: str | None = None,
    progress=None,
    stop=None,
    client: str | None = None,
) -> tuple[dict[str, bytes], dict]:
    """Everything `kpdiag svc` looks at, as bundle files (cluster/, node/ when visible, probes/).

    With ``probe`` False nothing at all is sent to the network but the API calls — no DNS query either. ``namespace``
    None: the kubeconfig context's, else ``default`` (as kubectl); the manifest's ``service`` names the one used."""
    from kpdiag.collect.cluster import ClusterCollector

    files: dict[str, bytes] = {}
    errors: list[dict] = []
    cc = ClusterCollector(kubeconfig, context)
    if namespace is None:
        cc.connect()  # credentials are loaded once: the context read here is the one the calls below use
        namespace = cc.context_namespace or "default"
    asked = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    service = cc.service(namespace, name, node_name=node)
    files.update(cc.out.files)
    errors.extend(cc.out.errors)
    manifest = {
        "format": FORMAT,
        "created": asked,  # when the API was asked: the ages of its timestamps (KP160) are counted to it
        "node": node or "",
        "kpdiag_version": __import__("kpdiag").__version__,
        "errors": errors,
        "service": f"{namespace}/{name}",
        "api": cc.out.api,
        "api_status": {"service": cc.service_status, "error": cc.config_error or cc.service_error},
    }
    if service is None:
        if cc.config_error or cc.service_status != 404:
            manifest["headline"] = _api_headline(
                namespace, name, None if cc.config_error else cc.service_status, cc.config_error or cc.service_error
            )
        return files, manifest
    _collect_client(cc, service, namespace, client, files, manifest)
    # DNS (a probe too: it sends packets) runs while the node is read and the Service is probed
    dns = _DnsProbe(namespace, name) if probe else None
    _collect_node_rules(service, namespace, name, host_root, progress, files, manifest)
    if dns is not None:
        _probe(service, namespace, name, stop, progress, dns, files, errors)
    else:
        errors.append(
            {"source": sources.PROBES_SERVICE, "error": "probes disabled (--no-probe): no packet sent, DNS not asked"}
        )
    return files, manifest


def _collect_client(cc, service: dict, namespace: str, client: str | None, files: dict, manifest: dict) -> None:
    """Who the client is (for NetworkPolicy), the policies on the way, the cluster DNS as the API shows it: into
    ``files``, and into the manifest how the client was found (or why it was not)."""
    from kpdiag.collect.probes import _my_address

    errors = manifest["errors"]
    spec = service.get("spec") or {}
    my_ip = _my_address(
        next((ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"), None)
    )
    guess, how = _client_guess(client)
    by_ip: dict | None = None
    if not client and not _named_by_downward_api() and my_ip:
        # nothing names this pod for sure (an ephemeral debug container has no $POD_NAME, often no token, and a
        # hostname that need not be the pod's): find it by the address its packets leave from
        by_ip = _client_by_address(cc, my_ip, namespace)
    seen = len(cc.out.errors)
    found = (by_ip or {}).get("pod")
    nss = {namespace} | ({guess[0]} if guess else set()) | ({found["metadata"]["namespace"]} if found else set())
    cc.policy_objects(sorted(nss), client_pod=None if found else guess)
    cc.dns_objects()
    files.update(cc.out.files)
    if found and by_ip is not None:
        md = found["metadata"]
        files[sources.CLIENT_POD] = json.dumps(
            {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [found]}, indent=1
        ).encode()
        manifest["client"] = {"namespace": md["namespace"], "pod": md["name"], "how": by_ip["how"]}
    elif by_ip and by_ip.get("node_ip"):
        manifest["client_ip"] = my_ip  # a hostNetwork client: the node's address, no pod's policies apply to it
        manifest["client_how"] = by_ip["how"]
    else:
        _client_named(files, manifest, guess, how, client, my_ip, by_ip)
    if by_ip and by_ip.get("error"):
        errors.append({"source": sources.CLIENT_POD, "error": by_ip["error"]})
    errors.extend(cc.out.errors[seen:])


def _client_named(files: dict, manifest: dict, guess, how: str, client: str | None, my_ip, by_ip) -> None:
    """The client as named (--from, the downward API, the service account and hostname), when its pod is found;
    else why it is not known."""
    pod = _client_pod(files, guess, None if client else my_ip) if guess else None
    if pod is not None:
        manifest["client"] = {"namespace": guess[0], "pod": guess[1], "how": how}
        return
    unknown = (
        how
        if guess is None
        else f"{how}: pod {guess[0]}/{guess[1]} not found" + (f" with IP {my_ip}" if my_ip and not client else "")
    )
    if by_ip and by_ip.get("why"):
        unknown = f"{by_ip['why']}; {unknown}"
    manifest["client_unknown"] = unknown
    if client:
        manifest["errors"].append(
            {
                "source": sources.CLIENT_POD,
                "error": f"--from {client}: no such pod (NetworkPolicy judged without a client)",
            }
        )


class _DnsProbe:
    """The Service's name asked of DNS in a thread of its own, after the ICMP probes (``icmp_done``)."""

    def __init__(self, namespace: str, name: str) -> None:
        import threading

        from kpdiag.collect.dns import dns_probe

        self.box: dict = {}  # "doc": the answer, once the lookup finished
        self.icmp_done = threading.Event()

        def dns() -> None:
            # after the ICMP echo (and TTL walk): a DNS query that errs on a router spends that router's ICMP rate
            # limit for this host (about one error a second), and the echo's 'Time to live exceeded' would be lost
            self.icmp_done.wait(ICMP_FIRST_MAX)
            self.box["doc"] = dns_probe(namespace, name)

        self.thread = threading.Thread(target=dns, name="kpdiag-dns", daemon=True)
        self.thread.start()


def _collect_node_rules(
    service: dict, namespace: str, name: str, host_root, progress, files: dict, manifest: dict
) -> None:
    """The node's own rules, when kpdiag runs in the node's network namespace (a node debug pod, the node): only
    those this Service's packets can meet."""
    errors = manifest["errors"]
    try:
        from kpdiag.collect.iptables_focused import ChainLister
        from kpdiag.collect.service_rules import NotFocused, focused_rules
        from kpdiag.collect.node import NodeCollector

        nc = NodeCollector(host_root=host_root, progress=progress)
        try:  # one chain, not the whole dump (a minute on a big nf_tables node): are kube-proxy's rules visible here?
            ChainLister(nc, "iptables")("nat", "KUBE-SERVICES")
            visible = True
        except NotFocused:
            visible = False
        if not visible:
            errors.append(
                {
                    "source": "node",
                    "error": "kube-proxy's rules are not visible from here (not in the node's network namespace): "
                    "node-side checks skipped — run kpdiag node on the node for them",
                }
            )
            return
        # only the rules this Service's packets can meet (IPVS mode finds them from the Service read above)
        nc.collect(rules=focused_rules(f"{namespace}/{name}", lambda: (service, "")))
        files.update(nc.out.files)
        errors.extend(nc.out.errors)
        if nc.partial:
            from kpdiag.commands.nodeapi import api_holds

            manifest["partial"] = nc.partial  # and the API part holds this Service only (ClusterCollector.service)
            manifest["partial"]["holds"].update(api_holds(f"{namespace}/{name}", files))
    except Exception as exc:  # the node side is a bonus; never let it stop the Service diagnosis
        errors.append({"source": "node", "error": f"node rules not collected: {exc.__class__.__name__}: {exc}"})


def _probe(service: dict, namespace: str, name: str, stop, progress, dns: _DnsProbe, files: dict, errors: list) -> None:
    """The active probes of the ClusterIP and the endpoints, then the DNS answer: into probes/."""
    from kpdiag.collect.probes import probe_service

    if progress:
        progress("probing the ClusterIP and the endpoints (and asking DNS)")
    endpoints, spread = _probe_endpoints(files, namespace, name)
    doc = probe_service(service, endpoints, stop=stop, icmp_done=dns.icmp_done, spread=spread)
    dns.icmp_done.set()
    files[sources.PROBES_SERVICE] = json.dumps(doc, indent=1).encode()
    if doc.get("raw_skipped_reason"):
        errors.append({"source": sources.PROBES_SERVICE, "error": doc["raw_skipped_reason"]})
    dns.thread.join(timeout=8.0)
    if "doc" in dns.box:
        files[sources.PROBES_DNS] = json.dumps(dns.box["doc"], indent=1).encode()
    else:
        errors.append({"source": sources.PROBES_DNS, "error": "the DNS lookup did not finish in time"})


def _named(*roles: str) -> tuple[str, ...]:
    """The checks that play ``roles`` in the verdict, as each declares it (``@check(..., verdict=…)``,
    kpdiag/rootcause.py VERDICT_ROLES): the verdict keeps no id list of its own."""
    from kpdiag.rootcause import playing

    return tuple(c for r in roles for c in playing(r))


def _ids(*roles: str, sep: str = "/") -> str:
    """Those checks as the verdict names them in its text: "KP101/KP102"."""
    return sep.join(_named(*roles))


def _playing(findings, role: str) -> list:
    """The findings of the checks that play ``role`` in the verdict."""
    named = _named(role)
    return [f for f in findings if f.id in named]


def _cause(o, policy: list, usable: bool, me: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The layer at fault for a failing port, in a few words with the check that explains it, and that check's ids."""
    blame = o.judgement.blame
    if blame == "service-layer" and any(d.ip == me for d in o.direct):
        return (
            "this pod is one of its endpoints and its own connection cannot hairpin back to it "
            f"({_ids('service-layer', 'hairpin', sep=', ')})",
            _named("service-layer", "hairpin"),
        )
    if blame == "service-layer":
        return (
            f"the Service layer on this client's node fails while the endpoints answer ({_ids('service-layer')})",
            _named("service-layer"),
        )
    if o.direct:
        if policy:  # named: "NetworkPolicy shop/web-allow-frontend admits only pods app=frontend …"
            return f"a NetworkPolicy drops it: {policy[0].summary.split('; ')[0]} ({policy[0].id})", (policy[0].id,)
        if all(d.outcome == "refused" for d in o.direct):
            return f"nothing listens on its endpoints ({_ids('endpoints-refuse')})", _named("endpoints-refuse")
        return f"its endpoints do not answer ({_ids('endpoints-silent')})", _named("endpoints-silent")
    if not usable:
        return f"it has no ready endpoint ({_ids('no-ready-endpoint')})", _named("no-ready-endpoint")
    return (
        f"{o.proto.upper()} {o.port} gets {o.service_result} and no endpoint was probed directly ({_ids('unexplained')})",
        _named("unexplained"),
    )


def _failing(dead) -> str:
    """ "endpoint X (pod, node) refuses" / "endpoints X, Y do not answer" / mixed."""
    ref = [d for d in dead if d.outcome == "refused"]
    sil = [d for d in dead if d.outcome != "refused"]
    out = []
    for group, one, many in ((ref, "refuses", "refuse"), (sil, "does not answer", "do not answer")):
        if group:
            names = ", ".join(d.label() for d in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
            out.append(f"endpoint{'s' if len(group) > 1 else ''} {names} {one if len(group) == 1 else many}")
    return "; ".join(out)


def _part(o) -> str:
    """Why a port works only in part: the endpoints that fail directly, or the Service layer when they do not explain
    the failed connects."""
    from kpdiag.state.probe_results import share_line

    j = o.judgement
    if j.blame == "service-layer":
        return (
            f"{j.unexplained} of {j.connects} connects through {o.target} fail that no endpoint failing directly "
            f"explains — the Service layer on this client's node ({_ids('service-layer')})"
        )
    roles = [
        role
        for role, failing in (
            ("endpoints-refuse", any(d.outcome == "refused" for d in o.failing_direct)),
            ("endpoints-silent", any(d.outcome != "refused" for d in o.failing_direct)),
        )
        if failing
    ]
    return f"{_failing(o.failing_direct)} — {share_line(o)} ({_ids(*(roles or ['endpoints-silent']), sep=', ')})"


def _fails_why(o, policy: list, usable: bool) -> str:
    """What follows a failing port's result in its line: the layer at fault, and the check that says so."""
    j = o.judgement
    if j.blame == "service-layer":
        return (
            f" — yet {len(o.ok_direct)}/{len(o.direct)} endpoints answer directly: the Service layer on this client's "
            f"node is broken, not the backend ({_ids('service-layer')})"
        )
    if o.direct:
        kinds = ", ".join(sorted({d.result for d in o.direct}))
        if policy:
            return f" — a NetworkPolicy blocks it: {policy[0].summary} ({policy[0].id})"
        if all(d.outcome == "refused" for d in o.direct):
            return f" — and nothing listens on the endpoints either ({kinds}): the backend is down ({_ids('endpoints-refuse')})"
        return f" — and the endpoints do not answer directly either ({kinds}): the backend is unreachable ({_ids('endpoints-silent')})"
    if not usable:
        return f" — it has no ready endpoint ({_ids('no-ready-endpoint')})"
    return f" — no endpoint was probed directly ({_ids('unexplained')})"


def _port_lines(o, to: str, policy: list, usable: bool, detail: bool = True) -> list[str]:
    """A port's verdict lines: what it does through the Service, why (``detail``: not said by the headline already),
    and what that rests on."""
    from kpdiag.state.probe_results import confidence

    p, j = f"{o.proto.upper()} {o.port}", o.judgement
    many = f" in {j.failed} of {j.connects} connects" if j.connects > 1 else ""
    if o.status == "works":
        text = f"{p} works through the Service{to} ({o.service_result}" + (
            f", {j.connects} of {j.connects} connects)" if j.connects > 1 else ")"
        )
    elif o.status == "partial" and not detail:  # the headline says why
        text = f"{p} works through the Service{to} in part ({j.failed} of {j.connects} connect(s) failed)"
    elif o.status == "partial":
        text = f"{p} works through the Service{to} in part: {_part(o)}"
    elif o.status == "fails":
        text = f"{p} through the Service{to}: {o.service_result}{many}" + _fails_why(o, policy, usable)
    else:
        text = f"{p} through the Service{to}: {o.service_result or 'not probed'}" + (
            " (UDP: silence is what an open port that does not answer looks like, too)" if o.proto == "udp" else ""
        )
    out = [text]
    if j.connects > 1 or (o.status != "works" and (j.connects or o.direct)):
        out.append(f"  confidence: {confidence(o)}")
    return out


def _root_first(findings, named: tuple[str, ...], text: str) -> str:
    """The verdict's cause, led by its root cause when the finding it names follows from another one (kube-proxy
    absent before the Service path it breaks; a NetworkPolicy before the endpoints that do not answer)."""
    from kpdiag.rootcause import root_of

    for f in findings:
        if f.id in named and f.caused_by:
            root = root_of(findings, f)
            if root is not f:
                return f"{root.summary} ({root.id}) — hence: {text}"
    return text


def _ping_lines(state: NodeState, svc) -> list[str]:
    """What a ping to each ClusterIP got, and why that is (or is not) normal."""
    ping = _ids("ping")
    out = []
    for ip in svc.cluster_ips:
        echo = next(
            (
                r
                for r in state.probe_results("icmp-echo")
                if r.get("target") == f"{ip}/icmp" and r.get("detail", {}).get("ttl", 64) == 64
            ),
            None,
        )
        if not echo or echo["result"] == "skipped":
            continue
        if echo["result"] == "time-exceeded":
            out.append(
                f"ping {ip} does not and cannot work: 'Time to live exceeded' from {echo.get('from')} — ICMP is not translated and loops via the gateway ({ping})"
            )
        elif echo["result"] == "timeout":
            out.append(f"ping {ip} gets no answer — normal: a ClusterIP only answers on its Service ports ({ping})")
        else:
            out.append(f"ping {ip}: {echo['result']}" + (f" from {echo.get('from')}" if echo.get("from") else ""))
    return out


def _no_service(state: NodeState, findings) -> tuple[list[str], str]:
    """The verdict when no Service is in focus: not found (the finding that says so), else not read."""
    nf = _playing(findings, "not-found")
    if nf:
        return [f"{nf[0].summary} ({nf[0].id})"], "not-found"
    if state.focus:
        ns, name = state.focus
        return [f"Service {ns}/{name} could not be read (see 'could not read')"], "unread"
    return [], "unread"


def _endpoints_line(svc) -> tuple[str, bool]:
    """The Service and its endpoints in one line, and whether kube-proxy has any endpoint to send to."""
    # the endpoints of its ports, paired by port name as kube-proxy pairs them (KP101 names any that are not)
    served = list({id(e): e for p in svc.ports for e in svc.endpoints_for(p)}.values())
    ready = [e for e in served if e.ready]
    term = [e for e in served if not e.ready and e.serving_terminating]
    detail = f"{svc.key}: {svc.type} {', '.join(svc.cluster_ips)}; {len(ready)} ready endpoint(s) of {len(served)}"
    if len(svc.endpoints) > len(served):
        detail += f" ({len(svc.endpoints) - len(served)} more listed under port names no Service port has)"
    if not ready and term:
        detail += f" — kube-proxy falls back to {len(term)} serving but terminating endpoint(s)"
    return detail, bool(ready or term)


def _unprobed(state: NodeState, svc, findings, detail: str) -> tuple[list[str], str]:
    """The verdict without probe results: from the API and the rules only (the first error's root cause, if any)."""
    lines = [
        detail,
        f"the probe results ({sources.PROBES_SERVICE}) could not be read: the verdict below comes from the API and "
        "the rules only"
        if state.has(sources.PROBES_SERVICE)
        else "not probed (--no-probe): the verdict below comes from the API and the rules only",
    ]
    errs = [f for f in findings if f.severity.value == "error"]
    if errs:
        from kpdiag.rootcause import root_of

        first = root_of(findings, errs[0])  # the root cause, before what follows from it
        return [f"{svc.key} is broken: {first.summary} ({first.id})"] + lines, "fails"
    return lines, "unknown"


def _headline(state: NodeState, svc, status: str, obs, findings, policy: list, usable: bool) -> str:
    """The verdict's first line: does the Service work, and if not, which layer is at fault."""
    if status == "fails":
        o = next(o for o in obs if o.status == "fails")
        text, named = _cause(o, policy, usable, (state.probes or {}).get("source"))
        return f"{svc.key} does NOT work: " + _root_first(findings, named, text)
    if status == "partial":
        return f"{svc.key} works in part: " + _part(next(o for o in obs if o.status == "partial"))
    errs = [f for f in findings if f.severity.value == "error"]
    if status == "works" and errs:
        return f"{svc.key} answered the probes, but kpdiag found {len(errs)} error(s) below"
    if status == "works":
        return f"{svc.key} works"
    return f"{svc.key}: the probes could not tell whether it works (see below)"


def verdict(state: NodeState, findings=()) -> tuple[list[str], str]:
    """A few lines a person reads first — does the Service work, and if not, which layer is at fault — and the
    status ("works", "partial", "fails", "unknown", "not-found", "no-clusterip", "unread") they state. Read from the
    same observation model (kpdiag.state.probe_results) and the same findings as the report, so they cannot disagree;
    the checks it names are those that declare their part in it (kpdiag/rootcause.py VERDICT_ROLES)."""
    from kpdiag.state.probe_results import headline_status, observations

    svcs = state.services_in_focus() or []
    if not svcs:
        return _no_service(state, findings)
    svc = svcs[0]
    if svc.type == "ExternalName" or svc.headless:
        kind = "ExternalName" if svc.type == "ExternalName" else "headless"
        return [f"{svc.key} has no ClusterIP ({kind}): kube-proxy is not involved"], "no-clusterip"
    detail, usable = _endpoints_line(svc)
    obs = observations(state, svc)
    status = headline_status(obs)
    if state.probes is None:
        return _unprobed(state, svc, findings, detail)
    policy = _playing(findings, "policy-drop")
    multi = len(svc.cluster_ips) > 1
    body: list[str] = []
    for o in obs:
        body.extend(_port_lines(o, f" to {o.cluster_ip}" if multi else "", policy, usable, len(obs) > 1))
    body.extend(_ping_lines(state, svc))
    return [_headline(state, svc, status, obs, findings, policy, usable), detail] + body, status


def diagnose_service(
    namespace: str | None,
    name: str,
    *,
    kubeconfig=None,
    context=None,
    probe=True,
    node=None,
    host_root=None,
    select=(),
    ignore=(),
    progress=None,
    save_to: str | None = None,
    stop=None,
    save_force: bool = False,
    client: str | None = None,
):
    files, manifest = collect_service(
        namespace, name, kubeconfig, context, probe, node, host_root, progress, stop=stop, client=client
    )
    if save_to:
        from kpdiag.bundle.store import write_bundle
        from kpdiag.errors import InputError
        from kpdiag.bundle.safeio import describe

        try:  # a new DIR or FILE.tar.gz: never over an existing path without save_force, never through a symlink
            written: dict[str, bytes | str] = dict(files)
            write_bundle(written, save_to, manifest, force=save_force)
        except OSError as exc:
            raise InputError(save_to, f"cannot write: {describe(exc)}") from None
    files["kpdiag.json"] = json.dumps(manifest).encode()
    namespace = manifest["service"].rsplit("/", 1)[0]  # the one used: given, or the kubeconfig context's
    return service_report(Bundle.from_files("", files), namespace, name, select, ignore)


def service_report(bundle: Bundle, namespace: str, name: str, select=(), ignore=()):
    """The report of one Service from collected state (live or a saved bundle).

    The exit code follows what was observed: a Service that does not work always carries an error finding (a check
    explains it; should none, KP114 says so rather than exit 0); a Service that could not be read at all — API
    unreachable, refused credentials, RBAC — is "could not diagnose" (exit 3) with the reason as the first line."""
    state = NodeState(bundle, focus=(namespace, name))
    _ = state.probes  # read (and judged against its schema) first: its problem, if any, is the report's too
    report = analyze_state(state, select, ignore, subject=f"service {namespace}/{name}")
    findings = list(report.findings)
    lines, status = verdict(state, findings)
    if status in ("fails", "partial") and not any(f.severity.value == "error" for f in findings):
        from kpdiag.checkapi import load_registry

        registry = load_registry()
        spec = next((registry.get(c) for c in _named("unexplained")), None)  # KP114
        if spec is not None:
            findings.append(
                spec.new(
                    f"{namespace}/{name} does not work as probed (" + "; ".join(lines[1:3]) + "), and no check "
                    "named the cause — a gap in kpdiag's checks: run kpdiag node --service on the client's node",
                    subject=f"{namespace}/{name}",
                )
            )
            from kpdiag.checkapi import running_mode
            from kpdiag.rootcause import link

            findings, _ = link(findings, [], running_mode(state))  # KP114 too follows from a cause, if one is here
    extra = dict(report.extra)
    extra["verdict"] = lines
    extra["status"] = status
    dns, dropped = _recorded_dns(state)
    extra["probes"] = state.probes  # judged against its schema when read (NodeState.probes): the verdict used it
    extra["dns"] = dns
    manifest = state.bundle.manifest if isinstance(state.bundle.manifest, dict) else {}
    who = _client_section(manifest)
    if who:
        extra["client"] = who
    headline = manifest.get("headline")
    if headline:
        extra["headline"] = str(headline)
    readable = status != "unread" and (state.cluster.services() is not None or status == "not-found")
    return replace(
        report,
        findings=tuple(findings),
        extra=extra,
        readable=readable,
        kind="service",
        problems=tuple(report.problems) + tuple(dropped),
    )


def _client_section(m: dict) -> dict | None:
    """Who asked, for the report: the client pod or address NetworkPolicy is judged for and how kpdiag identified it
    (--from, the downward API, the service account and hostname, its source address), or why none was."""
    c = m.get("client")
    if isinstance(c, dict) and isinstance(c.get("namespace"), str) and isinstance(c.get("pod"), str):
        how = c.get("how") if isinstance(c.get("how"), str) and c.get("how") else "named in the bundle's kpdiag.json"
        return {"namespace": c["namespace"], "pod": c["pod"], "identified": True, "how": how}
    ip = m.get("client_ip")
    if isinstance(ip, str) and ip:
        how = m.get("client_how") if isinstance(m.get("client_how"), str) and m.get("client_how") else None
        return {"ip": ip, "identified": True, "how": how or "named in the bundle's kpdiag.json (client_ip)"}
    why = m.get("client_unknown")
    if isinstance(why, str) and why:
        return {"identified": False, "how": why}
    return None


def _recorded_dns(state) -> tuple[dict | None, list[dict]]:
    """The bundle's DNS document for the report, only if it conforms to its schema (a bundle may be hand-made, old or
    hostile; the DNS checks read what they can of it either way): (dns, problems)."""
    from kpdiag import schemas

    dropped = []
    dns = state.dns
    why = None if dns is None else schemas.violation(dns, "dns.schema.json")
    if why and schemas.violation(dns, "service-report.schema.json#/$defs/dns_legacy"):
        dropped.append(
            {
                "source": state.display(sources.PROBES_DNS),
                "error": f"not a kpdiag.dns/v1 document ({why}): left out of the report's dns section",
            }
        )
        dns = None
    return dns, dropped
