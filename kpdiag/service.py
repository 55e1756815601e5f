"""`kpdiag svc`: one Service end to end — API view, DNS, active probes, the node's rules when visible."""

from __future__ import annotations

import json
from dataclasses import replace

from .bundle import FORMAT, Bundle
from .diagnose import analyze_state
from .state import NodeState


def _ready_endpoints(files: dict[str, bytes], namespace: str, name: str, service: dict) -> list[tuple[str, int, str]]:
    """(ip, targetPort, proto) of the ready endpoints, from the EndpointSlices collected."""
    from .cluster_state import ClusterView

    view = ClusterView(Bundle.from_files("svc", files))
    out = []
    for svc in view.services() or []:
        if svc.namespace != namespace or svc.name != name:
            continue
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").lower()
            for e in svc.endpoints_for(port):
                target = svc.target_of(e, port)
                if e.ready and target:
                    out.append((e.ip, int(target), proto))
    return sorted(set(out))[:16]


def collect_service(namespace: str, name: str, kubeconfig=None, context=None, probe: bool = True, node: str | None = None,
                    host_root: str | None = None, progress=None) -> tuple[dict[str, bytes], dict]:
    """Everything `kpdiag svc` looks at, as bundle files (cluster/, node/ when visible, probes/)."""
    from .collect.cluster import ClusterCollector
    from .collect.dns import resolve_service

    files: dict[str, bytes] = {}
    errors: list[dict] = []
    cc = ClusterCollector(kubeconfig, context)
    service = cc.service(namespace, name, node_name=node)
    files.update(cc.out.files)
    errors.extend(cc.out.errors)
    # the node's own rules, when kpdiag runs in the node's network namespace (a node debug pod, the node)
    try:
        from .collect.node import NodeCollector

        nc = NodeCollector(host_root=host_root, progress=progress)
        nc.iptables()
        rules = nc.out.files.get("node/iptables-save.txt", b"")
        if b"KUBE-SERVICES" in rules:
            nc.collect()
            files.update(nc.out.files)
            errors.extend(nc.out.errors)
        else:
            errors.append({"source": "node", "error": "kube-proxy's rules are not visible from here (not in the node's network namespace): "
                                                      "node-side checks skipped — run kpdiag node on the node for them"})
    except Exception as exc:  # the node side is a bonus; never let it stop the Service diagnosis
        errors.append({"source": "node", "error": f"node rules not collected: {exc.__class__.__name__}: {exc}"})
    if progress:
        progress(f"resolving {name}.{namespace} in DNS")
    files["probes/dns.json"] = json.dumps(resolve_service(namespace, name), indent=1).encode()
    if probe and service is not None:
        from .collect.probes import probe_service

        if progress:
            progress("probing the ClusterIP and the endpoints")
        doc = probe_service(service, _ready_endpoints(files, namespace, name, service))
        files["probes/service.json"] = json.dumps(doc, indent=1).encode()
        if doc.get("raw_skipped_reason"):
            errors.append({"source": "probes/service.json", "error": doc["raw_skipped_reason"]})
    elif not probe:
        errors.append({"source": "probes/service.json", "error": "probes disabled (--no-probe)"})
    manifest = {"format": FORMAT, "node": node or "", "kpdiag_version": __import__("kpdiag").__version__, "errors": errors,
                "service": f"{namespace}/{name}", "api": cc.out.api}
    return files, manifest


def verdict(state: NodeState) -> list[str]:
    """A few lines a person reads first: does the Service work, and what about ping."""
    lines: list[str] = []
    svcs = state.services_in_focus() or []
    if not svcs:
        if state.focus:
            ns, name = state.focus
            lines.append(f"Service {ns}/{name}: not found or the API could not be read (see below)")
        return lines
    svc = svcs[0]
    if svc.type == "ExternalName" or svc.headless:
        lines.append(f"{svc.key} has no ClusterIP ({'ExternalName' if svc.type == 'ExternalName' else 'headless'}): kube-proxy is not involved")
        return lines
    probes = state.probes
    ready = [e for e in svc.endpoints if e.ready]
    lines.append(f"{svc.key}: {svc.type} {', '.join(svc.cluster_ips)}; {len(ready)} ready endpoint(s) of {len(svc.endpoints)}")
    if probes is None:
        lines.append("not probed (--no-probe, or the Service could not be read)")
        return lines
    from .parse.addr import hostport

    def host_of(target: str) -> str:  # "10.0.0.1:80/tcp", "[fd00::1]:80/tcp" → the address
        return target.rsplit(":", 1)[0].strip("[]")

    for ip in svc.cluster_ips:  # a dual-stack Service: each family's ClusterIP
        to = f" to {ip}" if len(svc.cluster_ips) > 1 else ""
        family_eps = {e.ip for e in ready if (":" in e.ip) == (":" in ip)}
        for port in svc.ports:
            proto = (port.get("protocol") or "TCP").lower()
            kind = "tcp-connect" if proto == "tcp" else "udp"
            r = next((r for r in state.probe_results(kind) if r.get("target") == f"{hostport(ip, port.get('port'))}/{proto}"), None)
            if r is None:
                continue
            direct = [x for x in state.probe_results(kind) if host_of(x.get("target", "")) in family_eps]
            ok_direct = [x for x in direct if x.get("result") in ("connected", "udp-reply")]
            if r["result"] in ("connected", "udp-reply"):
                text = f"{proto.upper()} {port.get('port')} works through the Service{to} ({r['result']})"
            else:
                text = f"{proto.upper()} {port.get('port')} through the Service{to}: {r['result']}"
                if direct:
                    text += (f" — yet {len(ok_direct)}/{len(direct)} endpoints answer directly: the Service layer is broken, not the backend"
                             if ok_direct else f" — and the endpoints do not answer directly either ({', '.join(sorted({x['result'] for x in direct}))}): the backend is broken")
            lines.append(text)
        echo = next((r for r in state.probe_results("icmp-echo") if r.get("target") == f"{ip}/icmp" and r.get("detail", {}).get("ttl", 64) == 64), None)
        if echo and echo["result"] != "skipped":
            if echo["result"] == "time-exceeded":
                lines.append(f"ping {ip} does not and cannot work: 'Time to live exceeded' from {echo.get('from')} — ICMP is not translated and loops via the gateway (KP201)")
            elif echo["result"] == "timeout":
                lines.append(f"ping {ip} gets no answer — normal: a ClusterIP only answers on its Service ports (KP201)")
            else:
                lines.append(f"ping {ip}: {echo['result']}" + (f" from {echo.get('from')}" if echo.get("from") else ""))
    return lines


def diagnose_service(namespace: str, name: str, *, kubeconfig=None, context=None, probe=True, node=None, host_root=None,
                     select=(), ignore=(), progress=None, save_to: str | None = None):
    files, manifest = collect_service(namespace, name, kubeconfig, context, probe, node, host_root, progress)
    if save_to:
        from .bundle import write_bundle

        write_bundle(files, save_to, manifest)
    files["kpdiag.json"] = json.dumps(manifest).encode()
    return service_report(NodeState(Bundle.from_files("", files)), namespace, name, select, ignore)


def service_report(state: NodeState, namespace: str, name: str, select=(), ignore=()):
    """The report of one Service from collected state (live or a saved bundle)."""
    state.focus = (namespace, name)
    report = analyze_state(state, select, ignore, subject=f"service {namespace}/{name}")
    extra = dict(report.extra)
    extra["verdict"] = verdict(state)
    extra["probes"] = state.probes
    extra["dns"] = state.dns
    readable = report.readable or state.cluster.services() is not None
    return replace(report, extra=extra, readable=readable)
