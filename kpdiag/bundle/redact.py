"""Redaction for support bundles.

Two levels:

* :func:`scrub_secrets` — always applied to every bundle kpdiag writes (with or without ``--redact``):
  bearer tokens, JWTs, ``Authorization`` headers, PEM blocks and base64 PEM, ``token:`` / ``password:`` /
  ``client-key-data:``-style fields, credentials in URLs, container ``env`` values and the
  ``last-applied-configuration`` annotation of API objects become ``REDACTED``.
* :class:`Redactor` (``collect --redact``, ``kpdiag redact``) — also every name and address: namespaces,
  Service/Pod/Node names, label and annotation values, port names, host names and FQDNs, MAC addresses and
  every IP address (IPv4, IPv6 compressed/expanded/with a zone, IPv4-mapped, in CIDRs, inside nftables chain
  names, followed by punctuation).

The bundle stays analyzable: the same value gets the same pseudonym in every file, and IP addresses are
mapped by a keyed prefix-preserving permutation (two addresses that share their first N bits still share
them after mapping; an IP stays an IP of the same family; a network address ``a.b.c.0/24`` stays a network
address with the same prefix length). Kept as they are: loopback, unspecified, multicast/broadcast and
netmask-like addresses, the names of kube-system's well-known objects (``kube-system``, ``kube-dns``,
``kubernetes`` …), label and API-group keys under kubernetes.io/k8s.io, and kube-proxy's chain hashes
(KUBE-SVC-…, the 8-character hash of nftables chain names: one-way digests of the Service port name).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import secrets

from kpdiag.bundle.safeio import load_json

REDACTED = "REDACTED"

# ---------------------------------------------------------------- secrets (always)
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,64})-----.*?(?:-----END \1-----|\Z)", re.S)
_PEM_B64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*")  # base64 of "-----BEGIN"
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+|%20|=)(?!REDACTED)[A-Za-z0-9._~+/=:-]{6,}")
_AUTHZ = re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?!REDACTED)[^\"'\r\n,}\\]+")
_SECRET_KEYS = (
    r"[a-z0-9_-]*token|password|passwd|passphrase|secret[-_]?key|client[-_]?secret|api[-_]?key|"
    r"client-key-data|client-certificate-data|certificate-authority-data|private[-_]?key|credentials?"
)
_KEYVAL = re.compile(
    r"(?i)((?<![A-Za-z0-9])[\"']?(?:" + _SECRET_KEYS + r")[\"']?\s*[:=]\s*)"
    r"(\\\"(?:[^\"\\]|\\[^\"])*\\\"|\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|(?![\[{\"'\\]|(?:true|false|null)\b)[^\s,}\]\\\"']+)"
)
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@\"']+:[^/\s@\"']+@")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _keyval(m: re.Match) -> str:
    value = m.group(2)
    if value.strip("\\\"'") in ("", REDACTED):
        return m.group(0)
    quote = '\\"' if value.startswith('\\"') else (value[0] if value[0] in "\"'" else "")
    return f"{m.group(1)}{quote}{REDACTED}{quote}"


def scrub_text(text: str) -> str:
    """Tokens, keys, passwords and certificates out of one text (whatever its format)."""
    if "-----BEGIN" in text:
        text = _PEM.sub("[PEM " + REDACTED + "]", text)
    text = _PEM_B64.sub(REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    text = _AUTHZ.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _KEYVAL.sub(_keyval, text)
    text = _URL_CRED.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return text


def _scrub_objects(doc) -> bool:
    """Container env values and last-applied annotations (they copy env values) of API objects; True if changed."""
    changed = False
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "env" and isinstance(value, list):
                    for var in value:
                        if (
                            isinstance(var, dict)
                            and isinstance(var.get("value"), str)
                            and var["value"] not in ("", REDACTED)
                        ):
                            var["value"] = REDACTED
                            changed = True
                elif (
                    key == "annotations"
                    and isinstance(value, dict)
                    and value.get(_LAST_APPLIED) not in (None, REDACTED)
                ):
                    value[_LAST_APPLIED] = REDACTED
                    changed = True
                if isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return changed


def scrub_secrets(files: dict[str, bytes]) -> dict[str, bytes]:
    """Every file of a bundle without secrets (applied to every bundle kpdiag writes)."""
    out = {}
    for rel, data in files.items():
        if isinstance(data, str):
            data = data.encode()
        text = data.decode("utf-8", "surrogateescape")
        scrubbed = scrub_text(text)
        if rel.endswith(".json"):
            try:
                doc = load_json(text)  # a bundle is someone else's: depth-bounded (TooDeep is a ValueError)
            except (ValueError, RecursionError):
                doc = None
            # a JSON document is scrubbed string by string: a secret inside a string never takes a quote with it
            if doc is not None and (_scrub_objects(doc) or scrubbed != text):
                scrubbed = json.dumps(_map_strings(doc, scrub_text), indent=1)
            elif doc is not None:
                scrubbed = text
        out[rel] = scrubbed.encode("utf-8", "surrogateescape")
    return out


def _map_strings(doc, fn):
    if isinstance(doc, str):
        return fn(doc)
    if isinstance(doc, list):
        return [_map_strings(v, fn) for v in doc]
    if isinstance(doc, dict):
        return {k: _map_strings(v, fn) for k, v in doc.items()}
    return doc


# ---------------------------------------------------------------- names
# kube-system's well-known objects: they say nothing about the user, and keep the bundle readable
_SKIP_NAMES = {
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
_INFRA = (
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
_NAME_KEYS = {
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
_LABEL_MAPS = {"labels", "matchLabels", "selector", "nodeSelector"}
_KEEP_DOMAINS = (
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
_KEEP_IMAGES = (
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
_CLUSTER_SUFFIXES = (".svc.cluster.local", ".cluster.local")

_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*")
# ns/name:port (iptables comments, kube-proxy log values, manifest focus)
_NS_NAME_PORT = re.compile(
    r"(?<![A-Za-z0-9_.-])([a-z0-9][a-z0-9-]{0,62})/([a-z0-9][a-z0-9.-]{0,252})(?::([A-Za-z0-9][A-Za-z0-9-]{0,62}))?(?![A-Za-z0-9_-])"
)
# kube-proxy's nftables chain/set names: PREFIX-HASH-ns/name/proto/portname[__ip/port]
_NFT_NAME = re.compile(
    r"(?<![A-Za-z0-9_-])([a-z][a-z-]*)-([A-Z0-9]{8})-([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)/(tcp|udp|sctp)/([A-Za-z0-9-]*)"
    r"(?:__(\[?[0-9A-Fa-f:.]+\]?)/(\d+))?"
)
_IPT_COMMENT = re.compile(r'--comment "?([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9.-]*)(?::([A-Za-z0-9-]*))?')
_KLOG_NAME = re.compile(
    r"(?<![A-Za-z0-9_])(service|svc|servicePortName|portName|servicePort_name|node|nodeName|hostname|host|pod|namespace|"
    r'endpointSlice|slice|serviceName)="?([A-Za-z0-9][A-Za-z0-9_.:/-]*)"?'
)
_CONFIG_NAME = re.compile(r"(?m)^\s*(hostnameOverride|nodeName|hostname)\s*:\s*\"?([A-Za-z0-9][A-Za-z0-9_.-]*)\"?\s*$")

# ---------------------------------------------------------------- addresses
_ADDR = re.compile(
    r'(?P<nftp>"prefix":\s*\{\s*"addr":\s*")(?P<nftaddr>[0-9A-Fa-f:.]+)(?P<nftmid>",\s*"len":\s*)(?P<nftlen>\d+)'
    r"|(?P<mac>(?<![0-9A-Fa-f:])[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}(?![0-9A-Fa-f:]))"
    r"|(?P<v6>(?<![0-9A-Za-z:.])(?=[0-9A-Fa-f:]*:[0-9A-Fa-f]*:)"
    r"(?:(?:[0-9A-Fa-f]{0,4}:){2,6}\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:]{2,39})(?:%[A-Za-z0-9_.-]+)?)(?:/(?P<v6len>\d{1,3})(?!\d))?"
    r"|(?P<v4>(?<![0-9.])(?<![vV])\d{1,3}(?:\.\d{1,3}){3})(?![0-9])(?!\.\d)(?:/(?P<v4len>\d{1,2})(?!\d))?"
)
_VERBATIM = {
    "schema",
    "format",
    "apiVersion",
    "kind",
    "kpdiag_version",
    "created",
    "creationTimestamp",
    "resourceVersion",
}
_DNS_NAME = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class Redactor:
    def __init__(self, salt: str | None = None):
        self.salt = salt or secrets.token_hex(8)
        self._key = hashlib.sha256(f"kpdiag-redact:{self.salt}".encode()).digest()
        self.names: dict[str, str] = {}  # original → pseudonym (names, label values, hosts)
        self._pseudonyms: set[str] = set()
        self._learning = False
        self.global_names: set[str] = set()  # the names also replaced in free text
        self.ports: dict[str, str] = {}
        self.ips: dict[str, str] = {}  # the addresses replaced: original → pseudonym
        self._ipcache: dict[str, str] = {}
        self.macs: dict[str, str] = {}
        self._bits: dict[tuple, int] = {}
        ordinary = [o for o in range(1, 224) if o not in (127, 169)]
        shuffled = sorted(ordinary, key=lambda o: self._h(f"octet:{o}"))
        self._octet = dict(zip(ordinary, shuffled))

    def _h(self, text: str, n: int = 8) -> str:
        return hmac.new(self._key, text.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:n]

    # ------------------------------------------------------------ names
    def name(self, value: str, *, free_text: bool = True) -> str:
        """The pseudonym of a name (the same for a namespace, object, node or label value spelled alike)."""
        if not value or value in _SKIP_NAMES or value == REDACTED or value in self._pseudonyms:
            return value
        infra = self._infra(value)
        if infra is not None:
            return infra
        if "." in value and _DNS_NAME.fullmatch(value) and not _looks_numeric(value):
            # a host name / FQDN: its labels are names (ndots and the search list count them); the TLD stays
            low = value.lower().rstrip(".")
            suffix = next((sfx for sfx in _CLUSTER_SUFFIXES if low.endswith(sfx)), None)
            head = value[: len(value) - len(suffix)].split(".") if suffix else value.rstrip(".").split(".")[:-1]
            for label in head:
                self.name(label, free_text=free_text)
            return value if self._learning else self.host(value)
        if value not in self.names:
            self.names[value] = f"r{self._h('name:' + value)}"
            self._pseudonyms.add(self.names[value])
        if free_text and _global_ok(value):
            self.global_names.add(value)
        return self.names[value]

    def _infra(self, value: str) -> str | None:
        """A component's name as it is — but a node name inside it (etcd-NODE, kube-proxy-NODE) redacted."""
        for prefix in _INFRA:
            if value == prefix:
                return value
            if value.startswith(prefix + "-"):
                rest = value[len(prefix) + 1 :]
                return f"{prefix}-{self.names[rest]}" if rest in self.names else value
        return None

    def port(self, value: str) -> str:
        if not value or value == REDACTED:
            return value
        if value not in self.ports:
            self.ports[value] = f"p{self._h('port:' + value, 6)}"
        return self.ports[value]

    def host(self, value: str) -> str:
        """A host name or FQDN that is not a known name: a pseudonym under .redacted.invalid."""
        if value in self.names:
            return self.names[value]
        low = value.lower().rstrip(".")
        if low in ("svc.cluster.local", "cluster.local"):
            return value
        for suffix in _CLUSTER_SUFFIXES:  # web.shop.svc.cluster.local: the Service and namespace, not the suffix
            if low.endswith(suffix):
                head = value[: len(value) - len(suffix)]
                return ".".join(self.name(p) for p in head.split(".")) + value[len(head) :]
        if value not in self.names:
            # label by label (a name keeps its number of dots: resolv.conf's ndots counts them), the top-level domain kept
            labels = value.split(".")
            out = [
                self.names[p] if p in self.global_names else f"h{self._h('label:' + p.lower(), 7)}" for p in labels[:-1]
            ]
            self.names[value] = ".".join(out + [labels[-1]])
            self._pseudonyms.add(self.names[value])
        return self.names[value]

    # ------------------------------------------------------------ addresses
    def _bit(self, tag: str, i: int, prefix: int) -> int:
        key = (tag, i, prefix)
        b = self._bits.get(key)
        if b is None:
            b = hmac.new(self._key, f"{tag}:{i}:{prefix}".encode(), hashlib.sha256).digest()[0] & 1
            self._bits[key] = b
        return b

    def _permute(self, value: int, nbits: int, keep: int, tag: str) -> int:
        """Prefix-preserving: bit i flips by a keyed function of the bits before it; the first ``keep`` bits stay."""
        out = value
        for i in range(keep, nbits):
            if self._bit(tag, i, value >> (nbits - i)):
                out ^= 1 << (nbits - 1 - i)
        return out

    def _v4(self, a: int) -> tuple[int, int]:
        """(mapped address, bits kept as they are)."""
        o = a >> 24
        if o in (0, 127) or o >= 224:
            return a, 32
        low = self._permute(a & 0xFFFFFF, 24, 0, f"4:{o}")
        return ((self._octet.get(o, o) << 24) | low), (8 if o == 169 else 0)

    def _v6(self, a: int) -> tuple[int, int]:
        if a in (0, 1) or a >> 120 == 0xFF:  # ::, ::1, multicast
            return a, 128
        if (
            a >> 32 in (0, 0xFFFF) or a >> 32 == 0x0064FF9B << 64
        ):  # IPv4-compatible, IPv4-mapped, NAT64: the IPv4 inside
            v4, keep = self._v4(a & 0xFFFFFFFF)
            return (a & ~0xFFFFFFFF) | v4, 96 + keep
        for prefix_len, prefix in ((10, 0x3FA), (7, 0x7E), (3, 0x1)):  # link-local, ULA, global unicast
            if a >> (128 - prefix_len) == prefix:
                keep = 64 if prefix_len == 10 else prefix_len
                return self._permute(a, 128, keep, f"6:{prefix}"), keep
        return self._permute(a, 128, 16, "6:other"), 16

    def ip(self, value: str, prefixlen: int | None = None) -> str:
        """An IP address (maybe with a zone), or a network when ``prefixlen`` is given and the host bits are zero."""
        zone = ""
        if "%" in value:
            value, zone = value.split("%", 1)
            zone = "%" + zone
        key = value if prefixlen is None else f"{value}/{prefixlen}"
        if key in self._ipcache:
            return self._ipcache[key] + zone
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            return value + zone
        nbits = addr.max_prefixlen
        mapped, kept = (self._v4 if addr.version == 4 else self._v6)(int(addr))
        if prefixlen is not None and prefixlen <= nbits:
            hostmask = (1 << (nbits - prefixlen)) - 1
            if (
                int(addr) & hostmask == 0
            ):  # a network address: stays one (or stays as it is when shorter than what is kept)
                mapped = int(addr) if prefixlen < kept else mapped & ~hostmask
        out = ipaddress.ip_address(mapped) if addr.version == 4 else ipaddress.IPv6Address(mapped)
        if addr.version == 6 and ":" in value and value.count(":") == 7 and "::" not in value and len(value) == 39:
            text = out.exploded
        elif addr.version == 6 and "." in value and mapped >> 32 in (0, 0xFFFF):
            text = "::ffff:" + str(ipaddress.IPv4Address(mapped & 0xFFFFFFFF)) if mapped >> 32 == 0xFFFF else str(out)
        else:
            text = str(out)
        if value.isupper() if any(c.isalpha() for c in value) else False:
            text = text.upper()
        self._ipcache[key] = text
        if text != value:
            self.ips[key] = text
        return text + zone

    def mac(self, value: str) -> str:
        low = value.lower()
        if low in ("00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"):
            return value
        if low not in self.macs:
            h = bytes.fromhex(self._h("mac:" + low, 12))
            first = (h[0] & 0xFC) | 0x02  # locally administered, unicast
            self.macs[low] = ":".join(f"{b:02x}" for b in (first,) + tuple(h[1:6]))
        out = self.macs[low]
        return out.upper() if value.isupper() else out

    def _addr_sub(self, m: re.Match) -> str:
        if m.group("nftp"):  # nft -j writes a network as {"prefix": {"addr": A, "len": N}}
            return (
                m.group("nftp")
                + self.ip(m.group("nftaddr"), int(m.group("nftlen")))
                + m.group("nftmid")
                + m.group("nftlen")
            )
        if m.group("mac"):
            return self.mac(m.group("mac"))
        if m.group("v4"):
            plen = m.group("v4len")
            return self.ip(m.group("v4"), int(plen) if plen else None) + (f"/{plen}" if plen else "")
        raw, plen = m.group("v6"), m.group("v6len")
        tail = ""
        while raw:  # "fd00::1:" at the end of a sentence: the address is what parses
            try:
                ipaddress.ip_address(raw.split("%", 1)[0])
                break
            except ValueError:
                if not raw.endswith(":"):
                    return m.group(0)
                raw, tail = raw[:-1], ":" + tail
                plen = None
        if not raw:
            return m.group(0)
        if tail:
            return self.ip(raw) + tail + m.group(0)[len(m.group("v6")) :]
        return self.ip(raw, int(plen) if plen else None) + (f"/{plen}" if plen else "")

    # ------------------------------------------------------------ learning what to hide
    def learn(self, files: dict[str, bytes]) -> None:
        self._learning = True
        try:
            self._learn(files)
        finally:
            self._learning = False

    def _learn(self, files: dict[str, bytes]) -> None:
        manifest = _json(files.get("kpdiag.json"))
        if isinstance(manifest, dict):
            if manifest.get("node"):
                self.name(str(manifest["node"]))
            focus = manifest.get("service")
            if isinstance(focus, str) and "/" in focus:
                for part in focus.split("/"):
                    self.name(part)
        for rel, data in files.items():
            if rel.endswith(".json") and (rel.startswith(("cluster/", "probes/"))):
                doc = _json(data)
                if doc is not None:
                    self._learn_doc(doc)
        for rel, data in files.items():
            text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
            for m in _NFT_NAME.finditer(text):
                self.name(m.group(3))
                self.name(m.group(4))
                self.port(m.group(6))
            for m in _IPT_COMMENT.finditer(text):
                self.name(m.group(1))
                self.name(m.group(2))
                self.port(m.group(3) or "")
            if rel.endswith(("log.txt", ".log")) or "kube-proxy" in rel:
                for m in _KLOG_NAME.finditer(text):
                    value = m.group(2)
                    if "/" in value:
                        ns, _, rest = value.partition("/")
                        name, _, port = rest.partition(":")
                        self.name(ns)
                        self.name(name)
                        self.port(port)
                    elif not _looks_numeric(value):
                        self.name(value.split(":", 1)[0])
                for m in _CONFIG_NAME.finditer(text):
                    self.name(m.group(2))

    def _learn_doc(self, doc) -> None:
        stack = [(None, doc)]
        while stack:
            key, node = stack.pop()
            if isinstance(node, dict):
                is_port = any(k in node for k in ("port", "containerPort", "targetPort"))
                for k, v in node.items():
                    if isinstance(v, str):
                        if k == "name" and is_port:
                            self.port(v)
                        elif k == "targetPort":
                            self.port(v)
                        elif k in _NAME_KEYS and key not in ("env",):
                            self.name(v)
                    elif k in _LABEL_MAPS and isinstance(v, dict):
                        for lv in v.values():
                            if isinstance(lv, str):
                                self.name(lv)
                    elif k == "annotations" and isinstance(v, dict):
                        for av in v.values():
                            if isinstance(av, str):
                                self.name(av, free_text=False)
                    elif k == "addresses" and isinstance(v, list):
                        for a in v:
                            if (
                                isinstance(a, dict)
                                and a.get("type") in ("Hostname", "InternalDNS", "ExternalDNS")
                                and isinstance(a.get("address"), str)
                            ):
                                self.name(a["address"])
                    if isinstance(v, (dict, list)):
                        stack.append((k, v))
            elif isinstance(node, list):
                stack.extend((key, v) for v in node if isinstance(v, (dict, list)))

    # ------------------------------------------------------------ applying it
    def text(self, text: str, hosts: bool = True) -> str:
        """Secrets, nftables names, ns/name:port, addresses, MACs, host names and learned names out of a text."""
        text = scrub_text(text)
        text = _NFT_NAME.sub(self._nft_sub, text)
        text = _NS_NAME_PORT.sub(self._ns_sub, text)
        text = _ADDR.sub(self._addr_sub, text)
        return _TOKEN.sub(lambda m: self._token(m, hosts), text)

    def _nft_sub(self, m: re.Match) -> str:
        out = f"{m.group(1)}-{m.group(2)}-{self.name(m.group(3))}/{self.name(m.group(4))}/{m.group(5)}/{self.port(m.group(6))}"
        if m.group(7):  # the endpoint's address: left to the address pass that follows (mapped once)
            out += "__" + m.group(7) + "/" + m.group(8)
        return out

    def _ns_sub(self, m: re.Match) -> str:
        ns, name, port = m.group(1), m.group(2), m.group(3)
        if ns not in self.names and ns not in _SKIP_NAMES:
            return m.group(0)
        if name not in self.names and name not in _SKIP_NAMES:
            return m.group(0)
        return f"{self.name(ns)}/{self.name(name)}" + (f":{self.port(port)}" if port else "")

    def _token(self, m: re.Match, hosts: bool) -> str:
        t = m.group(0)
        if t in self.global_names:
            return self.names[t]
        if "." not in t:
            return t
        parts = t.split(".")
        if t in self._pseudonyms:
            return t
        if "-" in t and t.startswith(_INFRA):
            return self._infra(t) or t
        if all(p in self.global_names for p in parts) or (hosts and _fqdn_like(parts) and not _kept_domain(t)):
            return self.host(t)
        if any(p in self.global_names for p in parts):
            return ".".join(self.names[p] if p in self.global_names else p for p in parts)
        return t

    def json_doc(self, doc, key=None):
        """An API object / report / manifest, field by field."""
        if isinstance(doc, dict):
            is_port = any(k in doc for k in ("port", "containerPort", "targetPort"))
            out = {}
            for k, v in doc.items():
                if k == "managedFields":
                    continue
                if key in _LABEL_MAPS or key == "annotations":
                    nk = self._label_key(k)
                else:  # a field name stays (a key spelled like a name — "client" — is the schema's); map keys are redacted
                    nk = k if _FIELD.fullmatch(k) else self.text(k)
                if isinstance(v, str):
                    if k in _VERBATIM and key not in _LABEL_MAPS and key != "annotations":
                        out[nk] = v
                    elif key in _LABEL_MAPS:
                        out[nk] = self.name(v)
                    elif key == "annotations":
                        out[nk] = self.name(v, free_text=False)
                    elif (k == "name" and is_port) or k == "targetPort":
                        out[nk] = self.port(v)
                    elif k == "uid":
                        h = self._h("uid:" + v, 32)
                        out[nk] = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}" if _UID.match(v) else f"u{h[:12]}"
                    elif k == "image":
                        out[nk] = self._image(v)
                    elif k in _NAME_KEYS and key != "env" and v and not _looks_numeric(v) and not _ADDR.fullmatch(v):
                        if "/" in v:  # a Service focus, NS/NAME
                            out[nk] = "/".join(self.name(p) for p in v.split("/"))
                        else:
                            out[nk] = self.name(v)
                    elif v in self.names:
                        out[nk] = self.names[v]
                    else:
                        out[nk] = self.text(v)
                else:
                    out[nk] = self.json_doc(v, k)
            return out
        if isinstance(doc, list):
            return [self.json_doc(v, key) for v in doc]
        if isinstance(doc, str):
            return (
                self.names[doc] if doc in self.names else self.text(doc)
            )  # a whole value equal to a name is that name
        return doc

    def _label_key(self, k: str) -> str:
        prefix, slash, rest = k.rpartition("/")
        if not slash or prefix.lower().endswith(_KEEP_DOMAINS):
            return k
        return f"{self.host(prefix) if '.' in prefix else self.name(prefix)}/{rest}"

    def _image(self, v: str) -> str:
        if v.startswith(_KEEP_IMAGES):
            return v
        repo = v.split("@", 1)[0].rsplit("/", 1)[-1]
        if repo.startswith(_INFRA):  # a component's image: its name and tag kept, the registry not
            return f"registry.redacted.invalid/{repo}"
        tag = ""
        base = v.split("@", 1)[0]
        if ":" in base.rsplit("/", 1)[-1]:
            tag = ":" + base.rsplit(":", 1)[1]
        return f"registry.redacted.invalid/i{self._h('image:' + base.split(':')[0] if tag else base)}{tag}"

    def files(self, files: dict[str, bytes]) -> dict[str, bytes]:
        files = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
        self.learn(files)
        out = {}
        for rel, data in files.items():
            text = data.decode("utf-8", "surrogateescape")
            doc = (
                _json(data)
                if rel.endswith(".json") and (rel.startswith(("cluster/", "probes/")) or rel == "kpdiag.json")
                else None
            )
            if doc is not None:
                _scrub_objects(doc)
                red = self.json_doc(doc)
                out[rel] = json.dumps(red, indent=1).encode("utf-8", "surrogateescape")
            else:
                hosts = not rel.endswith(("sysctl.txt", "modules.txt", "modules-builtin.txt", "uname.txt"))
                out[rel] = self.text(text, hosts=hosts).encode("utf-8", "surrogateescape")
        return out


def _global_ok(value: str) -> bool:
    return (
        3 <= len(value) <= 253
        and value.lower() not in _RESERVED
        and any(c.isalpha() for c in value)
        and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", value) is not None
    )


def _looks_numeric(value: str) -> bool:
    return (
        re.fullmatch(r"[0-9.:/\[\]a-fA-F%-]*", value) is not None
        and any(c.isdigit() for c in value)
        and not re.search(r"[g-zG-Z]", value)
    )


def _fqdn_like(parts: list[str]) -> bool:
    if len(parts) < 2 or not all(re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", p) for p in parts):
        return False
    last = parts[-1]
    return (
        last.isalpha()
        and last.islower()
        and len(last) >= 2
        and last not in _FILE_EXT
        and any(c.isalpha() for c in parts[0])
        and all(p == p.lower() for p in parts)
        and parts[0] not in ("net", "kernel", "vm", "fs", "dev", "user", "abi", "debug")
    )


def _kept_domain(t: str) -> bool:
    low = t.lower()
    return any(low == d or low.endswith("." + d) for d in _KEEP_DOMAINS)


def _json(data: bytes | None):
    if not data:
        return None
    try:
        return load_json(data)
    except (ValueError, RecursionError):
        return None


def redact_files(files: dict[str, bytes], salt: str | None = None) -> tuple[dict[str, bytes], Redactor]:
    r = Redactor(salt)
    return r.files(files), r
