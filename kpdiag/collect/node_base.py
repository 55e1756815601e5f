"""The node collector's plumbing: what it collected (files, errors, timings: :class:`Collected`) and the helpers every
collection step uses — running a host binary (the host's own through chroot when a host root is mounted, within a time
bound, kpdiag/collect/child.py), reading a file, recording a source's failure, whether a kernel module is in."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from kpdiag import __version__
from kpdiag.bundle import sources
from kpdiag.bundle.store import FORMAT
from kpdiag.collect import child, kube_proxy

SAFE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
CMD_TIMEOUT = 60.0


@dataclass
class Collected:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)  # source → how its answer was verified (kube-proxy's socket)
    # source → {"path": the file it was read from, "at": when that file was last written}: a log's age
    written: dict[str, dict] = field(default_factory=dict)

    def manifest(self, node: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"verified": dict(self.verified)} if self.verified else {}
        extra |= {"written": dict(self.written)} if self.written else {}
        return extra | {
            "format": FORMAT,
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "node": node,
            "kpdiag_version": __version__,
            "errors": self.errors,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


class NodeCollectorBase:
    def __init__(self, host_root: str | None = None, progress=None, proc: str = "/proc", only=None):
        """``only``: collect just these sources (and what they depend on: the modules for a command that needs one,
        the addresses for a per-interface command); the others are neither run nor kept. None: every node source."""
        self.only = None if only is None else frozenset(str(s) for s in only)
        if host_root is None:
            host_root = "/host" if os.path.isdir("/host/proc") or os.path.isdir("/host/usr/sbin") else "/"
        self.host_root = host_root
        self.proc = proc
        self.progress = progress or (lambda msg: None)
        self.out = Collected()
        self._kp: kube_proxy.KubeProxyProcess | None = None  # find_kube_proxy, once per collection
        self.partial: dict = {}  # a focused collection's manifest "partial" (kpdiag/collect/service_rules.py)

    # ------------------------------------------------------------------ helpers
    def _err(self, source: str, error: str) -> None:
        self.out.errors.append({"source": source, "error": error})

    def wants(self, source) -> bool:
        """Is ``source`` collected (every source, unless ``only`` names some)?"""
        return self.only is None or str(source) in self.only

    def _put(self, rel: str, data: str | bytes) -> None:
        self.out.files[rel] = data.encode() if isinstance(data, str) else data

    def _binary(self, name: str) -> list[str] | None:
        """argv prefix for a host binary: the host's own through chroot when a host root is mounted."""
        if self.host_root not in ("/", ""):
            for d in ("usr/sbin", "sbin", "usr/bin", "bin"):
                if os.access(os.path.join(self.host_root, d, name), os.X_OK):
                    if shutil.which("chroot"):
                        return ["chroot", self.host_root, f"/{d}/{name}"]
        path = shutil.which(name, path=SAFE_ENV["PATH"])
        return [path] if path else None

    def _run(
        self,
        rel: str,
        name: str,
        args: list[str],
        timeout: float = CMD_TIMEOUT,
        max_lines: int | None = None,
        report_as: str | None = None,
    ) -> bytes | None:
        """Run ``name args``, its output written as ``rel``; what fails is said as a problem of ``report_as`` (the
        bundle file it was for, when ``rel`` is only a step of it), else of ``rel``."""
        said = report_as or rel
        argv = self._binary(name)
        if argv is None:
            self._err(said, f"{name} not found (install it, or mount the host root at /host)")
            return None
        t = time.monotonic()
        try:
            proc = child.run(argv + args, timeout=timeout, env=SAFE_ENV)
        except subprocess.TimeoutExpired:
            self._err(said, f"{name} timed out after {timeout:.0f} s")
            return None
        except OSError as exc:
            self._err(said, f"cannot run {name}: {exc.strerror or exc}")
            return None
        finally:
            self._timed(said, t)
        if proc.returncode != 0:
            msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            self._err(
                said, f"{' '.join([name, *args])} exited {proc.returncode}: {msg[-1][:300] if msg else 'no message'}"
            )
            return None
        data = proc.stdout  # kept as bytes: on a big node this is hundreds of MB, copy it no more than needed
        if max_lines is not None:
            lines = data.splitlines()
            if len(lines) > max_lines:
                data = b"\n".join(lines[-max_lines:]) + b"\n"
        self._put(rel, data)
        return data

    def _timed(self, what: str, start: float) -> None:
        took = time.monotonic() - start
        self.out.timings[what] = took
        if took > 1.0:
            self.progress(f"collected {what} in {took:.1f} s")

    def _read(self, path: str, limit: int = 16 * 1024 * 1024) -> str | None:
        try:
            with open(path, "rb") as fh:
                return fh.read(limit).decode("utf-8", "replace")
        except OSError:
            return None

    def _loaded(self, module: str) -> bool:
        """Is ``module`` in the kernel: loaded, built in, or the kernel loads no modules at all (no /proc/modules:
        whatever netfilter has is built in, and running a tool cannot load anything)."""
        text = self.out.files.get(sources.MODULES, b"").decode()
        if any(line.split(" ", 1)[0] == module for line in text.splitlines()):
            return True
        builtin = self.out.files.get(sources.MODULES_BUILTIN, b"").decode()
        if any(os.path.basename(line.strip()).split(".ko", 1)[0] == module for line in builtin.splitlines()):
            return True
        return sources.MODULES not in self.out.files and not os.path.lexists(os.path.join(self.proc, "modules"))

    # ------------------------------------------------------------------ sources
