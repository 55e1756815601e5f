"""Cluster DNS as a pod meets it: the kube-dns Service and CoreDNS (API side), the pod's resolv.conf, and what the
nameservers answered to the names the pod would ask (probes/dns.json, kpdiag.dns/v1: see kpdiag.collect.dns)."""

from __future__ import annotations

from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.evidence import clip
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_api import DnsLookups, DnsPods, DnsService, NetworkPolicies

NODE_LOCAL_DNS = "169.254.20.10"
ANSWERED = ("answer", "nodata", "nxdomain")  # the server replied with a usable verdict


# ------------------------------------------------------------------ reading the data


def _strs(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _clean(probe: DnsLookups, doc: dict) -> dict:
    """The probe document with every part of the wrong shape dropped (and named once as a problem of the bundle)."""
    bad: list[str] = []

    def dicts(value, what):
        if value is None:
            return []
        if not isinstance(value, list):
            bad.append(what)
            return []
        out = [v for v in value if isinstance(v, dict)]
        if len(out) != len(value):
            bad.append(what)
        return out

    d = dict(doc)
    rc = d.get("resolv_conf")
    if rc is not None and not isinstance(rc, dict):
        bad.append("resolv_conf")
    rc = dict(rc) if isinstance(rc, dict) else {}
    rc["entries"] = [
        e
        for e in dicts(rc.get("entries"), "resolv_conf.entries")
        if isinstance(e.get("line"), int) and isinstance(e.get("text"), str)
    ]
    rc["problems"] = dicts(rc.get("problems"), "resolv_conf.problems")
    rc["search"], rc["nameservers"] = _strs(rc.get("search")), _strs(rc.get("nameservers"))
    rc["options"] = rc.get("options") if isinstance(rc.get("options"), dict) else {}
    if not isinstance(rc.get("ndots"), int):
        rc["ndots"] = 1
    d["resolv_conf"] = rc
    d["nameservers"], d["addresses"] = _strs(d.get("nameservers")), _strs(d.get("addresses"))
    lookups = []
    for lk in dicts(d.get("lookups"), "lookups"):
        cands = lk.get("candidates") if isinstance(lk.get("candidates"), dict) else {}
        outs = lk.get("outcome") if isinstance(lk.get("outcome"), dict) else {}
        if not isinstance(lk.get("name"), str) or not isinstance(lk.get("purpose"), str):
            bad.append("lookups")
            continue
        lookups.append(
            {
                **lk,
                "candidates": {k: _strs(v) for k, v in cands.items()},
                "outcome": {
                    k: {**v, "addresses": _strs(v.get("addresses"))} for k, v in outs.items() if isinstance(v, dict)
                },
            }
        )
    d["lookups"] = lookups
    d["queries"] = [q for q in dicts(d.get("queries"), "queries") if isinstance(q.get("result"), str)]
    for q in d["queries"]:
        q["addresses"] = _strs(q.get("addresses"))
    for what in sorted(set(bad)):
        probe.problem(f"'{what}' is not what kpdiag.dns/v1 holds there; that part is ignored")
    return d


def _doc(lookups: DnsLookups, need_queries: bool = True) -> dict:
    doc = lookups.doc
    if not isinstance(doc, dict) or doc.get("schema") != "kpdiag.dns/v1":
        raise Skip(f"{sources.PROBES_DNS} holds a single lookup (written by an older kpdiag), not the DNS probe")
    if need_queries and not doc.get("sent", True):
        raise Skip("no DNS query was sent (--no-probe)")
    return _clean(lookups, doc)


def _g(obj, *keys, default=None):
    """obj[k1][k2]… through dicts only; ``default`` when a level is missing or not a dict."""
    for k in keys:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(k)
    return default if obj is None else obj


def _dl(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _rc(doc) -> dict:
    rc = doc.get("resolv_conf") or {}
    if rc.get("error") and not rc.get("entries"):
        raise Skip(f"the pod's resolv.conf: {rc['error']}")
    return rc


def _dns_service(service: DnsService | None) -> dict | None:
    items = service.services.items() if service is not None else None
    return items[0] if items else None


def _cluster_ips(svc: dict | None) -> list[str]:
    ips = _g(svc, "spec", "clusterIPs") or [_g(svc, "spec", "clusterIP")]
    return [ip for ip in (ips if isinstance(ips, list) else []) if isinstance(ip, str) and ip and ip != "None"]


def _svc_key(svc: dict) -> str:
    return f"{_g(svc, 'metadata', 'namespace')}/{_g(svc, 'metadata', 'name')}"


def _rc_source(lookups: DnsLookups, rc) -> str:
    return f"{lookups.source} (the pod's {rc.get('path') or '/etc/resolv.conf'})"


def _rc_ev(lookups: DnsLookups, rc, keyword: str) -> list[Evidence]:
    out = [
        Evidence(_rc_source(lookups, rc), e["text"], e["line"])
        for e in rc.get("entries") or []
        if str(e.get("text", "")).split()[:1] == [keyword]
        or (keyword == "search" and str(e.get("text", "")).startswith("domain"))
    ]
    return out or [Evidence(_rc_source(lookups, rc), f"no {keyword} line")]


def _q_text(q: dict) -> str:
    what = q.get("result")
    if q.get("addresses"):
        what += " " + ", ".join(q["addresses"])
    if q.get("truncated"):
        what += " (truncated, TC=1)"
    if q.get("error") and q.get("result") not in ("answer",):
        what += f" — {q['error']}"
    took = f", {q['duration_ms']:g} ms" if isinstance(q.get("duration_ms"), (int, float)) else ""
    return f"{q.get('server')} {str(q.get('transport', '')).upper()} {q.get('qtype')} {q.get('qname')}: {what}{took}"


def _q_ev(lookups: DnsLookups, q: dict) -> Evidence:
    return Evidence(lookups.source, _q_text(q))


def _q_data(q: dict) -> dict:
    """One DNS query as a finding's data."""
    return {
        k: q.get(k)
        for k in ("server", "qname", "qtype", "transport", "result", "rcode", "truncated", "error")
        if k in q
    }


def _rc_data(rc: dict) -> dict:
    """The pod's resolv.conf as a finding's data."""
    return {
        "resolv_conf": {
            "nameservers": list(rc.get("nameservers") or []),
            "search": list(rc.get("search") or []),
            "ndots": _g(rc, "options", "ndots"),
        }
    }


def _queries(doc, **match) -> list[dict]:
    qs = doc.get("queries") if isinstance(doc.get("queries"), list) else []
    return [
        q
        for q in qs
        if isinstance(q, dict) and isinstance(q.get("result"), str) and all(q.get(k) == v for k, v in match.items())
    ]


def _lookup(doc, purpose: str) -> dict | None:
    return next((lk for lk in doc.get("lookups") or [] if isinstance(lk, dict) and lk.get("purpose") == purpose), None)


def _resolved(lk: dict | None, libc: str | None = None) -> bool:
    if not lk:
        return False
    outs = lk.get("outcome") or {}
    libcs = [libc] if libc else list(outs)
    return any((outs.get(x) or {}).get("result") == "resolved" for x in libcs)


def _failed_names(lk: dict) -> bool:
    """A libc's walk ended with NXDOMAIN for every name: none exists (not a server failure). A walk ending in NODATA
    does not count: the search-path names are asked for A records only, and a name of an IPv6-only Service exists
    without one."""
    outs = lk.get("outcome") or {}
    return any((o or {}).get("result") == "nxdomain" for o in outs.values())


def _walk_text(doc, lk: dict, libc: str) -> str:
    server = (doc.get("nameservers") or ["?"])[0]
    parts = []
    for qname in (lk.get("candidates") or {}).get(libc) or []:
        q = next(iter(_queries(doc, server=server, qname=qname, qtype="A", transport="udp")), None)
        parts.append(f"{qname} → {q['result'] if q else 'not asked'}")
    out = (lk.get("outcome") or {}).get(libc) or {}
    return f"{libc}: " + "; ".join(parts) + f" ⇒ {out.get('result')}"


def _not_checked_dns_path(
    service: DnsService | None, pods_in: DnsPods | None, policies_in: NetworkPolicies | None, doc
) -> tuple[list[str], list[str]]:
    """(causes ruled out by the data at hand, causes that remain) for DNS packets that get no answer."""
    ruled, remain = [], []
    svc = _dns_service(service)
    ips = _cluster_ips(svc)
    servers = doc.get("nameservers") or []
    if svc is not None and servers and servers[0] in ips:
        eps = service.endpointslices.items()
        if eps is not None:
            ready = _ready_endpoints(eps)
            (ruled if ready else remain).append(
                f"kube-dns has {len(ready)} ready endpoint(s)" + ("" if ready else " (KP130)")
            )
        else:
            remain.append("kube-dns's endpoints (not collected)")
    elif svc is not None and servers:
        remain.append(f"the nameserver {servers[0]} is not the kube-dns ClusterIP {', '.join(ips) or '?'} (KP133)")
    else:
        remain.append("kube-dns's Service and endpoints (not collected)")
    pods = pods_in.pods.items() if pods_in is not None else None
    if pods is not None:
        ok = [p for p in pods if _pod_ready(p)]
        (ruled if ok else remain).append(f"{len(ok)} of {len(pods)} CoreDNS pod(s) ready" + ("" if ok else " (KP131)"))
    else:
        remain.append("CoreDNS pods' health (not collected)")
    policies = (
        "KP122 judges the NetworkPolicies collected"
        if policies_in is not None and policies_in.collected
        else "not checked: no NetworkPolicies collected"
    )
    remain += [
        f"a NetworkPolicy restricting this pod's egress without allowing 53/UDP and 53/TCP to kube-system ({policies})",
        "kube-proxy's rules for the kube-dns ClusterIP on this node (kpdiag svc kube-dns -n kube-system checks them)",
        "a host firewall or cloud security group between this node and the CoreDNS pods",
        "CoreDNS overloaded or stuck (its logs)",
    ]
    return ruled, remain


def _ready_endpoints(slices: list[dict]) -> list[str]:
    out = []
    for s in slices:
        for e in _dl(s.get("endpoints")):
            if _g(e, "conditions", "ready") is not False:  # an unset ready means ready (EndpointSlice API)
                out += _strs(e.get("addresses"))
    return out


def _pod_ready(pod: dict) -> bool:
    for c in _dl(_g(pod, "status", "conditions")):
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


# ------------------------------------------------------------------ the pod's resolv.conf


@check(
    "KP133",
    "resolv-nameserver",
    "The pod's nameserver is not the cluster DNS",
    "warning",
    severities=("info", "warning"),
    symptom="Service names do not resolve from this pod (or resolve only sometimes), while other pods resolve them.",
    why="""
        A pod with dnsPolicy ClusterFirst (the default) gets "nameserver <kube-dns ClusterIP>" from kubelet (--cluster-dns /
        clusterDNS), or node-local-dns's 169.254.20.10 where that cache runs. Any other first nameserver — a pod with
        dnsPolicy Default, a hostNetwork pod without ClusterFirstWithHostNet, a custom dnsConfig, kubelet's clusterDNS
        pointing at an old address — knows nothing of Service names unless it forwards the cluster domain to CoreDNS.
        A cluster nameserver followed by an outside one is a trap too: resolvers move to the next server when one does
        not answer, and the outside one then says NXDOMAIN for Service names.
    """,
    fix="dnsPolicy: ClusterFirst (ClusterFirstWithHostNet for hostNetwork pods); kubelet's clusterDNS = the kube-dns ClusterIP",
)
def resolv_nameserver(new, lookups: DnsLookups, service: DnsService):
    doc = _doc(lookups, need_queries=False)
    rc = _rc(doc)
    svc = _dns_service(service)
    ips = _cluster_ips(svc)
    if not ips:
        raise Skip("the kube-dns Service (or its ClusterIP) is not in the API data")
    good = set(ips) | {NODE_LOCAL_DNS}
    servers = list(rc.get("nameservers") or [])
    ev = _rc_ev(lookups, rc, "nameserver") + [
        Evidence(service.services.source, f"{_svc_key(svc)}: ClusterIP {', '.join(ips)}")
    ]
    fix = (
        "kubectl get pod POD -o jsonpath='{.spec.dnsPolicy} {.spec.hostNetwork} {.spec.dnsConfig}'",
        "# dnsPolicy: ClusterFirst — or ClusterFirstWithHostNet for a hostNetwork pod",
        f"grep -A2 clusterDNS /var/lib/kubelet/config.yaml   # on the node: should list {ips[0]} (or {NODE_LOCAL_DNS} with node-local-dns)",
    )
    fqdn_ok = doc.get("result") == "resolved"
    if not servers or servers[0] not in good:
        first = servers[0] if servers else "127.0.0.1 (no nameserver line: the resolvers' default)"
        yield new(
            f"this pod asks {first} for names, not the cluster DNS {', '.join(ips)} (nor node-local-dns {NODE_LOCAL_DNS})"
            + (
                f"; it did resolve {doc.get('name')}, so it forwards the cluster domain"
                if fqdn_ok
                else ": Service names resolve only if that server forwards the cluster domain to CoreDNS"
            ),
            severity="info" if fqdn_ok else "warning",
            fix=fix,
            evidence=ev,
            subject="resolv.conf",
            data={**_rc_data(rc), "cluster_dns": ips},
        )
        return
    others = [s for s in servers[1:3] if s not in good]
    if others:
        yield new(
            f"the pod's resolv.conf lists {', '.join(others)} after the cluster DNS {servers[0]}: when the cluster DNS is slow to "
            "answer, resolvers ask that server, which answers NXDOMAIN for Service names — intermittent failures",
            fix=fix,
            evidence=ev,
            subject="resolv.conf",
            data={**_rc_data(rc), "cluster_dns": ips, "not_cluster_dns": others},
        )


@check(
    "KP134",
    "resolv-limits",
    "resolv.conf beyond what resolvers read",
    "warning",
    symptom="Names resolve in some images (glibc ≥ 2.26) and not in others (Alpine/musl, older glibc); kubelet logs 'Search Line limits were exceeded'.",
    why="""
        Resolvers read only part of resolv.conf: at most 3 nameservers (glibc and musl) and ndots at most 15. glibc
        before 2.26 keeps at most 6 search domains in 256 characters and drops the rest. musl (Alpine images) reads
        lines of at most 254 characters and skips a longer line entirely — a long search line leaves it no search
        domain at all, so even the pod's own namespace is not searched. kubelet builds a pod's search list from the
        cluster entries plus the node's search domains (and dnsConfig), so a node with many or long search domains
        breaks short names in those images. Lines a resolver cannot parse are ignored silently.
    """,
    fix="Trim the node's search domains (or set the pod's dnsConfig); at most 3 nameservers; fix the lines named.",
)
def resolv_limits(new, lookups: DnsLookups):
    doc = _doc(lookups, need_queries=False)
    rc = _rc(doc)
    search = rc.get("search") or []
    chars = int(rc.get("search_chars") or len(" ".join(search)))
    servers = rc.get("nameservers") or []
    ndots = (rc.get("options") or {}).get("ndots")
    fix = (
        "kubectl get pod POD -o jsonpath='{.spec.dnsConfig}'",
        "grep -E '^(search|domain)' /etc/resolv.conf   # on the node: kubelet appends its search domains to every pod's",
    )
    line_chars = (
        rc.get("search_line_chars")
        if isinstance(rc.get("search_line_chars"), int)
        else len("search " + " ".join(search))
    )
    kept = _glibc_old_kept(search)
    if len(kept) < len(search) or line_chars > MUSL_LINE_MAX:
        parts = []
        if len(kept) < len(search):
            parts.append(
                f"glibc before 2.26 uses only the first {len(kept)} ({len(kept) and kept[-1]!r} is the last; at most 6 domains, 256 characters) "
                f"and never searches {', '.join(repr(d) for d in search[len(kept) :][:3])}{' …' if len(search) - len(kept) > 3 else ''}"
            )
        if line_chars > MUSL_LINE_MAX:
            parts.append(
                f"musl (Alpine images) ignores the whole search line ({line_chars} characters; it reads lines of at most "
                f"{MUSL_LINE_MAX}): no search domain at all there, so short Service names do not resolve"
            )
        yield new(
            f"the search list has {len(search)} domain(s), {chars} characters: " + "; ".join(parts),
            fix=fix
            + (
                "# dnsConfig: {searches: [...]} and dnsPolicy None, or fewer search domains on the node (kubelet --resolv-conf)",
            ),
            evidence=_rc_ev(lookups, rc, "search"),
            subject="resolv.conf",
            data={**_rc_data(rc), "search_line_chars": line_chars, "glibc_old_searches": len(kept)},
        )
    if len(servers) > 3:
        yield new(
            f"{len(servers)} nameservers: resolvers use the first 3 ({', '.join(servers[:3])}) and ignore {', '.join(servers[3:])}",
            fix=fix + ("# keep at most 3 nameserver lines (the node's resolv.conf or the pod's dnsConfig)",),
            evidence=_rc_ev(lookups, rc, "nameserver"),
            subject="resolv.conf",
            data={**_rc_data(rc), "ignored_nameservers": servers[3:]},
        )
    if isinstance(ndots, int) and ndots > 15:
        yield new(
            f"options ndots:{ndots}: resolvers cap it at 15",
            fix=fix,
            evidence=_rc_ev(lookups, rc, "options"),
            subject="resolv.conf",
            data=_rc_data(rc),
        )
    for p in (rc.get("problems") or [])[:4]:
        yield new(
            f"resolv.conf line {p.get('line')}: {p.get('why')}",
            fix=("# correct or remove the line (the node's resolv.conf, or the pod's dnsConfig)",),
            evidence=[Evidence(_rc_source(lookups, rc), str(p.get("text")), p.get("line"))],
            subject="resolv.conf",
        )


MUSL_LINE_MAX = (
    254  # musl reads resolv.conf with a 256-byte line buffer (with the newline and NUL) and skips longer lines
)


def _glibc_old_kept(search: list[str]) -> list[str]:
    """The search domains glibc before 2.26 keeps: at most 6, in a 256-byte buffer (each with its NUL)."""
    kept, used = [], 0
    for d in search[:6]:
        if used + len(d) + 1 > 256:
            break
        kept.append(d)
        used += len(d) + 1
    return kept


# ------------------------------------------------------------------ what the nameservers answered


@check(
    "KP135",
    "dns-search-path",
    "Short names fail through the search path, the FQDN works",
    "warning",
    symptom="curl http://NAME or http://NAME.NAMESPACE fails with 'could not resolve host' (or only in Alpine images), "
    "while http://NAME.NAMESPACE.svc.cluster.local works.",
    why="""
        A name with fewer dots than ndots (kubelet sets ndots:5) is tried with each search domain first, then as it is; a
        name with at least ndots dots is tried as it is first (glibc then tries the search domains; musl, in Alpine
        images, does not). Kubernetes puts "<namespace>.svc.<domain> svc.<domain> <domain>" in a pod's search list, so
        NAME and NAME.NAMESPACE find NAME.NAMESPACE.svc.<domain>. A search list without svc.<domain> (dnsPolicy Default,
        a custom dnsConfig) or a low ndots (musl then asks NAME.NAMESPACE as it is, and stops at NXDOMAIN) makes the
        short forms fail while the full name works.
    """,
    fix="Use the FQDN (with a trailing dot to skip the search path), or give the pod ClusterFirst DNS (its search list and ndots:5).",
)
def dns_search_path(new, lookups: DnsLookups):
    doc = _doc(lookups)
    if doc.get("result") != "resolved":
        return  # the FQDN itself fails: KP108 / KP138 / KP139 say why
    rc = doc.get("resolv_conf") or {}
    ns, name, domain = doc.get("namespace"), doc.get("service"), doc.get("cluster_domain")
    client_ns = doc.get("client_namespace")
    search = rc.get("search") or []
    for purpose in ("namespaced", "short"):
        lk = _lookup(doc, purpose)
        if not lk or not _failed_names(lk):
            continue
        if purpose == "short" and client_ns and client_ns != ns:
            continue  # expected from another namespace: KP136 explains it
        broken = [libc for libc, o in (lk.get("outcome") or {}).items() if (o or {}).get("result") != "resolved"]
        if f"svc.{domain}" not in search and f"{ns}.svc.{domain}" not in search:
            cause = (
                f"the search list ({' '.join(search) or 'empty'}) has no svc.{domain} entry, so {lk['name']} is never expanded to "
                f"{name}.{ns}.svc.{domain}"
            )
        elif purpose == "namespaced" and broken == ["musl"]:
            cause = (
                f"with ndots:{rc.get('ndots')} '{lk['name']}' has enough dots to be asked as it is; glibc then tries the search list and "
                "finds it, musl (Alpine images) does not — it stops at NXDOMAIN"
            )
        else:
            cause = f"none of the names the search path gives ({', '.join((lk.get('candidates') or {}).get(broken[0] if broken else 'glibc') or [])}) exists"
        who = " and ".join(broken)
        ev = _rc_ev(lookups, rc, "search") + _rc_ev(lookups, rc, "options")[:1]
        ev += [Evidence(lookups.source, _walk_text(doc, lk, libc)) for libc in broken]
        ev += [_q_ev(lookups, q) for q in _queries(doc, qname=doc.get("name"), qtype="A", transport="udp")[:1]]
        yield new(
            f"'{lk['name']}' does not resolve through this pod's search path ({who}) while {doc.get('name')} does: {cause}",
            fix=(
                f"use {name}.{ns}.svc.{domain}. (the FQDN; the trailing dot skips the search path)",
                '# or in the pod spec: dnsPolicy: ClusterFirst, or dnsConfig: {options: [{name: ndots, value: "5"}]}',
                "cat /etc/resolv.conf   # search and options lines",
            ),
            evidence=ev,
            subject=f"{ns}/{name} {purpose}",
        )


@check(
    "KP136",
    "dns-other-namespace",
    "The Service's short name does not lead to it from this pod's namespace",
    "warning",
    symptom="A client in another namespace calls http://NAME and gets 'could not resolve host' — or reaches a different Service of the same name.",
    why="""
        The short name NAME is searched in the client pod's own namespace first: kubelet writes "<pod namespace>.svc.<domain>"
        first in its search list. From another namespace, NAME finds NAME.<that namespace>.svc.<domain> — a Service of the
        same name there, or nothing (NXDOMAIN) — never the Service in the namespace meant. NAME.NAMESPACE and the FQDN
        name it wherever the client runs.
    """,
    fix="Call the Service as NAME.NAMESPACE (or NAME.NAMESPACE.svc.<cluster domain>) from other namespaces.",
)
def dns_other_namespace(new, lookups: DnsLookups):
    doc = _doc(lookups)
    ns, name, domain = doc.get("namespace"), doc.get("service"), doc.get("cluster_domain")
    short, nsd = _lookup(doc, "short"), _lookup(doc, "namespaced")
    if not short or not nsd or not _resolved(nsd) or doc.get("result") != "resolved":
        return
    rc = doc.get("resolv_conf") or {}
    client_ns = doc.get("client_namespace")
    want = set(doc.get("addresses") or [])
    ev = _rc_ev(lookups, rc, "search") + [
        Evidence(lookups.source, _walk_text(doc, short, "glibc")),
        Evidence(lookups.source, _walk_text(doc, nsd, "glibc")),
    ]
    fix = (f"use {name}.{ns} (or {name}.{ns}.svc.{domain}) in the client's configuration",)
    out = (short.get("outcome") or {}).get("glibc") or {}
    if out.get("result") == "resolved" and want and not (set(out.get("addresses") or []) & want):
        yield new(
            f"from this pod '{name}' resolves to {', '.join(out.get('addresses') or [])} ({out.get('qname')}), another Service — "
            f"not {ns}/{name} ({', '.join(sorted(want))})",
            fix=fix,
            evidence=ev,
            subject=f"{ns}/{name}",
        )
    elif client_ns and client_ns != ns and _failed_names(short):
        yield new(
            f"this pod is in namespace {client_ns}: the short name '{name}' searches {name}.{client_ns}.svc.{domain} first and "
            f"does not resolve (NXDOMAIN); '{name}.{ns}' does",
            fix=fix,
            evidence=ev,
            subject=f"{ns}/{name}",
        )


@check(
    "KP137",
    "dns-udp-tcp",
    "DNS answers over one transport only (UDP vs TCP)",
    "warning",
    severities=("warning", "error"),
    symptom="Most lookups work but large answers fail (headless Services with many pods, long records), or every lookup "
    "waits seconds then fails while 'dig +tcp' works.",
    why="""
        Resolvers ask over UDP first and retry over TCP when the UDP answer is truncated (TC flag: the answer did not fit
        in 512 bytes, or the EDNS size). So 53/TCP must be open too: kube-dns has a dns-tcp port, and NetworkPolicies or
        firewalls that allow only 53/UDP break every large answer. The reverse — TCP works, UDP does not — breaks almost
        every lookup: glibc and musl do not use TCP unless told (options use-vc) or a UDP answer was truncated.
    """,
    fix="Allow 53/TCP and 53/UDP from pods to kube-dns / CoreDNS (NetworkPolicy egress, host firewall); the kube-dns Service needs both ports.",
)
def dns_udp_tcp(new, lookups: DnsLookups, service: Optional[DnsService] = None):
    doc = _doc(lookups)
    fqdn = doc.get("name")
    svc = _dns_service(service)
    for server in doc.get("nameservers") or []:
        udp = next(iter(_queries(doc, server=server, qname=fqdn, qtype="A", transport="udp")), None)
        tcp = next(iter(_queries(doc, server=server, qname=fqdn, qtype="A", transport="tcp")), None)
        if not udp or not tcp:
            continue
        udp_ok, tcp_ok = udp["result"] in ANSWERED or udp["result"] == "truncated", tcp["result"] in ANSWERED
        truncated = [q for q in _queries(doc, server=server, transport="udp") if q.get("truncated")]
        svc_note = []
        if svc is not None and server in _cluster_ips(svc):
            protos = {(str(p.get("protocol") or "TCP").upper(), p.get("port")) for p in _dl(_g(svc, "spec", "ports"))}
            missing = [p for p in ("UDP", "TCP") if (p, 53) not in protos]
            if missing:
                svc_note.append(
                    Evidence(service.services.source, f"{_svc_key(svc)} ports: {sorted(protos)} — no 53/{missing[0]}")
                )
        ev = [_q_ev(lookups, udp), _q_ev(lookups, tcp)] + [_q_ev(lookups, q) for q in truncated[:2]] + svc_note
        remain = (
            "kubectl get networkpolicy -A   # egress rules allowing 53/UDP but not 53/TCP (or the reverse) to kube-system",
            f"dig +tcp @{server} {fqdn}; dig +notcp @{server} {fqdn}",
            "kubectl -n kube-system get svc kube-dns -o yaml   # ports dns (53/UDP) and dns-tcp (53/TCP)",
        )
        if udp_ok and not tcp_ok:
            big = bool(truncated)
            yield new(
                f"{server} answers over UDP but not over TCP (TCP: {tcp['result']})"
                + (
                    " — and a UDP answer here was truncated, so that lookup fails"
                    if big
                    else ": any answer too large for UDP will fail"
                ),
                severity="error" if big else "warning",
                fix=remain,
                evidence=ev,
                subject=f"nameserver {server}",
                data={"nameserver": server, "udp": _q_data(udp), "tcp": _q_data(tcp), "truncated": len(truncated)},
            )
        elif tcp_ok and not udp_ok:
            use_vc = "use-vc" in _g(doc, "resolv_conf", "options", default={})
            yield new(
                f"{server} answers over TCP but not over UDP (UDP: {udp['result']}): "
                + (
                    "this pod's resolv.conf says 'options use-vc' (glibc asks over TCP), but other resolvers (musl, Go) ask over UDP"
                    if use_vc
                    else "resolvers ask over UDP, so lookups fail"
                ),
                severity="warning" if use_vc else "error",
                fix=remain,
                evidence=ev + (_rc_ev(lookups, doc["resolv_conf"], "options") if use_vc else []),
                subject=f"nameserver {server}",
                data={"nameserver": server, "udp": _q_data(udp), "tcp": _q_data(tcp), "use_vc": use_vc},
            )


def _unreachable_text(server: str, fqdn, results: set, qs: list[dict], ruled: list[str], remain: list[str]):
    """(summary, explanation, fix) of KP138 for one nameserver that did not answer usably, by how it failed."""
    if results <= {"timeout"}:
        summary = f"no answer from the nameserver {server} (UDP and TCP timed out)"
        explanation = (
            "Nothing came back — not an answer, not an ICMP error. "
            + ("Ruled out from the data: " + "; ".join(ruled) + ". " if ruled else "")
            + "Causes that remain (not checked): "
            + "; ".join(remain)
            + "."
        )
        fix = (
            f"dig @{server} {fqdn}   # from this pod",
            "kubectl get networkpolicy -n <this pod's namespace> -o yaml   # egress to 53/UDP,TCP?",
            "kpdiag svc kube-dns -n kube-system   # the Service path to CoreDNS",
            "kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50",
        )
    elif "port-unreachable" in results and results <= {"port-unreachable", "timeout"}:
        summary = f"nothing listens on port 53 at {server}: {clip('; '.join(sorted({q['error'] for q in qs if q.get('error')})), 200)}"
        explanation = (
            "The packets arrived and were turned away. kube-proxy does this for a Service without ready endpoints "
            "(REJECT); a plain address without a DNS server does it too. "
            + ("Ruled out: " + "; ".join(ruled) + ". " if ruled else "")
            + "Remaining: "
            + "; ".join(r for r in remain if "NetworkPolicy" not in r)
            + "."
        )
        fix = (
            "kubectl -n kube-system get endpointslices -l kubernetes.io/service-name=kube-dns",
            "cat /etc/resolv.conf   # is the nameserver the kube-dns ClusterIP?",
        )
    elif "refused" in results:
        summary = f"the nameserver {server} answers REFUSED: it does not serve {fqdn} to this client"
        explanation = (
            "A DNS server answered and declined: it is not authoritative for the cluster domain and does not recurse "
            "for this client, or an ACL forbids it. Either the nameserver is not the cluster DNS (KP133), or CoreDNS's "
            "Corefile has no 'kubernetes' block for this cluster domain, or an 'acl' plugin blocks this source."
        )
        fix = (
            "cat /etc/resolv.conf",
            "kubectl -n kube-system get configmap coredns -o yaml   # the kubernetes <domain> block, acl",
        )
    elif "servfail" in results:
        summary = f"the nameserver {server} answers SERVFAIL for {fqdn}"
        explanation = (
            "The server tried and failed: CoreDNS cannot list Services from the API (RBAC, API unreachable: its log says so), "
            "or its upstream fails for names it forwards."
        )
        fix = ("kubectl -n kube-system logs -l k8s-app=kube-dns --tail=50   # errors listing Services / forwarding",)
    else:
        summary = f"the nameserver {server} fails: {', '.join(sorted(results))}"
        explanation = None
        fix = (f"dig @{server} {fqdn}",)
    return summary, explanation, fix


@check(
    "KP138",
    "dns-unreachable",
    "The nameserver does not answer, refuses or fails",
    "error",
    severities=("warning", "error"),
    symptom="'could not resolve host' / 'i/o timeout' / 'server misbehaving' for every name, after a few seconds.",
    why="""
        Three different failures look alike to an application. A timeout: the query or its answer was dropped on the way
        (or nothing runs behind the address). "Port unreachable"/reset: the packet arrived and nothing listens — kube-proxy
        answers this way for a Service without endpoints. REFUSED or SERVFAIL: a DNS server answered but will not or cannot
        resolve the name (not a cluster DNS server, an ACL, CoreDNS unable to reach the API or its upstream).
    """,
    fix="Follow the causes listed in the finding, from the ones kpdiag could check to the ones it could not.",
)
# an error when the nameserver is the cluster DNS (the kube-dns ClusterIP, or node-local-dns); a warning when kpdiag cannot
# tell (no kube-dns Service data) or it is another server (a hostNetwork pod, a node: its DNS is not the cluster's)
def dns_unreachable(
    new,
    lookups: DnsLookups,
    dns_pods: Optional[DnsPods] = None,
    service: Optional[DnsService] = None,
    policies: Optional[NetworkPolicies] = None,
):
    doc = _doc(lookups)
    if doc.get("result") not in ("timeout", "dns-failure"):
        return
    fqdn = doc.get("name")
    ruled, remain = _not_checked_dns_path(service, dns_pods, policies, doc)
    for server in doc.get("nameservers") or []:
        qs = [q for q in _queries(doc, server=server, qname=fqdn)]
        results = {q["result"] for q in qs}
        if results & {*ANSWERED, "truncated"} or not qs:  # it answers (a truncated UDP answer is an answer: KP137)
            continue
        ev = [_q_ev(lookups, q) for q in qs]
        summary, explanation, fix = _unreachable_text(server, fqdn, results, qs, ruled, remain)
        cluster_dns = set(_cluster_ips(_dns_service(service))) | {NODE_LOCAL_DNS}
        known = _dns_service(service) is not None
        if server not in cluster_dns:
            note = (
                f" — {server} is not the cluster DNS ({', '.join(sorted(cluster_dns - {NODE_LOCAL_DNS}))}, KP133)"
                if known
                else " (kpdiag could not tell whether it is the cluster DNS: the kube-dns Service was not read)"
            )
            summary += note
        yield new(
            summary,
            explanation=explanation,
            fix=fix,
            evidence=ev,
            subject=f"nameserver {server}",
            severity="error" if server in cluster_dns else "warning",
            data={
                "nameserver": server,
                "cluster_dns": server in cluster_dns if known else None,
                "queries": [_q_data(q) for q in qs],
            },
        )


@check(
    "KP139",
    "dns-kubernetes-default",
    "kubernetes.default does not resolve",
    "error",
    severities=("warning", "error"),
    symptom="Even 'nslookup kubernetes.default' fails from the pod, while the nameserver answers other queries.",
    why="""
        Every cluster has the Service default/kubernetes; CoreDNS answers kubernetes.default.svc.<cluster domain> for it.
        When the nameserver answers but says this name does not exist, the pod is not asking the cluster DNS, or the
        cluster domain in the pod's search list (kubelet's clusterDomain) is not the one CoreDNS serves (its Corefile's
        "kubernetes <domain>" block) — so no Service name works. This is about DNS, not about the Service diagnosed.
    """,
    fix="Make kubelet's clusterDomain match the Corefile's kubernetes block (cluster.local by default), and the pod's nameserver the kube-dns ClusterIP.",
)
def dns_kubernetes_default(new, lookups: DnsLookups):
    doc = _doc(lookups)
    lk = _lookup(doc, "kubernetes")
    if not lk or _resolved(lk) or not _failed_names(lk):
        return  # resolves, or the server did not answer (KP138)
    rc = doc.get("resolv_conf") or {}
    domain = doc.get("cluster_domain")
    if doc.get("cluster_domain_from") != "search":
        cause = (
            f"the pod's search list ({' '.join(rc.get('search') or []) or 'empty'}) has no svc.<cluster domain> entry: "
            "it does not come from a ClusterFirst pod"
        )
    else:
        cause = (
            f"the search list says the cluster domain is {domain}; the nameserver {', '.join((doc.get('nameservers') or [])[:1])} "
            "does not know kubernetes.default.svc."
            + str(domain)
            + " — it is not the cluster DNS, or CoreDNS serves another domain"
        )
    ev = (
        _rc_ev(lookups, rc, "search")
        + _rc_ev(lookups, rc, "nameserver")
        + [Evidence(lookups.source, _walk_text(doc, lk, "glibc"))]
    )
    served = doc.get("result") == "resolved"  # the Service's own FQDN resolves: this is no fault of its name
    yield new(
        f"kubernetes.default does not resolve from this pod (NXDOMAIN for every search-path name): {cause}"
        + (f" — {doc.get('name')} itself resolves" if served else ""),
        severity="warning" if served else "error",
        fix=(
            "kubectl -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}' | grep kubernetes   # the domain CoreDNS serves",
            "grep clusterDomain /var/lib/kubelet/config.yaml   # on the node: the domain kubelet writes in pods' search lists",
            "cat /etc/resolv.conf",
        ),
        evidence=ev,
        subject="kubernetes.default",
    )
