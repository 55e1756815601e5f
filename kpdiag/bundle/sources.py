"""The source catalogue: every file a bundle can hold, declared once (docs/architecture.md §3).

A :class:`Source` *is* its bundle path (a ``str``), so it works wherever a path does — as a key of a collector's
``files``, in :meth:`kpdiag.bundle.store.Bundle.read_text`, in evidence — and carries everything the rest of kpdiag
needs to know about it: how it is collected (``collect``: a declarative recipe the node collector interprets, or
``method()``: the collector methods that declare it with :func:`writes`), what it holds (in words, for messages and
docs), the function that parses it (``parser``: the function itself), how it is redacted (``redact``), how its parser
is fuzzed (``fuzz``) and whether a lab network namespace records it (``lab``).

No other module spells a bundle path: collectors write ``files[src.IPVSADM]``, the state reads
``bundle.read_text(src.IPVSADM)``, checks name ``src.IPVSADM`` in their evidence (a test enforces this).
Adding a node source = its declaration here (with a recipe: :func:`command`, :func:`per_interface`,
:func:`host_file`), its parser (``kpdiag/parse/``) and its test; the collector, the redaction, the fuzz test, the
lab recorder and the fixture test read the declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kpdiag.parse import ethtool, ipset, iptables, ipvs, neigh, nft, recent
from kpdiag.parse import node as parse_node

Parser = Callable[[str, str], Any]  # a source's parser: (text, the source's path for its errors) → what it holds


# ------------------------------------------------------------------ how a source is collected (node sources)
@dataclass(frozen=True)
class Command:
    """Run ``name ARGS`` (the host's own binary through chroot when a host root is mounted) and keep its stdout.

    ``timeout``: seconds (None: the collector's CMD_TIMEOUT). ``loaded``: kernel modules of which one must already be
    in the kernel (loaded or built in) — the command would load it otherwise, and kpdiag is read-only — or else a
    file under /proc (``proc:PATH``) whose presence says the feature is there; ``absent`` is the manifest's error when
    neither is."""

    name: str
    args: tuple[str, ...] = ()
    timeout: float | None = None
    loaded: tuple[str, ...] = ()
    absent: str = ""

    def describe(self) -> str:
        return " ".join((self.name, *self.args))


@dataclass(frozen=True)
class PerInterface:
    """Run ``name ARGS DEV`` for each interface of ``node/ip-addr.json`` whose link kind is in ``kinds`` (at most
    ``limit`` of them, names checked), the outputs concatenated."""

    name: str
    args: tuple[str, ...]
    kinds: tuple[str, ...]
    limit: int = 16
    timeout: float | None = None

    def describe(self) -> str:
        return f"{' '.join((self.name, *self.args))} DEV for each {'/'.join(self.kinds)} device"


@dataclass(frozen=True)
class HostFile:
    """Read ``path`` under the host root (``{release}``: the running kernel's), at most ``limit`` bytes; a missing file
    is no error (``missing``: unless an error text is given). The path's first folders must be a declared HOST_PATHS
    entry of the node collector (a test checks it)."""

    path: str
    limit: int = 16 * 1024 * 1024
    missing: str = ""

    def describe(self) -> str:
        return "/" + self.path.replace("{release}", "$(uname -r)")


@dataclass(frozen=True, eq=False)
class Method:
    """Written by methods of the node collector, each of which declares it (``@sources.writes(SRC, …)`` above the
    method in kpdiag/collect/): collection too involved for a recipe (backends, netlink, bounded streams, trust
    checks). ``steps`` holds those methods themselves (unbound), in the order they are declared."""

    steps: list[Callable[[Any], None]] = field(default_factory=list)

    @property
    def names(self) -> tuple[str, ...]:
        """The steps' names (a collection's step names, in errors and timings)."""
        return tuple(step.__name__ for step in self.steps)

    def describe(self) -> str:
        return ""


# ------------------------------------------------------------------ how a source is collected (the API, the probes)
@dataclass(frozen=True)
class ApiRead:
    """Read from the Kubernetes API. ``calls``: the requests, each (verb, API group, resource) — group "" is the core
    API, None a non-resource URL (``/version``) — which deploy/'s RBAC manifests grant; ``writers``: the functions that
    make them and write the file (``module:qualname``). Both are checked against the code and the manifests
    (tests/packaging/test_source_catalogue.py)."""

    calls: tuple[tuple[str, str | None, str], ...]
    writers: tuple[str, ...]

    def describe(self) -> str:
        return ", ".join(f"{verb} {res}{'.' + group if group else ''}" for verb, group, res in self.calls)


@dataclass(frozen=True)
class Probe:
    """Written from what kpdiag's own probes saw (``sends``, in words) by ``writers`` (``module:qualname``)."""

    sends: str
    writers: tuple[str, ...]

    def describe(self) -> str:
        return f"kpdiag's probes: {self.sends}"


@dataclass(frozen=True)
class ByHand:
    """Not collected by kpdiag: a file a hand-made bundle may hold, made with ``how``."""

    how: str

    def describe(self) -> str:
        return f"{self.how} (a hand-made bundle)"


Recipe = Command | PerInterface | HostFile | Method | ApiRead | Probe | ByHand
NODE_RECIPES = (Command, PerInterface, HostFile, Method)  # what the node collector interprets


def command(
    name: str, *args: str, timeout: float | None = None, loaded: tuple[str, ...] = (), absent: str = ""
) -> Command:
    return Command(name, tuple(args), timeout, tuple(loaded), absent)


def per_interface(name: str, *args: str, kinds: tuple[str, ...], limit: int = 16, timeout: float | None = None):
    return PerInterface(name, tuple(args), tuple(kinds), limit, timeout)


def host_file(path: str, limit: int = 16 * 1024 * 1024, missing: str = "") -> HostFile:
    return HostFile(path.lstrip("/"), limit, missing)


def method() -> Method:
    """Written by collector methods that say so with :func:`writes`."""
    return Method()


Step = TypeVar("Step", bound=Callable[..., None])


def writes(*written: "Source") -> Callable[[Step], Step]:
    """Declare, above a node collector method, the sources it writes (each declared with ``collect=method()``): the
    collector runs it for them (kpdiag/collect/node.py ``steps``), in the catalogue's order."""

    def declare(step: Step) -> Step:
        for src in written:
            if not isinstance(src.collect, Method):
                raise TypeError(
                    f"{src}: declared with {src.collect!r}, not method(): {step.__qualname__} cannot write it"
                )
            src.collect.steps.append(step)
        return step

    return declare


def api(*calls: str, writers: tuple[str, ...]) -> ApiRead:
    """``calls`` as ``kubectl auth can-i`` spells them: "list services", "list endpointslices.discovery.k8s.io",
    "get pods/log", "get /version"."""
    out: list[tuple[str, str | None, str]] = []
    for call in calls:
        verb, res = call.split()
        if res.startswith("/"):
            out.append((verb, None, res))
        else:
            name, _, group = res.partition(".")
            out.append((verb, group, name))
    return ApiRead(tuple(out), tuple(writers))


def probe(sends: str, writers: tuple[str, ...]) -> Probe:
    return Probe(sends, tuple(writers))


def by_hand(how: str) -> ByHand:
    return ByHand(how)


# ------------------------------------------------------------------ how a source is redacted and fuzzed
REDACT_FORMS = ("api", "json", "text")  # field by field (API objects) | JSON string by string | free text
FUZZ_STRATEGIES = ("lines", "json")  # real lines mutated | real JSON documents mutated (tests/hardening)


@dataclass(frozen=True)
class Redaction:
    """``form``: how the file is redacted (docs/redaction.md); ``klog_names``: names in klog ``key="value"`` pairs and
    kube-proxy's config are learnt from it before any file is redacted."""

    form: str
    klog_names: bool = False


def redaction_for(path: str) -> Redaction:
    """How a file is redacted by its name: the default of a declaration, and the rule for files no source declares
    (a hand-made bundle's extras)."""
    if path.endswith(".json"):
        form = "api" if path.startswith(("cluster/", "probes/")) else "json"
    else:
        form = "text"
    return Redaction(form, path.endswith(("log.txt", ".log")) or "kube-proxy" in path)


class Source(str):
    """A bundle path with its declaration. Equal to (and hashed as) the plain path string."""

    collected_by: str
    what: str
    parse: Parser | None
    lab: bool
    kind: str
    collect: Recipe | None
    redact: Redaction
    fuzz: str | None

    def __new__(
        cls,
        path: str,
        collected_by: str,
        what: str,
        parser: Parser | None = None,
        kind: str | None = None,
        *,
        collect: Recipe | None = None,
        redact: Redaction | None = None,
        fuzz: str | None = None,
        lab: bool = False,
    ):
        self = super().__new__(cls, path)
        self.collect = collect
        self.collected_by = collected_by or (collect.describe() if collect else "")
        self.what = what
        self.parse = parser
        self.lab = lab
        self.kind = kind or ("json" if path.endswith(".json") else "text")
        self.redact = redact or redaction_for(path)
        self.fuzz = fuzz if fuzz is not None else ((self.kind == "json" and "json" or "lines") if parser else None)
        return self

    @property
    def path(self) -> str:
        return str.__str__(self)

    @property
    def parser(self) -> str | None:
        """The declared parser's name, ``module:function`` (for messages and docs), or None."""
        return f"{self.parse.__module__}:{self.parse.__qualname__}" if self.parse else None

    def parse_function(self) -> Parser | None:
        """The parser declared for this source, or None."""
        return self.parse

    def __reduce__(self):  # pickles (multiprocessing) as the plain path
        return (str, (str.__str__(self),))


CATALOGUE: dict[str, Source] = {}


def _declare(
    path: str,
    collected_by: str,
    what: str,
    parser: Parser | None = None,
    *,
    collect: Recipe | None = None,
    redact: Redaction | None = None,
    fuzz: str | None = None,
    lab: bool = False,
) -> Source:
    """One source. ``collected_by`` may be "" when ``collect`` is a recipe (its words are derived from it); ``lab``:
    a lab network namespace records it (tests/lab/bundle_from_ns.py: the lab fixtures hold it)."""
    if path in CATALOGUE:
        raise ValueError(f"bundle source {path} declared twice")
    s = Source(path, collected_by, what, parser, collect=collect, redact=redact, fuzz=fuzz, lab=lab)
    CATALOGUE[path] = s
    return s


NODE = "node/"
CLUSTER = "cluster/"
PROBES = "probes/"
KUBE_PROXY_DIR = "node/kube-proxy/"

# ---------------------------------------------------------------- the node: kernel and host networking
UNAME = _declare(
    "node/uname.txt",
    "uname -r",
    "the kernel release",
    parse_node.parse_kernel_version,
    collect=method(),
    lab=True,
)
MODULES = _declare(
    "node/modules.txt",
    "cat /proc/modules",
    "the loaded kernel modules",
    parse_node.parse_modules,
    collect=method(),
)
MODULES_BUILTIN = _declare(
    "node/modules-builtin.txt",
    "",
    "the modules built into the kernel",
    collect=host_file("lib/modules/{release}/modules.builtin"),
)
DMI_VENDOR = _declare(
    "node/dmi-sys-vendor.txt",
    "",
    "the machine's maker as its firmware reports it (Amazon EC2, Microsoft Corporation, Google …): the cloud it runs on",
    collect=host_file("sys/class/dmi/id/sys_vendor", limit=4096),
)
MODULES_AVAILABLE = _declare(
    "node/modules-available.txt",
    "the module paths under kernel/net/ and kernel/drivers/net/ in /lib/modules/$(uname -r)/modules.dep",
    "the network modules this kernel can load (whether or not they are loaded)",
    collect=method(),
)
SYSCTL = _declare(
    "node/sysctl.txt",
    "sysctl -a (net.* read from /proc/sys)",
    "the network sysctls",
    parse_node.parse_sysctl,
    collect=method(),
    lab=True,
)
IP_ADDR = _declare(
    "node/ip-addr.json",
    "ip -d -j addr (or the same through pyroute2)",
    "the node's interfaces and addresses",
    collect=method(),
    lab=True,
)
IP_ROUTE = _declare(
    "node/ip-route.json",
    "ip -j route show table all, IPv4 and IPv6 (or the same through pyroute2)",
    "the node's routes, every table",
    collect=method(),
    lab=True,
)
IP_RULE = _declare(
    "node/ip-rule.json",
    "ip -j rule show, IPv4 and IPv6 (or the same through pyroute2)",
    "the node's policy-routing rules",
    parse_node.parse_ip_rules,
    collect=method(),
)
NEIGH = _declare(
    "node/neigh.json",
    "the neighbour (ARP/NDP) entries of the node's namespace counted by state and device (pyroute2), and "
    "/proc/net/stat/arp_cache and ndisc_cache (the tables' entries in every namespace, forced collections, refusals)",
    "the neighbour tables, counted",
    neigh.parse_neigh,
    collect=method(),
)
KERNEL_LOG = _declare(
    "node/kernel-log.txt",
    "the kernel log (/dev/kmsg, else dmesg): its lines about the network only (neighbour table overflow, conntrack "
    "table full), the last 200",
    "the kernel's log lines about the network",
    neigh.parse_kernel_log,
    collect=method(),
)
PROCESSES = _declare(
    "node/processes.txt",
    "/proc/*/comm and cmdline (pid, name, arguments)",
    "the node's processes, to find who implements Services",
    parse_node.parse_processes,
    collect=method(),
)
ETHTOOL_OFFLOAD = _declare(
    "node/ethtool-offload.txt",
    "ethtool -k DEV for each VXLAN/Geneve device (concatenated; each block starts 'Features for DEV:')",
    "the overlay devices' offload features (tx-checksum-ip-generic …)",
    ethtool.parse_ethtool_features,
    collect=per_interface("ethtool", "-k", kinds=("vxlan", "geneve")),
    lab=True,
)
BPF_MAPS = _declare(
    "node/bpf-maps.txt",
    "the names pinned under /sys/fs/bpf",
    "the pinned BPF objects (Cilium, Calico eBPF …)",
    collect=method(),
)

# ---------------------------------------------------------------- the node: netfilter
IPTABLES_SAVE = _declare(
    "node/iptables-save.txt",
    "iptables-save",
    "the IPv4 iptables rules (the default backend)",
    iptables.parse_iptables_save,
    collect=method(),
    lab=True,
)
IPTABLES_LEGACY_SAVE = _declare(
    "node/iptables-legacy-save.txt",
    "iptables-legacy-save",
    "the IPv4 rules of the legacy backend",
    iptables.parse_iptables_save,
    collect=method(),
    lab=True,
)
IPTABLES_NFT_SAVE = _declare(
    "node/iptables-nft-save.txt",
    "iptables-nft-save",
    "the IPv4 rules of the nf_tables backend",
    iptables.parse_iptables_save,
    collect=method(),
    lab=True,
)
IP6TABLES_SAVE = _declare(
    "node/ip6tables-save.txt",
    "ip6tables-save",
    "the IPv6 iptables rules",
    iptables.parse_iptables_save,
    collect=method(),
)
NFT_RULESET = _declare(
    "node/nft-ruleset.json",
    "nft -j list ruleset (iptables-nft's own tables left out)",
    "the nftables ruleset",
    nft.parse_nft_json,
    collect=method(),
    lab=True,
)
NFT_VERSION = _declare("node/nft-version.txt", "nft --version", "the nft tool's version", collect=method(), lab=True)
IPSET = _declare(
    "node/ipset.txt",
    "",
    "the ipsets",
    ipset.parse_ipset_save,
    collect=command(
        "ipset", "save", loaded=("ip_set",), absent="the ip_set kernel module is not loaded: no ipsets on this node"
    ),
    lab=True,
)
CONNTRACK_STATS = _declare(
    "node/conntrack-stats.txt",
    "",
    "the connection tracking counters per CPU",
    parse_node.parse_conntrack_stats,
    collect=command(
        "conntrack",
        "-S",
        loaded=("nf_conntrack", "proc:sys/net/netfilter/nf_conntrack_count"),
        absent="nf_conntrack is not loaded: no connection tracking on this node",
    ),
    lab=True,
)
XT_RECENT = _declare(
    "node/xt-recent.json",
    "/proc/net/xt_recent/KUBE-SEP-* (each table's text), with the jiffies and time since boot of /proc/timer_list",
    "kube-proxy's session affinity state: the clients each endpoint's recent table has seen, and when",
    recent.parse_xt_recent,
    collect=method(),
    lab=True,
)
CONNTRACK = _declare(
    "node/conntrack.txt",
    "conntrack -L (UDP first, then TCP; bounded)",
    "the connection tracking entries",
    collect=method(),
)

# ---------------------------------------------------------------- the node: IPVS
IPVSADM = _declare(
    "node/ipvsadm.txt",
    "ipvsadm -Sn (or the same, read through IPVS netlink)",
    "the IPVS virtual and real servers",
    ipvs.parse_ipvsadm_save,
    collect=method(),
)
IPVSADM_LIST = _declare(
    "node/ipvsadm-list.txt",
    "ipvsadm -Ln (or the same, read through IPVS netlink)",
    "the IPVS servers with their connection counts",
    ipvs.parse_ipvsadm_list,
    collect=method(),
)
IPVS_TIMEOUT = _declare(
    "node/ipvs-timeout.txt", "ipvsadm -L --timeout", "the IPVS connection timeouts", collect=method()
)
IPVS_CONN = _declare(
    "node/ipvs-conn.json",
    "/proc/net/ip_vs_conn counted by virtual service, real server and state",
    "the IPVS connections, counted",
    collect=method(),
)

# ---------------------------------------------------------------- the node: kube-proxy itself
KP_PROXY_MODE = _declare(
    "node/kube-proxy/proxy-mode.txt",
    "GET http://127.0.0.1:10249/proxyMode",
    "kube-proxy's running mode",
    collect=method(),
)
KP_METRICS = _declare(
    "node/kube-proxy/metrics.txt",
    "GET http://127.0.0.1:10249/metrics",
    "kube-proxy's metrics",
    parse_node.parse_metrics,
    collect=method(),
)
KP_HEALTHZ = _declare(
    "node/kube-proxy/healthz.json",
    "GET http://127.0.0.1:10256/healthz",
    "kube-proxy's health",
    collect=method(),
)
KP_CONFIG = _declare(
    "node/kube-proxy/config.yaml",
    "the KubeProxyConfiguration file in kube-proxy's --config",
    "kube-proxy's configuration",
    parse_node.parse_kube_proxy_config,
    collect=method(),
)
KP_CMDLINE = _declare(
    "node/kube-proxy/cmdline.txt",
    "/proc/PID/cmdline of the believed kube-proxy (one argument a line)",
    "kube-proxy's command line (its flags)",
    parse_node.parse_cmdline,
    collect=method(),
)
KP_LOG = _declare(
    "node/kube-proxy/log.txt",
    "kube-proxy's container log, else journald",
    "kube-proxy's log",
    collect=method(),
)

# ---------------------------------------------------------------- the cluster (Kubernetes API)
_CC = "kpdiag.collect.cluster:ClusterCollector."
_SVC = "kpdiag.commands.svc:"
_POLICY = "kpdiag.commands.policy:collect_live"
VERSION = _declare(
    "cluster/version.json",
    "GET /version",
    "the API server's version",
    collect=api("get /version", writers=(_CC + "service",)),
)
SERVICES = _declare(
    "cluster/services.json",
    "list services (all namespaces, or the one diagnosed)",
    "the Services",
    collect=api(
        "get services",
        "list services",
        writers=(_CC + "service", _CC + "node_view", _CC + "service_view", _POLICY),
    ),
)
ENDPOINTSLICES = _declare(
    "cluster/endpointslices.json",
    "list endpointslices",
    "the EndpointSlices",
    collect=api("list endpointslices.discovery.k8s.io", writers=(_CC + "_service_slices", _CC + "node_view", _POLICY)),
)
PODS = _declare(
    "cluster/pods.json",
    "list pods (the Service's, or all)",
    "the pods",
    collect=api("list pods", writers=(_CC + "service", _POLICY)),
)
NODES = _declare(
    "cluster/nodes.json",
    "get node (this node)",
    "the Node object",
    collect=api("get nodes", writers=(_CC + "service", _CC + "node_view", _CC + "service_view")),
)
NAMESPACES = _declare(
    "cluster/namespaces.json",
    "list namespaces (their labels, for NetworkPolicy)",
    "the namespaces",
    collect=api("list namespaces", writers=(_CC + "policy_objects",)),
)
NETWORKPOLICIES = _declare(
    "cluster/networkpolicies.json",
    "list networkpolicies (per namespace)",
    "the NetworkPolicies",
    collect=api("list networkpolicies.networking.k8s.io", writers=(_CC + "_policies",)),
)
CNI = _declare(
    "cluster/cni.json",
    "list daemonsets in kube-system (else get those kpdiag knows by name) and pods, reduced to the CNI components",
    "the CNI components (which one enforces NetworkPolicy)",
    collect=api(
        "list daemonsets.apps", "get daemonsets.apps", "list pods", writers=("kpdiag.collect.cni:collect_cni",)
    ),
)
DAEMONSETS = _declare(
    "cluster/daemonsets.json",
    "kubectl get daemonsets -A -o json (a hand-made bundle)",
    "the DaemonSets (read when cni.json is absent)",
    collect=by_hand("kubectl get daemonsets -A -o json"),
)
CLIENT_POD = _declare(
    "cluster/client-pod.json",
    "get pod (the --from client)",
    "the client pod",
    collect=api("list pods", writers=(_CC + "_client_pod", _SVC + "_collect_client")),
)
SERVICE_LOOKUP = _declare(
    "cluster/service-lookup.json",
    "get service (the one asked for, and the outcome)",
    "the outcome of looking the diagnosed Service up",
    collect=api("get services", "list services", writers=(_CC + "_lookup", _CC + "service", _CC + "service_view")),
)
KP_CONFIGMAP = _declare(
    "cluster/kube-proxy-configmap.json",
    "get configmap kube-system/kube-proxy",
    "kube-proxy's ConfigMap",
    collect=api("get configmaps", writers=(_CC + "service",)),
)
KP_DAEMONSET = _declare(
    "cluster/kube-proxy-daemonset.json",
    "get daemonset kube-system/kube-proxy",
    "kube-proxy's DaemonSet",
    collect=api("get daemonsets.apps", writers=(_CC + "service",)),
)
DNS_SERVICE = _declare(
    "cluster/dns-service.json",
    "list services in kube-system -l k8s-app=kube-dns",
    "the cluster DNS Service",
    collect=api("list services", "get services", writers=(_CC + "_dns_service",)),
)
DNS_ENDPOINTSLICES = _declare(
    "cluster/dns-endpointslices.json",
    "list endpointslices of the cluster DNS Service",
    "the cluster DNS Service's EndpointSlices",
    collect=api("list endpointslices.discovery.k8s.io", writers=(_CC + "dns_objects",)),
)
DNS_PODS = _declare(
    "cluster/dns-pods.json",
    "list pods in kube-system -l k8s-app=kube-dns",
    "the CoreDNS pods",
    collect=api("list pods", writers=(_CC + "dns_objects",)),
)
DNS_LOGS = _declare(
    "cluster/dns-logs.json",
    "the CoreDNS pods' recent log lines",
    "the CoreDNS logs",
    collect=api("get pods/log", writers=(_CC + "dns_objects",)),
)

# ---------------------------------------------------------------- what kpdiag observed (probes)
PROBES_SERVICE = _declare(
    "probes/service.json",
    "kpdiag's probes of the Service (ICMP, TCP, UDP, TCP connect)",
    "what the Service's addresses answered",
    collect=probe("ICMP echo, TCP SYN, UDP and TCP connect to the Service's addresses", writers=(_SVC + "_probe",)),
)
PROBES_DNS = _declare(
    "probes/dns.json",
    "kpdiag's DNS lookup of the Service name",
    "the DNS answer for the Service",
    collect=probe(
        "DNS queries for the Service's name, as the pod's resolv.conf makes them", writers=(_SVC + "_probe",)
    ),
)

# a collector's scratch names (errors of intermediate commands), never written to a bundle
NFT_LIST_TABLES = Source("node/nft-ruleset.json (nft list tables)", "nft list tables", "the nftables tables")
NFT_LIST_TABLE = Source("node/nft-ruleset.json (nft -j list table)", "nft -j list table", "one nftables table")


def iptables_dump(which: str) -> Source:
    """The source of ``which`` ("iptables-save", "iptables-legacy-save", "iptables-nft-save", "ip6tables-save")."""
    return CATALOGUE[f"{NODE}{which}.txt"]


def declared(path: str) -> Source | None:
    return CATALOGUE.get(path)


def node_sources() -> list[Source]:
    """The sources a node collection writes, in declaration order."""
    return [s for s in CATALOGUE.values() if s.path.startswith(NODE)]


def layout() -> dict[str, str]:
    """path → how it is collected, for every declared source (docs and ``kpdiag collect --help``)."""
    return {s.path: s.collected_by for s in CATALOGUE.values()}
