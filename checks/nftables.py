"""nftables mode: prerequisites, and the node's kube-proxy table against the API."""

from __future__ import annotations

from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence

from kpdiag.state.typed_api import EndpointSlices, Focus, NodeObject, Services
from kpdiag.state.typed_node import Kernel, Manifest, NftVersion, Preflight
from kpdiag.state.typed_proxy import KubeProxyConfig, Nft, ProxyMode

from . import dataplane

MIN_KERNEL = (5, 13, 0)
MIN_NFT = (1, 0, 1)


def _nft_mode(preflight: Preflight, cfg: KubeProxyConfig | None, proxy: ProxyMode) -> bool:
    if dataplanes.get(preflight.mode).services_in_nft:
        return True
    return proxy.dataplane.services_in_nft or (cfg is not None and dataplanes.get(cfg.mode).services_in_nft)


@check(
    "KP401",
    "nftables-prerequisites",
    "nftables mode on a kernel or nft too old for it",
    "error",
    explains=("KP701", "KP703", "KP707", "KP402", "KP403"),
    advice_for="kube-proxy",
    preflight=("nftables",),
    symptom="kube-proxy configured with mode: nftables crash-loops or falls back; Services do not work on this node.",
    why="""
        kube-proxy's nftables mode (beta in v1.31, GA in v1.33) uses kernel features that arrived in Linux 5.13 and
        an nft userspace of at least 1.0.1. On an older kernel kube-proxy refuses to start in that mode (the log says
        which feature is missing), so the node gets no Service rules at all.
    """,
    fix="Upgrade the node's kernel (≥ 5.13) and nftables (≥ 1.0.1), or keep mode: iptables on these nodes.",
    references=("https://kubernetes.io/docs/reference/networking/virtual-ips/#proxy-mode-nftables",),
)
def prerequisites(
    new,
    uname: Kernel,
    cfg: Optional[KubeProxyConfig] = None,
    nft_version: Optional[NftVersion] = None,
    preflight: Optional[Preflight] = None,
    proxy: Optional[ProxyMode] = None,
):
    if not _nft_mode(preflight, cfg, proxy):
        return
    kernel = uname.version
    problems, evidence = [], []
    if kernel < MIN_KERNEL:
        problems.append(f"kernel {'.'.join(map(str, kernel))} < 5.13")
        evidence.append(Evidence(uname.source, ".".join(map(str, kernel)), 1))
    nft_v = nft_version.version if nft_version is not None else None
    if nft_v is not None and nft_v < MIN_NFT:
        problems.append(f"nft {'.'.join(map(str, nft_v))} < 1.0.1")
        evidence.append(Evidence(nft_version.source, ".".join(map(str, nft_v)), 1))
    if not problems:
        return
    yield new(
        f"kube-proxy is set to nftables mode, but this node has {' and '.join(problems)}",
        fix=(
            "uname -r; nft --version",
            "upgrade the node image (kernel ≥ 5.13, nftables ≥ 1.0.1) — or set mode: iptables in the kube-proxy ConfigMap for these nodes",
            "kubectl -n kube-system logs ds/kube-proxy | grep -i nftables   # what kube-proxy said",
        ),
        evidence=evidence + [e for e in [cfg.evidence("mode") if cfg is not None else None] if e],
        subject="node",
    )


@check(
    "KP402",
    "nftables-service-missing",
    "Service in the API, but not in kube-proxy's nftables maps",
    "error",
    shows=("stale-rules",),
    modes=("nftables",),
    advice_for="kube-proxy",
    symptom="The Service works from other nodes, not from this one (rejected or dropped by cluster-ips-check).",
    why="""
        In nftables mode kube-proxy puts every ClusterIP . protocol . port into its service-ips verdict map. A Service
        port with ready endpoints that is missing there is not translated on this node: traffic to it hits
        cluster-ips-check and is rejected (a ClusterIP on an unknown port) or dropped (an address not in cluster-ips).
        This node's kube-proxy is stale, stuck, or not running.
    """,
    fix="Check kube-proxy on this node (log, /healthz); restart it.",
)
def service_missing(
    new,
    services: Services,
    slices: EndpointSlices,
    nft: Nft,
    focus: Optional[Focus] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.missing(new, dataplanes.get("nftables"), nft, services, proxy, focus)


@check(
    "KP403",
    "nftables-endpoints-mismatch",
    "nftables endpoint chains differ from the ready endpoints",
    "error",
    shows=("stale-rules",),
    modes=("nftables",),
    advice_for="kube-proxy",
    symptom="A share of connections to the Service fails or reaches old pods on this node.",
    why="""
        kube-proxy's per-Service chain picks an endpoint chain with numgen random mod N; each endpoint chain DNATs to
        one pod. When those DNAT targets differ from the Service's ready endpoints (with internalTrafficPolicy: Local,
        the ready endpoints on this node, in its local-… chain), this node sends a share of the
        connections to pods that are gone, or never to new ones: kube-proxy's view is stale.
    """,
    fix="Find why kube-proxy on this node is stale (log, /healthz) and restart it.",
)
def endpoints_mismatch(
    new,
    services: Services,
    slices: EndpointSlices,
    nft: Nft,
    focus: Optional[Focus] = None,
    manifest: Optional[Manifest] = None,
    node: Optional[NodeObject] = None,
    proxy: Optional[ProxyMode] = None,
):
    yield from dataplane.mismatch(new, dataplanes.get("nftables"), nft, services, slices, proxy, focus, node, manifest)


def _nodeports(rs, fam: str = "ip") -> list[tuple[str, int]]:
    s = rs.set(fam, "kube-proxy", "service-nodeports")
    out = []
    for raw in s.elems if s else []:
        key = raw[0] if isinstance(raw, list) else raw
        if isinstance(key, dict) and "elem" in key:
            key = key["elem"].get("val")
        if isinstance(key, dict) and isinstance(key.get("concat"), list) and len(key["concat"]) == 2:
            try:
                out.append((str(key["concat"][0]), int(key["concat"][1])))
            except (TypeError, ValueError):
                continue
    return out


@check(
    "KP404",
    "nftables-localhost-nodeport",
    "NodePorts on 127.0.0.1 do not work in nftables mode",
    "warning",
    modes=("nftables",),
    needs=("whole-rules",),  # every NodePort of the node (a partial bundle holds one's)
    advice_for="kube-proxy",
    symptom="curl 127.0.0.1:<nodePort> on the node hangs or is refused, while <node IP>:<nodePort> works; host agents and "
    "health checks that use localhost broke after switching kube-proxy to nftables mode.",
    why="""
        In iptables mode kube-proxy also serves NodePorts on 127.0.0.1 (iptables.localhostNodePorts, default true)
        and sets route_localnet=1 for it. nftables mode never does: it accepts NodePorts only on the addresses of
        nodePortAddresses (by default the node's primary IPs), and it does not set route_localnet, because routing
        127.0.0.0/8 off the node is a security risk. Clients on the node that use localhost:nodePort — a setting
        carried over from iptables mode shows that they were expected to — get nothing.
    """,
    fix="Point local clients at the node's IP (or the ClusterIP) instead of 127.0.0.1; nodePortAddresses chooses which "
    "node addresses accept NodePorts.",
)
def localhost_nodeport(new, nft: Nft, cfg: KubeProxyConfig, proxy: Optional[ProxyMode] = None):
    dp = dataplanes.get("nftables")
    why = dp.ports_skip(proxy.dataplane, None, nft)
    if why:
        raise Skip(why)
    rs = nft.ruleset()
    wants = []
    if cfg.get("iptables.localhostNodePorts") is True:
        wants.append(cfg.evidence("iptables.localhostNodePorts"))
    addrs = cfg.get("nodePortAddresses") or []
    if isinstance(addrs, str):
        addrs = [addrs]
    if any(str(a).startswith(("127.", "::1")) for a in addrs):
        wants.append(cfg.evidence("nodePortAddresses"))
    wants = [w for w in wants if w]
    if not wants:
        return  # nothing on this node asks for localhost NodePorts
    ports = _nodeports(rs)
    if not ports:
        return  # no NodePort Service on this node
    ips = rs.set("ip", "kube-proxy", "nodeport-ips")
    on = [str(e) for e in (ips.elems if ips else []) if isinstance(e, str)]
    reading = f"nodePortAddresses {addrs}" if addrs else "nodePortAddresses unset (the node's primary IPs)"
    shown = ", ".join(f"{p}/{proto}" for proto, p in ports[:4])
    yield new(
        f"kube-proxy runs nftables mode with {len(ports)} NodePort(s) ({shown}) and its configuration still expects them on "
        f"localhost, but nftables mode serves NodePorts only on {', '.join(on) or 'the nodePortAddresses'} ({reading}): "
        f"127.0.0.1:{ports[0][1]} does not work here",
        fix=(
            f"curl -sv http://{on[0] if on else '<node IP>'}:{ports[0][1]}/   # the node's address works",
            "change local clients (health checks, host agents, scripts) from 127.0.0.1:<nodePort> to the node IP or the ClusterIP",
            "kubectl -n kube-system edit configmap kube-proxy   # drop iptables.localhostNodePorts (it has no effect in nftables mode); "
            'nodePortAddresses: ["primary"] or the node\'s CIDRs',
        ),
        evidence=wants
        + [
            Evidence(rs.source, f"map ip kube-proxy service-nodeports: {shown}"),
            Evidence(rs.source, f"set ip kube-proxy nodeport-ips: {', '.join(on) or '(empty)'}"),
        ],
        subject="node",
    )
