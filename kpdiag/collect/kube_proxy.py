"""Which process is kube-proxy and whether what answers on its ports is kube-proxy: the process trusted by its uid,
executable, argv and network namespace (not by a name any user can take), its HTTP endpoints read within one total
deadline, the listening sockets a connection to 127.0.0.1 can reach and their owners, and kube-proxy's lines of a
k3s/k0s journal."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

# k3s and k0s log every component they embed: only kube-proxy's lines are kube-proxy's log (KP704 reads it)
_PROXY_MARKERS = (
    b"proxier.go",
    b"kube-proxy",
    b"server_linux.go",
    b"server_others.go",
    b"conntrack.go",
    b"service config",
    b"endpoint slice config",
    b"node config",
    b"proxy mode",
    b"Proxier",
    b"proxier",
)


def kube_proxy_lines(journal: bytes) -> bytes:
    """journalctl lines of kube-proxy's own unit, and kube-proxy's lines of the k3s/k0s units."""
    keep = []
    for line in journal.splitlines(keepends=True):
        head = line.split(b": ", 1)[0]
        if b" kube-proxy[" in head or any(m in line for m in _PROXY_MARKERS):
            keep.append(line)
    return b"".join(keep)


def mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


CONFIG_MAX_BYTES = 4 * 1024 * 1024  # kube-proxy's --config file (a KubeProxyConfiguration is a few KB)
KUBE_PROXY_EXES = ("kube-proxy",)  # the executable's file name (kubeadm, kOps, k0s, EKS, GKE, AKS images)
# run kube-proxy in their own process, from their flags: their names (comm) → the executable each must be
EMBEDDING_EXES = ("k3s", "k3s-server", "k3s-agent", "kubelite")  # kubelite: MicroK8s' one process for all components
_EMBEDDING_EXE = {"k3s": "k3s", "k3s-server": "k3s", "k3s-agent": "k3s", "kubelite": "kubelite"}


@dataclass
class KubeProxyProcess:
    pid: int | None = None
    cmdline: list[str] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (pid, why): called kube-proxy, not trusted
    embedded: str | None = None  # "k3s (pid N)" when kube-proxy runs inside another binary
    embedded_pid: int | None = None


def _status_uids(proc: str, pid: str) -> list[int]:
    with open(os.path.join(proc, pid, "status"), encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("Uid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def _exe_name(proc: str, pid: str) -> str:
    target = os.readlink(os.path.join(proc, pid, "exe"))
    if target.endswith(" (deleted)"):  # the binary was replaced on disk after the process started
        target = target[: -len(" (deleted)")]
    return os.path.basename(target)


def _trust(proc: str, pid: str, argv: list[str]) -> str | None:
    """Why PID is not to be trusted as kube-proxy (None: trusted).

    Its name (comm) is what any process sets for itself with prctl(PR_SET_NAME); what an unprivileged
    process cannot fake is running as root in kpdiag's user namespace, and the executable it runs:
    kube-proxy runs as root (uid 0 real, effective, saved and filesystem), from a file named kube-proxy,
    started as kube-proxy (argv[0]), in the network namespace whose rules kpdiag collects."""
    try:
        uids = _status_uids(proc, pid)
    except OSError as exc:
        return f"its status is unreadable: {exc.strerror or exc}"
    if not uids or any(u != 0 for u in uids):
        return f"it runs as uid {'/'.join(map(str, uids)) or 'unknown'}, not root"
    try:  # kube-proxy programs the network namespace it runs in: the one kpdiag collects (hostNetwork)
        theirs, ours = os.stat(os.path.join(proc, pid, "ns", "net")), os.stat("/proc/self/ns/net")
        if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
            return "it runs in another network namespace than the one collected here (kube-proxy uses the host's)"
    except OSError:
        pass  # namespaces not visible: the other checks decide
    try:
        exe = _exe_name(proc, pid)
    except OSError as exc:
        return f"its executable cannot be checked: {exc.strerror or exc}"
    if exe not in KUBE_PROXY_EXES:
        return f"its executable is {exe!r}, not kube-proxy"
    if not argv or os.path.basename(argv[0]) not in KUBE_PROXY_EXES:
        return f"it was started as {argv[0][:80]!r}, not kube-proxy" if argv else "it has no command line"
    return None


def find_kube_proxy(proc: str = "/proc") -> KubeProxyProcess:
    """The kube-proxy process this node runs, checked (see :func:`_trust`); spoofs are listed, not used."""
    out = KubeProxyProcess()
    try:
        entries = sorted((e for e in os.listdir(proc) if e.isdigit()), key=int)
    except OSError:
        return out
    for entry in entries:
        try:
            with open(os.path.join(proc, entry, "comm"), encoding="utf-8", errors="replace") as fh:
                comm = fh.read().strip()
            if comm in EMBEDDING_EXES and out.embedded is None:
                if not _trust_embedding(proc, entry, comm):
                    continue
                out.embedded, out.embedded_pid = f"{comm} (pid {entry})", int(entry)
                continue
            if comm not in KUBE_PROXY_EXES:
                continue
            with open(os.path.join(proc, entry, "cmdline"), "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read(1 << 20).split(b"\0") if a]
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        why = _trust(proc, entry, argv)
        if why is not None:
            out.refused.append((int(entry), why))
        elif out.pid is None:
            out.pid, out.cmdline = int(entry), argv
    return out


def _trust_embedding(proc: str, pid: str, comm: str = "k3s") -> bool:
    try:
        return all(u == 0 for u in _status_uids(proc, pid) or [1]) and _exe_name(proc, pid) == _EMBEDDING_EXE[comm]
    except OSError:
        return False


# ------------------------------------------------------------------ kube-proxy's HTTP endpoints, verified


class HttpFailure(Exception):
    """A GET that gave no usable answer: refused, timed out (the total deadline), not HTTP."""


def http_get(port: int, path: str, deadline: float, max_bytes: int, host: str = "127.0.0.1") -> tuple[int, bytes, bool]:
    """(status, body, cut) of ``GET path`` on host:port within ``deadline`` seconds in all — connect, request, header
    and body. A per-read timeout would let a listener that sends one byte every second hold kpdiag for ever; here
    each read waits at most what is left of the one deadline. HTTP/1.0, so the answer ends when the peer closes
    (chunked answers are decoded all the same); at most ``max_bytes`` of body are kept (``cut`` says so)."""
    end = time.monotonic() + deadline

    def left() -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise socket.timeout()
        return remaining

    buf = bytearray()
    cut = False
    try:
        with socket.create_connection((host, port), timeout=left()) as sock:
            sock.settimeout(left())
            sock.sendall(
                f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: kpdiag\r\nAccept-Encoding: identity\r\n\r\n".encode()
            )
            while True:
                sock.settimeout(left())
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > max_bytes + 65536:  # header and body: enough; the rest is not read
                    cut = True
                    break
    except socket.timeout:
        raise HttpFailure(
            f"no complete answer within {deadline:g} s ({len(buf)} bytes received): a total deadline, not per read"
        ) from None
    except ConnectionRefusedError:
        raise HttpFailure("connection refused") from None
    except OSError as exc:
        raise HttpFailure(exc.strerror or str(exc)) from None
    head, sep, body = bytes(buf).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2) if sep else []
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise HttpFailure(f"not an HTTP answer ({excerpt(bytes(buf))})")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _dechunk(body)
    length = headers.get(b"content-length", b"")
    if length.isdigit():
        body = body[: int(length)]
    if len(body) > max_bytes:
        body, cut = body[:max_bytes], True
    if cut and b"\n" in body:
        body = body[: body.rindex(b"\n") + 1]  # no half line
    return int(parts[1]), body, cut


def _dechunk(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    while pos < len(data):
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            break
        size = data[pos:eol].split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            break
        if n == 0:
            break
        out += data[eol + 2 : eol + 2 + n]
        pos = eol + 2 + n + 2
    return bytes(out)


def excerpt(body: bytes, n: int = 60) -> str:
    text = body[:n].decode("utf-8", "replace")
    return repr(text) + ("…" if len(body) > n else "")


# a connection to 127.0.0.1:PORT can be accepted by a socket listening on one of these
_LOOPBACK_REACHABLE = {"127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"}
NET_TABLE_MAX_BYTES = 256 * 1024 * 1024  # /proc/net/tcp of a node with a million sockets is ~150 MB


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    inode: int
    uid: int

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


def _hex_addr(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, words)


def loopback_listeners(port: int, net: str | None = None) -> list[Listener]:
    """The TCP sockets listening on ``port`` in kpdiag's own network namespace (the one its GET goes through) that
    a connection to 127.0.0.1:port can reach: from the kernel's socket diagnostics (NETLINK_SOCK_DIAG, listening
    sockets only — a few ms whatever the number of connections), else from /proc/thread-self/net/tcp{,6}, bounded."""
    if net is None:
        try:
            return _diag_listeners(port)
        except Exception:  # no pyroute2, or sock_diag refused: the /proc tables say the same, more slowly
            pass
    return _proc_listeners(port, net)


def _diag_listeners(port: int) -> list[Listener]:
    from pyroute2 import DiagSocket

    out = []
    with DiagSocket() as ds:
        ds.bind()
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ds.get_sock_stats(family=family, states=1 << 10):  # TCP_LISTEN
                if msg.get("idiag_sport") != port:
                    continue
                addr = socket.inet_ntop(family, socket.inet_pton(family, str(msg.get("idiag_src"))))
                if addr in _LOOPBACK_REACHABLE:
                    out.append(Listener(addr, port, int(msg.get("idiag_inode")), int(msg.get("idiag_uid"))))
    return out


def _proc_listeners(port: int, net: str | None) -> list[Listener]:
    if net is None:
        net = "/proc/thread-self/net" if os.path.isdir("/proc/thread-self/net") else "/proc/self/net"
    marker = f":{port:04X} "
    out = []
    for name in ("tcp", "tcp6"):
        try:
            fh = open(os.path.join(net, name), "rb")
        except OSError:
            continue
        with fh:
            read = 0
            for raw in fh:
                read += len(raw)
                if read > NET_TABLE_MAX_BYTES:
                    break
                line = raw.decode("ascii", "replace")
                if marker not in line:
                    continue
                f = line.split()
                if len(f) < 10 or f[3] != "0A":  # 0A: TCP_LISTEN
                    continue
                addr_hex, _, port_hex = f[1].partition(":")
                try:
                    if int(port_hex, 16) != port:
                        continue
                    addr = _hex_addr(addr_hex)
                    listener = Listener(addr, port, int(f[9]), int(f[7]))
                except ValueError:
                    continue
                if addr in _LOOPBACK_REACHABLE:
                    out.append(listener)
    return out


def socket_inodes(proc: str, pid: int) -> set[int]:
    """The inodes of the sockets among PID's open files (``socket:[N]`` links in /proc/PID/fd)."""
    inodes = set()
    fd_dir = os.path.join(proc, str(pid), "fd")
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:[") and link.endswith("]"):
            inodes.add(int(link[8:-1]))
    return inodes


OWNER_SCAN_SECONDS = 1.0


def socket_owner(proc: str, inode: int, budget: float = OWNER_SCAN_SECONDS) -> str | None:
    """``pid N (comm)`` of a process holding socket ``inode``, looked for among every visible process for at most
    ``budget`` seconds (only to name who answered instead of kube-proxy); None when not found."""
    target = f"socket:[{inode}]"
    end = time.monotonic() + budget
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        if time.monotonic() > end:
            return None
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) != target:
                    continue
            except OSError:
                continue
            try:
                with open(os.path.join(proc, entry, "comm"), encoding="utf-8", errors="replace") as fh:
                    comm = fh.read(64).strip()
            except OSError:
                comm = "?"
            return f"pid {entry} ({comm})"
    return None


def verify_listener(
    port: int, found: "KubeProxyProcess", proc: str = "/proc", net: str | None = None
) -> tuple[bool, str]:
    """(verified, how or why not): does every socket that can answer 127.0.0.1:``port`` here belong to the kube-proxy
    process ``found`` (or to the k3s process that embeds kube-proxy)? Socket inodes are unique across network
    namespaces, so an inode among kube-proxy's file descriptors is kube-proxy's socket, whatever namespace it is in."""
    cands = loopback_listeners(port, net)
    if not cands:
        return (
            False,
            f"no socket listening on port {port} that 127.0.0.1 reaches was found in kpdiag's network namespace",
        )
    owners = [(pid, what) for pid, what in ((found.pid, "kube-proxy"), (found.embedded_pid, found.embedded)) if pid]
    if not owners:
        first = cands[0]
        who = socket_owner(proc, first.inode) or f"a process not visible from here (socket uid {first.uid})"
        refused = "; ".join(f"pid {p}: {why}" for p, why in found.refused[:2])
        return False, (
            f"the socket listening on {first} belongs to {who}, and no trusted kube-proxy process is visible"
            + (f" (refused: {refused})" if refused else " (run with hostPID to see it)")
        )
    mine: set[int] = set()
    for pid, _ in owners:
        try:
            mine |= socket_inodes(proc, pid)
        except OSError as exc:
            return False, (
                f"kube-proxy's open files (/proc/{pid}/fd) cannot be read ({exc.strerror or exc}; needs CAP_SYS_PTRACE): "
                "the socket's owner cannot be checked"
            )
    foreign = [c for c in cands if c.inode not in mine]
    label = " ".join(f"{what} (pid {pid})" if what == "kube-proxy" else str(what) for pid, what in owners)
    if foreign:
        f = foreign[0]
        who = socket_owner(proc, f.inode) or f"a process other than {label} (socket uid {f.uid})"
        return False, f"the socket listening on {f} belongs to {who}, not to {label}"
    return True, f"the socket listening on {', '.join(map(str, cands))} belongs to {label}"
