"""What kube-proxy programmed in nftables mode, read back from its ``ip kube-proxy`` table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import dataclass, field

from kpdiag.parse.addr import hostport
from kpdiag.parse.nft import NftRuleset

if TYPE_CHECKING:
    import ipaddress

TABLE: tuple[str, str] = ("ip", "kube-proxy")
TABLES = (TABLE, ("ip6", "kube-proxy"))  # kube-proxy's IPv4 and IPv6 tables (a dual-stack node has both)


@dataclass
class NftServicePort:
    key: tuple[str, str, int]  # (ClusterIP, proto, port)
    chain: str | None  # service-… / local-… / external-… chain (None: in no-endpoint-services)
    endpoints: list[str] = field(default_factory=list)  # "ip:port" DNAT targets
    no_endpoints: bool = False  # goto reject-chain: no endpoint anywhere
    local_policy: bool = False  # internalTrafficPolicy: Local (local-… chain, or a drop: none on this node)
    comment: str | None = None  # kube-proxy's "ns/svc:port" on no-endpoint-services elements

    @property
    def external(self) -> bool:
        """An external IP / load-balancer IP entry (external-… chain), not a ClusterIP."""
        return bool(self.chain and self.chain.startswith("external-"))


def _elem_key(raw: Any) -> tuple[str, str, int] | None:
    key = raw[0] if isinstance(raw, list) else raw
    if isinstance(key, dict) and "elem" in key:
        key = key["elem"].get("val")
    if isinstance(key, dict) and "concat" in key:
        parts = key["concat"]
        if len(parts) == 3:
            return (str(parts[0]), str(parts[1]), int(parts[2]))
    return None


def _target(raw: Any) -> str | None:
    value = raw[1] if isinstance(raw, list) and len(raw) == 2 else None
    if isinstance(value, dict):
        for verb in ("goto", "jump"):
            if verb in value:
                target = value[verb].get("target")
                return target if isinstance(target, str) else None
    return None


def programmed_nft(rs: NftRuleset) -> dict[tuple[str, str, int], NftServicePort] | None:
    """(ClusterIP, proto, port) → what the node does with it, from kube-proxy's ip and ip6 tables; None without
    either."""
    tables = [t for t in TABLES if rs.has_table(*t)]
    if not tables:
        return None
    out: dict[tuple[str, str, int], NftServicePort] = {}
    for table in tables:
        service_ips = rs.set(*table, "service-ips")
        for raw in service_ips.elems if service_ips else []:
            key, chain = _elem_key(raw), _target(raw)
            if key is None:
                continue
            port = out[key] = NftServicePort(key, chain, local_policy=bool(chain and chain.startswith("local-")))
            c = rs.chain(*table, chain) if chain else None
            for rule in c.rules if c else []:
                for e in rule.expr:
                    vmap = e.get("vmap") if isinstance(e, dict) else None
                    if vmap and isinstance(vmap.get("key"), dict) and "numgen" in vmap["key"]:
                        for item in (vmap.get("data") or {}).get("set", []):
                            ep_chain = _target(item)
                            port.endpoints.extend(_dnat_targets(rs, ep_chain, table))
        no_eps = rs.set(*table, "no-endpoint-services")
        for raw in no_eps.elems if no_eps else []:
            key = _elem_key(raw)
            if key is not None:
                port = out.setdefault(key, NftServicePort(key, None))
                port.comment = _comment(raw)
                if (
                    _verdict(raw) == "drop"
                ):  # a Local traffic policy with no endpoint on this node; reject-chain: none at all
                    port.local_policy = True
                else:
                    port.no_endpoints = True
    return out


def _dnat_targets(rs: NftRuleset, chain_name: str | None, table: tuple[str, str] = TABLE) -> list[str]:
    c = rs.chain(*table, chain_name) if chain_name else None
    out = []
    for rule in c.rules if c else []:
        for e in rule.expr:
            d = e.get("dnat") if isinstance(e, dict) else None
            if d and isinstance(d.get("addr"), str):
                out.append(hostport(d["addr"], d.get("port")))
    return out


def cluster_ips(rs: NftRuleset) -> list[str]:
    out = []
    for table in TABLES:
        s = rs.set(*table, "cluster-ips")
        out += [str(e) for e in (s.elems if s else []) if isinstance(e, str)]
    return out


def _comment(raw: Any) -> str | None:
    key = raw[0] if isinstance(raw, list) else raw
    c = key["elem"].get("comment") if isinstance(key, dict) and isinstance(key.get("elem"), dict) else None
    return c if isinstance(c, str) else None


def _verdict(raw: Any) -> str | None:
    value = raw[1] if isinstance(raw, list) and len(raw) == 2 else None
    if isinstance(value, dict):
        return next(iter(value), None)
    return None


def match_cidrs(right: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks a match's right side names, as nft -j prints it: a prefix, an address, a range (adjacent CIDRs
    nft merged into one interval, read back as CIDRs), or a set of them; [] when any part is none of those."""
    import ipaddress

    items = right.get("set") if isinstance(right, dict) and "set" in right else [right]
    out: list[Any] = []
    for item in items if isinstance(items, list) else []:
        p = item.get("prefix") if isinstance(item, dict) else None
        r = item.get("range") if isinstance(item, dict) else None
        try:
            if isinstance(p, dict):
                out.append(ipaddress.ip_network(f"{p['addr']}/{p['len']}", strict=False))
            elif isinstance(r, list) and len(r) == 2:
                out += ipaddress.summarize_address_range(*map(ipaddress.ip_address, r))
            elif isinstance(item, str):
                out.append(ipaddress.ip_network(item))
            else:
                return []
        except (ValueError, TypeError, KeyError):
            return []  # not a network: the rule is not the shape it is read for
    return out


def service_cidrs(rs: NftRuleset) -> list[tuple[str, list[ipaddress.IPv4Network | ipaddress.IPv6Network]]]:
    """The Service CIDRs of kube-proxy's rule "Drop traffic to unallocated ClusterIPs" (cluster-ips-check), per family
    table: (family, networks) — one CIDR is a prefix as the kernel lists it, two or more (ServiceCIDRs) a set."""
    out: list[tuple[str, list[ipaddress.IPv4Network | ipaddress.IPv6Network]]] = []
    for family, table in TABLES:
        chain = rs.chain(family, table, "cluster-ips-check")
        for rule in chain.rules if chain else []:
            if "unallocated" not in (rule.comment or ""):
                continue
            for e in rule.expr:
                m = e.get("match") if isinstance(e, dict) else None
                if isinstance(m, dict) and m.get("op") in ("==", "in") and (found := match_cidrs(m.get("right"))):
                    out.append((family, found))
    return out


def cluster_cidr(rs: NftRuleset) -> tuple[list[str], list[tuple[str, str]]]:
    """kube-proxy's clusterCIDR as its nftables rules show it — a service chain's
    ``ip saddr != CIDR jump mark-for-masquerade`` (a set of CIDRs for two or more), the first such rule of each
    family's table — and, per family, (chain, the rule as nft lists it) for evidence. ([], []) when no rule shows it
    (detectLocalMode other than ClusterCIDR, or no Service)."""
    cidrs, seen = [], []
    for family, table in TABLES:
        for (fam, tab, name), chain in rs.chains.items():
            if (fam, tab) != (family, table) or not name.startswith("service-"):
                continue
            found = None
            for rule in chain.rules:
                expr = rule.expr
                if not any(
                    isinstance(e, dict) and (e.get("jump") or {}).get("target") == "mark-for-masquerade" for e in expr
                ):
                    continue
                for e in expr:
                    m = e["match"] if isinstance(e, dict) and isinstance(e.get("match"), dict) else {}
                    left = m.get("left")
                    if (
                        isinstance(left, dict)
                        and (left.get("payload") or {}).get("field") == "saddr"
                        and m.get("op") == "!="
                    ):
                        found = ([str(n) for n in match_cidrs(m.get("right"))], rule.text)
                        break
                if found:
                    break
            if found and found[0]:
                cidrs += found[0]
                seen.append((name, found[1]))
                break
    return cidrs, seen
