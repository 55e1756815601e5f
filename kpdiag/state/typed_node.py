"""Typed inputs of the node itself (kpdiag/state/typed.py says what a typed input is): its kernel settings,
addresses, routes, modules, conntrack, processes, neighbours, kernel log, CNI, cloud and the run's scope.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

    from kpdiag.parse.ethtool import Offloads
    from kpdiag.parse.neigh import KernelLog as KernelLogLines, NeighTables
    from kpdiag.parse.node import Module, Value
    from kpdiag.state.cloud import CloudModel
    from kpdiag.state.cni import CniModel
    from kpdiag.state.inputs import Inputs
    from kpdiag.trace.routing import RoutingTable

from kpdiag.bundle import sources
from kpdiag.model import Evidence
from kpdiag.state.typed import Typed


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
            raise KeyError(f"{key} is not one of the conntrack input's sysctls (state/typed_node.py CONNTRACK_SYSCTLS)")
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


class NodeProcesses(Processes):
    """``Processes`` read through the named input "processes" (its skip reason says "the node's processes")."""

    INPUT: ClassVar[str] = "processes"


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
