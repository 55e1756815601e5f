"""Turn a bundle into a Report: parse once, run the selected checks, gather facts and problems."""

from __future__ import annotations

from typing import Any

from kpdiag import __version__
from kpdiag.checkapi import load_registry, run_checks, select_checks
from kpdiag.model import Report
from kpdiag.state.node import NodeState
from kpdiag.bundle import sources

KNOWN_SOURCES = (
    sources.IPTABLES_SAVE,
    sources.SYSCTL,
    sources.IP_ADDR,
    sources.IP_ROUTE,
    sources.MODULES,
    sources.NFT_RULESET,
    sources.IPVSADM,
    sources.KP_CONFIG,
    sources.KP_METRICS,
    sources.KP_LOG,
    sources.KP_HEALTHZ,
    sources.KP_PROXY_MODE,
    sources.CONNTRACK_STATS,
    sources.SERVICES,
    sources.KP_CONFIGMAP,
)


def facts(state: NodeState, programmed: dict | None = None) -> dict:
    """What was seen; ``programmed`` is the node's mode-independent Service table (kpdiag.state.programmed), when built."""
    mode, how = state.proxy_mode
    out: dict = {"node": state.node_name or None, "proxy_mode": mode, "proxy_mode_source": how}
    if state.kernel is not None:
        out["kernel"] = ".".join(map(str, state.kernel))
    rs = state.iptables()
    if rs is not None:
        out["iptables_rules"] = rs.rule_count
        out["iptables_backend"] = next(
            (("nf_tables" if "nf_tables" in c else "legacy") for c in rs.header_comments if "iptables" in c), None
        )
    if programmed is not None:
        out["service_ports_programmed"] = programmed["count"]
    elif rs is not None:
        out["service_ports_programmed"] = len(state.programmed() or {})
    try:
        zone = state.cluster.node_zone()
    except Exception:  # a malformed cluster/nodes.json is a named problem already; the zone is only a fact
        zone = None
    if zone:
        out["zone"] = zone  # kpdiag cluster compares endpoint sets within a zone (topology-aware routing)
    if state.ip_addr is not None:
        out["cni"] = state.cni.to_dict()  # which checks judge routes and overlays follows from it
    v = state.kube_proxy_version
    if v:
        out["kube_proxy_version"] = f"{v[0]}.{v[1]}"
    count, limit = (state.sysctl_value(f"net.netfilter.nf_conntrack_{k}") for k in ("count", "max"))
    if count is not None and limit is not None and count.value.strip().isdigit() and limit.value.strip().isdigit():
        out["conntrack"] = {"count": int(count.value), "max": int(limit.value)}
    return out


def _anything_readable(state: NodeState) -> bool:
    """True when at least one known source was read without a problem."""
    bundle = state.bundle
    for rel in KNOWN_SOURCES:
        if not bundle.exists(rel):
            continue
        data = bundle.read_json(rel) if rel.endswith(".json") else bundle.read_text(rel)
        if data is None:
            continue
        if not state.problems_with(rel):
            return True
    return False


def _not_a_node(state: NodeState) -> str | None:
    """The headline when the host does not look like a Kubernetes node (kpdiag.state.service_proxy), else None."""
    try:
        impl = state.service_implementer
    except Exception:  # the state could not tell: the checks say what they can
        return None
    if impl is None or impl.not_a_node is None:
        return None
    name = state.node_name or state.bundle.name
    return (
        f"kpdiag {name}: this does not look like a Kubernetes node — looked for, found none: "
        + "; ".join(impl.not_a_node)
        + ". Nothing was diagnosed and nothing is recommended for this host: run kpdiag node on a node of the cluster "
        "(kubectl debug node/NAME …)"
    )


def _service_of(finding) -> str | None:
    """The Service (NS/NAME) a finding is about, from its data (``service``: NS/NAME or NS/NAME:PORT), or None."""
    svc = (finding.data or {}).get("service")
    return svc.split(":", 1)[0] if isinstance(svc, str) and svc else None


def _filled(finding, state: NodeState):
    """The finding with the placeholders of its fix that this state knows filled in (kpdiag.fixcmd.fill_known)."""
    from dataclasses import replace

    from kpdiag.fixcmd import fill_known

    fix = fill_known(finding.fix, node=state.node_name, bundle=state.bundle.path)
    return finding if fix == finding.fix else replace(finding, fix=fix)


def analyze_state(state: NodeState, select=(), ignore=(), subject: str | None = None) -> Report:
    registry = load_registry()
    chosen = [c for c in select_checks(registry.checks, select, ignore) if c.scope == "node"]
    findings, runs = run_checks(state, chosen)
    findings = [_filled(f, state) for f in findings]
    partial = state.partial
    if partial and state.focus:  # only this Service's rules were read: what the checks say of others is not judged
        about = "/".join(state.focus)
        findings = [f for f in findings if _service_of(f) in (None, about)]
    problems = [p.to_dict() for p in state.problems]
    problems += [{"source": f"plugin {name}", "error": why} for name, why in registry.load_errors]
    readable = _anything_readable(state) or bool(findings)
    extra: dict[str, Any] = {}
    if partial:
        extra["partial"] = {k: partial[k] for k in ("service", "mode", "holds") if k in partial}
    not_a_node = _not_a_node(state)
    if not_a_node:  # first, and exit 3: nothing to diagnose here, and nothing to change on this host
        extra["headline"] = not_a_node
        readable = False
    if not state.preflight:
        from kpdiag.state.programmed import summary

        programmed = summary(state)
        if programmed is not None:
            extra["programmed"] = programmed  # compared across nodes by `kpdiag cluster`
    return Report(
        subject=subject or state.node_name or state.bundle.name,
        findings=tuple(findings),
        checks=tuple(runs),
        problems=tuple(problems),
        facts=facts(state, extra.get("programmed")),
        readable=readable,
        kpdiag_version=__version__,
        extra=extra,
    )
