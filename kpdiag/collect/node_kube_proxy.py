"""The node collector's steps that read kube-proxy itself: its HTTP endpoints (believed only when the answering socket
is kube-proxy's), its configuration file and command line (from the process trusted as kube-proxy, kpdiag/collect/
kube_proxy.py), and its log (the newest of the container log and --log-file, else journald)."""

from __future__ import annotations

import datetime
import glob
import json
import os
import subprocess
import time

from kpdiag.bundle import sources
from kpdiag.collect import child, kube_proxy
from kpdiag.collect.node_base import SAFE_ENV, NodeCollectorBase
from kpdiag.parse.decode import load_json

HTTP_DEADLINE = 4.0  # per kube-proxy endpoint, the whole answer: connect, header and body together
HTTP_MAX_BYTES = 8 * 1024 * 1024
KP_ENDPOINTS = (
    (sources.KP_PROXY_MODE, 10249, "/proxyMode"),
    (sources.KP_METRICS, 10249, "/metrics"),
    (sources.KP_HEALTHZ, 10256, "/healthz"),
)
LOG_MAX_BYTES = 2 * 1024 * 1024
JOURNAL_TIMEOUT = 20.0
JOURNAL_UNITS = ("kube-proxy", "k3s", "k3s-agent", "k0sworker", "k0scontroller")
JOURNAL_LINES = 20000


class KubeProxySteps(NodeCollectorBase):
    """The kube-proxy steps of :class:`kpdiag.collect.node.NodeCollector`."""

    @sources.writes(sources.KP_PROXY_MODE, sources.KP_METRICS, sources.KP_HEALTHZ)
    def kube_proxy_http(self) -> None:
        """kube-proxy's /proxyMode, /metrics and /healthz — believed only when the socket that answers is kube-proxy's.

        Any local user can listen on 127.0.0.1:10249 or :10256 where kube-proxy does not (absent, or bound to
        another address). So before and after each GET the listening sockets a connection to 127.0.0.1:PORT can
        reach are read from kpdiag's own network namespace (/proc/thread-self/net/tcp and tcp6: state LISTEN, the
        port, address 127.0.0.1, 0.0.0.0, :: or ::ffff:127.0.0.1) and each one's inode is looked up among the file
        descriptors of the kube-proxy process :func:`find_kube_proxy` trusts (or of k3s when it embeds kube-proxy).
        Verified: the file is written and the manifest's ``verified`` says how. Otherwise nothing is written for that
        source and the manifest's error for it says ``unverified`` and who owns the socket: no check takes what a
        stranger said as kube-proxy's word. Each GET has one total deadline (connect, header and body together), so
        a listener that trickles a byte at a time is cut off there, not waited on per read."""
        found = self._kube_proxy_process()
        before: dict[int, tuple[bool, str]] = {}
        answers = []
        for rel, port, path in KP_ENDPOINTS:
            url = f"http://127.0.0.1:{port}{path}"
            if port not in before:
                before[port] = kube_proxy.verify_listener(port, found, self.proc)
            t = time.monotonic()
            try:
                answers.append((rel, port, url, *kube_proxy.http_get(port, path, HTTP_DEADLINE, HTTP_MAX_BYTES)))
            except kube_proxy.HttpFailure as exc:
                self._err(rel, f"GET {url}: {exc} (kube-proxy not running here, or not on hostNetwork)")
            finally:
                self._timed(rel, t)
        after = {
            port: kube_proxy.verify_listener(port, found, self.proc)
            for port in {a[1] for a in answers}
            if before[port][0]
        }
        for rel, port, url, status, body, cut in answers:
            ok, why = before[port] if not before[port][0] else after[port]
            if not ok:
                self.out.errors.append(
                    {
                        "source": rel,
                        "error": f"unverified: GET {url} was answered (HTTP {status}, {len(body)} bytes, "
                        f"{kube_proxy.excerpt(body)}), but {why}: the answer is not used",
                        "unverified": True,
                    }
                )
                continue
            self.out.verified[rel] = before[port][1]
            if cut:
                self._err(rel, f"GET {url}: the answer is larger than {HTTP_MAX_BYTES // (1024 * 1024)} MiB: cut there")
            if rel == sources.KP_HEALTHZ:
                try:
                    data = load_json(body.decode("utf-8", "replace"))  # kube-proxy's, verified; still checked
                    if not isinstance(data, dict):
                        data = {"body": data}
                except ValueError:
                    data = {"body": body.decode("utf-8", "replace")[:2000]}
                data["kpdiag_http_status"] = status
                self._put(rel, json.dumps(data, indent=1))
            elif status == 200:
                self._put(rel, body)
            else:
                self._err(rel, f"GET {url}: HTTP {status}")

    def _kube_proxy_process(self) -> kube_proxy.KubeProxyProcess:
        if self._kp is None:
            self._kp = kube_proxy.find_kube_proxy(self.proc)
        return self._kp

    @sources.writes(sources.KP_CONFIG, sources.KP_CMDLINE, sources.KP_LOG)
    def kube_proxy_files(self) -> None:
        """kube-proxy's configuration file, its command line and its log.

        Which process is kube-proxy is not taken from its name alone (any user can call a process
        "kube-proxy"): see :func:`find_kube_proxy`. Its ``--config`` is then resolved inside that process's
        own root (``/proc/PID/root``) and never out of it, regular files only, without blocking, at most
        :data:`CONFIG_MAX_BYTES`."""
        from kpdiag.bundle import safeio

        rel = sources.KP_CONFIG
        found = kube_proxy.find_kube_proxy(self.proc)
        for refused, why in found.refused:
            self._err(
                rel, f"process {refused} is called kube-proxy but is not trusted ({why}): its files were not read"
            )
        pid, cmdline = found.pid, found.cmdline
        config_path = None
        if pid is not None and self.wants(sources.KP_CMDLINE):  # its flags: part of its effective configuration
            self._put(sources.KP_CMDLINE, "".join(a.replace("\n", " ") + "\n" for a in cmdline))
        if pid is not None:
            for i, arg in enumerate(cmdline):
                if arg.startswith("--config="):
                    config_path = arg.split("=", 1)[1]
                elif arg == "--config" and i + 1 < len(cmdline):
                    config_path = cmdline[i + 1]
        if config_path and not config_path.startswith("/"):
            self._err(rel, f"kube-proxy (pid {pid}) has a relative --config {config_path!r}: not read")
        elif config_path:
            try:
                self._put(
                    rel,
                    safeio.read_file(
                        os.path.join(self.proc, str(pid), "root"),
                        config_path,
                        kube_proxy.CONFIG_MAX_BYTES,
                        safeio.IN_ROOT,
                    ),
                )
            except OSError as exc:
                self._err(
                    rel, f"cannot read {config_path} of kube-proxy (pid {pid}) inside its root: {safeio.describe(exc)}"
                )
        elif pid is None and found.embedded:
            self._err(rel, f"kube-proxy runs inside {found.embedded}: it has no configuration file of its own")
        elif pid is None:
            self._err(rel, "no kube-proxy process visible (run with hostPID, e.g. kubectl debug node/…)")
        self._kube_proxy_log(safeio)

    def _kube_proxy_log(self, safeio) -> None:
        """The newest kube-proxy log of every place it can be — the pod logs and /var/log/kube-proxy.log (--log-file),
        by when each was last written: a file left from 2019 does not win over today's container log. Regular files
        under the log folder only, no symlink on the way, the last LOG_MAX_BYTES; when the chosen file was last
        written goes in the manifest (``written``), so that a finding citing it can say how old it is."""
        pods = os.path.join(self.host_root, "var/log/pods")
        found = [
            (pods, os.path.relpath(p, pods))
            for p in glob.glob(os.path.join(pods, "kube-system_kube-proxy-*/kube-proxy/*.log"))
        ]
        plain = os.path.join(self.host_root, "var/log")
        if os.path.lexists(os.path.join(plain, "kube-proxy.log")):
            found.append((plain, "kube-proxy.log"))
        if not found:
            self._err(sources.KP_LOG, f"no kube-proxy log under {pods}")
            return
        found.sort(key=lambda item: kube_proxy.mtime(os.path.join(*item)))  # stable: on a tie the pod log, as before
        base, rel = found[-1]
        path = os.path.join(base, rel)
        when = kube_proxy.mtime(path)
        if when:
            self.out.written[sources.KP_LOG] = {
                "path": "/" + os.path.relpath(path, self.host_root) if self.host_root != "/" else path,
                "at": datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        try:
            fd = safeio.open_regular(base, rel, safeio.BENEATH)
            try:
                size = os.fstat(fd).st_size
                os.lseek(fd, max(0, size - LOG_MAX_BYTES), os.SEEK_SET)
                data = safeio.read_capped(fd, LOG_MAX_BYTES, path)
            finally:
                os.close(fd)
            self._put(sources.KP_LOG, data)
        except safeio.TooLarge:  # grew while read: what was there is enough
            self._err(sources.KP_LOG, f"{path} grew while it was read: not read")
        except OSError as exc:
            self._err(sources.KP_LOG, f"cannot read {path}: {safeio.describe(exc)}")

    @sources.writes(sources.KP_LOG)
    def kube_proxy_journal(self) -> None:
        """kube-proxy's log from journald when no log file was found: kube-proxy, k3s and k0s units (k3s and k0s run
        kube-proxy inside themselves), a bounded tail, with a timeout."""
        if sources.KP_LOG in self.out.files:
            return
        journal = os.path.join(self.host_root, "var/log/journal")
        if not os.path.isdir(journal):
            return
        args = ["-D", journal, "--no-pager", "-o", "short-iso", "-n", str(JOURNAL_LINES)]
        for unit in JOURNAL_UNITS:
            args += ["-u", unit]
        argv = self._binary("journalctl")
        if argv is None:
            return
        t = time.monotonic()
        try:
            proc = child.run(argv + args, timeout=JOURNAL_TIMEOUT, env=SAFE_ENV)
        except subprocess.TimeoutExpired:
            self._err(sources.KP_LOG, f"journalctl -D {journal} timed out after {JOURNAL_TIMEOUT:.0f} s")
            return
        except OSError as exc:
            self._err(sources.KP_LOG, f"cannot run journalctl: {exc.strerror or exc}")
            return
        finally:
            self._timed(f"{sources.KP_LOG} (journald)", t)
        data = kube_proxy.kube_proxy_lines(proc.stdout)[-LOG_MAX_BYTES:]
        if proc.returncode != 0 or not data.strip() or data.startswith(b"-- No entries --"):
            return
        self._put(sources.KP_LOG, data)
        # the file search's "no kube-proxy log" is answered: say where it came from instead
        self.out.errors = [e for e in self.out.errors if e.get("source") != sources.KP_LOG]
        self._err(sources.KP_LOG, f"no log file; read from journald ({journal}, units {', '.join(JOURNAL_UNITS)})")
