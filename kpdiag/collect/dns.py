"""DNS as the pod resolves it: its resolv.conf, the search path and ndots, raw queries over UDP and TCP.

kpdiag asks the nameservers itself, with DNS messages it builds and parses here (no system resolver:
``getaddrinfo`` hides which server and which of the expanded names failed, and over which transport).

:func:`dns_probe` writes the document kept as ``probes/dns.json`` (schema ``kpdiag.dns/v1``)::

    schema          "kpdiag.dns/v1"
    namespace, service
    name            the Service's FQDN NAME.NS.svc.<cluster domain>        ┐ what KP108 reads (also written by
    result          resolved | nxdomain | nodata | timeout | dns-failure   │ older kpdiag versions): the FQDN's
                    | not-probed (send=False: nothing was sent)            │ lookup as a resolver does it — the
    addresses       A and AAAA answers of the FQDN                         │ first nameserver that answers (over
                                                                           │ TCP when the UDP answer is truncated)
    error           why not resolved (names the servers), else null        ┘
    nameservers     the nameservers asked (resolv.conf's, at most 3; 127.0.0.1 when it names none)
    sent            false when no packet was sent (send=False)
    resolv_conf     {path, error, nameservers, search, ndots, options {timeout, attempts, rotate, edns0, use-vc, …},
                     lines {"nameserver": [line numbers], "search": […], "options": […]}, entries [{line, text}] (those
                     lines as written, at most 64), problems [{line, text, why}], search_chars (the domains joined by
                     spaces), search_line_chars (the whole search line as written)}  — ndots as the resolvers use it (default 1, at most 15)
    cluster_domain  from the search list ("svc.<domain>"), else "cluster.local" (cluster_domain_from: search|default)
    client_namespace the namespace of the first "<ns>.svc.<domain>" search entry (the pod's own), else null
    search_queried  how many search domains the expansions below use (the first 8; a longer list is cut here)
    lookups         [{name, purpose (short|namespaced|fqdn|kubernetes), candidates {glibc: […], musl: […]},
                      outcome {glibc: {result, qname, addresses, error}, musl: {…}}}] — each name expanded through
                     the search path given ndots, and what each C library would return, walked over the queries below
    queries         [{id, server, port, qname, qtype (A|AAAA), transport (udp|tcp), result, rcode, truncated,
                      answers [{name, type, ttl, data}], addresses, duration_ms, tries, error}]
                    result: answer | nodata | nxdomain | servfail | refused | timeout | port-unreachable | truncated | error
                    (refused = the server answered REFUSED; port-unreachable = ICMP port unreachable / TCP reset)
    timeout_s, deadline_s, elapsed_ms

Which queries: every search-path candidate of ``NAME``, ``NAME.NS`` and ``kubernetes.default`` (type A, UDP) to the first
nameserver — the one a resolver uses while it answers; the FQDN (A and AAAA over UDP, A over TCP) to every nameserver;
``kubernetes.default.svc.<domain>`` (A over TCP) to the first. All run in parallel threads: the whole probe returns after
the slowest answer, and never later than ``deadline`` seconds (queries still open then are recorded as timeouts).
"""

from __future__ import annotations

import os
import random
import socket
import stat
import struct
import threading
import time
from typing import Any

RESOLV_MAX_BYTES = 64 * 1024
MAX_NAMESERVERS = 3  # glibc and musl use the first three
MAX_NDOTS = 15  # both cap ndots there
MAX_SEARCH_USED = 8  # search domains expanded by the probe (a resolver may use more; the rest are noted, not queried)
QUERY_TIMEOUT = 2.0
DEADLINE = 4.0
NODE_LOCAL_DNS = "169.254.20.10"

QTYPES = {"A": 1, "AAAA": 28, "CNAME": 5}
QTYPE_NAMES = {v: k for k, v in QTYPES.items()}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


# ------------------------------------------------------------------ resolv.conf


def parse_resolv_conf(text: str) -> dict:
    """resolv.conf as glibc and musl read it: ``nameserver`` lines (in order), the last ``search``/``domain`` line wins,
    ``options`` (ndots:N capped at 15, timeout:N, attempts:N, flags). Comments start with ``#`` or ``;``."""
    out: dict[str, Any] = {
        "nameservers": [],
        "search": [],
        "ndots": 1,
        "options": {},
        "lines": {"nameserver": [], "search": [], "options": []},
        "entries": [],
        "problems": [],
    }
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        key, *args = line.split()
        if key in ("nameserver", "search", "domain", "options") and len(out["entries"]) < 64:
            out["entries"].append({"line": no, "text": raw.strip()[:300]})
        if key == "nameserver":
            out["lines"]["nameserver"].append(no)
            if not args:
                out["problems"].append({"line": no, "text": raw[:200], "why": "nameserver without an address"})
                continue
            addr = args[0]
            if not _is_ip(addr.split("%", 1)[0]):
                out["problems"].append(
                    {
                        "line": no,
                        "text": raw[:200],
                        "why": f"{addr[:80]!r} is not an IP address (resolvers ignore the line)",
                    }
                )
                continue
            out["nameservers"].append(addr)
        elif key in ("search", "domain"):
            out["lines"]["search"].append(no)
            out["search"] = (
                [d.rstrip(".") for d in args if d.rstrip(".")] if key == "search" else [a.rstrip(".") for a in args[:1]]
            )
            out["search_line_chars"] = len(raw.rstrip("\r\n"))
        elif key == "options":
            out["lines"]["options"].append(no)
            for opt in args:
                name, _, value = opt.partition(":")
                if name in ("ndots", "timeout", "attempts"):
                    try:
                        n = int(value)
                        if n < 0:
                            raise ValueError
                    except ValueError:
                        out["problems"].append(
                            {"line": no, "text": raw[:200], "why": f"options {opt[:40]}: not a number"}
                        )
                        continue
                    if name == "ndots":
                        out["options"]["ndots"] = n
                        out["ndots"] = min(n, MAX_NDOTS)
                    else:
                        out["options"][name] = n
                else:
                    out["options"][name] = value or True
    out["search_chars"] = len(" ".join(out["search"]))
    return out


def read_resolv_conf(path: str = "/etc/resolv.conf") -> dict:
    """:func:`parse_resolv_conf` of ``path`` (a regular file, first 64 KiB) plus ``path`` and ``error``."""
    text, error = "", None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                error = f"could not read {path}: not a regular file"
            else:
                data = os.read(fd, RESOLV_MAX_BYTES + 1)
                if len(data) > RESOLV_MAX_BYTES:
                    error = f"{path}: larger than {RESOLV_MAX_BYTES // 1024} KiB, read the first {RESOLV_MAX_BYTES // 1024} KiB"
                    data = data[:RESOLV_MAX_BYTES]
                text = data.decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError as exc:
        error = f"could not read {path}: {exc.strerror or exc}"
    doc = parse_resolv_conf(text)
    doc["path"], doc["error"] = path, error
    return doc


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def cluster_domain_of(search: list[str]) -> tuple[str, str]:
    """(cluster domain, "search") from the first ``svc.<domain>`` entry, else ("cluster.local", "default")."""
    for entry in search:
        if entry.startswith("svc.") and len(entry) > 4:
            return entry[4:], "search"
    return "cluster.local", "default"


def client_namespace_of(search: list[str], domain: str) -> str | None:
    """The pod's namespace: kubelet writes ``<ns>.svc.<domain>`` first in a ClusterFirst pod's search list."""
    suffix = f".svc.{domain}"
    for entry in search:
        if entry.endswith(suffix) and entry != suffix[1:]:
            head = entry[: -len(suffix)]
            if head and "." not in head:
                return head
    return None


def cluster_domain(resolv_conf: str = "/etc/resolv.conf") -> tuple[str, list[str]]:
    """(cluster domain, nameservers) from resolv.conf (kept for callers of the single-lookup API)."""
    rc = read_resolv_conf(resolv_conf)
    return cluster_domain_of(rc["search"])[0], rc["nameservers"]


def search_candidates(name: str, search: list[str], ndots: int, libc: str = "glibc") -> list[str]:
    """The names a resolver asks for ``name``, in order (without the trailing dot).

    A trailing dot makes the name absolute: only itself. Otherwise, with at least ``ndots`` dots, glibc asks the name
    as it is first and then with each search domain; musl asks only the name. With fewer dots both ask the name with
    each search domain first and the name as it is last."""
    if name.endswith("."):
        return [name.rstrip(".")]
    dots = name.count(".")
    expanded = [f"{name}.{d}" for d in search]
    if dots >= ndots:
        return [name] + (expanded if libc == "glibc" else [])
    return expanded + [name]


# ------------------------------------------------------------------ DNS messages


def encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if not raw or len(raw) > 63:
            raise ValueError(f"bad DNS label {label[:70]!r} in {name[:260]!r}")
        out += bytes([len(raw)]) + raw
    if len(out) + 1 > 255:
        raise ValueError(f"DNS name longer than 255 bytes: {name[:80]}…")
    return out + b"\0"


def build_query(qname: str, qtype: str, qid: int) -> bytes:
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(qname) + struct.pack("!HH", QTYPES[qtype], 1)


def _read_name(msg: bytes, off: int) -> tuple[str, int]:
    labels, jumps, end = [], 0, None
    while True:
        if off >= len(msg):
            raise ValueError("name runs past the message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg):
                raise ValueError("truncated compression pointer")
            if end is None:
                end = off + 2
            jumps += 1
            if jumps > 32:
                raise ValueError("compression loop")
            off = ((n & 0x3F) << 8) | msg[off + 1]
            continue
        if n & 0xC0:
            raise ValueError("bad label type")
        off += 1
        if n == 0:
            break
        labels.append(msg[off : off + n].decode("ascii", "replace"))
        off += n
    return ".".join(labels), (end if end is not None else off)


def parse_response(msg: bytes, qid: int) -> dict:
    """{rcode, rcode_name, truncated, answers [{name, type, ttl, data}]}; ValueError when it is not a reply to ``qid``."""
    if len(msg) < 12:
        raise ValueError("reply shorter than a DNS header")
    rid, flags, qd, an, _ns, _ar = struct.unpack("!HHHHHH", msg[:12])
    if rid != qid or not flags & 0x8000:
        raise ValueError("not a reply to this query")
    off = 12
    for _ in range(qd):
        _, off = _read_name(msg, off)
        off += 4
    answers = []
    for _ in range(an):
        rname, off = _read_name(msg, off)
        if off + 10 > len(msg):
            raise ValueError("answer runs past the message")
        rtype, _rclass, ttl, rdlen = struct.unpack("!HHIH", msg[off : off + 10])
        off += 10
        rdata = msg[off : off + rdlen]
        if len(rdata) != rdlen:
            raise ValueError("record data runs past the message")
        if rtype == 1 and rdlen == 4:
            data = socket.inet_ntop(socket.AF_INET, rdata)
        elif rtype == 28 and rdlen == 16:
            data = socket.inet_ntop(socket.AF_INET6, rdata)
        elif rtype == 5:
            data = _read_name(msg, off)[0]
        else:
            data = rdata.hex()[:80]
        answers.append({"name": rname, "type": QTYPE_NAMES.get(rtype, str(rtype)), "ttl": ttl, "data": data})
        off += rdlen
    rcode = flags & 0x000F
    return {
        "rcode": rcode,
        "rcode_name": RCODES.get(rcode, str(rcode)),
        "truncated": bool(flags & 0x0200),
        "answers": answers,
    }


def _family(server: str) -> int:
    return socket.AF_INET6 if ":" in server else socket.AF_INET


def _sockaddr(server: str, port: int):
    return socket.getaddrinfo(server, port, _family(server), 0, 0, socket.AI_NUMERICHOST)[0][4]


def _judge(doc: dict, reply: dict, qtype: str) -> None:
    doc.update(rcode=reply["rcode_name"], truncated=reply["truncated"], answers=reply["answers"][:32])
    doc["addresses"] = sorted({a["data"] for a in reply["answers"] if a["type"] == qtype})
    if reply["rcode"] == 0:
        doc["result"] = "answer" if doc["addresses"] else ("truncated" if reply["truncated"] else "nodata")
    else:
        doc["result"] = {3: "nxdomain", 2: "servfail", 5: "refused"}.get(reply["rcode"], "error")
        if doc["result"] == "error":
            doc["error"] = f"rcode {reply['rcode_name']}"


def query(
    server: str, qname: str, qtype: str = "A", transport: str = "udp", timeout: float = QUERY_TIMEOUT, port: int = 53
) -> dict:
    """One query, one transport; never raises. UDP is sent again once at half the timeout (a lost datagram)."""
    doc: dict[str, Any] = {
        "server": server,
        "port": port,
        "qname": qname,
        "qtype": qtype,
        "transport": transport,
        "result": None,
        "rcode": None,
        "truncated": False,
        "answers": [],
        "addresses": [],
        "duration_ms": None,
        "tries": 0,
        "error": None,
    }
    qid = random.randrange(1, 0xFFFF)
    start = time.monotonic()
    end = start + max(timeout, 0.05)
    sock = None
    try:
        msg = build_query(qname, qtype, qid)
        addr = _sockaddr(server, port)
        if transport == "udp":
            sock = socket.socket(_family(server), socket.SOCK_DGRAM)
            sock.connect(addr)  # a connected UDP socket hears ICMP port unreachable (ECONNREFUSED)
            resend_at = start + timeout / 2
            sock.send(msg)
            doc["tries"] = 1
            while True:
                now = time.monotonic()
                if now >= end:
                    raise TimeoutError
                if doc["tries"] == 1 and now >= resend_at:
                    sock.send(msg)
                    doc["tries"] = 2
                sock.settimeout(max(0.01, min(end, resend_at if doc["tries"] == 1 else end) - now))
                try:
                    data = sock.recv(65535)
                except socket.timeout:
                    continue
                try:
                    reply = parse_response(data, qid)
                except ValueError:
                    continue  # not ours (or garbage): keep waiting
                break
        else:
            sock = socket.socket(_family(server), socket.SOCK_STREAM)
            sock.settimeout(max(0.01, end - time.monotonic()))
            doc["tries"] = 1
            sock.connect(addr)
            sock.sendall(struct.pack("!H", len(msg)) + msg)
            head = _recv_exact(sock, 2, end)
            data = _recv_exact(sock, struct.unpack("!H", head)[0], end)
            reply = parse_response(data, qid)
        _judge(doc, reply, qtype)
    except (TimeoutError, socket.timeout):
        doc["result"], doc["error"] = "timeout", f"no answer within {timeout:g} s"
    except ConnectionRefusedError:
        doc["result"] = "port-unreachable"
        doc["error"] = (
            "ICMP port unreachable: nothing listens on 53/udp there"
            if transport == "udp"
            else "connection refused (TCP reset or ICMP port unreachable): nothing accepts 53/tcp there"
        )
    except ConnectionResetError:
        doc["result"], doc["error"] = "port-unreachable", "connection reset by the server"
    except ValueError as exc:
        doc["result"], doc["error"] = "error", str(exc)[:200]
    except OSError as exc:
        doc["result"], doc["error"] = "error", f"{exc.strerror or exc}"[:200]
    finally:
        if sock is not None:
            sock.close()
        doc["duration_ms"] = round((time.monotonic() - start) * 1000, 1)
    return doc


def _recv_exact(sock, n: int, end: float) -> bytes:
    buf = b""
    while len(buf) < n:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("closed before the whole reply")
        buf += chunk
    return buf


# ------------------------------------------------------------------ the probe


def _outcome(candidates: list[str], answer_of, libc: str) -> dict:
    """What ``libc`` returns, walking the candidates: the first answer; NXDOMAIN/no data go on to the next; a server
    failure goes on in glibc and stops musl; any other failure (timeout, refused, unreachable) stops both."""
    seen = []
    for qname in candidates:
        q = answer_of(qname)
        if q is None:
            return {"result": "not-asked", "qname": qname, "addresses": [], "error": None}
        seen.append(q["result"])
        if q["result"] == "answer":
            return {"result": "resolved", "qname": qname, "addresses": q["addresses"], "error": None}
        if q["result"] in ("nxdomain", "nodata"):
            continue
        if q["result"] == "servfail" and libc == "glibc":
            continue
        return {"result": q["result"], "qname": qname, "addresses": [], "error": q.get("error") or q["result"]}
    if "servfail" in seen:
        return {"result": "servfail", "qname": None, "addresses": [], "error": "every name failed, one with SERVFAIL"}
    return {"result": "nodata" if "nodata" in seen else "nxdomain", "qname": None, "addresses": [], "error": None}


def _run_parallel(jobs: list[tuple], timeout: float, deadline_at: float, port: int = 53) -> list[dict | None]:
    """Run ``query`` for each job in its own daemon thread; wait at most until ``deadline_at``."""
    results: list[dict | None] = [None] * len(jobs)
    left = [len(jobs)]
    lock, done = threading.Lock(), threading.Event()

    def work(i, job):
        try:
            server, qname, qtype, transport = job
            results[i] = query(
                server,
                qname,
                qtype,
                transport,
                timeout=min(timeout, max(0.05, deadline_at - time.monotonic())),
                port=port,
            )
        finally:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    if not jobs:
        return results
    for i, job in enumerate(jobs):
        threading.Thread(target=work, args=(i, job), daemon=True, name=f"kpdiag-dns-{i}").start()
    while not done.is_set():  # short waits: Ctrl-C is seen promptly
        remaining = deadline_at - time.monotonic()
        if remaining <= 0:
            break
        done.wait(min(0.2, remaining))
    return results


def dns_probe(
    namespace: str,
    name: str,
    *,
    resolv_conf: str = "/etc/resolv.conf",
    timeout: float = QUERY_TIMEOUT,
    deadline: float = DEADLINE,
    send: bool = True,
    port: int = 53,
) -> dict:
    """The ``probes/dns.json`` document (see the module docstring). ``send=False`` reads resolv.conf only. ``port``
    is for tests (resolv.conf has no port: resolvers always use 53)."""
    started = time.monotonic()
    deadline_at = started + max(0.1, deadline)
    rc = read_resolv_conf(resolv_conf)
    domain, domain_from = cluster_domain_of(rc["search"])
    servers = rc["nameservers"][:MAX_NAMESERVERS] or ["127.0.0.1"]
    search = rc["search"][:MAX_SEARCH_USED]
    fqdn = f"{name}.{namespace}.svc.{domain}"
    k8s_fqdn = f"kubernetes.default.svc.{domain}"
    doc: dict[str, Any] = {
        "schema": "kpdiag.dns/v1",
        "namespace": namespace,
        "service": name,
        "name": fqdn,
        "result": None,
        "addresses": [],
        "error": None,
        "nameservers": servers,
        "sent": bool(send),
        "resolv_conf": rc,
        "cluster_domain": domain,
        "cluster_domain_from": domain_from,
        "client_namespace": client_namespace_of(rc["search"], domain),
        "search_queried": len(search),
        "lookups": [],
        "queries": [],
        "timeout_s": timeout,
        "deadline_s": deadline,
        "elapsed_ms": None,
    }
    jobs = _plan(doc, servers, search, rc["ndots"], k8s_fqdn)
    if not send:
        doc["result"], doc["error"] = "not-probed", "no DNS query sent (--no-probe)"
        doc["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return doc

    results = _run_parallel(jobs, timeout, deadline_at, port)
    by_key = {}
    for i, (job, res) in enumerate(zip(jobs, results)):
        if res is None:  # its thread was still waiting at the deadline
            res = _no_answer(job, port, deadline)
        res["id"] = i
        doc["queries"].append(res)
        by_key[job] = res

    for lk in doc["lookups"]:
        for libc, cands in lk["candidates"].items():
            lk["outcome"][libc] = _outcome(cands, lambda q: by_key.get((servers[0], q, "A", "udp")), libc)
    _resolved(doc, servers, by_key)
    doc["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
    return doc


def _plan(doc: dict, servers: list[str], search: list[str], ndots: int, k8s_fqdn: str) -> list[tuple]:
    """The queries to send, each once, in order: every search candidate of the four lookups (to the first server, as
    glibc and musl would try them, also recorded in ``doc["lookups"]``), the Service's FQDN to each server (A and AAAA
    over UDP, A over TCP), and the API Service's FQDN over TCP."""
    name, namespace, fqdn = doc["service"], doc["namespace"], doc["name"]
    lookups = [
        ("short", name),
        ("namespaced", f"{name}.{namespace}"),
        ("fqdn", fqdn + "."),
        ("kubernetes", "kubernetes.default"),
    ]
    jobs: list[tuple] = []

    def want(job):
        if job not in jobs:
            jobs.append(job)

    for purpose, lname in lookups:
        cands = {libc: search_candidates(lname, search, ndots, libc) for libc in ("glibc", "musl")}
        doc["lookups"].append({"name": lname, "purpose": purpose, "candidates": cands, "outcome": {}})
        for qname in cands["glibc"] + cands["musl"]:
            want((servers[0], qname, "A", "udp"))
    for server in servers:
        want((server, fqdn, "A", "udp"))
        want((server, fqdn, "AAAA", "udp"))
        want((server, fqdn, "A", "tcp"))
    want((servers[0], k8s_fqdn, "A", "tcp"))
    return jobs


def _no_answer(job: tuple, port: int, deadline: float) -> dict:
    """The result of a query whose thread was still waiting at the probe's deadline."""
    server, qname, qtype, transport = job
    return {
        "server": server,
        "port": port,
        "qname": qname,
        "qtype": qtype,
        "transport": transport,
        "result": "timeout",
        "rcode": None,
        "truncated": False,
        "answers": [],
        "addresses": [],
        "duration_ms": None,
        "tries": None,
        "error": f"no answer before the probe's {deadline:g} s deadline",
    }


def _resolved(doc: dict, servers: list[str], by_key: dict) -> None:
    """The FQDN as a resolver gets it — the first server that gives an answer — into ``doc``'s result, addresses and
    error."""
    fqdn = doc["name"]
    errors = []
    for server in servers:
        a, aaaa = by_key[(server, fqdn, "A", "udp")], by_key[(server, fqdn, "AAAA", "udp")]
        if a["result"] == "truncated":  # a resolver asks again over TCP
            a = by_key[(server, fqdn, "A", "tcp")]
        results_here = {a["result"], aaaa["result"]}
        if "answer" in results_here:
            doc["result"] = "resolved"
            doc["addresses"] = sorted(set(a["addresses"]) | set(aaaa["addresses"]))
            return
        if "nxdomain" in results_here:
            doc["result"], doc["error"] = "nxdomain", f"{fqdn} does not exist (NXDOMAIN from {server})"
            return
        if results_here <= {"nodata"}:
            doc["result"], doc["error"] = "nodata", f"{fqdn} exists but has no A or AAAA record ({server})"
            return
        errors.append((server, a))
    doc["result"] = "timeout" if all(q["result"] == "timeout" for _, q in errors) else "dns-failure"
    doc["error"] = "; ".join(
        f"{s}: {q['transport'].upper()} {q['result']}"
        + (f" ({q['error']})" if q.get("error") and q["error"] != q["result"] else "")
        for s, q in errors
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m kpdiag.collect.dns NAMESPACE NAME [--resolv-conf F] [--timeout S] [--deadline S]``: the JSON document."""
    import argparse
    import json

    from kpdiag import exitcodes

    ap = argparse.ArgumentParser(prog="python -m kpdiag.collect.dns")
    ap.add_argument("namespace")
    ap.add_argument("name")
    ap.add_argument("--resolv-conf", default="/etc/resolv.conf")
    ap.add_argument("--timeout", type=float, default=QUERY_TIMEOUT)
    ap.add_argument("--deadline", type=float, default=DEADLINE)
    args = ap.parse_args(argv)
    print(
        json.dumps(
            dns_probe(
                args.namespace, args.name, resolv_conf=args.resolv_conf, timeout=args.timeout, deadline=args.deadline
            ),
            indent=1,
        )
    )
    return exitcodes.OK


if __name__ == "__main__":
    raise SystemExit(main())
