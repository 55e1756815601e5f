"""Active probes: what really comes back from a ClusterIP and from each endpoint.

Raw probes (ICMP echo, TCP SYN, UDP, a TTL walk) use scapy and need CAP_NET_RAW; the TCP
connect probe uses an ordinary socket and always runs. Every probe is bounded: a handful of
packets, a per-probe timeout, a total deadline, and only the Service's own addresses and its
endpoints as targets (:class:`ProbeBudget` enforces all four).

Results are plain dicts (``probes/service.json`` in a bundle, format ``kpdiag.probes/v1``):
``{"target": "10.96.0.20:80/tcp", "kind": "tcp-syn", "result": "syn-ack", "from": null, "rtt_ms": 0.4, "detail": …}``.
``result`` is one of: echo-reply, time-exceeded, port-unreachable, host-unreachable,
net-unreachable, admin-prohibited, unreachable, rst, syn-ack, udp-reply, connected, refused,
timeout (nothing came back), error, skipped.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from ..parse.addr import hostport

PROBES_SCHEMA = "kpdiag.probes/v1"
MAX_PACKETS = 400  # the ClusterIP series (below) included
MAX_RATE = 20.0  # packets per second at most
PER_PROBE_TIMEOUT = 1.5
TOTAL_DEADLINE = 20.0
TRACE_MAX_TTL = 12
# connects through one ClusterIP port: enough that every endpoint is reached with P(some endpoint never chosen) below
# MISS_PROBABILITY under kube-proxy's uniform choice (iptables' statistic, nftables' numgen, IPVS rr), at most
# SERIES_MAX, within SERIES_SECONDS
MISS_PROBABILITY = 1e-3
SERIES_MAX = 160
SERIES_SECONDS = 8.0

_UNREACH = {
    0: "net-unreachable",
    1: "host-unreachable",
    3: "port-unreachable",
    9: "admin-prohibited",
    10: "admin-prohibited",
    13: "admin-prohibited",
}
# ICMPv6 destination unreachable codes (RFC 4443) in the same words
_UNREACH6 = {
    0: "net-unreachable",
    1: "admin-prohibited",
    3: "host-unreachable",
    4: "port-unreachable",
    5: "admin-prohibited",
    6: "admin-prohibited",
}


class ProbeRefused(Exception):
    """A probe was not sent: budget exhausted or target not allowed."""


@dataclass
class ProbeBudget:
    allowed: set[str]
    max_packets: int = MAX_PACKETS
    deadline: float = field(default_factory=lambda: time.monotonic() + TOTAL_DEADLINE)
    sent: int = 0
    rate: float = MAX_RATE
    _last: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)  # set: no further packet (Ctrl-C, deadline)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, dst: str, packets: int = 1) -> None:
        """Account for ``packets`` to ``dst`` before they are sent; thread-safe (probes run in parallel)."""
        if dst not in self.allowed:
            raise ProbeRefused(f"{dst} is not one of the Service's addresses or endpoints")
        with self._lock:
            if self.stop.is_set():
                raise ProbeRefused("interrupted")
            if self.sent + packets > self.max_packets:
                raise ProbeRefused(f"packet budget of {self.max_packets} used up")
            now = time.monotonic()
            if now > self.deadline:
                raise ProbeRefused(f"time budget of {TOTAL_DEADLINE:.0f} s used up")
            slot = max(now, self._last + packets / self.rate)  # never more than `rate` packets per second
            self._last = slot
            self.sent += packets
        if slot > now:
            time.sleep(slot - now)


def raw_capability() -> str | None:
    """None if raw sockets work here, else why not (one line, with the fix)."""
    from .. import DEFAULT_IMAGE

    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.close()
        return None
    except PermissionError:
        return (
            "raw packets need CAP_NET_RAW (root or the capability); ICMP/SYN/UDP probes skipped — run e.g. "
            f"kubectl debug -it <pod> --image={DEFAULT_IMAGE} --profile=netadmin -- kpdiag svc …"
        )
    except OSError as exc:
        return f"raw sockets unavailable: {exc.strerror or exc}"


def _result(target: str, kind: str, result: str, src: str | None = None, rtt: float | None = None, **detail) -> dict:
    out = {
        "target": target,
        "kind": kind,
        "result": result,
        "from": src,
        "rtt_ms": None if rtt is None else round(rtt * 1000, 2),
    }
    if detail:
        out["detail"] = detail
    return out


def tcp_connect(budget: ProbeBudget, ip: str, port: int, timeout: float = PER_PROBE_TIMEOUT) -> dict:
    target = f"{hostport(ip, port)}/tcp"
    try:
        budget.take(ip)
    except ProbeRefused as exc:
        return _result(target, "tcp-connect", "skipped", reason=str(exc))
    t = time.monotonic()
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((ip, port))
        return _result(target, "tcp-connect", "connected", rtt=time.monotonic() - t)
    except socket.timeout:
        return _result(target, "tcp-connect", "timeout")
    except ConnectionRefusedError:
        return _result(target, "tcp-connect", "refused", rtt=time.monotonic() - t)
    except OSError as exc:
        kind = {errno.EHOSTUNREACH: "host-unreachable", errno.ENETUNREACH: "net-unreachable"}.get(exc.errno, "error")
        return _result(target, "tcp-connect", kind, error=exc.strerror or str(exc))
    finally:
        s.close()


def p_missed(endpoints: int, connects: int) -> float:
    """P(at least one of ``endpoints`` is never chosen in ``connects`` independent uniform choices), exactly: a walk over
    how many distinct endpoints the connects have reached (positive terms only, stable for any count)."""
    n = endpoints
    if n <= 1:
        return 0.0 if connects >= 1 or n == 0 else 1.0
    dist = [1.0] + [0.0] * n  # dist[j]: P(j distinct endpoints reached so far)
    for _ in range(connects):
        dist = [dist[j] * j / n + (dist[j - 1] * (n - j + 1) / n if j else 0.0) for j in range(n + 1)]
    return min(1.0, max(0.0, 1.0 - dist[n]))


def connects_needed(endpoints: int, miss: float = MISS_PROBABILITY, cap: int = SERIES_MAX) -> int:
    """The fewest connects through a ClusterIP that reach each of ``endpoints`` with P(one missed) < ``miss``
    (2 endpoints: 11; 5: 39; 16: 150), at most ``cap`` (the same walk as :func:`p_missed`, once)."""
    n = endpoints
    if n <= 1:
        return 1
    dist = [1.0] + [0.0] * n
    for k in range(1, cap + 1):
        dist = [dist[j] * j / n + (dist[j - 1] * (n - j + 1) / n if j else 0.0) for j in range(n + 1)]
        if 1.0 - dist[n] < miss:
            return k
    return cap


_ERRNO_RESULT = {
    errno.ECONNREFUSED: "refused",
    errno.ECONNRESET: "refused",
    errno.EHOSTUNREACH: "host-unreachable",
    errno.ENETUNREACH: "net-unreachable",
    errno.ETIMEDOUT: "timeout",
}


def _bound_socket(ip: str, used: set[int]) -> tuple[socket.socket, int]:
    """A non-blocking TCP socket bound to a source port not used before in this series (kube-proxy chooses per new
    connection: a port reused within conntrack's memory could meet the old entry and its old choice)."""
    for _ in range(8):
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind(("::" if ":" in ip else "0.0.0.0", 0))
        port = s.getsockname()[1]
        if port not in used:
            used.add(port)
            return s, port
        s.close()
    return s, port  # pragma: no cover - eight repeats of the same ephemeral port


def _connect_result(target: str, seq: int, sport: int, result: str, rtt, reached, error=None) -> dict:
    detail = {"seq": seq, "sport": sport, "reached": None if reached is None else hostport(*reached)}
    if error:
        detail["error"] = error
    return _result(target, "tcp-connect", result, rtt=rtt, **detail)


def connect_series(
    budget: ProbeBudget,
    ip: str,
    port: int,
    endpoints: int,
    timeout: float = PER_PROBE_TIMEOUT,
    seconds: float = SERIES_SECONDS,
    lookup=None,
) -> tuple[list[dict], dict]:
    """TCP connects to ClusterIP ``ip``:``port``, each from its own source port, as many as :func:`connects_needed`
    for ``endpoints``, paced by the budget and overlapping (a dropped connect waits ``timeout`` while the next ones go).
    Each result says which endpoint it reached when conntrack here knows (``lookup``: a ConntrackLookup), else null.
    Returns (results, the series' summary: wanted, sent, why it stopped short, P(an endpoint never reached))."""
    target = f"{hostport(ip, port)}/tcp"
    wanted = connects_needed(endpoints)
    end = time.monotonic() + seconds
    sel = selectors.DefaultSelector()
    used: set[int] = set()
    src = _my_address(ip)
    out: list[dict] = []
    pending: dict[int, tuple] = {}  # fd → (socket, seq, sport, start, the endpoint reached)
    stopped, seq = None, 0

    def finish(fd: int, result: str, error=None) -> None:
        s, i, sport, t, reached = pending.pop(fd)
        sel.unregister(s)
        rtt = time.monotonic() - t if result != "timeout" else None
        out.append(_connect_result(target, i, sport, result, rtt, reached, error))
        s.close()

    def reached(s: socket.socket, sport: int):
        """Asked while the SYN is out: conntrack forgets a connection that was reset at once."""
        if lookup is None:
            return None
        try:
            here = s.getsockname()[0]
        except OSError:
            here = None
        here = here if here and here not in ("0.0.0.0", "::") else src
        return lookup.reached(here, sport, ip, port) if here else None

    while (seq < wanted and stopped is None) or pending:
        if seq < wanted and stopped is None:
            if time.monotonic() > end:
                stopped = f"time budget of {seconds:.0f} s for the series used up"
            else:
                try:
                    budget.take(ip)
                except ProbeRefused as exc:
                    stopped = str(exc)
                else:
                    s, sport = _bound_socket(ip, used)
                    t = time.monotonic()
                    err = s.connect_ex((ip, port))
                    seq += 1
                    pending[s.fileno()] = (s, seq, sport, t, reached(s, sport))
                    sel.register(s, selectors.EVENT_WRITE)
                    if err not in (0, errno.EINPROGRESS):
                        finish(s.fileno(), _ERRNO_RESULT.get(err, "error"), os_error(err))
        for key, _ in sel.select(timeout=0 if (seq < wanted and stopped is None) else 0.05):
            err = key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            finish(key.fd, "connected" if err == 0 else _ERRNO_RESULT.get(err, "error"), os_error(err) if err else None)
        now = time.monotonic()
        for fd in [fd for fd, p in pending.items() if now - p[3] > timeout or budget.stop.is_set()]:
            finish(fd, "timeout" if not budget.stop.is_set() else "skipped")
    sel.close()
    out.sort(key=lambda r: r["detail"]["seq"])
    summary = {
        "target": target,
        "endpoints": endpoints,
        "wanted": wanted,
        "sent": len(out),
        "stopped": stopped,
        "p_missed": p_missed(endpoints, len(out)),
        "reached_known": any(r["detail"]["reached"] for r in out),
    }
    if lookup is not None and not summary["reached_known"]:
        summary["why_unknown"] = lookup.why_not or "conntrack here did not show the translation"
    return out, summary


def os_error(err: int) -> str:
    return os.strerror(err) if err else ""


class RawProber:
    """scapy-based probes (imported lazily: scapy takes a second to import)."""

    def __init__(self, budget: ProbeBudget, timeout: float = PER_PROBE_TIMEOUT):
        from scapy.all import conf

        conf.verb = 0
        self.budget = budget
        self.timeout = timeout

    def _send(self, pkt, dst: str):
        from scapy.all import sr1

        self.budget.take(dst)
        t = time.monotonic()
        reply = sr1(pkt, timeout=self.timeout, verbose=0, chainCC=True)
        return reply, time.monotonic() - t

    def _classify_icmp(self, reply) -> tuple[str, dict]:
        """An ICMP or ICMPv6 answer in the same words (echo-reply, time-exceeded, port-unreachable …)."""
        from scapy.all import ICMP

        if reply.haslayer(ICMP):
            icmp = reply[ICMP]
            if icmp.type == 0:
                return "echo-reply", {}
            if icmp.type == 11:
                return "time-exceeded", {"code": int(icmp.code)}
            if icmp.type == 3:
                return _UNREACH.get(int(icmp.code), "unreachable"), {"code": int(icmp.code)}
            return f"icmp-{icmp.type}", {"code": int(icmp.code)}
        from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6EchoReply, ICMPv6TimeExceeded

        if reply.haslayer(ICMPv6EchoReply):
            return "echo-reply", {}
        if reply.haslayer(ICMPv6TimeExceeded):
            return "time-exceeded", {"code": int(reply[ICMPv6TimeExceeded].code)}
        if reply.haslayer(ICMPv6DestUnreach):
            code = int(reply[ICMPv6DestUnreach].code)
            return _UNREACH6.get(code, "unreachable"), {"code": code}
        return "icmp6-other", {"summary": reply.summary()}

    @staticmethod
    def _is_icmp(reply) -> bool:
        from scapy.all import ICMP
        from scapy.layers.inet6 import _ICMPv6

        return reply.haslayer(ICMP) or reply.haslayer(_ICMPv6)

    @staticmethod
    def _ip(dst: str, ttl: int = 64):
        """An IPv4 or IPv6 header towards ``dst`` (the hop limit is IPv6's TTL)."""
        from scapy.all import IP
        from scapy.layers.inet6 import IPv6

        return IPv6(dst=dst, hlim=ttl) if ":" in dst else IP(dst=dst, ttl=ttl)

    def icmp_echo(self, ip: str, ttl: int = 64) -> dict:
        from scapy.all import ICMP
        from scapy.layers.inet6 import ICMPv6EchoRequest

        target = f"{ip}/icmp"
        echo = ICMPv6EchoRequest(id=0x6B70, seq=ttl) if ":" in ip else ICMP(id=0x6B70, seq=ttl)
        try:
            reply, rtt = self._send(self._ip(ip, ttl) / echo, ip)
        except ProbeRefused as exc:
            return _result(target, "icmp-echo", "skipped", reason=str(exc))
        if reply is None:
            return _result(target, "icmp-echo", "timeout")
        result, detail = self._classify_icmp(reply)
        return _result(target, "icmp-echo", result, reply.src, rtt, ttl=ttl, **detail)

    def tcp_syn(self, ip: str, port: int) -> dict:
        from scapy.all import TCP, RandShort

        target = f"{hostport(ip, port)}/tcp"
        try:
            reply, rtt = self._send(self._ip(ip) / TCP(sport=RandShort(), dport=port, flags="S"), ip)
        except ProbeRefused as exc:
            return _result(target, "tcp-syn", "skipped", reason=str(exc))
        if reply is None:
            return _result(target, "tcp-syn", "timeout")
        if reply.haslayer(TCP):
            flags = reply[TCP].flags
            if flags & 0x12 == 0x12:
                return _result(target, "tcp-syn", "syn-ack", reply.src, rtt)
            if flags & 0x04:
                return _result(target, "tcp-syn", "rst", reply.src, rtt)
        if self._is_icmp(reply):
            result, detail = self._classify_icmp(reply)
            return _result(target, "tcp-syn", result, reply.src, rtt, **detail)
        return _result(target, "tcp-syn", "error", reply.src, rtt, summary=reply.summary())

    def udp(self, ip: str, port: int) -> dict:
        from scapy.all import UDP, RandShort, Raw

        target = f"{hostport(ip, port)}/udp"
        try:
            reply, rtt = self._send(self._ip(ip) / UDP(sport=RandShort(), dport=port) / Raw(b"kpdiag probe\n"), ip)
        except ProbeRefused as exc:
            return _result(target, "udp", "skipped", reason=str(exc))
        if reply is None:
            return _result(target, "udp", "timeout", note="no answer: open but silent, or dropped")
        if self._is_icmp(reply):
            result, detail = self._classify_icmp(reply)
            return _result(target, "udp", result, reply.src, rtt, **detail)
        return _result(target, "udp", "udp-reply", reply.src, rtt)

    def ttl_walk(self, ip: str, max_ttl: int = TRACE_MAX_TTL) -> dict:
        """Who answers for each TTL (a traceroute with ICMP echo); says whether the path loops."""
        hops = []
        for ttl in range(1, max_ttl + 1):
            r = self.icmp_echo(ip, ttl)
            hops.append({"ttl": ttl, "from": r["from"], "result": r["result"]})
            if r["result"] in ("echo-reply", "skipped") or r["result"].endswith("unreachable"):
                break
        responders = [h["from"] for h in hops if h["from"]]
        loop = _loop(responders)
        return {
            "target": f"{ip}/icmp",
            "kind": "ttl-walk",
            "result": "loop" if loop else "path",
            "from": None,
            "rtt_ms": None,
            "detail": {"hops": hops, "loop_between": loop},
        }


def _loop(responders: list[str]) -> list[str] | None:
    """The addresses a packet bounces between, when the TTL walk shows the same ones again and again.

    Routers rate-limit ICMP errors, so some hops stay silent: a loop is two (or three) addresses that
    each answer at least twice among the later hops, and nothing else answering there."""
    tail = responders[-6:]
    if len(tail) < 4:
        return None
    counts: dict[str, int] = {}
    for r in tail:
        counts[r] = counts.get(r, 0) + 1
    if 2 <= len(counts) <= 3 and all(n >= 2 for n in counts.values()):
        return sorted(counts, key=lambda a: tail.index(a))
    return None


def _port_jobs(
    ip: str,
    ports: list,
    endpoints: list[tuple[str, int, str]],
    budget: ProbeBudget,
    prober,
    why_no_raw,
    spread: dict,
    series: list,
) -> list:
    """The jobs for the Service ports of one ClusterIP: a TCP connect series (and a SYN) per TCP port, a datagram per
    UDP port."""
    jobs: list[list] = []
    for port in ports:
        proto = (port.get("protocol") or "TCP").lower()
        number = port.get("port")
        if not number:
            continue
        if proto == "tcp":
            count = spread.get((number, proto))
            if count is None:  # one per distinct endpoint address of this family
                count = len({e for e, _, p in endpoints if p == proto and (":" in e) == (":" in ip)})
            jobs.append([lambda ip=ip, n=number, c=count: _series_job(budget, ip, n, c, series)])
            if prober is not None:
                jobs.append([lambda ip=ip, n=number: [prober.tcp_syn(ip, n)]])
        elif proto == "udp":
            jobs.append(
                [
                    lambda ip=ip, n=number: [
                        prober.udp(ip, n)
                        if prober
                        else _result(f"{hostport(ip, n)}/udp", "udp", "skipped", reason=why_no_raw)
                    ]
                ]
            )
    return jobs


def _jobs(
    service: dict,
    endpoints: list[tuple[str, int, str]],
    budget: ProbeBudget,
    prober,
    why_no_raw,
    icmp: bool,
    icmp_done: threading.Event | None = None,
    spread: dict | None = None,
    series: list | None = None,
) -> list:
    """The probes as independent jobs (each a list of callables run in order, in its own thread). ``icmp_done`` is set
    once the ICMP echoes (and TTL walks) are over. ``spread``: {(Service port, proto): how many endpoints kube-proxy
    chooses among}, for the ClusterIP series; ``series`` receives each series' summary."""
    spread = spread or {}
    series = series if series is not None else []
    spec = service.get("spec") or {}
    cluster_ips = [ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip and ip != "None"]
    jobs: list[list] = []
    echo_ips = [ip for ip in cluster_ips if icmp and prober is not None]
    pending = [len(echo_ips)]
    lock = threading.Lock()
    if not echo_ips and icmp_done is not None:
        icmp_done.set()
    for ip in cluster_ips:
        if icmp:
            if prober is not None:

                def echo_and_walk(ip=ip):
                    try:
                        echo = prober.icmp_echo(ip)
                        return [echo, prober.ttl_walk(ip)] if echo["result"] == "time-exceeded" else [echo]
                    finally:
                        with lock:
                            pending[0] -= 1
                            if pending[0] == 0 and icmp_done is not None:
                                icmp_done.set()

                jobs.append([echo_and_walk])
            else:
                jobs.append([lambda ip=ip: [_result(f"{ip}/icmp", "icmp-echo", "skipped", reason=why_no_raw)]])
        jobs += _port_jobs(ip, spec.get("ports") or [], endpoints, budget, prober, why_no_raw, spread, series)
    for ip, port, proto in endpoints:
        if proto == "tcp":
            jobs.append([lambda ip=ip, n=port: [tcp_connect(budget, ip, n)]])
        elif proto == "udp" and prober is not None:
            jobs.append([lambda ip=ip, n=port: [prober.udp(ip, n)]])
    return jobs


def _series_job(budget: ProbeBudget, ip: str, port: int, endpoints: int, series: list) -> list[dict]:
    from .ct_lookup import ConntrackLookup

    lookup = ConntrackLookup()
    try:
        results, summary = connect_series(budget, ip, port, endpoints, lookup=lookup)
    finally:
        lookup.close()
    series.append(summary)
    return results


def run_parallel(jobs: list, deadline: float, stop: threading.Event | None = None) -> list[list]:
    """Run each job (a list of callables returning result lists) in its own daemon thread; the results in job order.

    Daemon threads, and the main thread only ever sleeps in Event.wait: Ctrl-C (KeyboardInterrupt in the main thread)
    leaves at once — no probe can swallow it (scapy's sr1 does in the main thread) and no executor lock is left held.
    A job still running at ``deadline`` (time.monotonic) is given up ("interrupted")."""
    results: list[list | None] = [None] * len(jobs)
    done = threading.Event()
    left = [len(jobs)]
    lock = threading.Lock()

    def run(i: int, steps: list) -> None:
        out: list = []
        try:
            for step in steps:
                out.extend(step())
        except Exception as exc:  # a probe's bug must not hide the others
            out.append(
                {
                    "target": "?",
                    "kind": "error",
                    "result": "error",
                    "from": None,
                    "rtt_ms": None,
                    "detail": {"error": f"{exc.__class__.__name__}: {exc}"},
                }
            )
        results[i] = out
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    if not jobs:
        return []
    for i, steps in enumerate(jobs):
        threading.Thread(target=run, args=(i, steps), name=f"kpdiag-probe-{i}", daemon=True).start()
    while not done.wait(0.05):
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            break
    return [r if r is not None else [] for r in results]


def probe_service(
    service: dict,
    endpoints: list[tuple[str, int, str]],
    raw: bool = True,
    icmp: bool = True,
    stop: threading.Event | None = None,
    icmp_done: threading.Event | None = None,
    spread: dict | None = None,
) -> dict:
    """Probe a Service's ClusterIP ports and each endpoint directly, all at once (bounded by the packet budget, the
    rate limit and TOTAL_DEADLINE).

    ``endpoints``: (ip, targetPort, protocol) of the endpoints kube-proxy uses; ``spread``: {(Service port, proto):
    how many endpoints kube-proxy chooses among} (default: the distinct endpoint addresses). Each TCP port is connected
    to through the ClusterIP as often as that number asks (:func:`connect_series`). Returns the probes document.
    """
    spec = service.get("spec") or {}
    cluster_ips = [
        ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip and ip != "None"
    ]  # both families
    allowed = set(cluster_ips) | {ip for ip, _, _ in endpoints}
    budget = ProbeBudget(allowed)
    if stop is not None:
        budget.stop = stop
    why_no_raw = raw_capability() if raw else "raw probes disabled (--no-raw)"
    prober = None
    if why_no_raw is None:
        try:
            prober = RawProber(budget)
        except Exception as exc:  # scapy missing or broken
            why_no_raw = f"scapy unavailable: {exc.__class__.__name__}: {exc}"
    series: list[dict] = []
    jobs = _jobs(service, endpoints, budget, prober, why_no_raw, icmp, icmp_done, spread, series)
    try:
        per_job = run_parallel(jobs, budget.deadline + PER_PROBE_TIMEOUT, stop)
    except BaseException:  # Ctrl-C: no further packet from the probe threads, then leave
        budget.stop.set()
        raise
    results = [r for out in per_job for r in out]
    unfinished = sum(1 for out in per_job if not out)
    return {
        "schema": PROBES_SCHEMA,
        "source": _my_address(cluster_ips[0] if cluster_ips else None),
        "raw": why_no_raw is None,
        "raw_skipped_reason": why_no_raw,
        "packets_sent": budget.sent,
        "results": results,
        "series": sorted(series, key=lambda x: x["target"]),
        **({"unfinished": unfinished} if unfinished else {}),
    }


def _my_address(towards: str | None) -> str | None:
    """The source address this host uses towards ``towards`` (no packet is sent)."""
    if not towards:
        return None
    s = socket.socket(socket.AF_INET6 if ":" in towards else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((towards, 9))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
