"""Collect a live node into the bundle layout (docs/architecture.md §3), read-only.

Every source is optional: a missing binary, a permission problem, a timeout becomes an entry in
the manifest's ``errors`` and the collection goes on. Nothing here changes the host: commands
that could load kernel modules as a side effect (ipvsadm, ipset, iptables-legacy-save,
conntrack) are only run when their module is already loaded.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kpdiag.parse.decode import load_json
from kpdiag.bundle import sources
from kpdiag.collect import child, kube_proxy, netlink_dump
from kpdiag.collect.node_base import CMD_TIMEOUT, SAFE_ENV, Collected
from kpdiag.collect.node_kube_proxy import KubeProxySteps

DUMP_TIMEOUT = 600.0  # iptables-save / nft list of a 10,000-Service node take minutes on the nf_tables backend
CONNTRACK_MAX_LINES = 5000
CONNTRACK_MAX_ENTRIES = 100_000  # conntrack -L: UDP first, then TCP, until either bound is reached
CONNTRACK_MAX_BYTES = 50 * 1024 * 1024
XT_RECENT_MAX_TABLES = 20000  # kube-proxy's: one per endpoint of a ClientIP-affinity Service
XT_RECENT_MAX_BYTES = 16 * 1024 * 1024
CONNTRACK_TIMEOUT = 30.0
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


class NodeCollector(KubeProxySteps):
    """Collect a live node into a bundle: every node source of the catalogue (kpdiag/bundle/sources.py), each by
    its recipe or by the methods that declare it (``@sources.writes``), read-only."""

    def steps(self) -> list[tuple[str, Callable[[], object]]]:
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
        out: list[tuple[str, Callable[[], object]]] = []
        seen: set[str] = set()
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
                out.append((src.path, functools.partial(self._recipe, src)))
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
        devs: list[str] = [
            link["ifname"]
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
                addrs, routes = netlink_dump.pyroute2_dump(ipr)
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
                rules = netlink_dump.pyroute2_rules(ipr)
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
        doc: dict[str, Any] = {
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
            if comm in kube_proxy.KUBE_PROXY_EXES and int(entry) != self._kube_proxy_process().pid:
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


def collect_node(host_root: str | None = None, progress=None, rules=None) -> tuple[dict[str, bytes], dict]:
    """Collect this node: (files, manifest); ``rules``: see :meth:`NodeCollector.collect` (a partial bundle)."""
    c = NodeCollector(host_root=host_root, progress=progress)
    out = c.collect(rules)
    manifest = out.manifest(socket.gethostname())
    if c.partial:
        manifest["partial"] = c.partial
    return out.files, manifest
