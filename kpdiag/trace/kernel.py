"""``kpdiag trace --kernel``: the kernel's own trace of one probe the node sends, beside the simulated path.

The only part of kpdiag that changes the node, for the time of one probe, and leaves nothing behind:

- an nf_tables table of its own with the **owner** flag, made by an ``nft -i`` process kpdiag holds open: the kernel
  binds the table to that process's netlink socket and deletes it when the socket closes — on a normal exit, on a
  signal, and on SIGKILL of kpdiag (its children are killed with it: ``PR_SET_PDEATHSIG``). No other process can
  change or delete it. Its chains, at priority -350 on prerouting and output (before raw), set ``meta nftrace`` for
  the probe's 5-tuple only (and for one canary datagram to 127.0.0.1 that tells when the listener is ready);
- a listener, ``nft monitor trace``, killed on every exit path, bounded in time (DEADLINE) and lines (MAX_LINES);
- the probe: one connection attempt from the node (its own socket, a source port of its own), which leaves a
  conntrack entry and sends a SYN (or a datagram) to wherever the rules send it, the way any client of the node does.

nftrace covers kube-proxy's nftables table, iptables-nft's rules and every other nftables table; iptables-legacy's
rules are not traced this way (their ``TRACE`` target is not used here: the trace says so).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InputError

if TYPE_CHECKING:
    from .model import Path, TraceResult

DEADLINE = 5.0  # seconds for the whole kernel trace: setup, the listener's start, the probe, the events
MAX_LINES = 5000  # lines read from the listener: past this, what it printed is cut (and said)
QUIET = 0.15  # seconds without a new line after the probe: its events are all in
CANARY_PORT = 9  # discard: the canary datagram goes to 127.0.0.1:9 from a port of its own
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}

CHANGES = (
    "kpdiag trace --kernel changes this node for about a second: an nftables table of its own (owner flag: the kernel "
    "deletes it when kpdiag exits, even on SIGKILL) that marks one probe for tracing, a listener (nft monitor trace), "
    "and the probe itself — one connection attempt from this node (a conntrack entry, a SYN to where the rules send "
    "it, affinity state for the node's address)"
)


def _dies_with(parent: int) -> Callable[[], None]:
    """In the child, before exec: SIGKILL when kpdiag dies, whatever kills it (PR_SET_PDEATHSIG; a parent already
    gone: die now); the signals kpdiag blocked around the fork unblocked."""

    def child() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as PR_SET_PDEATHSIG would have
        signal.pthread_sigmask(signal.SIG_SETMASK, set())

    return child


@dataclass
class KernelPath:
    """What the kernel reported for the probe: (table, chain, rule text, verdict) of every rule that matched."""

    rules: list[tuple[str, str, str, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": [{"table": t, "chain": c, "rule": r, "verdict": v} for t, c, r, v in self.rules],
            "notes": list(self.notes),
        }


_RULE = re.compile(r"^(?:ip6?|inet) (\S+) (\S+) rule (.*) \(verdict ([^()]*)\)\s*$")


class KernelTrace:
    """The kernel's trace of one probe (a context manager: nothing of it outlives the ``with``)."""

    def __init__(self, src: str, dst: str, proto: str, sport: int, dport: int | None) -> None:
        if proto not in ("tcp", "udp") or ":" in dst:
            raise InputError("--kernel", "the kernel's trace is for an IPv4 TCP or UDP probe")
        self.src, self.dst, self.proto, self.sport, self.dport = src, dst, proto, sport, dport
        self.table = f"kpdiag_trace_{os.getpid()}"
        self.nft: subprocess.Popen[bytes] | None = None
        self.monitor: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self._pending = b""
        self.cut = False

    # ------------------------------------------------------------ setup and cleanup
    def __enter__(self) -> "KernelTrace":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the listener, close the table's socket (the kernel deletes the table); on every exit path."""
        for proc in (self.monitor, self.nft):
            if proc is not None and proc.poll() is None:
                proc.kill()
        for proc in (self.monitor, self.nft):
            if proc is not None:
                proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        stream.close()
        self.monitor = self.nft = None

    def _spawn(self, argv: list[str], stdin: bool) -> subprocess.Popen[bytes]:
        """Start a child that dies with kpdiag; a signal that comes during the fork waits until the child is
        registered (else the forked child would run kpdiag's handler and the parent lose the signal)."""
        stop = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        try:
            proc = self._popen(argv, stdin)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return proc

    def _popen(self, argv: list[str], stdin: bool) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=_ENV,
                preexec_fn=_dies_with(os.getpid()),
            )
        except OSError as exc:
            raise InputError("--kernel", f"cannot run {argv[0]}: {exc.strerror or exc}") from None

    def _start(self) -> None:
        deadline = time.monotonic() + DEADLINE
        match = (
            f"ip saddr {self.src} ip daddr {self.dst} {self.proto} sport {self.sport} {self.proto} dport {self.dport}"
        )
        t = f"ip {self.table}"
        script = (
            f"add table {t} {{ flags owner; }}\n"
            f"add chain {t} pre {{ type filter hook prerouting priority -350; }}\n"
            f"add chain {t} out {{ type filter hook output priority -350; }}\n"
            f"add rule {t} pre {match} meta nftrace set 1\n"
            f"add rule {t} out {match} meta nftrace set 1\n"
            f"add rule {t} out ip daddr 127.0.0.1 udp dport {CANARY_PORT} udp sport {self.sport} meta nftrace set 1\n"
            f"list chain {t} out\n"
        )
        self.nft = nft = self._spawn(["nft", "-i"], stdin=True)  # its netlink socket owns the table
        assert nft.stdin is not None  # spawned with stdin=PIPE
        nft.stdin.write(script.encode())
        nft.stdin.flush()
        said = b""
        while b"meta nftrace set 1" not in said.split(b"chain out", 1)[-1] or not said.rstrip().endswith(b"}"):
            said += self._read(nft, deadline, "nft -i")
            if b"Error" in said:
                raise InputError("--kernel", f"nft refused the trace table: {said.decode('utf-8', 'replace')[:300]}")
        self.monitor = self._spawn(["nft", "monitor", "trace"], stdin=False)
        self._wait_ready(deadline)

    def _read(self, proc: subprocess.Popen[bytes], deadline: float, what: str) -> bytes:
        assert proc.stdout is not None  # spawned with stdout=PIPE
        left = deadline - time.monotonic()
        ready = select.select([proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
        data = os.read(proc.stdout.fileno(), 1 << 16) if ready else b""
        if not data:
            why = "exited" if proc.poll() is not None else f"no answer within {DEADLINE:.0f} s"
            raise InputError("--kernel", f"{what}: {why}")
        return data

    def _pump(self, timeout: float) -> bool:
        """Read what the listener printed within ``timeout``; True when there was something."""
        out = self.monitor.stdout if self.monitor is not None else None
        if out is None or not select.select([out], [], [], timeout)[0]:
            return False
        data = os.read(out.fileno(), 1 << 20)
        if not data:
            return False
        *full, self._pending = (self._pending + data).split(b"\n")
        room = MAX_LINES - len(self.lines)
        self.cut = self.cut or len(full) > room
        self.lines.extend(line.decode("utf-8", "replace") for line in full[: max(0, room)])
        return True

    def _wait_ready(self, deadline: float) -> None:
        """The listener is ready when the canary datagram's trace comes back (nft reads the ruleset first)."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as canary:
            canary.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            canary.bind(("127.0.0.1", self.sport))
            while time.monotonic() < deadline:
                canary.sendto(b"kpdiag", ("127.0.0.1", CANARY_PORT))
                self._pump(0.05)
                if any(f"udp dport {CANARY_PORT}" in line for line in self.lines):
                    return
        raise InputError("--kernel", f"nft monitor trace did not start within {DEADLINE:.0f} s")

    # ------------------------------------------------------------ the probe
    def probe(self) -> KernelPath:
        """Send the probe from the node and read the kernel's trace of it."""
        kind = socket.SOCK_STREAM if self.proto == "tcp" else socket.SOCK_DGRAM
        self.lines = [line for line in self.lines if f"udp dport {CANARY_PORT}" not in line]
        before = set(self.lines)
        with socket.socket(socket.AF_INET, kind) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.settimeout(0.3)
            try:
                s.bind((self.src, self.sport))
                s.connect((self.dst, self.dport))
                if kind == socket.SOCK_DGRAM:
                    s.send(b"kpdiag")
            except OSError:
                pass  # refused, timed out, unreachable: the kernel's trace says what happened
        deadline, quiet = time.monotonic() + DEADLINE, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet < QUIET:
            if self._pump(0.05):
                quiet = time.monotonic()
        return self._path([line for line in self.lines if line not in before])

    def _path(self, lines: list[str]) -> KernelPath:
        canary = {
            m.group(1)
            for line in lines
            if f"udp dport {CANARY_PORT}" in line
            for m in [re.match(r"trace id (\w+)", line)]
            if m
        }
        out = KernelPath()
        for line in lines:
            m = re.match(r"trace id (\w+) (.*)", line)
            if m is None or m.group(1) in canary:
                continue
            out.lines.append(m.group(2))
            r = _RULE.match(m.group(2))
            if r and r.group(1) != self.table:
                out.rules.append((r.group(1), r.group(2), r.group(3), r.group(4)))
        if self.cut:
            out.notes.append(f"the listener printed more than {MAX_LINES} lines: the rest is not shown")
        if not out.lines:
            out.notes.append("the kernel reported nothing for the probe (it did not reach a traced hook)")
        return out


def compare(path: Path, kernel: KernelPath) -> tuple[bool, str, list[int | None]]:
    """AGREE when every rule the kernel reports is on the simulated path, in order (the simulated path also shows
    steps the kernel does not print, such as a chain's implicit return); else the first rule where they part. Also
    the step of the path (1-based, among all its steps) each kernel rule was matched with (None: not on it)."""
    ours, last = [], None
    for n, s in enumerate(path.steps, 1):  # a rule's statement and its "continue" are two steps, one kernel line
        if s.rule is not None and (s.table, s.chain, s.rule) != last:
            ours.append((n, (s.table.split()[-1], s.chain)))
        last = (s.table, s.chain, s.rule)
    steps: list[int | None] = [None] * len(kernel.rules)
    if not kernel.lines:
        return False, "the kernel reported nothing for the probe", steps
    if not kernel.rules:
        if ours:
            return False, f"the kernel reported no rule for the probe; kpdiag's path has {len(ours)}", steps
        return True, "AGREE: no rule matched the probe, in the kernel or on kpdiag's path", steps
    it = 0
    for i, (table, chain, rule, verdict) in enumerate(kernel.rules):
        while it < len(ours) and ours[it][1] != (table, chain):
            it += 1
        if it == len(ours):
            where = f"{table}/{chain} (verdict {verdict})"
            return False, f"the kernel's rule '{rule}' in {where} is not on kpdiag's path", steps
        steps[i] = ours[it][0]
        it += 1
    return True, f"AGREE: the kernel's {len(kernel.rules)} rules are kpdiag's path, in order", steps


@contextlib.contextmanager
def _raising_on_signals() -> Iterator[None]:
    """SIGHUP, SIGINT, SIGQUIT and SIGTERM raise Interrupted while the trace table exists: the ``with`` blocks close
    what they opened and the command ends with 128 + signal (SIGKILL cannot be caught: the children die with kpdiag
    and the kernel deletes the table with their socket)."""
    from ..errors import Interrupted

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    stops = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
    saved = {sig: signal.signal(sig, handler) for sig in stops}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


class TraceNotes(Protocol):
    """What the kernel check reads of the trace's set-up (kpdiag/commands/trace.py ``TraceSetup``): its notes on
    the inputs, which say when the rules walked were iptables-legacy's."""

    @property
    def notes(self) -> tuple[str, ...]: ...


def kernel_check(result: TraceResult, setup: TraceNotes) -> dict[str, Any]:
    """The kernel's trace of ``result``'s packet, sent now as a probe, compared with every simulated path: AGREE when
    one of them holds the kernel's rules in order (the kernel took that branch), else where the first path parts."""
    if any("iptables-legacy" in n for n in setup.notes):
        raise InputError("--kernel", "the node's rules are iptables-legacy's: nftrace does not trace them")
    pk = result.packet
    with _raising_on_signals(), KernelTrace(pk.src, pk.dst, pk.proto, pk.sport, pk.dport) as kt:
        kpath = kt.probe()
    verdicts = [compare(p, kpath) for p in result.paths]
    n = next((i for i, v in enumerate(verdicts) if v[0]), 0)  # the branch the kernel took, else the first path
    agree, says, steps = verdicts[n] if verdicts else (False, "kpdiag traced no path", [None] * len(kpath.rules))
    out = dict(kpath.to_dict(), agree=agree, says=says, path=n + 1 if verdicts else None)
    for rule, step in zip(out["rules"], steps):
        rule["step"] = step
    return out
