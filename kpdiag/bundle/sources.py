"""The source catalogue: every file a bundle can hold, declared once (docs/architecture.md §3).

A :class:`Source` *is* its bundle path (a ``str``), so it works wherever a path does — as a key of a collector's
``files``, in :meth:`kpdiag.bundle.store.Bundle.read_text`, in evidence — and carries what the rest of kpdiag needs to
know about it: how it is collected, what it holds (in words, for messages and docs), and which function parses it.

No other module spells a bundle path: collectors write ``files[src.IPVSADM]``, the state reads
``bundle.read_text(src.IPVSADM)``, checks name ``src.IPVSADM`` in their evidence (a test enforces this).
Adding a source = declaring it here, collecting it (``kpdiag/collect/``), parsing it (``kpdiag/parse/``).
"""

from __future__ import annotations

import importlib


class Source(str):
    """A bundle path with its declaration. Equal to (and hashed as) the plain path string."""

    collected_by: str
    what: str
    parser: str | None
    kind: str

    def __new__(cls, path: str, collected_by: str, what: str, parser: str | None = None, kind: str | None = None):
        self = super().__new__(cls, path)
        self.collected_by = collected_by
        self.what = what
        self.parser = parser
        self.kind = kind or ("json" if path.endswith(".json") else "text")
        return self

    @property
    def path(self) -> str:
        return str.__str__(self)

    def parse_function(self):
        """The parser declared for this source (``module:function``, imported on first use), or None."""
        if not self.parser:
            return None
        module, _, name = self.parser.partition(":")
        return getattr(importlib.import_module(module), name)

    def __reduce__(self):  # pickles (multiprocessing) as the plain path
        return (str, (str.__str__(self),))


CATALOGUE: dict[str, Source] = {}


def _declare(path: str, collected_by: str, what: str, parser: str | None = None) -> Source:
    if path in CATALOGUE:
        raise ValueError(f"bundle source {path} declared twice")
    s = Source(path, collected_by, what, parser)
    CATALOGUE[path] = s
    return s


NODE = "node/"
CLUSTER = "cluster/"
PROBES = "probes/"
KUBE_PROXY_DIR = "node/kube-proxy/"

# ---------------------------------------------------------------- the node: kernel and host networking
UNAME = _declare("node/uname.txt", "uname -r", "the kernel release", "kpdiag.parse.node:parse_kernel_version")
MODULES = _declare(
    "node/modules.txt", "cat /proc/modules", "the loaded kernel modules", "kpdiag.parse.node:parse_modules"
)
MODULES_BUILTIN = _declare(
    "node/modules-builtin.txt", "/lib/modules/$(uname -r)/modules.builtin", "the modules built into the kernel"
)
MODULES_AVAILABLE = _declare(
    "node/modules-available.txt",
    "the module paths under kernel/net/ and kernel/drivers/net/ in /lib/modules/$(uname -r)/modules.dep",
    "the network modules this kernel can load (whether or not they are loaded)",
)
SYSCTL = _declare(
    "node/sysctl.txt", "sysctl -a (net.* read from /proc/sys)", "the network sysctls", "kpdiag.parse.node:parse_sysctl"
)
IP_ADDR = _declare(
    "node/ip-addr.json", "ip -d -j addr (or the same through pyroute2)", "the node's interfaces and addresses"
)
IP_ROUTE = _declare(
    "node/ip-route.json",
    "ip -j route show table all, IPv4 and IPv6 (or the same through pyroute2)",
    "the node's routes, every table",
)
IP_RULE = _declare(
    "node/ip-rule.json",
    "ip -j rule show, IPv4 and IPv6 (or the same through pyroute2)",
    "the node's policy-routing rules",
    "kpdiag.parse.node:parse_ip_rules",
)
PROCESSES = _declare(
    "node/processes.txt",
    "/proc/*/comm and cmdline (pid, name, arguments)",
    "the node's processes, to find who implements Services",
    "kpdiag.parse.node:parse_processes",
)
ETHTOOL_OFFLOAD = _declare(
    "node/ethtool-offload.txt",
    "ethtool -k DEV for each VXLAN/Geneve device (concatenated; each block starts 'Features for DEV:')",
    "the overlay devices' offload features (tx-checksum-ip-generic …)",
    "kpdiag.parse.ethtool:parse_ethtool_features",
)
BPF_MAPS = _declare(
    "node/bpf-maps.txt", "the names pinned under /sys/fs/bpf", "the pinned BPF objects (Cilium, Calico eBPF …)"
)

# ---------------------------------------------------------------- the node: netfilter
IPTABLES_SAVE = _declare(
    "node/iptables-save.txt",
    "iptables-save",
    "the IPv4 iptables rules (the default backend)",
    "kpdiag.parse.iptables:parse_iptables_save",
)
IPTABLES_LEGACY_SAVE = _declare(
    "node/iptables-legacy-save.txt",
    "iptables-legacy-save",
    "the IPv4 rules of the legacy backend",
    "kpdiag.parse.iptables:parse_iptables_save",
)
IPTABLES_NFT_SAVE = _declare(
    "node/iptables-nft-save.txt",
    "iptables-nft-save",
    "the IPv4 rules of the nf_tables backend",
    "kpdiag.parse.iptables:parse_iptables_save",
)
IP6TABLES_SAVE = _declare(
    "node/ip6tables-save.txt", "ip6tables-save", "the IPv6 iptables rules", "kpdiag.parse.iptables:parse_iptables_save"
)
NFT_RULESET = _declare(
    "node/nft-ruleset.json",
    "nft -j list ruleset (iptables-nft's own tables left out)",
    "the nftables ruleset",
    "kpdiag.parse.nft:parse_nft_json",
)
NFT_VERSION = _declare("node/nft-version.txt", "nft --version", "the nft tool's version")
IPSET = _declare("node/ipset.txt", "ipset save", "the ipsets", "kpdiag.parse.ipset:parse_ipset_save")
CONNTRACK_STATS = _declare(
    "node/conntrack-stats.txt",
    "conntrack -S",
    "the connection tracking counters per CPU",
    "kpdiag.parse.node:parse_conntrack_stats",
)
CONNTRACK = _declare(
    "node/conntrack.txt", "conntrack -L (UDP first, then TCP; bounded)", "the connection tracking entries"
)

# ---------------------------------------------------------------- the node: IPVS
IPVSADM = _declare(
    "node/ipvsadm.txt",
    "ipvsadm -Sn (or the same, read through IPVS netlink)",
    "the IPVS virtual and real servers",
    "kpdiag.parse.ipvs:parse_ipvsadm_save",
)
IPVSADM_LIST = _declare(
    "node/ipvsadm-list.txt",
    "ipvsadm -Ln (or the same, read through IPVS netlink)",
    "the IPVS servers with their connection counts",
    "kpdiag.parse.ipvs:parse_ipvsadm_list",
)
IPVS_TIMEOUT = _declare("node/ipvs-timeout.txt", "ipvsadm -L --timeout", "the IPVS connection timeouts")
IPVS_CONN = _declare(
    "node/ipvs-conn.json",
    "/proc/net/ip_vs_conn counted by virtual service, real server and state",
    "the IPVS connections, counted",
)

# ---------------------------------------------------------------- the node: kube-proxy itself
KP_PROXY_MODE = _declare(
    "node/kube-proxy/proxy-mode.txt", "GET http://127.0.0.1:10249/proxyMode", "kube-proxy's running mode"
)
KP_METRICS = _declare(
    "node/kube-proxy/metrics.txt",
    "GET http://127.0.0.1:10249/metrics",
    "kube-proxy's metrics",
    "kpdiag.parse.node:parse_metrics",
)
KP_HEALTHZ = _declare("node/kube-proxy/healthz.json", "GET http://127.0.0.1:10256/healthz", "kube-proxy's health")
KP_CONFIG = _declare(
    "node/kube-proxy/config.yaml",
    "the KubeProxyConfiguration file in kube-proxy's --config",
    "kube-proxy's configuration",
    "kpdiag.parse.node:parse_kube_proxy_config",
)
KP_LOG = _declare("node/kube-proxy/log.txt", "kube-proxy's container log, else journald", "kube-proxy's log")

# ---------------------------------------------------------------- the cluster (Kubernetes API)
VERSION = _declare("cluster/version.json", "GET /version", "the API server's version")
SERVICES = _declare("cluster/services.json", "list services (all namespaces, or the one diagnosed)", "the Services")
ENDPOINTSLICES = _declare("cluster/endpointslices.json", "list endpointslices", "the EndpointSlices")
PODS = _declare("cluster/pods.json", "list pods (the Service's, or all)", "the pods")
NODES = _declare("cluster/nodes.json", "get node (this node)", "the Node object")
NAMESPACES = _declare("cluster/namespaces.json", "list namespaces (their labels, for NetworkPolicy)", "the namespaces")
NETWORKPOLICIES = _declare(
    "cluster/networkpolicies.json", "list networkpolicies (per namespace)", "the NetworkPolicies"
)
CNI = _declare(
    "cluster/cni.json",
    "list daemonsets and pods in kube-system, reduced to the CNI components",
    "the CNI components (which one enforces NetworkPolicy)",
)
DAEMONSETS = _declare(
    "cluster/daemonsets.json",
    "kubectl get daemonsets -A -o json (a hand-made bundle)",
    "the DaemonSets (read when cni.json is absent)",
)
CLIENT_POD = _declare("cluster/client-pod.json", "get pod (the --from client)", "the client pod")
SERVICE_LOOKUP = _declare(
    "cluster/service-lookup.json",
    "get service (the one asked for, and the outcome)",
    "the outcome of looking the diagnosed Service up",
)
KP_CONFIGMAP = _declare(
    "cluster/kube-proxy-configmap.json", "get configmap kube-system/kube-proxy", "kube-proxy's ConfigMap"
)
KP_DAEMONSET = _declare(
    "cluster/kube-proxy-daemonset.json", "get daemonset kube-system/kube-proxy", "kube-proxy's DaemonSet"
)
DNS_SERVICE = _declare(
    "cluster/dns-service.json", "list services in kube-system -l k8s-app=kube-dns", "the cluster DNS Service"
)
DNS_ENDPOINTSLICES = _declare(
    "cluster/dns-endpointslices.json",
    "list endpointslices of the cluster DNS Service",
    "the cluster DNS Service's EndpointSlices",
)
DNS_PODS = _declare("cluster/dns-pods.json", "list pods in kube-system -l k8s-app=kube-dns", "the CoreDNS pods")
DNS_LOGS = _declare("cluster/dns-logs.json", "the CoreDNS pods' recent log lines", "the CoreDNS logs")

# ---------------------------------------------------------------- what kpdiag observed (probes)
PROBES_SERVICE = _declare(
    "probes/service.json",
    "kpdiag's probes of the Service (ICMP, TCP, UDP, TCP connect)",
    "what the Service's addresses answered",
)
PROBES_DNS = _declare("probes/dns.json", "kpdiag's DNS lookup of the Service name", "the DNS answer for the Service")

# a collector's scratch names (errors of intermediate commands), never written to a bundle
NFT_LIST_TABLES = Source("node/nft-ruleset.json (nft list tables)", "nft list tables", "the nftables tables")
NFT_LIST_TABLE = Source("node/nft-ruleset.json (nft -j list table)", "nft -j list table", "one nftables table")


def iptables_dump(which: str) -> Source:
    """The source of ``which`` ("iptables-save", "iptables-legacy-save", "iptables-nft-save", "ip6tables-save")."""
    return CATALOGUE[f"{NODE}{which}.txt"]


def declared(path: str) -> Source | None:
    return CATALOGUE.get(path)


def layout() -> dict[str, str]:
    """path → how it is collected, for every declared source (docs and ``kpdiag collect --help``)."""
    return {s.path: s.collected_by for s in CATALOGUE.values()}
