"""kube-proxy's nftables mode (Kubernetes ≥ 1.29): table ip/ip6 kube-proxy, its service-ips and service-nodeports
maps, service-/local-/endpoint- chains; cluster-ips-check rejects what no Service port matches."""

from __future__ import annotations

from kpdiag.dataplane.base import Dataplane, dataplane


@dataplane
class Nftables(Dataplane):
    name = "nftables"
    reads_one_service = True  # kube-proxy's table over netlink, chain by chain (kpdiag/collect/service_rules.py)
    label = "kube-proxy (nftables mode)"
    order = 40
    precedence = 4
    services_live = "its nftables table is"
    has_own_tracer = True
    preflight = True
    traced_with_iptables = False
    shows_local_policy = True  # a local-… chain, or drop in no-endpoint-services
    cluster_ips_stay_on_node = True  # cluster-ips-check rejects/drops on the node
    services_in_nft = True
    not_in_use = ("ipvs",)
    trace_sources = ("nft-ruleset", "ip-addr", "ip-route", "sysctl")

    def signs(self, state) -> str | None:
        family = state.nft_kube_proxy_table
        return f"nftables table {family} kube-proxy" if family else None

    def service_table(self, state):
        from kpdiag.state.kube_nft import cluster_ips, programmed_nft

        rs = state.nft()
        ports = programmed_nft(rs) if rs is not None else None
        if ports is None:
            return None
        cips = set(cluster_ips(rs))
        table = {}
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

    def tracer(self, state, family: int = 4):
        from kpdiag.trace.nftables import NftTracer

        rs = state.nft()
        return None if rs is None else NftTracer(rs, state.routing)  # the ip6/inet tables for IPv6 packets

    def trace_rules(self, state, family: int = 4):
        from kpdiag.bundle import sources

        return state.nft(), sources.NFT_RULESET, "an nftables ruleset"
