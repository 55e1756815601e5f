"""What kube-proxy's own rules say about a Service when the API objects are not in the bundle: kube-proxy writes a
REJECT (iptables) or a reject-chain element (nftables) for a port with no endpoints at all, and a DROP for a Local
traffic policy with no endpoint on this node. Offline (`kpdiag analyze` of a node bundle, `kpdiag node` without
credentials) these are findings in their own right, marked "from the node's rules", with the rule as evidence. With the
API objects present, KP101/KP105/KP106 say the same from the API and these stay silent."""

from __future__ import annotations

from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_api import Services
from kpdiag.state.typed_proxy import KubeProxyRules, Nft, ProxyMode

SUFFIX_NONE = " has no endpoints"
SUFFIX_LOCAL = " has no local endpoints"


def _iptables_marks(rules: KubeProxyRules, suffix: str) -> dict[str, list]:
    """kube-proxy's name → its filter rules whose comment ends with ``suffix`` (REJECT/DROP), in rule order."""
    out: dict[str, list] = {}
    for which in ("iptables-save", "ip6tables-save"):
        rs = rules.dump(which)
        if rs is None:
            continue
        for chain in ("KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES"):
            c = rs.chain("filter", chain)
            for r in c.rules if c is not None else []:
                comment = r.comment or ""
                if comment.endswith(suffix) and r.target in ("REJECT", "DROP"):
                    out.setdefault(comment[: -len(suffix)], []).append(r)
    return out


def _nft_marks(nft: Nft | None, verdict: str) -> dict[str, list[Evidence]]:
    """kube-proxy's name → no-endpoint-services / no-endpoint-nodeports elements with that verdict (goto = reject)."""
    rs = nft.ruleset() if nft is not None else None
    if rs is None:
        return {}
    from kpdiag.dataplane.kube_nft import TABLES, _comment, _elem_key, _verdict

    out: dict[str, list[Evidence]] = {}
    for table in TABLES:
        if not rs.has_table(*table):
            continue
        for set_name in ("no-endpoint-services", "no-endpoint-nodeports"):
            s = rs.set(*table, set_name)
            for raw in s.elems if s else []:
                v = _verdict(raw)
                if (verdict == "reject") != (v == "goto"):
                    continue
                if verdict == "drop" and v != "drop":
                    continue
                name = _comment(raw) or "?"
                key = _elem_key(raw)
                what = " . ".join(map(str, key)) if key else "(nodeport)"
                out.setdefault(name, []).append(
                    Evidence(
                        nft.source,
                        f'{table[0]} {table[1]} {set_name}: {what} comment "{name}" : '
                        + ("goto reject-chain" if v == "goto" else "drop"),
                    )
                )
    return out


def _mode(proxy: ProxyMode):
    """The dataplane whose no-endpoint rules are read (unknown: the iptables rules), or Skip when they do not name
    the Service."""
    dp = proxy.dataplane
    if not dp.per_service_reject_comments:
        raise Skip(f"{dp.in_words}: kube-proxy's no-endpoint REJECTs are not per-Service comments there")
    return dp


@check(
    "KP115",
    "rules-no-endpoints",
    "kube-proxy's rules say a Service has no endpoints",
    "error",
    shows=("stale-rules",),
    symptom="Connections to a Service are refused at once; the API objects were not collected, but the node's rules say why.",
    why="""
        When a Service port has no endpoints at all, kube-proxy writes a rule that rejects its traffic — in iptables mode a
        filter REJECT commented "NS/NAME:PORT has no endpoints", in nftables mode an element of no-endpoint-services that
        jumps to reject-chain. So even without the API objects, the node's own rules prove that, as far as this node's
        kube-proxy knows, nothing backs that Service: clients get "connection refused". The cause is on the API side: a
        selector that matches no pod, pods that are not ready, or a Service without selector and without EndpointSlices.
    """,
    fix="kubectl -n NS get endpointslices -l kubernetes.io/service-name=NAME; kubectl -n NS get pods --show-labels (compare with the selector); or run kpdiag svc NAME -n NS.",
)
def rules_no_endpoints(
    new,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
):
    if services is not None:
        return  # KP101/KP102 judge it from the API objects
    dp = _mode(proxy)
    if dp.services_in_nft:
        marks = {k: v for k, v in _nft_marks(nft, "reject").items()}
    else:
        if rules is None:
            raise Skip(f"needs {sources.IPTABLES_SAVE}")
        marks = {
            k: [Evidence(r.source, r.text, r.lineno) for r in found]
            for k, found in _iptables_marks(rules, SUFFIX_NONE).items()
        }
    for name in sorted(marks):
        ns_name = name.split(":")[0]
        ns, _, svc = ns_name.partition("/")
        yield new(
            f"{name} has no endpoints (from the node's rules: kube-proxy rejects its traffic): connections are refused",
            fix=(
                f"kubectl -n {ns} get endpointslices -l kubernetes.io/service-name={svc} -o wide",
                f"kpdiag svc {svc} -n {ns}   # the Service, its selector and its pods from the API",
            ),
            evidence=marks[name][:3],
            subject=name,
            data={"service": ns_name, "port_name": name.partition(":")[2] or None, "mode": dp.name or "iptables"},
        )


@check(
    "KP116",
    "rules-no-local-endpoints",
    "kube-proxy's rules drop a Local-policy Service on this node",
    "warning",
    shows=("stale-rules",),
    symptom="A Service times out from this node (pods here, or NodePort/LoadBalancer traffic arriving here) and works elsewhere.",
    why="""
        With internalTrafficPolicy: Local (traffic from pods) or externalTrafficPolicy: Local (NodePort, LoadBalancer,
        external IPs), a node only uses endpoints on itself. kube-proxy DROPs the traffic when this node has none — a rule
        commented "has no local endpoints" in iptables mode, a drop element in nftables mode. Read from the node's rules
        when the API objects are not at hand; with them, KP105/KP106 say the same.
    """,
    fix="Run an endpoint on this node (a DaemonSet), send external traffic only to nodes with endpoints (LB health checks), or use the Cluster policy.",
)
def rules_no_local_endpoints(
    new,
    rules: Optional[KubeProxyRules] = None,
    nft: Optional[Nft] = None,
    proxy: Optional[ProxyMode] = None,
    services: Optional[Services] = None,
):
    if services is not None:
        return  # KP105/KP106 judge it from the API objects
    dp = _mode(proxy)
    if dp.services_in_nft:
        marks = _nft_marks(nft, "drop")
        kinds = {
            name: ("internal" if any("no-endpoint-services" in e.text for e in evs) else "external")
            for name, evs in marks.items()
        }
    else:
        if rules is None:
            raise Skip(f"needs {sources.IPTABLES_SAVE}")
        found = _iptables_marks(rules, SUFFIX_LOCAL)
        marks = {k: [Evidence(r.source, r.text, r.lineno) for r in rs] for k, rs in found.items()}
        kinds = {
            k: ("internal" if any(r.chain == "KUBE-SERVICES" for r in rs) else "external") for k, rs in found.items()
        }
    for name in sorted(marks):
        ns, _, svc = name.split(":")[0].partition("/")
        internal = kinds[name] == "internal"
        yield new(
            f"{name} has no endpoint on this node and a Local traffic policy (from the node's rules): "
            + (
                "pods on this node cannot reach its ClusterIP (internalTrafficPolicy: Local)"
                if internal
                else "NodePort/LoadBalancer traffic arriving at this node is dropped (externalTrafficPolicy: Local)"
            ),
            fix=(
                f"kubectl -n {ns} get endpointslices -l kubernetes.io/service-name={svc} -o wide   # which nodes have endpoints",
                f'kubectl -n {ns} patch service {svc} -p \'{{"spec":{{"{"internal" if internal else "external"}TrafficPolicy":"Cluster"}}}}\'   # if locality is not needed',
            ),
            evidence=marks[name][:3],
            subject=name,
            data={
                "service": name.split(":")[0],
                "port_name": name.partition(":")[2] or None,
                "mode": dp.name or "iptables",
                "policy": "internalTrafficPolicy" if internal else "externalTrafficPolicy",
            },
        )
