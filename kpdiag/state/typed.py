"""Typed inputs: what a check needs, said by its signature (docs/architecture.md, "Typed inputs").

A check may take its inputs as typed parameters instead of ``ctx``::

    @check("KP613", ..., severity="warning", ...)
    def cidr_misses_node(new, config: KubeProxyConfig, nodes: NodePodCIDRs, sysctls: Optional[Sysctls] = None):

A parameter typed ``T`` is a *need* of the check (input ``T.INPUT``: when it is missing the check is skipped with the
reason, as for ``needs=``); ``Optional[T]`` is a *use* (the check gets None when the input is not there). The runner
builds each value with ``T.build(view)`` from a view that opens ``T.INPUT`` only (state/inputs.py polices it), and
calls the check with plain values: a check that receives no state cannot read an input it did not declare, so it
needs no static analysis (tests/packaging/test_check_inputs.py reads the few ``build`` functions here instead: a
build uses its view only as ``ctx.NAME``, ``ctx.cluster.NAME`` or ``ctx.source(sources.X)``-like calls naming the
source — ``ctx.file(sources.X)`` keeps one to read later — never hands it to a helper).

A typed input is a frozen dataclass of fields (``NodePodCIDRs.nodes[i].cidrs``), built from one named input of the
catalogue (``INPUT``); adding one is a class here — no grant string in state/inputs.py.
"""

from __future__ import annotations

import ipaddress
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.dataplane.base import Dataplane
    from kpdiag.parse.ethtool import Offloads
    from kpdiag.checkapi import CheckSpec
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.parse.ipvs import VirtualService
    from kpdiag.parse.neigh import KernelLog as KernelLogLines, NeighTables
    from kpdiag.parse.nft import NftRuleset
    from kpdiag.parse.node import KubeProxyConfig as ParsedConfig, Metrics, Module, Value
    from kpdiag.state.cluster import Svc
    from kpdiag.state.cloud import CloudModel
    from kpdiag.state.cni import CniModel
    from kpdiag.state.inputs import Inputs, SourceFile
    from kpdiag.state.kpsettings import Effective, LogFact, Setting
    from kpdiag.state.kube_rules import ProgrammedPort
    from kpdiag.state.service_proxy import Implementer
    from kpdiag.trace.netfilter import IptablesTracer
    from kpdiag.trace.routing import RoutingTable
    from kpdiag.trace.walker import PacketWalker

from kpdiag.bundle import sources
from kpdiag.model import Evidence


class Typed:
    """The base of typed inputs: ``INPUT`` names the catalogue input it is built from (its presence, its skip reason,
    the sources it opens); ``build(ctx)`` makes the value from a view opening that input only (None: not there);
    ``FILES``, when set, the bundle files that show its fact was collected (else the input's ``files``)."""

    INPUT: ClassVar[str]
    SCOPE: ClassVar[str] = "node"  # the catalogue INPUT is in: "node" (NodeState), "cluster" (FleetState)
    # the bundle files that show the fact it carries was collected, when narrower than its input's (Input.files)
    FILES: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


@dataclass(frozen=True)
class Sysctls(Typed):
    """The node's kernel settings (``sysctl -a``): each value with its line, for evidence."""

    INPUT: ClassVar[str] = "sysctl"
    values: typing.Mapping[str, Value]  # key → its value, source, line, text

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        parsed = ctx.sysctl
        return None if parsed is None else cls(parsed)

    def get(self, key: str) -> str | None:
        v = self.values.get(key)
        return None if v is None else v.value.strip()

    def value(self, key: str) -> Value | None:
        """The parsed line of ``key`` (kpdiag.parse.node.Value: value, source, line, text), or None."""
        return self.values.get(key)

    def evidence(self, key: str) -> Evidence | None:
        v = self.values.get(key)
        return None if v is None else Evidence(v.source, v.text, v.line)

    def data(self, want: dict[str, Any]) -> dict[str, Any]:
        """A finding's data about kernel settings, for scripts that check or apply them: ``{"sysctls": [{key, value seen
        (None: not collected), want}]}``."""
        return {"sysctls": [{"key": k, "value": self.get(k), "want": str(w)} for k, w in want.items()]}


@dataclass(frozen=True)
class NeighThresholds(Sysctls):
    """The node's sysctls where the neighbour tables' bounds (net.ipv4/ipv6.neigh.default.gc_thresh1/2/3) were
    collected: a bundle from before kpdiag read them does not show the fact."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.SYSCTL}#neigh.default.gc_thresh3",)


@dataclass(frozen=True)
class LocalPorts(Typed):
    """The node's ephemeral ports: net.ipv4.ip_local_port_range (the source ports the kernel picks for the node's own
    connections) and net.ipv4.ip_local_reserved_ports (ports it never picks), with their lines for evidence."""

    INPUT: ClassVar[str] = "sysctl"
    FILES: ClassVar[tuple[str, ...]] = (f"{sources.SYSCTL}#net.ipv4.ip_local_port_range",)
    range: Value | None  # ip_local_port_range
    reserved: Value | None  # ip_local_reserved_ports

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        parsed = ctx.sysctl
        if parsed is None:
            return None
        return cls(parsed.get("net.ipv4.ip_local_port_range"), parsed.get("net.ipv4.ip_local_reserved_ports"))

    def local_range(self) -> tuple[int, int] | None:
        """ip_local_port_range as (low, high); None when it was not collected. ValueError when it is not two ports."""
        if self.range is None:
            return None
        low, high = (int(x) for x in self.range.value.split())
        return low, high

    def reserved_ports(self) -> list[tuple[int, int]]:
        """ip_local_reserved_ports ("30000-32767,10250") as [(low, high)]; [] when empty or not collected."""
        text = self.reserved.value.strip() if self.reserved is not None else ""
        out = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, _, high = part.partition("-")
            out.append((int(low), int(high or low)))
        return out


@dataclass(frozen=True)
class Addresses(Typed):
    """The node's interfaces and their addresses (``ip -j addr``), as ip prints them."""

    INPUT: ClassVar[str] = "addresses"
    source: str  # how evidence names the file
    links: tuple[Any, ...]  # the ip -j addr objects (dicts: ifname, mtu, linkinfo, addr_info …)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        links = ctx.ip_addr
        return None if links is None else cls(ctx.display(sources.IP_ADDR), tuple(links))


@dataclass(frozen=True)
class Routes(Typed):
    """The node's routes (``ip -j route`` of every table) and the routing decision made from them (trace/routing.py:
    lookup, is_local, has_routes, knows), which also reads the addresses, forwarding and the policy-routing rules."""

    INPUT: ClassVar[str] = "routes"
    source: str
    routes: tuple[Any, ...]  # the ip -j route objects
    routing: RoutingTable

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        routes = ctx.ip_route
        return None if routes is None else cls(ctx.display(sources.IP_ROUTE), tuple(routes), ctx.routing)


@dataclass(frozen=True)
class Modules(Typed):
    """The kernel modules: loaded (/proc/modules), built in (modules.builtin), available to modprobe (None: not
    collected)."""

    INPUT: ClassVar[str] = "modules"
    source: str
    loaded: typing.Mapping[str, Module]  # by name
    builtin: frozenset[str]
    available: frozenset[str] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        mods = ctx.modules
        if mods is None:
            return None
        avail = ctx.modules_available
        return cls(
            ctx.display(sources.MODULES),
            mods,
            frozenset(ctx.modules_builtin),
            None if avail is None else frozenset(avail),
        )

    def evidence(self, name: str) -> Evidence | None:
        """The /proc/modules line of ``name`` or None when it is not loaded."""
        m = self.loaded.get(name)
        if m is None:
            return None
        return Evidence(self.source, f"{m.name} {m.size} {m.refcount} {','.join(m.used_by) or '-'} {m.state}", m.line)


@dataclass(frozen=True)
class ProxyMode(Typed):
    """The mode kube-proxy runs (/proxyMode, else the configuration, else the rules present) and its dataplane class
    (kpdiag/dataplane/: ``dataplane.known``, its capabilities and words). Always there (``UNKNOWN`` when not known)."""

    INPUT: ClassVar[str] = "proxy-mode"
    mode: str | None
    how: str  # how it is known, in words
    dataplane: Dataplane  # the registered instance of a kpdiag.dataplane class
    inferred: typing.Mapping[str, str]  # the modes whose artefacts are on the node: mode → evidence text

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        mode, how = ctx.proxy_mode
        return cls(mode, how, ctx.dataplane, ctx.inferred_modes())


# the nf_conntrack sysctls the conntrack input carries (it grants them by key: it does not open every sysctl)
CONNTRACK_SYSCTLS = (
    "net.netfilter.nf_conntrack_count",
    "net.netfilter.nf_conntrack_max",
    "net.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_be_liberal",
)


@dataclass(frozen=True)
class Kernel(Typed):
    """The running kernel's version (``uname -r``), as (major, minor, patch)."""

    INPUT: ClassVar[str] = "kernel"
    source: str
    version: tuple[int, ...]
    release: str  # uname -r as printed ("5.4.0-150-generic"), else the version joined

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        k = ctx.kernel
        if k is None:
            return None
        release = (ctx.source_text(sources.UNAME) or "").strip() or ".".join(map(str, k))
        return cls(ctx.display(sources.UNAME), k, release)


@dataclass(frozen=True)
class NftVersion(Typed):
    """The nft binary's version (``nft --version``), as (major, minor, patch)."""

    INPUT: ClassVar[str] = "nft-version"
    source: str
    version: tuple[int, ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        v = ctx.nft_version
        return None if v is None else cls(ctx.display(sources.NFT_VERSION), v)


@dataclass(frozen=True)
class KubeProxyVersion(Typed):
    """kube-proxy's (major, minor) version: its metrics' kubernetes_build_info, else the API server's."""

    INPUT: ClassVar[str] = "kube-proxy-version"
    source: str  # how evidence names it: kube-proxy's metrics
    version: tuple[int, ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        v = ctx.kube_proxy_version
        return None if v is None else cls(ctx.display(sources.KP_METRICS), v)


@dataclass(frozen=True)
class Preflight(Typed):
    """The proxy mode ``kpdiag node --preflight MODE`` asks about (``mode``: None when not asked). Always there."""

    INPUT: ClassVar[str] = "preflight"
    mode: str | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.preflight)


@dataclass(frozen=True)
class ConntrackStats(Typed):
    """Connection tracking's counters: ``conntrack -S`` summed over the CPUs (``stats``: {} when only the sysctls
    were collected) and its sysctls (``CONNTRACK_SYSCTLS``: count, max, tcp_be_liberal)."""

    INPUT: ClassVar[str] = "conntrack"
    source: str
    stats: typing.Mapping[str, int]  # counter → value
    sysctls: typing.Mapping[str, Value]  # key of CONNTRACK_SYSCTLS → its value (those collected)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        values = {k: v for k in CONNTRACK_SYSCTLS if (v := ctx.sysctl_value(k)) is not None}
        stats = ctx.conntrack_stats
        if stats is None and "net.netfilter.nf_conntrack_count" not in values:
            return None
        return cls(ctx.display(sources.CONNTRACK_STATS), stats or {}, values)

    def sysctl(self, key: str) -> Value | None:
        """The Value of one of CONNTRACK_SYSCTLS (None: not collected); another key is a defect of the check."""
        if key not in CONNTRACK_SYSCTLS:
            raise KeyError(f"{key} is not one of the conntrack input's sysctls (state/typed.py CONNTRACK_SYSCTLS)")
        return self.sysctls.get(key)

    def sysctl_evidence(self, key: str) -> Evidence | None:
        v = self.sysctl(key)
        return None if v is None else Evidence(v.source, v.text, v.line)

    def sysctl_data(self, want: dict[str, Any]) -> dict[str, Any]:
        """A finding's data about these sysctls (as ``Sysctls.data``)."""
        out = []
        for k, w in want.items():
            v = self.sysctl(k)
            out.append({"key": k, "value": None if v is None else v.value.strip(), "want": str(w)})
        return {"sysctls": out}

    def evidence(self, key: str, value: int) -> Evidence:
        """A counter of ``conntrack -S`` (kpdiag.parse.node.parse_conntrack_stats sums it over the CPUs)."""
        return Evidence(self.source, f"{key}={value} (summed over CPUs)")


@dataclass(frozen=True)
class KubeProxyMode(Typed):
    """What kube-proxy answers on /proxyMode (iptables, ipvs, nftables, kernelspace …)."""

    INPUT: ClassVar[str] = "kube-proxy-mode"
    source: str
    running: str

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        running = ctx.proxy_mode_running
        return None if running is None else cls(ctx.display(sources.KP_PROXY_MODE), running)


@dataclass(frozen=True)
class KubeProxyHealthz(Typed):
    """kube-proxy's /healthz answer (a JSON object: lastUpdated, currentTime, and kpdiag_http_status)."""

    INPUT: ClassVar[str] = "kube-proxy-healthz"
    source: str
    doc: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        hz = ctx.healthz
        return None if hz is None else cls(ctx.display(sources.KP_HEALTHZ), hz)


@dataclass(frozen=True)
class Manifest(Typed):
    """The bundle's manifest (kpdiag.json) and what it says about the bundle: its name as the user gave it (evidence
    about the node as a whole cites it), the node, when it was collected. Always there ({} without a manifest)."""

    INPUT: ClassVar[str] = "manifest"
    bundle: str
    node: str
    created: float | None  # epoch seconds
    doc: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.bundle_name, ctx.node_name, ctx.created, ctx.manifest)


@dataclass(frozen=True)
class Nft(Typed):
    """The node's nftables ruleset (``nft -j list ruleset``): its text, the family of kube-proxy's table, and the
    parsed ruleset — parsed on first ``ruleset()`` only (it can be hundreds of MB), once per run."""

    INPUT: ClassVar[str] = "nft"
    source: str
    text: str
    kube_proxy_family: str | None  # "ip" / "ip6" when table kube-proxy is there
    _parse: typing.Callable[[], NftRuleset | None] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        text = ctx.nft_text
        if text is None:
            return None
        return cls(ctx.display(sources.NFT_RULESET), text, ctx.nft_kube_proxy_table, lambda: ctx.nft())

    def ruleset(self) -> NftRuleset | None:
        """kpdiag.parse.nft's ruleset (None when it could not be parsed: a problem of the source)."""
        return self._parse()


@dataclass(frozen=True)
class KubeProxyConfig(Typed):
    """kube-proxy's configuration (its file on the node, else the ConfigMap) as the fields checks compare."""

    INPUT: ClassVar[str] = "kube-proxy-config"
    source: str
    mode: str
    cluster_cidrs: tuple[str, ...]  # clusterCIDR split at commas (dual-stack: one a family); () when not set
    detect_local_mode: str  # "ClusterCIDR" when not set (kube-proxy's default)
    parsed: ParsedConfig  # for evidence

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        cfg = ctx.kube_proxy_config
        if cfg is None:
            return None
        raw = cfg.get("clusterCIDR")
        cidrs = tuple(p.strip() for p in raw.split(",") if p.strip()) if isinstance(raw, str) else ()
        detect = cfg.get("detectLocalMode")
        return cls(
            cfg.source, cfg.mode, cidrs, (detect.strip() if isinstance(detect, str) else "") or "ClusterCIDR", cfg
        )

    def get(self, path: str, default: Any = None) -> Any:
        """Any setting by its dotted path (``iptables.masqueradeAll``), as the configuration holds it."""
        return self.parsed.get(path, default)

    def evidence(self, key: str) -> Evidence:
        """The line that sets ``key`` (a dotted path), or that it is not set."""
        cfg = self.parsed
        line = cfg.line_of(key)
        value = cfg.get(key)
        text = (
            cfg.text.splitlines()[line - 1].strip()
            if line
            else (f"{key}: {value!r}" if value is not None else f"{key} is not set")
        )
        return Evidence(self.source, text, line)


@dataclass(frozen=True)
class KubeProxySettings(Typed):
    """kube-proxy's effective configuration (state/kpsettings.py): each field with where it comes from — the file or
    ConfigMap, a flag, kube-proxy's default — the flags it ignores, and the facts its log states (the proxier, single-
    or dual-stack and why, the node IPs, a detect-local mode it could not apply)."""

    INPUT: ClassVar[str] = "kube-proxy-settings"
    effective: Effective

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        eff = ctx.kube_proxy_settings
        return None if eff is None else cls(eff)

    def __getitem__(self, name: str) -> Setting:
        """The Setting of one field of kpdiag.state.kpsettings.FIELDS (value, origin, evidence())."""
        return self.effective[name]

    def value(self, name: str) -> Any:
        return self.effective.value(name)

    def facts(self, kind: str) -> list[LogFact]:
        return self.effective.facts(kind)

    def last(self, kind: str) -> LogFact | None:
        return self.effective.last(kind)

    def log_evidence(self, fact: LogFact) -> Evidence:
        return self.effective.log_evidence(fact)


@dataclass(frozen=True)
class KubeProxyRules(Typed):
    """kube-proxy's iptables rules as read back (state/kube_rules.py): the Service ports it programmed, and the
    ruleset they come from (for evidence)."""

    INPUT: ClassVar[str] = "iptables"
    programmed: typing.Mapping[str, ProgrammedPort]  # key → the port (chain, cluster_cidr, …)
    ruleset: Ruleset  # node/iptables-save.txt
    _dump: typing.Callable[[str], Ruleset | None] = field(repr=False, compare=False)
    _programmed: typing.Callable[[str], typing.Mapping[str, ProgrammedPort] | None] | None = field(
        default=None, repr=False, compare=False
    )

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        rs = ctx.iptables()
        if rs is None:
            return None
        return cls(ctx.programmed() or {}, rs, lambda which: ctx.iptables(which), lambda which: ctx.programmed(which))

    def dump(self, which: str) -> Ruleset | None:
        """The ruleset of another dump of this input, parsed on first use: "ip6tables-save", "iptables-legacy-save",
        "iptables-nft-save" (None: not collected)."""
        return self.ruleset if which == "iptables-save" else self._dump(which)

    def programmed_in(self, which: str) -> typing.Mapping[str, ProgrammedPort] | None:
        """The Service ports programmed in another dump ("ip6tables-save": a dual-stack node's IPv6 side), read on
        first use (None: that dump was not collected)."""
        if which == "iptables-save":
            return self.programmed
        return self._programmed(which) if self._programmed is not None else None


@dataclass(frozen=True)
class KubeProxyLog(Typed):
    """kube-proxy's log, line by line (line 1 first), and how evidence names it."""

    INPUT: ClassVar[str] = "kube-proxy-log"
    source: str
    lines: tuple[str, ...]
    written: str | None = None  # when the file it was read from was last written (the manifest's ``written``)
    origin: str | None = None  # that file, on the node
    age: float | None = None  # seconds from that write to the collection

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        lines = ctx.kube_proxy_log
        if lines is None:
            return None
        written, origin, age = _written(ctx.manifest, ctx.created, sources.KP_LOG)
        return cls(ctx.display(sources.KP_LOG), tuple(lines), written, origin, age)

    def entries(self) -> list[tuple[int, str]]:
        """The log's entries as (first line number, text): klog writes a multi-line value as ``key=<``, lines indented
        by a tab, then `` >`` — one entry, joined with blanks, so that it is matched and quoted whole."""
        out: list[tuple[int, str]] = []
        i, lines = 0, self.lines
        while i < len(lines):
            n, text = i + 1, lines[i].rstrip()
            i += 1
            if text.endswith("=<"):
                parts = [text]
                while i < len(lines) and lines[i][:1] in ("\t", " ") and lines[i].strip():
                    parts.append(lines[i].strip())
                    i += 1
                    if parts[-1] == ">":
                        break
                text = " ".join(parts)
            out.append((n, text))
        return out

    def evidence(self, lineno: int, text: str) -> Evidence:
        """A log entry quoted whole (up to 2,000 characters; past that cut at a blank, with " …")."""
        from kpdiag.evidence import clip

        return Evidence(self.source, clip(text.strip(), 2000), lineno)

    def age_evidence(self) -> Evidence | None:
        """When the log was last written, and how long before the collection: lines of an old log are old."""
        if self.written is None:
            return None
        ago = f", {_duration(self.age)} before this bundle was collected" if self.age is not None else ""
        return Evidence(self.source, f"read from {self.origin or 'the node'}, last written {self.written}{ago}")


def _written(manifest: object, created: float | None, source: str) -> tuple[str | None, str | None, float | None]:
    """(when, from which file, seconds before the collection at ``created``) of the manifest's ``written`` entry for
    ``source``."""
    import datetime

    written = manifest.get("written") if isinstance(manifest, dict) else None
    entry = written.get(str(source)) if isinstance(written, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), str):
        return None, None, None
    try:
        at = datetime.datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None, None, None
    origin = entry.get("path") if isinstance(entry.get("path"), str) else None
    return entry["at"], origin, (created - at if created is not None else None)


def _duration(seconds: float) -> str:
    if seconds < 0:
        return "after (the clocks disagree)"
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


@dataclass(frozen=True)
class KubeProxyMetrics(Typed):
    """kube-proxy's /metrics, parsed (kpdiag.parse.node.Metrics: get, histogram_mean, histogram_quantile)."""

    INPUT: ClassVar[str] = "kube-proxy-metrics"
    source: str
    metrics: Metrics

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        m = ctx.metrics
        return None if m is None else cls(ctx.display(sources.KP_METRICS), m)

    def evidence(self, name: str, value: object) -> Evidence:
        return Evidence(self.source, f"{name} {value}", self.metrics.line_of(name))


@dataclass(frozen=True)
class ApiList:
    """One List file of the API side (``kubectl get -o json``): ``items()`` its objects, read on first use (None when
    the file was not collected; a file that is not a List is a problem of the source, and None)."""

    source: str  # how evidence names it
    _read: typing.Callable[[], Any] = field(repr=False, compare=False)
    _problem: typing.Callable[[str], None] = field(repr=False, compare=False)
    _text: typing.Callable[[], str | None] | None = field(repr=False, compare=False, default=None)

    def items(self) -> list[dict[str, Any]] | None:
        from kpdiag.bundle.store import list_items

        data = self._read()
        if data is None:
            return None
        items = list_items(data)
        if items is None:
            self._problem("not a List (kubectl get -o json)")
        return items

    def text(self) -> str | None:
        """The file as written (evidence finds an object's line in it), None when it was not collected."""
        return self._text() if self._text is not None else None

    @classmethod
    def of(cls, f: SourceFile) -> ApiList:
        """The List file ``f`` (a source of a check's view: kpdiag.state.inputs.SourceFile), read when first asked."""
        return cls(f.display, f.read, f.problem, lambda: f.text() if f.has() else None)


@dataclass(frozen=True)
class DnsService(Typed):
    """The cluster DNS Service (kube-dns, ``services``) and its EndpointSlices (``endpointslices``), as collected."""

    INPUT: ClassVar[str] = "dns-service"
    services: ApiList
    endpointslices: ApiList

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        if ctx.source(sources.DNS_SERVICE) is None:
            return None
        return cls(ApiList.of(ctx.file(sources.DNS_SERVICE)), ApiList.of(ctx.file(sources.DNS_ENDPOINTSLICES)))


@dataclass(frozen=True)
class DnsPods(Typed):
    """The CoreDNS pods (label k8s-app=kube-dns in kube-system), as collected."""

    INPUT: ClassVar[str] = "dns-pods"
    pods: ApiList

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return None if ctx.source(sources.DNS_PODS) is None else cls(ApiList.of(ctx.file(sources.DNS_PODS)))


@dataclass(frozen=True)
class DnsLogs(Typed):
    """The CoreDNS logs kpdiag collected (``{"logs": [{namespace, pod, previous, text | error}]}``)."""

    INPUT: ClassVar[str] = "dns-logs"
    source: str
    doc: object

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.DNS_LOGS)
        return None if doc is None else cls(ctx.display(sources.DNS_LOGS), doc)


@dataclass(frozen=True)
class DnsLookups(Typed):
    """The DNS probe (probes/dns.json of kpdiag.dns/v1: the pod's resolv.conf, the lookups and each query sent), as
    written; ``problem(msg)`` records what in it could not be read."""

    INPUT: ClassVar[str] = "dns-lookups"
    source: str
    doc: typing.Mapping[str, Any]
    _problem: typing.Callable[..., Any] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.dns
        if not isinstance(doc, dict):
            return None
        return cls(ctx.display(sources.PROBES_DNS), doc, lambda msg: ctx.problem(sources.PROBES_DNS, msg))

    def problem(self, message: str) -> None:
        self._problem(message)


@dataclass(frozen=True)
class NetworkPolicies(Typed):
    """The NetworkPolicies (and what judging them needs: namespaces, pods, the CNI): whether they were collected, and
    the data they are judged with (``data()``, kpdiag.state.policy, read on first use), and the files of its input
    that evidence cites (the policies, the pods, the client pod, the CNI: ``has``, ``text``, ``source``, ``display``)."""

    INPUT: ClassVar[str] = "networkpolicies"
    collected: bool
    _data: typing.Callable[[], Any] = field(repr=False, compare=False)
    # the files evidence cites, by path (each a kpdiag.state.inputs.SourceFile)
    _files: typing.Mapping[str, SourceFile] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        files = (
            ctx.file(sources.NETWORKPOLICIES),
            ctx.file(sources.PODS),
            ctx.file(sources.CLIENT_POD),
            ctx.file(sources.CNI),
        )
        return cls(ctx.has(sources.NETWORKPOLICIES), lambda: ctx.cluster.policy_data(), {f.rel: f for f in files})

    def data(self) -> Any:
        return self._data()

    def has(self, rel: str) -> bool:
        """Whether one of its files was collected."""
        return self._files[rel].has()

    def display(self, rel: str) -> str:
        """How evidence names one of its files."""
        return self._files[rel].display

    def text(self, rel: str) -> str | None:
        """One of its files as written (evidence finds an object's line in it), None when not collected."""
        return self._files[rel].text() if self.has(rel) else None

    def source(self, rel: str) -> Any:
        """One of its files as read (``cluster/networkpolicies.json``: the List), None when not collected."""
        return self._files[rel].read() if self.has(rel) else None


@dataclass(frozen=True)
class NodeCIDRs:
    """One Node's pod ranges (``spec.podCIDRs``, else ``spec.podCIDR``) as the API records them."""

    name: str
    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    invalid: tuple[str, ...] = ()  # values that are not CIDRs, kept to say so


@dataclass(frozen=True)
class NodePodCIDRs(Typed):
    """The Nodes from the API (``cluster/nodes.json``) with their pod CIDRs; nodes without one are left out."""

    INPUT: ClassVar[str] = str(sources.NODES)
    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#podCIDR",)  # a Node List without pod CIDRs carries no fact
    source: str  # how evidence names the file
    nodes: tuple[NodeCIDRs, ...]
    objects: tuple[dict[str, Any], ...] = ()  # every Node object of the List, as the API wrote it

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.NODES)
        if not isinstance(doc, dict):
            return None
        out = []
        for item in doc.get("items") or []:
            if not isinstance(item, dict):
                continue
            meta, spec = item.get("metadata"), item.get("spec")
            name = meta.get("name") if isinstance(meta, dict) else None
            spec = spec if isinstance(spec, dict) else {}
            raw: list[Any] = spec["podCIDRs"] if isinstance(spec.get("podCIDRs"), list) else [spec.get("podCIDR")]
            good, bad = [], []
            for c in raw:
                if not isinstance(c, str) or not c:
                    continue
                try:
                    good.append(ipaddress.ip_network(c.strip(), strict=False))
                except ValueError:
                    bad.append(c)
            if good or bad:
                out.append(NodeCIDRs(name if isinstance(name, str) else "?", tuple(good), tuple(bad)))
        objects = (
            tuple(i for i in doc.get("items") or [] if isinstance(i, dict))
            if isinstance(doc.get("items"), list)
            else ()
        )
        return cls(ctx.display(sources.NODES), tuple(out), objects)

    def evidence(self, node: NodeCIDRs) -> Evidence:
        return Evidence(self.source, f"node {node.name}: podCIDRs {', '.join(map(str, node.cidrs))}")


@dataclass(frozen=True)
class NodeObjects(Typed):
    """Every Node object of ``cluster/nodes.json``, as the API wrote it (with or without a podCIDR), and how to read
    the few fields the CNI checks compare: the name, the InternalIP, an annotation."""

    INPUT: ClassVar[str] = str(sources.NODES)
    source: str
    objects: tuple[dict[str, Any], ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.NODES)
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            return None
        return cls(ctx.display(sources.NODES), tuple(i for i in doc["items"] if isinstance(i, dict)))

    @staticmethod
    def name(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else "?"

    def named(self, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if self.name(o) == name), None)

    @staticmethod
    def annotation(obj: dict[str, Any], key: str) -> str | None:
        meta = obj.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        value = notes.get(key) if isinstance(notes, dict) else None
        return value if isinstance(value, str) else None

    @staticmethod
    def internal_ip(obj: dict[str, Any]) -> str | None:
        status = obj.get("status")
        for a in (status.get("addresses") if isinstance(status, dict) else None) or []:
            if isinstance(a, dict) and a.get("type") == "InternalIP" and isinstance(a.get("address"), str):
                return str(a["address"])
        return None

    @staticmethod
    def pod_cidrs(obj: dict[str, Any]) -> list[str]:
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        raw: list[Any] = spec["podCIDRs"] if isinstance(spec.get("podCIDRs"), list) else [spec.get("podCIDR")]
        return [c for c in raw if isinstance(c, str) and c]


@dataclass(frozen=True)
class FlannelNodes(NodeObjects):
    """The Nodes, for the checks of flannel's own record of each node (its ``flannel.alpha.coreos.com/*``
    annotations: public-ip, backend-data with the VtepMAC); a Node List without them carries no fact for those."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#flannel.alpha.coreos.com/",)


@dataclass(frozen=True)
class CalicoNodes(NodeObjects):
    """The Nodes, for the checks of Calico's record of each node (``projectcalico.org/IPv4Address``)."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.NODES}#projectcalico.org/",)


@dataclass(frozen=True)
class Processes(Typed):
    """The node's processes kpdiag looked for (node/processes.txt: name → pid), as parsed."""

    INPUT: ClassVar[str] = str(sources.PROCESSES)
    source: str
    pids: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        procs = ctx.source(sources.PROCESSES)
        return None if procs is None else cls(ctx.display(sources.PROCESSES), procs)


@dataclass(frozen=True)
class ServiceLookup(Typed):
    """What ``kpdiag svc`` learnt asking the API for the Service (cluster/service-lookup.json): found or not, the
    names in its namespace, the namespaces holding one of that name."""

    INPUT: ClassVar[str] = "service-lookup"
    source: str
    doc: object

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.source(sources.SERVICE_LOOKUP)
        return None if doc is None else cls(ctx.display(sources.SERVICE_LOOKUP), doc)


@dataclass(frozen=True)
class IpvsTimeout(Typed):
    """``ipvsadm -L --timeout`` as collected (its text); ``problem(msg)`` records what in it could not be read."""

    INPUT: ClassVar[str] = "ipvs-timeout"
    source: str
    text: str
    _problem: typing.Callable[..., Any] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        text = ctx.source(sources.IPVS_TIMEOUT)
        if text is None:
            return None
        return cls(ctx.display(sources.IPVS_TIMEOUT), text, lambda msg: ctx.problem(sources.IPVS_TIMEOUT, msg))

    def problem(self, message: str) -> None:
        self._problem(message)


@dataclass(frozen=True)
class EthtoolOffload(Typed):
    """``ethtool -k`` of the overlay devices (node/ethtool-offload.txt), parsed: ``features.devices[dev][name]``
    (kpdiag.parse.ethtool: on, text, line) and ``features.source``."""

    INPUT: ClassVar[str] = str(sources.ETHTOOL_OFFLOAD)
    features: Offloads

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        parsed = ctx.source(sources.ETHTOOL_OFFLOAD)
        return None if parsed is None else cls(parsed)


@dataclass(frozen=True)
class Neighbours(Typed):
    """The neighbour tables, counted (node/neigh.json, kpdiag.parse.neigh): ``tables.families["ipv4"|"ipv6"]``
    (entries of the node's namespace by device, the kernel's count over every namespace, refusals) and
    ``tables.source``."""

    INPUT: ClassVar[str] = str(sources.NEIGH)
    tables: NeighTables

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        parsed = ctx.source(sources.NEIGH)
        return None if parsed is None else cls(parsed)


@dataclass(frozen=True)
class KernelLog(Typed):
    """The kernel's log lines about the network (node/kernel-log.txt, kpdiag.parse.neigh.KernelLog): ``log.lines``,
    ``log.overflows()``, ``log.source``."""

    INPUT: ClassVar[str] = str(sources.KERNEL_LOG)
    log: KernelLogLines

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        parsed = ctx.source(sources.KERNEL_LOG)
        return None if parsed is None else cls(parsed)


def parameters(fn: typing.Callable[..., Any]) -> tuple[tuple[str, type[Typed], bool], ...] | None:
    """A typed check's parameters: (name, typed input, optional) for each but ``new`` — or None for a check written
    the old way (``ctx, new``). A parameter that is neither ``new`` nor a typed input is a declaration error."""
    import inspect

    names = [p for p in inspect.signature(fn).parameters if p != "new"]
    if not names or names == ["ctx"]:
        return None
    hints = typing.get_type_hints(fn)
    out = []
    for name in names:
        hint = hints.get(name)
        optional = False
        args = typing.get_args(hint)
        if args and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            hint, optional = (rest[0] if len(rest) == 1 else None), True
        if not (isinstance(hint, type) and issubclass(hint, Typed) and hint is not Typed):
            raise ValueError(
                f"check {fn.__name__}: parameter {name!r} is not a typed input (kpdiag/state/typed.py) nor 'new'"
            )
        out.append((name, hint, optional))
    return tuple(out)


def call(
    fn: typing.Callable[..., Any],
    params: tuple[tuple[str, type[Typed], bool], ...],
    ctx: Inputs,
    new: typing.Callable[..., Any],
    skip: typing.Callable[[str], Exception],
) -> Any:
    """Build each typed input from the check's view and call the check with them (``skip``: checkapi.Skip, raised
    when a needed input is there but cannot be read as its type)."""
    from kpdiag.state.inputs import Inputs

    kwargs = {}
    for name, typ, _optional in params:
        view = Inputs(ctx._target, ctx.check_id, (typ.INPUT,), typ.SCOPE)  # the one input it is built from
        object.__setattr__(view, "violations", ctx.violations)  # a lazy field's reads later are policed as one
        kwargs[name] = typ.build(view)
        if kwargs[name] is None and not _optional:  # there, but not in a form it can be read as
            raise skip(f"needs {view_what(typ)}, which is missing or unreadable")
    return fn(new=new, **kwargs)


def evident_by(spec: CheckSpec, name: str) -> tuple[str, ...]:
    """The bundle files any one of which shows that input ``name`` of check ``spec`` was collected: a typed parameter's
    ``FILES``, else the input's own (``Input.evident_by``)."""
    from kpdiag.state.inputs import catalogue

    for _, typ, _ in spec.params:
        files: tuple[str, ...] | None = typ.FILES
        if typ.INPUT == name and files is not None:
            return files
    return catalogue(spec.scope)[name].evident_by


def view_what(typ: type[Typed]) -> str:
    from kpdiag.state.inputs import catalogue

    return catalogue(typ.SCOPE)[typ.INPUT].what


# --- typed inputs of the service checks (h/typedsvc)


@dataclass(frozen=True)
class Focus(Typed):
    """The Service being diagnosed (``kpdiag svc``, ``kpdiag node --service``): (namespace, name), or None when every
    Service is. Always there."""

    INPUT: ClassVar[str] = "focus"
    service: tuple[str, str] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.focus)


@dataclass(frozen=True)
class Services(Typed):
    """The Services from the API (cluster/services.json), parsed (kpdiag.state.cluster.Svc: ports, selector,
    cluster_ips, traffic policies, and the endpoints of its EndpointSlices when those were read): ``focused`` the ones
    to diagnose (the focused one — none when the API has no such Service — else all), ``every`` all of them."""

    INPUT: ClassVar[str] = "services"
    source: str
    focused: tuple[Any, ...]  # of kpdiag.state.cluster.Svc
    every: tuple[Any, ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        every = ctx.cluster.services()
        if every is None:
            return None
        return cls(ctx.display(sources.SERVICES), tuple(ctx.services_in_focus()), tuple(every))

    def evidence(self, svc: Svc, what: str) -> Evidence:
        """A fact of Service ``svc`` (``what``: its spec as it bears on the finding)."""
        return Evidence(self.source, f"{svc.key}: {what}")


@dataclass(frozen=True)
class EndpointSlices(Typed):
    """The EndpointSlices from the API (cluster/endpointslices.json): ``items`` as read (None when not collected;
    their endpoints are joined to the Services, ``Svc.endpoints``), ``source`` how evidence about endpoints names the
    file. Always built, as a use too: evidence about a Service's (absent) endpoints cites it."""

    INPUT: ClassVar[str] = "endpointslices"
    source: str
    items: tuple[Any, ...] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        items = ctx.cluster.endpointslices()
        return cls(ctx.display(sources.ENDPOINTSLICES), None if items is None else tuple(items))

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class Pods(Typed):
    """The pods from the API (cluster/pods.json) as read, and ``selected(svc)``: those a Service's selector picks in
    its namespace."""

    INPUT: ClassVar[str] = "pods"
    source: str
    items: tuple[Any, ...]  # the Pod objects (dicts)
    _selected: typing.Callable[[Svc], list[dict[str, Any]]] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        items = ctx.cluster.pods()
        if items is None:
            return None
        return cls(ctx.display(sources.PODS), tuple(items), lambda svc: ctx.cluster.selected_pods(svc))

    def selected(self, svc: Svc) -> list[dict[str, Any]]:
        return self._selected(svc)

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class NodeObject(Typed):
    """This node as the API knows it: its name (the one Node of cluster/nodes.json, else the manifest's node) and
    zone (its topology.kubernetes.io/zone label, else the manifest's zone); None when not known. Always there."""

    INPUT: ClassVar[str] = "node-object"
    name: str | None
    zone: str | None
    source: str = ""  # how evidence names cluster/nodes.json
    _doc: typing.Callable[..., Any] = field(default=lambda: None, repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(
            ctx.cluster.node_name(),
            ctx.cluster.node_zone(),
            ctx.display(sources.NODES),
            lambda: ctx.source(sources.NODES) if ctx.has(sources.NODES) else None,
        )

    def names(self) -> list[str]:
        """The names of the Node objects in cluster/nodes.json (a List, or one Node), read on first use ([] without
        the file)."""
        from kpdiag.bundle.store import list_items

        doc = self._doc()
        if doc is None:
            return []
        listed = list_items(doc)
        items: list[Any] = listed if listed is not None else [doc]
        return [
            str((i.get("metadata") or {}).get("name"))
            for i in items
            if isinstance(i, dict) and isinstance(i.get("metadata"), dict) and (i.get("metadata") or {}).get("name")
        ]


@dataclass(frozen=True)
class Probes(Typed):
    """The active probes of the Service (probes/service.json, a kpdiag.probes/v1 document): ``doc`` as written,
    ``probe_results(kind, target_prefix)`` its results. kpdiag.state.probe_results.observations reads it as it reads
    the state (``probes``, ``probe_results``)."""

    INPUT: ClassVar[str] = "probes"
    source: str
    doc: typing.Mapping[str, Any]
    _results: typing.Callable[[str | None, str | None], list[dict[str, Any]]] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.probes
        if doc is None:
            return None
        return cls(ctx.display(sources.PROBES_SERVICE), doc, lambda kind, prefix: ctx.probe_results(kind, prefix))

    @property
    def probes(self) -> typing.Mapping[str, Any]:
        return self.doc

    def probe_results(self, kind: str | None = None, target_prefix: str | None = None) -> list[dict[str, Any]]:
        return self._results(kind, target_prefix)

    def evidence(self, text: str) -> Evidence:
        return Evidence(self.source, text)


@dataclass(frozen=True)
class DnsProbe(Typed):
    """A DNS lookup of the Service (probes/dns.json): the name asked, the result, the addresses, as written."""

    INPUT: ClassVar[str] = "dns"
    source: str
    doc: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.dns
        return None if doc is None else cls(ctx.display(sources.PROBES_DNS), doc)


# --- typed inputs of the node checks (h/typednode)


@dataclass(frozen=True)
class ConntrackEntries(Typed):
    """The node's conntrack table (``conntrack -L``), its text as collected."""

    INPUT: ClassVar[str] = "conntrack-entries"
    source: str
    text: str

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        text = ctx.source(sources.CONNTRACK)
        return None if text is None else cls(ctx.display(sources.CONNTRACK), text)


@dataclass(frozen=True)
class Tracer(Typed):
    """The node's packet tracers (kpdiag/trace/), each made on first use and shared by every check of the run:
    ``iptables()`` through its iptables rules, ``of_mode(mode, family)`` through the rules of a proxy mode (default:
    the one kube-proxy runs), ``if_forwarding()`` as if the node forwarded packets. Each is None without the rules."""

    INPUT: ClassVar[str] = "tracer"
    _iptables: typing.Callable[[], IptablesTracer | None] = field(repr=False, compare=False)
    _mode: typing.Callable[[str | None, int], PacketWalker | None] = field(repr=False, compare=False)
    _forwarding: typing.Callable[[], IptablesTracer | None] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(
            lambda: ctx.tracer(),
            lambda mode, family: ctx.mode_tracer(mode, family),
            lambda: ctx.tracer_if_forwarding(),
        )

    def iptables(self) -> IptablesTracer | None:
        return self._iptables()

    def of_mode(self, mode: str | None = None, family: int = 4) -> PacketWalker | None:
        return self._mode(mode, family)

    def if_forwarding(self) -> IptablesTracer | None:
        return self._forwarding()


# --- typed inputs of the dataplane checks (h/typeddp)


@dataclass(frozen=True)
class Ipvs(Typed):
    """The IPVS table (``ipvsadm -Sn``, else ``ipvsadm -Ln``): virtual servers by (proto, address, port)
    (kpdiag.parse.ipvs.VirtualService: name, addr, reals, line)."""

    INPUT: ClassVar[str] = "ipvs"
    source: str  # how evidence names ipvsadm -Sn
    services: typing.Mapping[tuple[object, ...], VirtualService]
    listing: str | None  # how evidence names ipvsadm -Ln (its connection counts), None when it was not collected

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        services = ctx.ipvs
        if services is None:
            return None
        listed = ctx.display(sources.IPVSADM_LIST) if ctx.has(sources.IPVSADM_LIST) else None
        return cls(ctx.display(sources.IPVSADM), services, listed)

    def absent(self, flag: str, addr: str) -> Evidence:
        """No virtual server ``flag`` (-t/-u) ``addr``."""
        return Evidence(self.source, f"no -A {flag} {addr}")

    def reals(self, vs: VirtualService, have: typing.Iterable[str]) -> Evidence:
        """A virtual server and the real servers it sends new connections to."""
        return Evidence(self.source, f"{vs.name}: real servers {', '.join(sorted(have))}", vs.line)


@dataclass(frozen=True)
class IpvsConnections(Typed):
    """IPVS's connection table (/proc/net/ip_vs_conn), counted: ``doc["entries"]`` ({proto, vaddr, vport, daddr,
    dport, state, count}), ``truncated``, ``connections_read``."""

    INPUT: ClassVar[str] = "ipvs-conn"
    source: str
    doc: typing.Mapping[str, Any]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        doc = ctx.ipvs_conn
        return None if doc is None else cls(ctx.display(sources.IPVS_CONN), doc)


@dataclass(frozen=True)
class Cni(Typed):
    """The node's CNI and its routing model (kpdiag/state/cni.py): ``model.route_verdicts()`` is None where pod-CIDR
    route verdicts apply, else the one-line reason they do not (an unknown CNI gets none)."""

    INPUT: ClassVar[str] = "cni"
    model: CniModel

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.cni)


@dataclass(frozen=True)
class Cloud(Typed):
    """The cloud this node runs on (kpdiag/state/cloud.py ``CloudModel``: AWS, Azure or another, and how it was told:
    its Node's providerID, else the firmware's maker)."""

    INPUT: ClassVar[str] = "cloud"
    model: CloudModel

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        model = ctx.cloud
        return None if model is None else cls(model)


@dataclass(frozen=True)
class AwsNodeEnv(Cni):
    """The CNI model, for the checks of aws-node's settings (its AWS_VPC_K8S_CNI_* env, ``model.settings``, kept from
    the DaemonSet in cluster/cni.json or cluster/daemonsets.json); a bundle without them carries no fact for those."""

    FILES: ClassVar[tuple[str, ...]] = (f"{sources.CNI}#AWS_VPC_K8S_CNI_", f"{sources.DAEMONSETS}#AWS_VPC_K8S_CNI_")


@dataclass(frozen=True)
class ServiceImplementer(Typed):
    """Who implements Services on this node (kpdiag/state/service_proxy.py ``Implementer``: kube-proxy, a replacement,
    nothing of Kubernetes; its evidence, leftovers, pod). ``implementer`` is None when that cannot be told."""

    INPUT: ClassVar[str] = "implementer"
    implementer: Implementer | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.service_implementer)


class NodeProcesses(Processes):
    """``Processes`` read through the named input "processes" (its skip reason says "the node's processes")."""

    INPUT: ClassVar[str] = "processes"


@dataclass(frozen=True)
class Ipsets(Typed):
    """kube-proxy's ipsets (``ipset save``, kpdiag.parse.ipset: name → set with ``raw_entries``); ``sets`` is None when
    they could not be read, and ``problems`` says why (the collector's or parser's words). Always there."""

    INPUT: ClassVar[str] = "ipsets"
    source: str
    sets: typing.Mapping[str, Any] | None
    problems: tuple[Any, ...] = ()  # kpdiag.bundle problems recorded with ipset save (error, source)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        sets = ctx.ipsets
        return cls(ctx.display(sources.IPSET), sets, tuple(ctx.problems_with(sources.IPSET)))


@dataclass(frozen=True)
class ModulesOnDisk(Typed):
    """The kernel modules modprobe can load (modules.dep; None: not collected) and whether /proc/modules exists,
    whether or not it could be read (``Modules`` is there only when it was). Always there."""

    INPUT: ClassVar[str] = "modules"
    available: frozenset[str] | None
    source: str  # how evidence names the list of modules on disk
    proc_modules: bool  # /proc/modules was collected (a kernel without loadable modules has none)
    no_loadable_modules: bool = False  # the collector found no /proc/modules: this kernel cannot load modules

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        avail = ctx.modules_available
        return cls(
            None if avail is None else frozenset(avail),
            ctx.display(sources.MODULES_AVAILABLE),
            ctx.has(sources.MODULES),
            any("/proc/modules does not exist" in p.error for p in ctx.problems_with(sources.MODULES)),
        )


@dataclass(frozen=True)
class IpvsProblems(Typed):
    """What collecting the IPVS table ran into (``problems``: error, source), whether or not it was read — "not
    loaded" is the sign that IPVS is not in the kernel. Always there."""

    INPUT: ClassVar[str] = "ipvs"
    problems: tuple[Any, ...]

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(tuple(ctx.problems_with(sources.IPVSADM)))


@dataclass(frozen=True)
class IptablesBackends(Typed):
    """Both iptables backends' dumps (iptables-legacy-save, iptables-nft-save; None: not collected), whether or not
    iptables-save itself was (``KubeProxyRules`` is there only when it was). Always there."""

    INPUT: ClassVar[str] = "iptables"
    legacy: Ruleset | None
    nft: Ruleset | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.iptables("iptables-legacy-save"), ctx.iptables("iptables-nft-save"))


# --- typed inputs of the last node checks (h/typedlast)


@dataclass(frozen=True)
class Partial(Typed):
    """What a partial bundle holds (``kpdiag node --service`` reads one Service's rules; the manifest's ``partial``:
    the Service, the sources it holds), None for a whole bundle. Always there."""

    INPUT: ClassVar[str] = "whole-rules"
    partial: typing.Mapping[str, Any] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.partial or None)


class PartialServices(Partial):
    """``Partial`` read through the named input "whole-services" (every Service of the API, not one Service's)."""

    INPUT: ClassVar[str] = "whole-services"


@dataclass(frozen=True)
class ProxyModeAnswered(Typed):
    """Whether kube-proxy's /proxyMode answer was written as a file (kpdiag node writes it only when kube-proxy's own
    socket answered), whether or not it parses: ``present``; ``rel`` its path, ``source`` how evidence names it.
    ``MetricsAnswered`` and ``HealthzAnswered`` say the same of /metrics and /healthz. Always there."""

    INPUT: ClassVar[str] = "kube-proxy-mode"
    rel: str
    source: str
    present: bool

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(str(sources.KP_PROXY_MODE), ctx.display(sources.KP_PROXY_MODE), ctx.has(sources.KP_PROXY_MODE))


class MetricsAnswered(ProxyModeAnswered):
    INPUT: ClassVar[str] = "kube-proxy-metrics"

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(str(sources.KP_METRICS), ctx.display(sources.KP_METRICS), ctx.has(sources.KP_METRICS))


class HealthzAnswered(ProxyModeAnswered):
    INPUT: ClassVar[str] = "kube-proxy-healthz"

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(str(sources.KP_HEALTHZ), ctx.display(sources.KP_HEALTHZ), ctx.has(sources.KP_HEALTHZ))


@dataclass(frozen=True)
class Ip6Programmed(Typed):
    """The Service ports kube-proxy programmed in the IPv6 rules (ip6tables-save), whether or not the IPv4 dump was
    collected (``KubeProxyRules`` is there only when it was): ``ports`` None when not collected. Always there."""

    INPUT: ClassVar[str] = "iptables"
    source: str
    ports: typing.Mapping[str, Any] | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.display(sources.IP6TABLES_SAVE), ctx.programmed("ip6tables-save"))


# --- typed inputs of the cluster checks (checks/fleet.py): built from a kpdiag.fleet.aggregate.FleetState


@dataclass(frozen=True)
class NodeReports(Typed):
    """The node reports of a fleet run (``kpdiag cluster``, ``kpdiag analyze DIR``): every node's result (``results``:
    kpdiag.fleet.aggregate.NodeResult, its normalised report or why there is none), the diagnosed ones (``ok``), their
    findings by check id, and the API server's version (None: not asked)."""

    INPUT: ClassVar[str] = "node-reports"
    SCOPE: ClassVar[str] = "cluster"
    results: tuple[Any, ...]  # every NodeResult, diagnosed or not
    ok: tuple[Any, ...]  # the NodeResults with a report
    api_version: str | None  # the API server's gitVersion
    findings_by_check: typing.Mapping[str, Any]  # check id → [(node, finding dict)]
    common_threshold: int  # a node finding on at least this many nodes is reported once (KP805)
    _fact: typing.Callable[..., Any] = field(repr=False, compare=False)

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(
            tuple(ctx.results),
            tuple(ctx.ok),
            ctx.api_version,
            ctx.node_findings_by_check(),
            ctx.common_threshold(),
            lambda r, key: ctx.fact(r, key),
        )

    def fact(self, r: Any, key: str) -> Any:
        """A fact of node result ``r``'s report (``proxy_mode``, ``zone``, ``kube_proxy_version`` …), or None."""
        return self._fact(r, key)


@dataclass(frozen=True)
class ProgrammedTables(Typed):
    """The Service ports the nodes programmed (their reports' programmed tables), nodes with identical tables grouped,
    and the internalTrafficPolicy: Local ports (each node programs its own endpoints for those, by design)."""

    INPUT: ClassVar[str] = "programmed"
    SCOPE: ClassVar[str] = "cluster"
    # (one document, node names, decoded table: "ClusterIP:port/proto" → (name, endpoints digest, count)), biggest first
    groups: tuple[Any, ...]
    local_keys: frozenset[str]  # internalTrafficPolicy: Local ports, from the API and from the nodes' own rules
    policy_known: bool  # every table tells those ports apart, or the API was read

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(tuple(ctx.programmed_groups()), frozenset(ctx.local_keys), ctx.policy_known)

    @property
    def nodes(self) -> int:
        """How many nodes reported a programmed table."""
        return sum(len(nodes) for _, nodes, _ in self.groups)
