"""Collect a live node into the bundle layout (docs/architecture.md §3), read-only.

Every source is optional: a missing binary, a permission problem, a timeout becomes an entry in
the manifest's ``errors`` and the collection goes on. Nothing here changes the host: commands
that could load kernel modules as a side effect (ipvsadm, ipset, iptables-legacy-save,
conntrack) are only run when their module is already loaded.
"""

from __future__ import annotations

import datetime
import functools
import glob
import json
import re
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

from .. import __version__
from kpdiag.bundle.store import FORMAT
from kpdiag.parse.decode import load_json
from kpdiag.bundle import sources
from kpdiag.collect import child

SAFE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
CMD_TIMEOUT = 60.0
DUMP_TIMEOUT = 600.0  # iptables-save / nft list of a 10,000-Service node take minutes on the nf_tables backend
HTTP_DEADLINE = 4.0  # per kube-proxy endpoint, the whole answer: connect, header and body together
HTTP_MAX_BYTES = 8 * 1024 * 1024
KP_ENDPOINTS = (
    (sources.KP_PROXY_MODE, 10249, "/proxyMode"),
    (sources.KP_METRICS, 10249, "/metrics"),
    (sources.KP_HEALTHZ, 10256, "/healthz"),
)
LOG_MAX_BYTES = 2 * 1024 * 1024
CONNTRACK_MAX_LINES = 5000
CONNTRACK_MAX_ENTRIES = 100_000  # conntrack -L: UDP first, then TCP, until either bound is reached
CONNTRACK_MAX_BYTES = 50 * 1024 * 1024
XT_RECENT_MAX_TABLES = 20000  # kube-proxy's: one per endpoint of a ClientIP-affinity Service
XT_RECENT_MAX_BYTES = 16 * 1024 * 1024
CONNTRACK_TIMEOUT = 30.0
JOURNAL_TIMEOUT = 20.0
JOURNAL_UNITS = ("kube-proxy", "k3s", "k3s-agent", "k0sworker", "k0scontroller")
JOURNAL_LINES = 20000
# processes whose presence says who implements Services (node/processes.txt: pid and name only, plus pid 1)
PROCESS_NAMES = (
    "kube-proxy",
    "k3s",
    "k3s-server",
    "k3s-agent",
    "k0s",
    "kubelite",
    "cilium-agent",
    "kube-router",
    "calico-node",
    "kubelet",
    "node-cache",  # NodeLocal DNSCache: its rules without it break every lookup (KP140)
    "flanneld",
)
BPF_MAX_ENTRIES = 2000
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


@dataclass(frozen=True)
class HostPath:
    """A path under the host root (``--host-root``) the collector reads, what it gives, and whether kpdiag's node pod
    mounts it (kpdiag/fleet/pods.py derives its read-only hostPath mounts from this list: never the host's /)."""

    path: str  # relative to the host root
    gives: str
    pod: bool = True  # mounted read-only into the node pod at /host/PATH
    not_mounted: str = ""  # why not, and what the pod does instead


HOST_PATHS = (
    HostPath("var/log/pods", "kube-proxy's container log (kube-system_kube-proxy-*/kube-proxy/*.log), the last 2 MB"),
    HostPath(
        "lib/modules", "modules.builtin of the running kernel: built-in ip_vs or nf_conntrack are not in /proc/modules"
    ),
    HostPath("sys/fs/bpf", "the names of pinned BPF objects (Cilium's, Calico eBPF's): who implements Services"),
    HostPath(
        "sys/class/dmi/id/sys_vendor",
        "the machine's maker (Amazon EC2, Microsoft Corporation): the cloud a node without a providerID runs on",
        pod=False,
        not_mounted="the per-node pod reads its Node's providerID from the API instead (kpdiag node with the API)",
    ),
    HostPath(
        "var/log/kube-proxy.log",
        "kube-proxy's log where it writes a file of its own (--log-file)",
        pod=False,
        not_mounted="a file that may not exist: a hostPath of type File stops the pod where it is absent, an untyped "
        "one makes the container runtime create it on the host; the pod reads the container log only",
    ),
    HostPath(
        "var/log/journal",
        "kube-proxy's, k3s' or k0s' journald log (journalctl -D)",
        pod=False,
        not_mounted="the image carries no journalctl",
    ),
    *(
        HostPath(
            d,
            "the host's own iptables, nft, ipvsadm, ipset, conntrack, run as chroot HOST TOOL (their versions match the rules)",
            pod=False,
            not_mounted="the whole host root would be needed to chroot into (with /etc/kubernetes/pki and the kubelet's "
            "credentials): the pod runs the image's own tools",
        )
        for d in ("usr/sbin", "sbin", "usr/bin", "bin")
    ),
)

SYSCTL_DIRS = (
    "net/ipv4",
    "net/ipv6/conf/all",
    "net/ipv6/conf/default",
    "net/ipv6/neigh/default",
    "net/bridge",
    "net/netfilter",
    "net/core",
)
SYSCTL_SKIP = ("net/ipv4/route/flush", "net/ipv4/neigh", "net/ipv6/neigh")
# of the neighbour tables' settings, only the defaults (gc_thresh1/2/3 live there): one folder per interface is not read
SYSCTL_KEEP = ("net/ipv4/neigh/default", "net/ipv6/neigh/default")


@dataclass
class Collected:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)  # source → how its answer was verified (kube-proxy's socket)
    # source → {"path": the file it was read from, "at": when that file was last written}: a log's age
    written: dict[str, dict] = field(default_factory=dict)

    def manifest(self, node: str) -> dict:
        extra = {"verified": dict(self.verified)} if self.verified else {}
        extra |= {"written": dict(self.written)} if self.written else {}
        return extra | {
            "format": FORMAT,
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "node": node,
            "kpdiag_version": __version__,
            "errors": self.errors,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


class NodeCollector:
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
        self._kp: KubeProxyProcess | None = None  # find_kube_proxy, once per collection
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
    def steps(self) -> list[tuple[str, object]]:
        """(name, callable) of each collection step, in the catalogue's order (kpdiag/bundle/sources.py): a source's
        recipe is interpreted here (:meth:`_recipe`), a collector method runs once for all the sources it writes.
        With ``only``, the steps that write those sources, after the ones they depend on."""
        wanted = None
        if self.only is not None:
            wanted = set(self.only)
            for src in sources.node_sources():
                if src in self.only and isinstance(src.collect, sources.Command) and src.collect.loaded:
                    wanted |= {sources.MODULES, sources.MODULES_BUILTIN}  # which modules are in the kernel
                if src in self.only and isinstance(src.collect, sources.PerInterface):
                    wanted.add(sources.IP_ADDR)  # the devices it runs for
        out, seen = [], set()
        for src in sources.node_sources():
            if wanted is not None and src not in wanted:
                continue
            recipe = src.collect
            if isinstance(recipe, sources.Method):  # the methods that declare it (@sources.writes)
                for step in recipe.steps:
                    if step.__name__ not in seen:
                        seen.add(step.__name__)
                        out.append((step.__name__, functools.partial(step, self)))
            elif recipe is not None:
                out.append((src.path, lambda src=src: self._recipe(src)))
        return out

    RULE_STEPS = ("iptables", "nft", "ipvs", "ipset")  # the steps that read the rules

    def ipset(self) -> None:
        """The ipset step on its own (its recipe: ``ipset save`` when ip_set is in the kernel)."""
        self._recipe(sources.IPSET)

    def collect(self, rules=None) -> Collected:
        """Every source; ``rules(self)``, when given, reads the rules instead of RULE_STEPS (kpdiag/collect/service_rules.py:
        one Service's rules; it sets ``self.partial``, the manifest's ``partial``)."""
        steps = self.steps()
        if rules is not None:
            skip = set(self.RULE_STEPS) | {sources.IPSET.path}
            steps = [(name, self.links_ip if name == "links" else step) for name, step in steps if name not in skip]
            steps.append(("rules", lambda: rules(self)))
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # a collector bug must not stop the others
                self._err(name, f"internal error: {exc.__class__.__name__}: {exc}")
        if self.only is not None:  # what was collected only to decide something else is not kept
            self.out.files = {k: v for k, v in self.out.files.items() if k in self.only}
            self.out.errors = [
                e for e in self.out.errors if e["source"] in self.only or sources.declared(e["source"]) is None
            ]
        return self.out

    # ------------------------------------------------------------------ the declared recipes (sources.py)
    def _recipe(self, src: "sources.Source") -> None:
        recipe = src.collect
        if isinstance(recipe, sources.Command):
            if recipe.loaded and not any(
                os.path.exists(os.path.join(self.proc, m[5:])) if m.startswith("proc:") else self._loaded(m)
                for m in recipe.loaded
            ):
                self._err(src, recipe.absent or f"{recipe.loaded[0]} is not loaded: {recipe.name} not run")
                return
            self._run(src, recipe.name, list(recipe.args), timeout=recipe.timeout or CMD_TIMEOUT)
        elif isinstance(recipe, sources.PerInterface):
            self._per_interface(src, recipe)
        elif isinstance(recipe, sources.HostFile):
            path = os.path.join(self.host_root, recipe.path.format(release=os.uname().release))
            text = self._read(path, recipe.limit)
            if text:
                self._put(src, text)
            elif recipe.missing:
                self._err(src, f"{path}: {recipe.missing}")
        else:
            raise TypeError(f"{src}: no recipe the node collector knows ({recipe!r})")

    def _per_interface(self, src: "sources.Source", recipe: "sources.PerInterface") -> None:
        """``recipe.name ARGS DEV`` for the node's devices of the declared link kinds (names checked, at most
        ``recipe.limit``), concatenated."""
        raw = self.out.files.get(sources.IP_ADDR)
        try:
            links = json.loads(raw) if raw else []
        except ValueError:
            return
        devs = [
            link.get("ifname")
            for link in links
            if isinstance(link, dict)
            and (link.get("linkinfo") or {}).get("info_kind") in recipe.kinds
            and isinstance(link.get("ifname"), str)
            and _IFNAME.match(link["ifname"])
        ][: recipe.limit]
        blocks = []
        for dev in devs:
            data = self._run(src, recipe.name, [*recipe.args, dev], timeout=recipe.timeout or CMD_TIMEOUT)
            if data is not None:
                blocks.append(data if data.endswith(b"\n") else data + b"\n")
        self.out.files.pop(src, None)  # _run kept the last device's output alone
        if blocks:
            self._put(src, b"".join(blocks))

    @sources.writes(sources.UNAME, sources.MODULES, sources.MODULES_AVAILABLE)
    def kernel(self) -> None:
        self._put(sources.UNAME, os.uname().release + "\n")
        path = os.path.join(self.proc, "modules")
        text = self._read(path)
        if text is None:
            why = (
                "does not exist (a kernel without loadable module support?)"
                if not os.path.exists(path)
                else "is not readable"
            )
            self._err(sources.MODULES, f"{path} {why}")
        else:
            self._put(sources.MODULES, text)
        dep = self._read(os.path.join(self.host_root, "lib/modules", os.uname().release, "modules.dep"))
        if dep:  # the network modules the kernel could load: tells "not loaded" from "cannot be loaded here"
            names = [
                line.split(":", 1)[0]
                for line in dep.splitlines()
                if line.startswith(("kernel/net/", "kernel/drivers/net/"))
            ]
            self._put(sources.MODULES_AVAILABLE, "\n".join(names) + "\n")

    @sources.writes(sources.SYSCTL)
    def sysctls(self) -> None:
        t = time.monotonic()
        base = os.path.join(self.proc, "sys")
        lines, denied = [], 0
        for d in SYSCTL_DIRS:
            root = os.path.join(base, d)
            for dirpath, dirnames, filenames in os.walk(root):
                rel_dir = os.path.relpath(dirpath, base)
                if rel_dir.startswith(SYSCTL_SKIP) and not rel_dir.startswith(SYSCTL_KEEP):
                    dirnames[:] = [n for n in dirnames if os.path.join(rel_dir, n) in SYSCTL_KEEP]
                    continue
                for name in sorted(filenames):
                    rel = os.path.join(rel_dir, name)
                    if rel.startswith(SYSCTL_SKIP) and not rel.startswith(SYSCTL_KEEP):
                        continue
                    try:
                        with open(os.path.join(dirpath, name)) as fh:
                            value = fh.read(4096).strip().replace("\n", " ").replace("\t", " ")
                    except OSError:
                        denied += 1
                        continue
                    # as sysctl -a names it: a dot inside a folder name (interface flannel.1) becomes "/"
                    key = ".".join(part.replace(".", "/") for part in rel.split("/"))
                    lines.append(f"{key} = {value}")
        if not lines:
            self._err(sources.SYSCTL, f"no sysctl readable under {base}/net")
        else:
            self._put(sources.SYSCTL, "\n".join(sorted(lines)) + "\n")
        self._timed(sources.SYSCTL, t)

    @sources.writes(sources.NEIGH)
    def neighbours(self) -> None:
        """node/neigh.json: the neighbour tables counted (kpdiag/collect/neigh.py)."""
        from . import neigh

        t = time.monotonic()
        doc, errors = neigh.neighbours(self.proc)
        for error in errors:
            self._err(sources.NEIGH, error)
        if len(doc) > 1:
            self._put(sources.NEIGH, json.dumps(doc, indent=1))
        self._timed(sources.NEIGH, t)

    @sources.writes(sources.KERNEL_LOG)
    def kernel_log(self) -> None:
        """node/kernel-log.txt: the kernel log's lines about the network (/dev/kmsg, else dmesg), bounded."""
        from . import neigh

        lines = neigh._kmsg_lines(os.path.join(os.path.dirname(self.proc.rstrip("/")) or "/", "dev/kmsg"))
        how = "/dev/kmsg"
        if lines is None:
            data = self._run(sources.KERNEL_LOG, "dmesg", [], max_lines=neigh.MAX_LOG_RECORDS)
            if data is None:
                return
            lines, how = data.decode("utf-8", "replace").splitlines(), "dmesg"
        kept = neigh.network_lines(lines)
        head = f"# the kernel log ({how}): {len(lines)} lines read, {kept.count(chr(10))} about the network kept\n"
        self._put(sources.KERNEL_LOG, head + kept)

    @sources.writes(sources.IP_ADDR, sources.IP_ROUTE)
    def links(self) -> None:
        t = time.monotonic()
        try:
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                addrs, routes = _pyroute2_dump(ipr)
            self._put(sources.IP_ADDR, json.dumps(addrs, indent=1))
            self._put(sources.IP_ROUTE, json.dumps(routes, indent=1))
        except Exception as exc:  # pyroute2 missing or netlink refused: fall back to ip -j
            self._err(sources.IP_ADDR, f"pyroute2 failed ({exc.__class__.__name__}: {exc}); used 'ip -j' instead")
            self._links_ip()
        self._timed(f"{sources.IP_ADDR}+ip-route.json", t)

    def links_ip(self) -> None:
        """The links step of a focused run (``collect(rules=…)``): ``ip -j``, whose dump is decoded in C — pyroute2
        decodes each address and route in Python, 7.8 s for kube-ipvs0's 10,000 addresses and their local routes
        where ``ip -j`` takes 0.2 s (measured: benchmarks/bench_ipvs_focused.py, README) — then, in IPVS mode, the
        reader keeps only the Service's addresses of kube-ipvs0 (kpdiag/collect/ipvs_rules.py). pyroute2 when there
        is no ``ip``."""
        if self._binary("ip") is None:
            self.links()
            return
        t = time.monotonic()
        self._links_ip()
        self._timed(f"{sources.IP_ADDR}+ip-route.json (ip -j)", t)

    def _links_ip(self) -> None:
        self._run(sources.IP_ADDR, "ip", ["-d", "-j", "addr"])  # -d: link kinds (vxlan, bridge, …) and their MTUs
        v4 = self._run(sources.IP_ROUTE, "ip", ["-j", "route", "show", "table", "all"])
        v6 = (
            self._run(sources.IP_ROUTE, "ip", ["-6", "-j", "route", "show", "table", "all"]) if v4 is not None else None
        )
        if v4 is not None:  # `ip route` shows one family: both, as the pyroute2 dump has them
            try:
                self._put(sources.IP_ROUTE, json.dumps(json.loads(v4) + (json.loads(v6) if v6 else []), indent=1))
            except ValueError:
                self._put(sources.IP_ROUTE, v4)

    @sources.writes(sources.IP_RULE)
    def ip_rules(self) -> None:
        """The policy-routing rules of both families, as ``ip -j rule`` shows them (each with its family)."""
        t = time.monotonic()
        try:
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                rules = _pyroute2_rules(ipr)
        except Exception as exc:  # pyroute2 missing or netlink refused: fall back to ip -j rule
            self._err(sources.IP_RULE, f"pyroute2 failed ({exc.__class__.__name__}: {exc}); used 'ip -j rule' instead")
            rules = []
            for family, args in (("inet", ["-j", "rule", "show"]), ("inet6", ["-6", "-j", "rule", "show"])):
                text = self._run(sources.IP_RULE, "ip", args)
                try:
                    if text is None:
                        raise ValueError("no output")
                    rules += [dict(r, family=family) for r in load_json(text) if isinstance(r, dict)]
                except (ValueError, TypeError):
                    self._err(sources.IP_RULE, f"ip {' '.join(args)}: no JSON list of rules")
                    rules = None  # half the rules is not "the rules": the trace must not trust an incomplete list
                    break
            self.out.files.pop(sources.IP_RULE, None)  # _run kept the last raw output: the merged list replaces it
            if rules is None:
                self._timed(sources.IP_RULE, t)
                return
        self._put(sources.IP_RULE, json.dumps(rules, indent=1))
        self._timed(sources.IP_RULE, t)

    @sources.writes(
        sources.IPTABLES_SAVE, sources.IPTABLES_LEGACY_SAVE, sources.IPTABLES_NFT_SAVE, sources.IP6TABLES_SAVE
    )
    def iptables(self) -> None:
        backend = self._iptables_backend()
        default = self._run(sources.IPTABLES_SAVE, "iptables-save", [], timeout=DUMP_TIMEOUT)
        # the default binary is one of the two backends: reuse its output instead of a second full dump
        # (on a 10,000-service node each dump takes a minute or more)
        if backend == "nf_tables":
            if default is not None:
                self._put(sources.IPTABLES_NFT_SAVE, default)
        elif self._binary("iptables-nft-save"):
            self._run(sources.IPTABLES_NFT_SAVE, "iptables-nft-save", [], timeout=DUMP_TIMEOUT)
        if backend == "legacy":
            if default is not None:
                self._put(sources.IPTABLES_LEGACY_SAVE, default)
        # legacy tables exist only when ip_tables is loaded (do not make iptables-legacy-save load it); when the
        # kernel lists some, their rules act on every packet: a missing iptables-legacy-save is said, not skipped
        elif os.path.exists(os.path.join(self.proc, "net", "ip_tables_names")) and (
            self._binary("iptables-legacy-save") or self.legacy_tables(4)
        ):
            self._run(sources.IPTABLES_LEGACY_SAVE, "iptables-legacy-save", [], timeout=DUMP_TIMEOUT)
        if default is not None and self._binary("ip6tables-save"):
            self._run(sources.IP6TABLES_SAVE, "ip6tables-save", [])

    def legacy_tables(self, family: int) -> list[str]:
        """The tables of the legacy iptables backend the kernel has in this network namespace
        (``/proc/net/ip_tables_names``, ``ip6_tables_names``): none when it lists none or cannot be read."""
        names = os.path.join(self.proc, "net", "ip_tables_names" if family == 4 else "ip6_tables_names")
        try:
            with open(names) as fh:
                return fh.read().split()
        except OSError:
            return []

    def _iptables_backend(self) -> str | None:
        """'nf_tables' or 'legacy': what the host's iptables uses (from `iptables --version`)."""
        if "_backend" not in self.__dict__:
            argv = self._binary("iptables")
            backend = None
            if argv:
                try:
                    out = child.run(argv + ["--version"], timeout=CMD_TIMEOUT, env=SAFE_ENV)
                    text = out.stdout.decode("utf-8", "replace")
                    backend = "nf_tables" if "nf_tables" in text else ("legacy" if "legacy" in text else None)
                except (OSError, subprocess.TimeoutExpired):
                    backend = None
            self.__dict__["_backend"] = backend
        return self.__dict__["_backend"]

    IPTABLES_NFT_TABLES = {("ip", t) for t in ("filter", "nat", "mangle", "raw", "security")} | {
        ("ip6", t) for t in ("filter", "nat", "mangle", "raw", "security")
    }

    @sources.writes(sources.NFT_RULESET, sources.NFT_VERSION)
    def nft(self) -> None:
        """``nft -j list ruleset`` — without iptables-nft's own tables when iptables-save already has them.

        On an iptables-mode node with 10,000 Services those tables hold 230,000 translated rules: as nft
        JSON that is hundreds of MB, and the same rules are in node/iptables-save.txt."""
        self._run(sources.NFT_VERSION, "nft", ["--version"])
        if self._iptables_backend() != "nf_tables":
            self._run(sources.NFT_RULESET, "nft", ["-j", "list", "ruleset"], timeout=DUMP_TIMEOUT)
            return
        listing = self._run("node/.nft-tables", "nft", ["list", "tables"], report_as=sources.NFT_RULESET)
        self.out.files.pop("node/.nft-tables", None)
        if listing is None:
            return
        tables = []
        for line in listing.decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "table":
                tables.append((parts[1], parts[2]))
        self.nft_tables(tables)

    def nft_tables(self, tables) -> None:
        """``nft -j list table`` of each (family, name) that is not iptables-nft's own, merged into one ruleset; the
        tables left out are named (their rules are in iptables-save.txt)."""
        items: list = []
        skipped = []
        for family, name in tables:
            if (family, name) in self.IPTABLES_NFT_TABLES:
                skipped.append(f"{family} {name}")
                continue
            data = self._run(
                "node/.nft-table",
                "nft",
                ["-j", "list", "table", family, name],
                timeout=DUMP_TIMEOUT,
                report_as=sources.NFT_RULESET,
            )
            self.out.files.pop("node/.nft-table", None)
            try:
                doc = load_json(data) if data else {}
            except ValueError:  # not JSON, or nested deeper than kpdiag decodes
                self._err(sources.NFT_RULESET, f"nft -j list table {family} {name}: not JSON")
                continue
            for item in doc.get("nftables", []):
                if "metainfo" in item and any("metainfo" in i for i in items):
                    continue
                items.append(item)
        self._put(sources.NFT_RULESET, json.dumps({"nftables": items}))
        if skipped:
            self._err(
                sources.NFT_RULESET,
                f"iptables-nft's own tables ({', '.join(skipped)}) left out: {sources.IPTABLES_SAVE} has their rules",
            )

    @sources.writes(sources.IPVSADM, sources.IPVSADM_LIST, sources.IPVS_TIMEOUT, sources.IPVS_CONN)
    def ipvs(self) -> None:
        if not os.path.exists(os.path.join(self.proc, "net", "ip_vs")):
            self._err(
                sources.IPVSADM,
                "the ip_vs kernel module is not loaded (no /proc/net/ip_vs): no IPVS state on this node",
            )
            return
        from . import ipvs as ipvs_netlink

        t = time.monotonic()
        try:
            services = ipvs_netlink.dump()
        except ipvs_netlink.IpvsUnavailable as exc:
            # ipvsadm would modprobe ip_vs here: it is not run, so the collection stays read-only
            self._err(
                sources.IPVSADM,
                f"{exc}, although {self.proc}/net/ip_vs exists; ipvsadm not run (it would load the module)",
            )
        except Exception as exc:  # pyroute2 missing, netlink refused (no CAP_NET_ADMIN), …: ipvsadm reads the same
            self._err(
                sources.IPVSADM, f"IPVS netlink dump failed ({exc.__class__.__name__}: {exc}); used ipvsadm instead"
            )
            self._run(sources.IPVSADM, "ipvsadm", ["-Sn"])
            self._run(sources.IPVSADM_LIST, "ipvsadm", ["-Ln"])
        else:
            self._put(sources.IPVSADM, ipvs_netlink.render_save(services))
            self._put(sources.IPVSADM_LIST, ipvs_netlink.render_list(services))
        self._timed(sources.IPVSADM, t)
        if sources.IPVSADM in self.out.files:  # ip_vs is loaded (checked above): ipvsadm reads, it loads nothing
            self._run(sources.IPVS_TIMEOUT, "ipvsadm", ["-L", "--timeout"])
        conn = os.path.join(self.proc, "net", "ip_vs_conn")
        t = time.monotonic()
        try:
            self._put(sources.IPVS_CONN, ipvs_netlink.conn_counts_json(conn))
        except OSError as exc:
            self._err(sources.IPVS_CONN, f"cannot read {conn}: {exc.strerror or exc}")
        self._timed(sources.IPVS_CONN, t)

    @sources.writes(sources.XT_RECENT)
    def xt_recent(self) -> None:
        """kube-proxy's session affinity state: each ``/proc/net/xt_recent/KUBE-SEP-*`` table (at most
        XT_RECENT_MAX_TABLES, XT_RECENT_MAX_BYTES in all) and, to date its entries (kpdiag/parse/recent.py), the
        jiffies and time since boot of ``/proc/timer_list``. Nothing when the kernel has no recent tables."""
        folder = os.path.join(self.proc, "net", "xt_recent")
        try:
            names = sorted(e.name for e in os.scandir(folder) if e.name.startswith("KUBE-SEP-"))
        except OSError:
            return  # xt_recent is not loaded in this network namespace: no rule can match on recent state
        t = time.monotonic()
        tables, size = {}, 0
        for name in names[:XT_RECENT_MAX_TABLES]:
            text = self._read(os.path.join(folder, name), XT_RECENT_MAX_BYTES - size)
            if text is None:
                self._err(sources.XT_RECENT, f"{folder}/{name}: not readable")
                return  # part of the state is not the state: a trace would send a recorded client elsewhere
            tables[name] = text
            size += len(text)
            if size >= XT_RECENT_MAX_BYTES:
                self._err(sources.XT_RECENT, f"more than {XT_RECENT_MAX_BYTES} bytes of recent tables: not kept")
                return
        if len(names) > XT_RECENT_MAX_TABLES:
            self._err(sources.XT_RECENT, f"{len(names)} recent tables, more than {XT_RECENT_MAX_TABLES}: not kept")
            return
        clock = self._read(os.path.join(self.proc, "timer_list"), 256 * 1024) or ""
        now = re.search(r"^now at (\d+) nsecs", clock, re.M)
        jiffies = re.search(r"^jiffies: (\d+)", clock, re.M)
        doc = {
            "read_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tables": tables,
        }
        if now and jiffies:
            doc.update(jiffies=int(jiffies.group(1)), uptime=int(now.group(1)) / 1e9)
        else:
            self._err(sources.XT_RECENT, f"{self.proc}/timer_list unreadable: when each entry was seen is not known")
        self._put(sources.XT_RECENT, json.dumps(doc, indent=1))
        self._timed(sources.XT_RECENT, t)

    @sources.writes(sources.CONNTRACK)
    def conntrack_entries(self) -> None:
        """A bounded ``conntrack -L``: UDP entries first (stale UDP entries are what KP504 looks for), then TCP, at most
        CONNTRACK_MAX_ENTRIES entries / CONNTRACK_MAX_BYTES; a cut is said in the manifest."""
        if sources.CONNTRACK_STATS not in self.out.files:
            return  # nf_conntrack not loaded (said already) or conntrack missing
        argv = self._binary("conntrack")
        if argv is None:
            return
        import resource
        import tempfile

        def cap_file_size():  # in the child: the kernel stops conntrack (SIGXFSZ) at the byte bound
            resource.setrlimit(resource.RLIMIT_FSIZE, (CONNTRACK_MAX_BYTES + 1, CONNTRACK_MAX_BYTES + 1))

        t = time.monotonic()
        chunks, entries, size, cut = [], 0, 0, None
        for proto in ("udp", "tcp"):
            if cut:
                break
            with tempfile.TemporaryFile() as fh:
                try:
                    proc = child.run(
                        argv + ["-L", "-p", proto],
                        stdout=fh,
                        stderr=subprocess.DEVNULL,
                        env=SAFE_ENV,
                        timeout=max(1.0, CONNTRACK_TIMEOUT - (time.monotonic() - t)),
                        preexec=cap_file_size,
                    )
                    if proc.returncode < 0:
                        cut = f"{CONNTRACK_MAX_BYTES} bytes"
                except subprocess.TimeoutExpired:
                    cut = f"{CONNTRACK_TIMEOUT:.0f} s"
                except OSError as exc:
                    self._err(sources.CONNTRACK, f"cannot run conntrack: {exc.strerror or exc}")
                    return
                fh.seek(0)
                for line in fh:
                    if entries >= CONNTRACK_MAX_ENTRIES or size + len(line) > CONNTRACK_MAX_BYTES:
                        cut = f"{entries} entries, {size} bytes"
                        break
                    chunks.append(line)
                    entries += 1
                    size += len(line)
        self._put(sources.CONNTRACK, b"".join(chunks))
        if cut:
            self._err(sources.CONNTRACK, f"conntrack -L cut at {cut} (UDP first, then TCP): the table holds more")
        self._timed(sources.CONNTRACK, t)

    @sources.writes(sources.PROCESSES)
    def processes(self) -> None:
        """node/processes.txt: ``pid name`` of the processes that tell who implements Services, and of pid 1 (whether
        the host's processes are visible at all). Nothing else of the process table is kept."""
        lines = []
        try:
            entries = os.listdir(self.proc)
        except OSError as exc:
            self._err(sources.PROCESSES, f"cannot list {self.proc}: {exc.strerror or exc}")
            return
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                with open(os.path.join(self.proc, entry, "comm")) as fh:
                    comm = fh.read(64).strip()
            except OSError:
                continue
            if comm in KUBE_PROXY_EXES and int(entry) != self._kube_proxy_process().pid:
                continue  # called kube-proxy but not trusted as kube-proxy (find_kube_proxy): a name any user can take
            if entry == "1" or comm in PROCESS_NAMES:
                lines.append(f"{entry} {comm}")
        self._put(sources.PROCESSES, "\n".join(sorted(lines, key=lambda l: int(l.split()[0]))) + "\n")

    @sources.writes(sources.BPF_MAPS)
    def bpf_maps(self) -> None:
        """node/bpf-maps.txt: the names of pinned BPF objects under /sys/fs/bpf (Cilium's cilium_lb4_*, Calico's
        cali_v4_nat_*), names only, bounded."""
        root = os.path.join(self.host_root, "sys/fs/bpf")
        if not os.path.isdir(root):
            return
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath[len(root) :].count(os.sep) >= 3:
                dirnames[:] = []
            names.extend(filenames)
            if len(names) >= BPF_MAX_ENTRIES:
                self._err(sources.BPF_MAPS, f"more than {BPF_MAX_ENTRIES} pinned BPF objects: list cut")
                break
        if names:
            self._put(sources.BPF_MAPS, "\n".join(sorted(set(names))[:BPF_MAX_ENTRIES]) + "\n")

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
                before[port] = verify_listener(port, found, self.proc)
            t = time.monotonic()
            try:
                answers.append((rel, port, url, *http_get(port, path, HTTP_DEADLINE, HTTP_MAX_BYTES)))
            except HttpFailure as exc:
                self._err(rel, f"GET {url}: {exc} (kube-proxy not running here, or not on hostNetwork)")
            finally:
                self._timed(rel, t)
        after = {port: verify_listener(port, found, self.proc) for port in {a[1] for a in answers} if before[port][0]}
        for rel, port, url, status, body, cut in answers:
            ok, why = before[port] if not before[port][0] else after[port]
            if not ok:
                self.out.errors.append(
                    {
                        "source": rel,
                        "error": f"unverified: GET {url} was answered (HTTP {status}, {len(body)} bytes, "
                        f"{_excerpt(body)}), but {why}: the answer is not used",
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

    def _kube_proxy_process(self) -> "KubeProxyProcess":
        if self._kp is None:
            self._kp = find_kube_proxy(self.proc)
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
        found = find_kube_proxy(self.proc)
        for pid, why in found.refused:
            self._err(rel, f"process {pid} is called kube-proxy but is not trusted ({why}): its files were not read")
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
                        os.path.join(self.proc, str(pid), "root"), config_path, CONFIG_MAX_BYTES, safeio.IN_ROOT
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
        found.sort(key=lambda item: _mtime(os.path.join(*item)))  # stable: on a tie the pod log, as before
        base, rel = found[-1]
        path = os.path.join(base, rel)
        when = _mtime(path)
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
        data = _kube_proxy_lines(proc.stdout)[-LOG_MAX_BYTES:]
        if proc.returncode != 0 or not data.strip() or data.startswith(b"-- No entries --"):
            return
        self._put(sources.KP_LOG, data)
        # the file search's "no kube-proxy log" is answered: say where it came from instead
        self.out.errors = [e for e in self.out.errors if e.get("source") != sources.KP_LOG]
        self._err(sources.KP_LOG, f"no log file; read from journald ({journal}, units {', '.join(JOURNAL_UNITS)})")


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


def _kube_proxy_lines(journal: bytes) -> bytes:
    """journalctl lines of kube-proxy's own unit, and kube-proxy's lines of the k3s/k0s units."""
    keep = []
    for line in journal.splitlines(keepends=True):
        head = line.split(b": ", 1)[0]
        if b" kube-proxy[" in head or any(m in line for m in _PROXY_MARKERS):
            keep.append(line)
    return b"".join(keep)


def _mtime(path: str) -> float:
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
        raise HttpFailure(f"not an HTTP answer ({_excerpt(bytes(buf))})")
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


def _excerpt(body: bytes, n: int = 60) -> str:
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


_SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}
_RT_TYPES = {
    1: "unicast",
    2: "local",
    3: "broadcast",
    4: "anycast",
    5: "multicast",
    6: "blackhole",
    7: "unreachable",
    8: "prohibit",
    9: "throw",
    10: "nat",
}
_TABLES = {253: "default", 254: "main", 255: "local"}


_RULE_ACTIONS = {1: None, 2: "goto", 3: "nop", 6: "blackhole", 7: "unreachable", 8: "prohibit"}
_FIB_RULE_INVERT = 0x2
_IP_PROTOS = {1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp"}


def _range(value) -> tuple[int, int] | None:
    """A netlink port or uid range as pyroute2 gives it ("1000:2000", or an object with start/end)."""
    if value is None:
        return None
    if isinstance(value, str):
        lo, _, hi = value.strip("'").partition(":")
        return int(lo), int(hi or lo)
    get = value.get_attr if hasattr(value, "get_attr") else value.get
    return int(get("start")), int(get("end"))


def _pyroute2_rules(ipr) -> list[dict]:
    """The policy-routing rules of both families in the shape of ``ip -j rule show`` (plus ``family``)."""
    out = []
    for family, fam in ((socket.AF_INET, "inet"), (socket.AF_INET6, "inet6")):
        for r in ipr.get_rules(family=family):
            item: dict = {"family": fam, "priority": r.get_attr("FRA_PRIORITY") or 0}
            if r["flags"] & _FIB_RULE_INVERT:
                item["not"] = None
            for key, attr, length in (("src", "FRA_SRC", "src_len"), ("dst", "FRA_DST", "dst_len")):
                value = r.get_attr(attr)
                item[key] = value or "all" if key == "src" else value
                if value:
                    item[key + "len"] = r[length]
            if item.get("dst") is None:
                item.pop("dst", None)
            for key, attr in (("iif", "FRA_IIFNAME"), ("oif", "FRA_OIFNAME")):
                value = r.get_attr(attr)
                if value:
                    item[key] = value
            proto = r.get_attr("FRA_IP_PROTO")
            if proto:
                item["ipproto"] = _IP_PROTOS.get(int(proto), str(proto))
            mark = r.get_attr("FRA_FWMARK")
            if mark is not None:
                item["fwmark"] = hex(mark)
                item["fwmask"] = hex(r.get_attr("FRA_FWMASK") if r.get_attr("FRA_FWMASK") is not None else 0xFFFFFFFF)
            # ranges as ip -j prints them: "dport": 53, or "dport_start"/"dport_end"; "uid_start"/"uid_end"
            for key, attr in (("sport", "FRA_SPORT_RANGE"), ("dport", "FRA_DPORT_RANGE"), ("uid", "FRA_UID_RANGE")):
                rng = _range(r.get_attr(attr))
                if rng is None:
                    continue
                if key != "uid" and rng[0] == rng[1]:
                    item[key] = rng[0]
                else:
                    item[f"{key}_start"], item[f"{key}_end"] = rng
            for key, attr in (
                ("l3mdev", "FRA_L3MDEV"),
                ("suppress_prefixlen", "FRA_SUPPRESS_PREFIXLEN"),
                ("suppress_ifgroup", "FRA_SUPPRESS_IFGROUP"),
            ):
                value = r.get_attr(attr)
                if (
                    value is not None
                    and int(value) not in (0xFFFFFFFF, -1)
                    and not (attr == "FRA_L3MDEV" and not int(value))
                ):
                    item[key] = int(value)
            if r["tos"]:
                item["tos"] = hex(r["tos"])
            action = _RULE_ACTIONS.get(r["action"], str(r["action"]))
            if action is None:
                table = r.get_attr("FRA_TABLE") or r["table"]
                item["table"] = _TABLES.get(table, str(table))
            else:
                item["action"] = action
            out.append(item)
    return out


_IFF_FLAGS = (
    (0x1, "UP"),
    (0x2, "BROADCAST"),
    (0x8, "LOOPBACK"),
    (0x100, "PROMISC"),
    (0x1000, "MULTICAST"),
    (0x10000, "LOWER_UP"),
)
_IFF_UP, _IFF_RUNNING = 0x1, 0x40
# a route's nexthop flags (rtm_flags), as ``ip -j route`` names them
_RTNH_FLAGS = ((0x1, "dead"), (0x2, "pervasive"), (0x4, "onlink"), (0x8, "offload"), (0x10, "linkdown"))


def _pyroute2_dump(ipr) -> tuple[list, list]:
    """Links/addresses and routes in the shape of ``ip -j addr`` / ``ip -j route show table all``."""
    names, out_links = {}, {}
    for link in ipr.get_links():
        idx = link["index"]
        name = link.get_attr("IFLA_IFNAME")
        names[idx] = name
        info = link.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
        entry = {
            "ifindex": idx,
            "ifname": name,
            "mtu": link.get_attr("IFLA_MTU"),
            "operstate": link.get_attr("IFLA_OPERSTATE"),
            "address": link.get_attr("IFLA_ADDRESS"),
            "addr_info": [],
        }
        master = link.get_attr("IFLA_MASTER")
        if master:
            entry["master_index"] = master
        if kind:
            entry["linkinfo"] = {"info_kind": kind}
        flags = link["flags"]
        # as ip shows it: an interface that is up without carrier (not running) is NO-CARRIER, first
        no_carrier = ["NO-CARRIER"] if flags & _IFF_UP and not flags & _IFF_RUNNING else []
        entry["flags"] = no_carrier + [n for bit, n in _IFF_FLAGS if flags & bit]
        if kind in ("vxlan", "geneve"):  # the overlay's UDP port, as ip -d -j shows it (info_data.port)
            data = info.get_attr("IFLA_INFO_DATA")
            port = (
                data.get_attr("IFLA_VXLAN_PORT" if kind == "vxlan" else "IFLA_GENEVE_PORT")
                if data is not None
                else None
            )
            if port:
                entry["linkinfo"]["info_data"] = {"port": int(port)}
        slave = info.get_attr("IFLA_INFO_SLAVE_KIND") if info is not None else None
        if slave == "bridge":  # a bridge port: its hairpin mode, as ip -d -j shows it (info_slave_data.hairpin)
            data = info.get_attr("IFLA_INFO_SLAVE_DATA")
            mode = data.get_attr("IFLA_BRPORT_MODE") if data is not None else None
            entry.setdefault("linkinfo", {})["info_slave_kind"] = slave
            if mode is not None:
                entry["linkinfo"]["info_slave_data"] = {"hairpin": bool(mode)}
        out_links[idx] = entry
    for addr in ipr.get_addr():
        entry = out_links.get(addr["index"])
        if entry is None:
            continue
        fam = "inet" if addr["family"] == socket.AF_INET else "inet6"
        entry["addr_info"].append(
            {
                "family": fam,
                "local": addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS"),
                "prefixlen": addr["prefixlen"],
                "scope": _SCOPES.get(addr["scope"], str(addr["scope"])),
                "label": addr.get_attr("IFA_LABEL"),
            }
        )
    for entry in out_links.values():
        if "master_index" in entry:
            entry["master"] = names.get(entry.pop("master_index"))
    routes = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for r in ipr.get_routes(family=family):  # every table
            table = r.get_attr("RTA_TABLE") or r["table"]
            dst = r.get_attr("RTA_DST")
            item = {
                "type": _RT_TYPES.get(r["type"], str(r["type"])),
                "dst": f"{dst}/{r['dst_len']}" if dst and r["dst_len"] not in (32, 128) else (dst or "default"),
                "table": _TABLES.get(table, str(table)),
                "scope": _SCOPES.get(r["scope"], str(r["scope"])),
            }
            gw = r.get_attr("RTA_GATEWAY")
            if gw:
                item["gateway"] = gw
            oif = r.get_attr("RTA_OIF")
            if oif:
                item["dev"] = names.get(oif, str(oif))
            src = r.get_attr("RTA_PREFSRC")
            if src:
                item["prefsrc"] = src
            nh_flags = [n for bit, n in _RTNH_FLAGS if r["flags"] & bit]
            if nh_flags:  # linkdown: its device has no carrier; dead: never used
                item["flags"] = nh_flags
            routes.append(item)
    return list(out_links.values()), routes


def collect_node(host_root: str | None = None, progress=None, rules=None) -> tuple[dict[str, bytes], dict]:
    """Collect this node: (files, manifest); ``rules``: see :meth:`NodeCollector.collect` (a partial bundle)."""
    c = NodeCollector(host_root=host_root, progress=progress)
    out = c.collect(rules)
    manifest = out.manifest(socket.gethostname())
    if c.partial:
        manifest["partial"] = c.partial
    return out.files, manifest
