"""Typed inputs of kube-proxy and its dataplanes (kpdiag/state/typed.py says what a typed input is): its mode,
version, configuration, log, metrics and answers, its iptables, nftables and IPVS rules, ipsets, the tracers.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.dataplane.base import Dataplane
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.parse.ipvs import VirtualService
    from kpdiag.parse.nft import NftRuleset
    from kpdiag.parse.node import KubeProxyConfig as ParsedConfig, Metrics
    from kpdiag.state.inputs import Inputs
    from kpdiag.state.kpsettings import Effective, LogFact, Setting
    from kpdiag.state.kube_rules import ProgrammedPort
    from kpdiag.state.service_proxy import Implementer
    from kpdiag.trace.netfilter import IptablesTracer
    from kpdiag.trace.walker import PacketWalker

from kpdiag.bundle import sources
from kpdiag.model import Evidence
from kpdiag.state.typed import Typed


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
class ServiceImplementer(Typed):
    """Who implements Services on this node (kpdiag/state/service_proxy.py ``Implementer``: kube-proxy, a replacement,
    nothing of Kubernetes; its evidence, leftovers, pod). ``implementer`` is None when that cannot be told."""

    INPUT: ClassVar[str] = "implementer"
    implementer: Implementer | None

    @classmethod
    def build(cls, ctx: Inputs) -> Self | None:
        return cls(ctx.service_implementer)


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
