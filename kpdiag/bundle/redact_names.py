"""What redaction keeps and what it treats as a name: the name/key classifiers of kpdiag/bundle/redact.py.

kube-system's well-known object names, the cluster components whose names say which software runs, the words that
are syntax in the files kpdiag writes, the JSON keys that hold names, the domains, registries and file extensions
kept, the patterns of a name inside a text (``ns/name:port``, kube-proxy's nftables chain names, klog's
``key="value"``), and the tests of a word (host-name-like, numeric, a schema value kept verbatim).
"""

from __future__ import annotations

import re

from kpdiag.bundle.redact_addr import V4_IN

# kube-system's well-known objects: they say nothing about the user, and keep the bundle readable
SKIP_NAMES = {
    # the CNIs' own devices whose names look like host names (a dot): kept, kpdiag recognises the CNI by them
    "vxlan.calico",
    "vxlan-v6.calico",
    "flannel.1",
    "flannel-v6.1",
    "flannel.4096",
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kubernetes",
    "kube-proxy",
    "kube-dns",
    "coredns",
    "kube-root-ca.crt",
    "localhost",
}
# cluster components (CNI, DNS, control plane): their object names say which software runs, and checks read them
INFRA = (
    "calico",
    "canal",
    "cilium",
    "weave",
    "antrea",
    "kube-router",
    "kube-network-policies",
    "kube-flannel",
    "flannel",
    "aws-node",
    "aws-eks-nodeagent",
    "aws-network-policy-agent",
    "tigera",
    "coredns",
    "kube-dns",
    "kube-proxy",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "metrics-server",
    "konnectivity",
    "node-local-dns",
    "nodelocaldns",
    "multus",
    "ovnkube",
    "kindnet",
    "kpdiag",
    "dnsmasq",
    "sidecar",
    "install-cni",
    "upgrade-ipam",
    "mount-bpf-fs",
    "clean-cilium-state",
)
INFRA_RE = re.compile("(" + "|".join(re.escape(p) for p in INFRA) + ")(?:-|$)")
# words that are syntax in the files kpdiag writes: a name spelled like one is replaced only where it is a name
_RESERVED = {
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmpv6",
    "http",
    "https",
    "dns",
    "nat",
    "filter",
    "mangle",
    "raw",
    "security",
    "input",
    "output",
    "forward",
    "prerouting",
    "postrouting",
    "accept",
    "drop",
    "reject",
    "return",
    "masquerade",
    "snat",
    "dnat",
    "true",
    "false",
    "null",
    "none",
    "local",
    "cluster",
    "ip",
    "ip6",
    "inet",
    "arp",
    "bridge",
    "netdev",
    "node",
    "nodes",
    "service",
    "services",
    "pod",
    "pods",
    "endpoint",
    "endpoints",
    "chain",
    "table",
    "rule",
    "set",
    "map",
    "elem",
    "comment",
    "jump",
    "goto",
    "counter",
    "packets",
    "bytes",
    "family",
    "name",
    "type",
    "handle",
    "hook",
    "prio",
    "policy",
    "mode",
    "iptables",
    "ipvs",
    "nftables",
    "userspace",
    "kernelspace",
    "kube",
    "proxy",
    "metrics",
    "healthz",
    "version",
    "items",
    "metadata",
    "spec",
    "status",
    "kind",
    "list",
    "labels",
    "annotations",
    "selector",
    "ready",
    "serving",
    "terminating",
    "conditions",
    "addresses",
    "ports",
    "port",
    "protocol",
    "targetport",
    "nodeport",
    "clusterip",
    "loadbalancer",
    "externalname",
    "main",
    "eth0",
    "lo",
    "link",
    "global",
    "host",
    "scope",
    "dev",
    "via",
    "src",
    "dst",
    "unicast",
    "broadcast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
    "error",
    "warning",
    "info",
    "debug",
    "yes",
    "no",
    "on",
    "off",
    "enabled",
    "disabled",
    "running",
    "succeeded",
    "failed",
    "pending",
    "unknown",
    "always",
    "never",
    "ifnotpresent",
    "clusterfirst",
}
NAME_KEYS = {
    "name",
    "namespace",
    "generateName",
    "nodeName",
    "hostname",
    "subdomain",
    "serviceAccountName",
    "serviceAccount",
    "externalName",
    "secretName",
    "claimName",
    "clusterName",
    "providerID",
    "machineID",
    "systemUUID",
    "bootID",
    "node",
    "priorityClassName",
    "runtimeClassName",
    "schedulerName",
    "service",
}
KUBERNETES_DOMAINS = (".kubernetes.io", ".k8s.io", ".x-k8s.io")
# the cloud a Node's providerID names (aws:///ZONE/ID): the scheme is the cloud, not the node, and kept; the rest is
# redacted
CLOUD_SCHEMES = {
    "aws",
    "azure",
    "gce",
    "openstack",
    "vsphere",
    "digitalocean",
    "hcloud",
    "linode",
    "oci",
    "ibm",
    "kind",
}
KEEP_DOMAINS = (
    "kubernetes.io",
    "k8s.io",
    "x-k8s.io",
    "golang.org",
    "github.com",
    "go.dev",
    "in-addr.arpa",
    "ip6.arpa",
    "example.invalid",
    "redacted.invalid",
)
# public component registries, and kpdiag's own image as deploy/build-image.sh names it (kpdiag:VERSION[@sha256:…])
KEEP_IMAGES = (
    "registry.k8s.io/",
    "k8s.gcr.io/",
    "kpdiag:",
    "kpdiag@",
    "docker.io/library/kpdiag:",
    "localhost/kpdiag:",
)
_FILE_EXT = {
    "go",
    "yaml",
    "yml",
    "json",
    "conf",
    "config",
    "txt",
    "log",
    "sh",
    "py",
    "so",
    "ko",
    "gz",
    "tgz",
    "tar",
    "pem",
    "crt",
    "key",
    "sock",
    "pid",
    "cfg",
    "ini",
    "toml",
    "service",
    "socket",
    "mount",
    "d",
    "xml",
    "html",
    "md",
    "lock",
    "bin",
    "out",
    "err",
    "tmp",
    "bak",
    "old",
    "new",
    "status",
    "kubeconfig",
    "c",
    "h",
    "rs",
    "js",
    "timer",
    "target",
    "slice",
    "scope",
    "csv",
    "zst",
    "xz",
    "bz2",
    "deb",
    "rpm",
    "whl",
    "swp",
}
CLUSTER_SUFFIXES = (".svc.cluster.local", ".cluster.local")

PCT = re.compile(r"(%[0-9A-Fa-f]{2})")
# possessive: a repeated group keeps no backtracking state (a 10 MB "a-a-a-…" cost 60 bytes per character)
TOKEN = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_]++(?:[-.][A-Za-z0-9_]++)*+")
# ns/name:port (iptables comments, kube-proxy log values, manifest focus)
NS_NAME_PORT = re.compile(
    r"(?<![A-Za-z0-9_.-])([a-z0-9][a-z0-9-]{0,62})/([a-z0-9][a-z0-9.-]{0,252})(?::([A-Za-z0-9][A-Za-z0-9-]{0,62}))?(?![A-Za-z0-9_-])"
)
# kube-proxy's nftables chain/set names: PREFIX-HASH-ns/name/proto/portname[__ip/port]
NFT_NAME = re.compile(
    r"(?<![A-Za-z0-9_-])([a-z][a-z-]*)-([A-Z0-9]{8})-([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)/(tcp|udp|sctp)/([A-Za-z0-9-]*)"
    r"(?:__(\[?[0-9A-Fa-f:.]+\]?)/(\d+))?"
)
IPT_COMMENT = re.compile(r'--comment "?([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)(?::([A-Za-z0-9-]*))?')
KLOG_NAME = re.compile(
    r"(?<![A-Za-z0-9_])(service|svc|servicePortName|portName|servicePort_name|node|nodeName|hostname|host|pod|namespace|"
    r'endpointSlice|slice|serviceName)="?([A-Za-z0-9][A-Za-z0-9_.:/-]*)"?'
)
CONFIG_NAME = re.compile(r"(?m)^\s*(hostnameOverride|nodeName|hostname)\s*:\s*\"?([A-Za-z0-9][A-Za-z0-9_.-]*)\"?\s*$")

VERBATIM = {
    "schema",
    "format",
    "apiVersion",
    "kind",
    "kpdiag_version",
    "created",
    "creationTimestamp",
    "resourceVersion",
}
DNS_NAME = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,127}[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)
UID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
ADDRLIKE = re.compile(r"[0-9A-Fa-f:.]{2,45}(?:%[A-Za-z0-9_.-]{1,32})?(?:/\d{1,3})?")
# the values a schema field (kind, apiVersion, format, timestamps, versions) holds: kept as they are; anything else
# under such a key is treated like any other string
_VERBATIM_SHAPE = re.compile(
    r"[A-Za-z][A-Za-z0-9.-]{0,62}(?:/[A-Za-z0-9.-]{1,32})?|\d{4}-\d\d-\d\d(?:[T ][0-9:.]{1,20}(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|v?\d{1,6}(?:\.\d{1,6}){0,3}(?:[-+][A-Za-z0-9.-]{1,40})?"
)


def verbatim_ok(v: str) -> bool:
    return _VERBATIM_SHAPE.fullmatch(v) is not None and not V4_IN.search(v)


def global_ok(value: str) -> bool:
    return (
        3 <= len(value) <= 253
        and value.lower() not in _RESERVED
        and any(c.isalpha() for c in value)
        and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", value) is not None
    )


def looks_numeric(value: str) -> bool:
    return (
        re.fullmatch(r"[0-9.:/\[\]a-fA-F%-]*", value) is not None
        and any(c.isdigit() for c in value)
        and not re.search(r"[g-zG-Z]", value)
    )


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def fqdn_like(parts: list[str]) -> bool:
    last = parts[-1]
    if len(parts) < 2 or not last.isalpha() or not all(_LABEL.fullmatch(p) for p in parts):
        return False
    return (  # one letter case throughout (DNS ignores case: DB01.ACME.COM is a host name too)
        len(last) >= 2
        and (all(p == p.lower() for p in parts) or all(p == p.upper() for p in parts))
        and last.lower() not in _FILE_EXT
        and any(c.isalpha() for c in parts[0])
        and parts[0].lower() not in ("net", "kernel", "vm", "fs", "dev", "user", "abi", "debug")
    )


def kept_domain(t: str) -> bool:
    low = t.lower()
    return any(low == d or low.endswith("." + d) for d in KEEP_DOMAINS)
