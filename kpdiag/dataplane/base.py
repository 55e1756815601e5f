"""The dataplane base class and its registry (see the package's docstring)."""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

if TYPE_CHECKING:
    from kpdiag.model import Evidence
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.state.cluster import Svc
    from kpdiag.state.node import NodeState
    from kpdiag.trace.walker import PacketWalker

# a dataplane's Service ports, read back from its rules: "ClusterIP:port/proto" → (name, endpoints, local policy)
ServiceTable = dict[str, tuple[str, tuple[str, ...], bool]]
D = TypeVar("D", bound="type[Dataplane]")

_REGISTRY: dict[str, Dataplane] = {}
_LOADED = False


class Dataplane:
    """One way Services are implemented on a node. Subclasses set the class attributes and override the methods
    that differ; the defaults are those of a mode kpdiag knows nothing particular about."""

    name: str = ""  # kube-proxy's name for its mode (iptables, ipvs …) or the replacement's (cilium …)
    label: str = ""  # for people ("Cilium's kube-proxy replacement")
    kube_proxy: bool = True  # a kube-proxy mode (False: a replacement that implements Services instead)
    known: bool = True  # False only for UNKNOWN: no /proxyMode, configuration or rules say the mode
    order: int = 100  # the order its signs are listed in (and replacements are tried in)
    precedence: int = 0  # kube-proxy modes: when several modes' rules are on the node, the highest is taken
    # ---- its words
    services_live: str = ""  # "its iptables rules are": "kube-proxy runs in ipvs mode: <this> not where Services live"
    tools: tuple[str, ...] = ()  # commands that show its own view of Services (a replacement's, for KP708)
    # ---- its capabilities (what the rest of kpdiag asks instead of comparing names)
    has_own_tracer: bool = False  # kpdiag traces packets through it (else a trace reads the iptables rules)
    traced_with_iptables: bool = True  # its tracer walks iptables' tables (a host firewall's nft tables are added)
    shows_local_policy: bool = False  # its programmed table shows internalTrafficPolicy: Local
    cluster_ips_stay_on_node: bool = False  # a ClusterIP without a matching Service port is not routed away
    keeps_service_names: bool = True  # its rules name the Service (IPVS keeps addresses only)
    services_in_nft: bool = False  # its Services are in kube-proxy's nftables table (ClusterIPs, NodePorts, endpoints)
    services_in_ipvs: bool = False  # its Services are IPVS virtual servers
    per_service_reject_comments: bool = True  # kube-proxy's no-endpoint rules carry the Service's name
    cluster_ips_bound: bool = False  # ClusterIPs are addresses of the node (kube-ipvs0): they answer ping
    removed: str | None = None  # the Kubernetes release that removed this mode
    not_in_use: tuple[str, ...] = ()  # components (kpdiag/rootcause.py COMPONENTS) a node in this mode does not use
    reads_one_service: bool = False  # `kpdiag node --service` can read only that Service's rules (else: all of them)
    preflight: bool = False  # `kpdiag node --preflight NAME` asks whether a host can run it (its checks: preflight=)
    trace_sources: tuple[str, ...] = ("iptables-save", "ip-addr", "ip-route", "sysctl")  # what a live trace reads

    @property
    def in_words(self) -> str:
        """ "iptables mode", "IPVS mode" …"""
        return f"{self.title or self.name} mode"

    title: str = ""  # its name in prose when that differs (IPVS)

    def __repr__(self) -> str:
        return f"<dataplane {self.name or 'unknown'}>"

    # ---- detection
    def signs(self, state: NodeState) -> str | None:
        """A kube-proxy mode: what on the node shows its rules (None: nothing)."""
        return None

    def detect(self, host: Host) -> tuple[list[tuple[str, str]], bool]:
        """A replacement: ([(source, text)] of what shows it is there, whether its service proxy is the part seen)."""
        return [], False

    # ---- what it programmed, and how a packet goes through it
    def service_table(self, state: NodeState) -> ServiceTable | None:
        """``{"ClusterIP:port/proto": (name, endpoints, local policy)}`` read back from this dataplane's rules, or None
        when they are not readable. The default is kube-proxy's iptables rules (a mode with no table of its own)."""
        return get("iptables").service_table(state)

    def tracer(self, state: NodeState, family: int = 4, rules: Ruleset | None = None) -> PacketWalker | None:
        """The tracer of this dataplane for IP version ``family``, or None without its rules. Default: iptables.
        ``rules``: the iptables rules to walk instead of ``iptables-save``'s (kpdiag/trace/backends.py: another
        backend's)."""
        return get("iptables").tracer(state, family, rules)

    def trace_rules(self, state: NodeState, family: int = 4) -> tuple[object, str, str]:
        """(parsed rules, source, what they are in words) that a trace of this dataplane cannot do without."""
        from kpdiag.bundle import sources

        which = "ip6tables-save" if family == 6 else "iptables-save"
        return (
            state.iptables(which),
            sources.iptables_dump(which),
            "IPv6 iptables rules" if family == 6 else "iptables rules",
        )

    def trace_missing(self, state: NodeState) -> str | None:
        """What else a trace of this dataplane needs and the node lacks, in words (None: nothing)."""
        return None

    def skip_reason(self, check_modes: tuple[str, ...]) -> str:
        """Why a check about ``check_modes`` does not run on a node in this mode."""
        return f"kube-proxy runs in {self.name} mode; this check is about {' and '.join(check_modes)} mode"

    def not_where_services_live(self, running: Dataplane) -> str:
        return f"kube-proxy runs in {running.name} mode: {self.services_live} not where Services live"

    # ---- its Service ports (checks/dataplane.py: "missing" and "mismatch", the same for every mode)
    ports_verb: str = "the node DNATs to"  # how a drift says where new connections go
    counts_share: bool = False  # a drift also says which share of connections goes astray (iptables' words)

    def ports_skip(self, running: Dataplane, preflight: str | None, table: Any) -> str | None:
        """Why its Service ports cannot be judged here (None: they can): kube-proxy runs another known mode, or
        ``table`` (its rules as a typed input: KubeProxyRules, Ipvs, Nft) cannot show them."""
        if running.known and running is not self:
            return self.not_where_services_live(running)
        return None

    def port_views(self, services: Iterable[Svc], table: Any) -> Iterable[PortView]:
        """Each port of ``services`` (kpdiag.state.cluster.Svc) on each ClusterIP, as ``table`` programs it."""
        return ()

    def missing_words(self, view: PortView) -> Words:
        raise NotImplementedError(f"{self.name} judges no Service ports")

    def mismatch_words(self, view: PortView, have: set[str], text: str) -> Words:
        raise NotImplementedError(f"{self.name} judges no Service ports")


@dataclass
class PortView:
    """One Service port on one ClusterIP, as the API defines it and as a dataplane's rules program it."""

    svc: Svc
    port: dict[str, Any]  # the Service's port as the API has it
    family: int  # 4 or 6
    ip: str  # the ClusterIP of that family
    ready: int  # ready endpoints of that family in the API
    programmed: Any  # the mode's object (KUBE-SVC chain, virtual server, nft chain); None: not programmed
    endpoints: frozenset[str] = frozenset()  # where it sends new connections ("ip:port", "[ip6]:port")
    context: Any = None  # the mode's own extras for its words (the ruleset, the map family, the key)

    @property
    def number(self) -> int:
        return int(self.port.get("port") or 0)

    @property
    def proto(self) -> str:
        return str(self.port.get("protocol") or "TCP").lower()

    @classmethod
    def of(
        cls,
        svc: Svc,
        port: dict[str, Any],
        family: int,
        ip: str,
        programmed: Any,
        endpoints: Iterable[str] = frozenset(),
        context: Any = None,
    ) -> PortView:
        ready = sum(1 for e in svc.endpoints_for(port, family=family) if e.ready)
        return cls(svc, port, family, ip, ready, programmed, frozenset(endpoints), context)


@dataclass(frozen=True)
class Words:
    """One finding's words in one mode: the summary, the commands that show the rules, and where they say it."""

    summary: str
    fix: tuple[str, ...]
    rules: Evidence  # the rule, virtual server or map element (or its absence)


def cluster_ips(svc: Svc) -> list[tuple[int, str]]:
    """A Service's ClusterIPs with their IP version."""
    return [(6 if ":" in ip else 4, ip) for ip in svc.cluster_ips]


KUBE_PROXY_LOG = "kubectl -n kube-system logs <kube-proxy pod on this node> --tail=100"
KUBE_PROXY_RESTART = "kubectl -n kube-system delete pod <kube-proxy pod on this node>"


class _Other(Dataplane):
    """A mode name kpdiag has no class for (a configuration's typo, Windows' kernelspace): known, nothing more."""

    def __init__(self, name: str):
        self.name = name


class _Unknown(Dataplane):
    known = False
    label = "unknown"


UNKNOWN = _Unknown()


@dataclass
class Host:
    """What replacements are recognised by: the node's interfaces, iptables chains, BPF map names and processes, with
    the sources to cite for each."""

    links: dict[str, dict[str, Any]] = field(default_factory=dict)  # ifname → ip -j addr entry
    chains: set[str] = field(default_factory=set)
    maps: list[str] = field(default_factory=list)
    procs: dict[str, str] = field(default_factory=dict)  # comm → pid
    addr_src: str = ""
    ipt_src: str = ""
    maps_src: str = ""
    procs_src: str = ""


def dataplane(cls: D) -> D:
    """Register a dataplane class (one instance of it) under its ``name``."""
    if not cls.name:
        raise ValueError(f"dataplane {cls.__name__} has no name")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and type(existing).__module__ != cls.__module__:
        raise ValueError(f"dataplane {cls.name} declared twice ({type(existing).__module__} and {cls.__module__})")
    _REGISTRY[cls.name] = cls()
    return cls


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    package = __name__.rpartition(".")[0]  # every module of this package but this one declares dataplanes
    for mod in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if mod.name != "base":
            importlib.import_module(f"{package}.{mod.name}")


def registered() -> list[Dataplane]:
    """Every registered dataplane, in ``order``."""
    _load()
    return sorted(_REGISTRY.values(), key=lambda d: (d.order, d.name))


def kube_proxy_modes() -> list[Dataplane]:
    return [d for d in registered() if d.kube_proxy]


def replacements() -> list[Dataplane]:
    return [d for d in registered() if not d.kube_proxy]


def get(name: str | None) -> Dataplane:
    """The dataplane called ``name``; UNKNOWN for None, a nameless one for a name no class has."""
    if name is None:
        return UNKNOWN
    _load()
    found = _REGISTRY.get(name)
    return found if found is not None else _Other(str(name))
