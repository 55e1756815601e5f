"""What this node's kube-proxy programmed, in a form that is the same in every proxy mode and cheap to compare
across hundreds of nodes.

Each service port is keyed by ``ClusterIP:port/proto`` (the same in iptables, nftables and IPVS mode) and
carries kube-proxy's name for it (when the rules say) and its endpoints. A node report carries this table as
one compact text (``key<TAB>name<TAB>hash<TAB>count[<TAB>L]`` per line, sorted) and its digest: nodes with the
same digest programmed exactly the same, so the fleet aggregation only has to look inside the tables that differ.

``L`` marks internalTrafficPolicy: Local, which the rules show in iptables mode (KUBE-SVL, or a DROP "has no local
endpoints") and nftables mode (a local-… chain, or ``drop`` in no-endpoint-services): such a port's endpoints are
this node's own and differ between nodes by design. IPVS rules do not show it (``policy`` is false there).
"""

from __future__ import annotations

import hashlib

FORMAT = "kpdiag.programmed/v1"


def _ep_hash(endpoints) -> str:
    if not endpoints:
        return "-"
    return hashlib.sha1(",".join(sorted(endpoints)).encode()).hexdigest()[:10]


Entry = tuple  # (name, endpoints tuple, local policy)


def service_table(state) -> dict[str, Entry] | None:
    """``{"10.96.0.10:53/udp": ("kube-system/kube-dns:dns", ("10.244.1.20:53", …), False)}`` for the mode kube-proxy
    runs in, or None when this node's rules for that mode are not readable."""
    mode, _ = state.proxy_mode
    table: dict[str, Entry] = {}
    if mode == "nftables":
        from kpdiag.state.kube_nft import cluster_ips, programmed_nft

        rs = state.nft()
        ports = programmed_nft(rs) if rs is not None else None
        if ports is None:
            return None
        cips = set(cluster_ips(rs))
        for (ip, proto, port), sp in ports.items():
            if sp.external or (cips and ip not in cips):
                continue  # external and load-balancer IPs: the iptables and IPVS tables hold ClusterIPs only
            # kube-proxy's chain name: service-HASH-ns/name/proto/portname ("ns/name/proto/" for a port without a
            # name, whose ServicePortName is plain ns/name)
            parts = (sp.chain or "").split("-", 2)
            bits = parts[2].split("/") if len(parts) == 3 else []
            name = (
                (f"{bits[0]}/{bits[1]}" + (f":{bits[3]}" if bits[3] else "")) if len(bits) == 4 else (sp.comment or "")
            )
            table[f"{ip}:{port}/{proto}"] = (name, tuple(sorted(sp.endpoints)), sp.local_policy)
        return table
    if mode == "ipvs":
        services = state.ipvs
        if services is None:
            return None
        bound = _ipvs_bound(state)
        for vs in services.values():
            if vs.addr is None or (bound is not None and vs.addr not in bound):
                continue  # fwmark services and NodePorts on the node's own addresses are per node
            table[f"{vs.addr}:{vs.port}/{vs.proto}"] = (
                "",
                tuple(sorted(r.target for r in vs.reals if r.weight > 0)),
                False,
            )
        return table
    progs = state.programmed()
    if progs is None:
        return None
    for ports in (
        progs,
        state.programmed("ip6tables-save") or {},
    ):  # a dual-stack node's IPv6 Services are in ip6tables
        for p in ports.values():
            if p.cluster_ip and p.port:
                table[f"{p.cluster_ip}:{p.port}/{(p.proto or 'tcp').lower()}"] = (
                    p.name,
                    tuple(sorted(p.endpoints)),
                    p.local_policy,
                )
    return table


def _ipvs_bound(state) -> set[str] | None:
    links = state.ip_addr
    if links is None:
        return None
    for link in links:
        if link.get("ifname") == "kube-ipvs0":
            return {a.get("local") for a in link.get("addr_info") or [] if a.get("local")}
    return None


def encode(table: dict[str, Entry], mode: str | None) -> dict:
    lines = [
        f"{key}\t{name}\t{_ep_hash(eps)}\t{len(eps)}" + ("\tL" if local else "")
        for key, (name, eps, local) in sorted(table.items())
    ]
    text = "\n".join(lines)
    return {
        "format": FORMAT,
        "mode": mode,
        "count": len(lines),
        "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
        "policy": mode in ("iptables", "nftables"),
        "entries": text,
    }


def decode(doc: dict, local: set[str] | None = None) -> dict[str, tuple[str, str, int]]:
    """``entries`` text → {key: (name, endpoint hash, endpoint count)}; keys marked internalTrafficPolicy: Local are
    added to ``local`` when given; malformed lines are skipped."""
    out = {}
    for line in str(doc.get("entries") or "").split("\n"):
        parts = line.split("\t")
        if len(parts) in (4, 5) and parts[3].isdigit():
            out[parts[0]] = (parts[1], parts[2], int(parts[3]))
            if local is not None and len(parts) == 5 and parts[4] == "L":
                local.add(parts[0])
    return out


def summary(state) -> dict | None:
    table = service_table(state)
    if table is None:
        return None
    return encode(table, state.proxy_mode[0])
