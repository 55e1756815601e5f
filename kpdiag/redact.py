"""Redaction for support bundles: namespaces, names, node names and non-cluster IPs become stable
hashes, the same in every file of the bundle, so that `kpdiag analyze` still works on it.

Kept as they are: addresses inside the cluster's own ranges (the pod CIDR, the service range around
the ClusterIPs), loopback, link-local, multicast, unspecified and netmask-like values — they say
nothing about the user's network beyond the cluster. kube-proxy's chain hashes (KUBE-SVC-…) are
one-way already and are kept.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import secrets

_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w.])")
# candidate IPv6 addresses (validated by ipaddress before anything is replaced)
_IPV6 = re.compile(r"(?<![\w:.])((?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{0,4}|(?:[0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*|::[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*)(?![\w:.])")
_COMMENT_NAME = re.compile(r'"([a-z0-9][a-z0-9.-]*)/([a-z0-9][a-z0-9.-]*)(?::[^" ]*)?[ "]')
_KEEP_NETS = [ipaddress.ip_network(n) for n in ("127.0.0.0/8", "0.0.0.0/32", "169.254.0.0/16", "224.0.0.0/4", "255.0.0.0/8",
                                                "::1/128", "::/128", "fe80::/10", "ff00::/8")]
_SKIP_NAMES = {"default", "kube-system", "kube-public", "kube-node-lease", "kubernetes", "kube-proxy", "kube-dns", "coredns"}


class Redactor:
    def __init__(self, salt: str | None = None):
        self.salt = salt or secrets.token_hex(8)
        self.names: dict[str, str] = {}
        self.ips: dict[str, str] = {}
        self.keep: list = []

    def _h(self, text: str, n: int = 6) -> str:
        return hashlib.sha256(f"{self.salt}:{text}".encode()).hexdigest()[:n]

    def name(self, kind: str, value: str) -> str:
        if value in _SKIP_NAMES or not value:
            return value
        if value not in self.names:
            self.names[value] = f"{kind}-{self._h(value)}"
        return self.names[value]

    def ip(self, value: str) -> str:
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            return value
        if any(addr.version == net.version and addr in net for net in _KEEP_NETS + self.keep):
            return value
        if value not in self.ips:
            if addr.version == 4:
                digest = int(self._h(value, 8), 16)
                # 198.18.0.0/15 is reserved for benchmarking: never a real address of the user's
                self.ips[value] = str(ipaddress.IPv4Address(int(ipaddress.IPv4Address("198.18.0.0")) + digest % (1 << 17)))
            else:
                # 2001:db8::/32 is the documentation range
                self.ips[value] = str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("2001:db8::")) + int(self._h(value, 16), 16)))
        return self.ips[value]

    # ---------------------------------------------------------------- learning what to hide
    def learn(self, files: dict[str, bytes]) -> None:
        """Collect the names to replace and the cluster ranges to keep."""
        manifest = _json(files.get("kpdiag.json"))
        if isinstance(manifest, dict) and manifest.get("node"):
            self.name("node", str(manifest["node"]))
        for rel in ("cluster/services.json", "cluster/endpointslices.json", "cluster/pods.json", "cluster/nodes.json"):
            doc = _json(files.get(rel))
            for item in (doc or {}).get("items", []) if isinstance(doc, dict) else []:
                md = item.get("metadata") or {} if isinstance(item, dict) else {}
                if md.get("namespace"):
                    self.name("ns", str(md["namespace"]))
                if md.get("name"):
                    self.name("node" if rel.endswith("nodes.json") else "obj", str(md["name"]))
                for ep in (item.get("endpoints") or []) if isinstance(item, dict) else []:
                    if isinstance(ep, dict) and ep.get("nodeName"):
                        self.name("node", str(ep["nodeName"]))
                    ref = ep.get("targetRef") if isinstance(ep, dict) else None
                    if isinstance(ref, dict) and ref.get("name"):
                        self.name("obj", str(ref["name"]))
        for rel, data in files.items():
            if rel.endswith("iptables-save.txt") or rel.endswith("-save.txt"):
                for ns, name in _COMMENT_NAME.findall(data.decode("utf-8", "replace")):
                    self.name("ns", ns)
                    self.name("obj", name)
        text = b"\n".join(v for k, v in files.items() if k.startswith("node/")).decode("utf-8", "replace")
        for cidr in re.findall(r"! -s (\d+\.\d+\.\d+\.\d+/\d+)", text) + re.findall(r"clusterCIDR: \"?(\d+\.\d+\.\d+\.\d+/\d+)", text):
            self.keep.append(ipaddress.ip_network(cidr, strict=False))
        for ip in re.findall(r"-d (\d+\.\d+\.\d+\.\d+)(?:/32)? -p \w+ -m comment --comment \"[^\"]* cluster IP\"", text):
            self.keep.append(ipaddress.ip_network(f"{ip}/16", strict=False))
        svc = _json(files.get("cluster/services.json"))
        for item in (svc or {}).get("items", []) if isinstance(svc, dict) else []:
            cip = ((item.get("spec") or {}).get("clusterIP") if isinstance(item, dict) else None) or ""
            if _IPV4.fullmatch(cip):
                self.keep.append(ipaddress.ip_network(f"{cip}/16", strict=False))

    # ---------------------------------------------------------------- applying it
    def text(self, text: str) -> str:
        text = _IPV4.sub(lambda m: self.ip(m.group(1)), text)
        text = _IPV6.sub(lambda m: self.ip(m.group(1)), text)
        if self.names:
            pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True)) + r")(?![\w-])")
            text = pattern.sub(lambda m: self.names[m.group(1)], text)
        return text

    def files(self, files: dict[str, bytes]) -> dict[str, bytes]:
        self.learn(files)
        out = {}
        for rel, data in files.items():
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                out[rel] = data  # not text: kept (bundles hold only text files)
                continue
            out[rel] = self.text(text).encode()
        return out


def _json(data: bytes | None):
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def redact_files(files: dict[str, bytes], salt: str | None = None) -> tuple[dict[str, bytes], Redactor]:
    r = Redactor(salt)
    return r.files(files), r
