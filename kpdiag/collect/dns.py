"""Resolve a Service's name the way a pod does (its resolv.conf and the system resolver)."""

from __future__ import annotations

import concurrent.futures
import socket

DNS_TIMEOUT = 6.0


def cluster_domain(resolv_conf: str = "/etc/resolv.conf") -> tuple[str, list[str]]:
    """(cluster domain, nameservers) from resolv.conf's search list ("<ns>.svc.<domain> svc.<domain> <domain>")."""
    domain, servers = "cluster.local", []
    try:
        with open(resolv_conf) as fh:
            for line in fh:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] == "nameserver" and len(parts) > 1:
                    servers.append(parts[1])
                elif parts[0] == "search":
                    for entry in parts[1:]:
                        if entry.startswith("svc."):
                            domain = entry[4:]
                            break
    except OSError:
        pass
    return domain, servers


def resolve_service(namespace: str, name: str, resolv_conf: str = "/etc/resolv.conf", timeout: float = DNS_TIMEOUT) -> dict:
    """The document kept as ``probes/dns.json``: the name asked, the addresses or why none."""
    domain, servers = cluster_domain(resolv_conf)
    fqdn = f"{name}.{namespace}.svc.{domain}"
    doc = {"name": fqdn, "nameservers": servers, "addresses": [], "result": None, "error": None}

    def lookup():
        return sorted({ai[4][0] for ai in socket.getaddrinfo(fqdn, None, socket.AF_UNSPEC, socket.SOCK_STREAM)})

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        doc["addresses"] = pool.submit(lookup).result(timeout=timeout)
        doc["result"] = "resolved"
    except concurrent.futures.TimeoutError:
        doc["result"], doc["error"] = "timeout", f"no answer within {timeout:.0f} s from {', '.join(servers) or 'any nameserver'}"
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
            doc["result"], doc["error"] = "nxdomain", f"{fqdn} does not exist ({exc.strerror})"
        else:
            doc["result"], doc["error"] = "dns-failure", f"the resolver failed: {exc.strerror} (nameservers: {', '.join(servers) or 'none'})"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return doc
