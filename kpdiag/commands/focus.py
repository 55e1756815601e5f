"""Focus a node report on one Service or one destination: add traces of its ports."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from kpdiag.bundle import sources


def _parse_target(text: str) -> tuple[str, int, str]:
    proto = "tcp"
    if "/" in text:
        text, proto = text.rsplit("/", 1)
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise ValueError(f"--trace wants DST:PORT[/PROTO] ([IPv6]:PORT), not {text!r}")
    return host.strip("[]"), int(port), proto.lower()


def check_focus(service: str | None, trace_to: str | None) -> None:
    """ValueError (one line, naming the option) for a --service or --trace that cannot be used: checked before a
    node is collected, so a typo costs nothing."""
    if service is not None and ("/" not in service or not all(service.split("/", 1))):
        raise ValueError(f"--service wants NS/NAME, not {service!r}")
    if trace_to:
        from kpdiag.parse.addr import parse_ip
        from kpdiag.trace.model import Packet

        dst, port, proto = _parse_target(trace_to)
        try:
            parse_ip(dst)
            Packet("::1" if ":" in dst else "127.0.0.1", dst, proto, port)
        except ValueError as exc:
            raise ValueError(f"--trace {trace_to}: {exc}") from None


def _named_by_api(state, service: str, table: dict) -> list[tuple[str, str, int, str]]:
    """The Service's ClusterIP ports the mode's table holds, named from the API's Service (IPVS keeps no names)."""
    out = []
    for svc in state.cluster.services() or []:
        if svc.key != service:
            continue
        for ip in svc.cluster_ips:
            for p in svc.ports:
                proto = str(p.get("protocol") or "TCP").lower()
                key = f"{ip}:{p.get('port')}/{proto}"  # as the mode's table spells it (IPv6 unbracketed)
                if key in table:
                    out.append((svc.kube_proxy_name(p), ip, int(p["port"]), proto))
    return out


def focus_report(report, state, service: str | None = None, trace_to: str | None = None):
    """Add traces (from a pod and from an external client) for a Service's ports or one DST:PORT."""
    if not service and not trace_to:
        return report
    check_focus(service, trace_to)
    tracer = state.mode_tracer()
    targets: list[tuple[str, str, int, str]] = []  # (label, dst, port, proto)
    if trace_to:
        dst, port, proto = _parse_target(trace_to)
        targets.append((trace_to, dst, port, proto))
    if service:
        if "/" not in service:
            raise ValueError(f"--service wants NS/NAME, not {service!r}")
        from kpdiag.state.programmed import service_table

        prefix = service + ":"
        for key, (name, _, _) in sorted((service_table(state) or {}).items(), key=lambda kv: kv[1][0]):
            if name == service or name.startswith(prefix):  # key: ClusterIP:port/proto, the same in every proxy mode
                # (a port without a name is plain ns/svc, kube-proxy's ServicePortName)
                hostport, proto = key.rsplit("/", 1)
                ip, number = hostport.rsplit(":", 1)
                targets.append((name, ip, int(number), proto))
        if not targets and not state.dataplane.keeps_service_names:
            targets += _named_by_api(state, service, service_table(state) or {})
    extra = dict(report.extra)
    traces = []
    notes = []
    if tracer is None:
        notes.append("no rules of kube-proxy's mode could be read on this node: nothing to trace")
    elif service and not any(t[0] == service or t[0].startswith(service + ":") for t in targets):
        if not state.dataplane.keeps_service_names:
            notes.append(f"{service}: IPVS keeps no Service names — trace its ClusterIP with --trace CLUSTERIP:PORT")
        else:
            notes.append(
                f"{service}: no ClusterIP rules on this node (not a Service here, headless, or not programmed — see KP202/KP402)"
            )
    if tracer is not None:
        from kpdiag.state.kube_rules import cluster_cidr
        from kpdiag.trace.model import Packet

        cidr = cluster_cidr(state.programmed())
        pod_src = str(ipaddress.ip_network(cidr, strict=False).network_address + 77) if cidr else "10.244.250.77"
        tracer6 = None
        for label, dst, port, proto in targets:
            origins: tuple[tuple[str, str], ...] = (("pod", pod_src), ("external", "203.0.113.77"))
            use = tracer
            if ":" in dst:  # IPv6: iptables and IPVS mode keep those rules apart (ip6tables)
                tracer6 = tracer6 or state.mode_tracer(family=6)
                use = tracer6
                cidr6 = (
                    cluster_cidr(state.programmed("ip6tables-save")) if state.dataplane.traced_with_iptables else None
                )
                pod6: tuple[tuple[str, str], ...] = (
                    (("pod", str(ipaddress.ip_network(cidr6, strict=False).network_address + 77)),) if cidr6 else ()
                )
                origins = pod6 + (("external", "2001:db8::77"),)
                if use is None:
                    notes.append(
                        f"{label}: an IPv6 address, and this node's IPv6 rules ({sources.IP6TABLES_SAVE}) could not be read"
                    )
                    continue
                if not cidr6:
                    notes.append(f"{label}: the IPv6 pod CIDR is unknown here: traced from an external client only")
            for origin, src in origins:
                r = use.trace(Packet(src, dst, proto, port, origin=origin))
                traces.append({"target": label, **r.to_dict()})
    extra["traces"] = traces
    if notes:
        extra["notes"] = notes
    return replace(report, extra=extra)
