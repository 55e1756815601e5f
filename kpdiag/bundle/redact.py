"""Redaction of names and addresses for support bundles (``collect --redact``, ``kpdiag redact``).

Two levels:

* :func:`kpdiag.bundle.scrub.scrub_secrets` — always applied to every bundle kpdiag writes (with or without
  ``--redact``): bearer tokens, JWTs, ``Authorization`` headers, PEM blocks and base64 PEM, ``token:`` /
  ``password:`` / ``client-key-data:``-style fields, credentials in URLs, container ``env`` values and the
  ``last-applied-configuration`` annotation of API objects become ``REDACTED``.
* :class:`Redactor` (here) — also every name and address: namespaces, Service/Pod/Node names, label and annotation
  values, port names, host names and FQDNs, MAC addresses and every IP address (IPv4, IPv6 compressed/expanded/with
  a zone, IPv4-mapped, in CIDRs, inside nftables chain names, followed by punctuation). It learns the names from the
  bundle's API objects and files, then applies them to every file: JSON documents field by field, other files as
  text, piece by piece. What counts as a name and what is kept: kpdiag/bundle/redact_names.py; addresses and their
  pseudonyms: kpdiag/bundle/redact_addr.py.

The bundle stays analyzable: the same value gets the same pseudonym in every file, and IP addresses are
mapped by a keyed prefix-preserving permutation (two addresses that share their first N bits still share
them after mapping; an IP stays an IP of the same family; a network address ``a.b.c.0/24`` stays a network
address with the same prefix length). Kept as they are: loopback, unspecified, multicast/broadcast and
netmask-like addresses, the names of kube-system's well-known objects (``kube-system``, ``kube-dns``,
``kubernetes`` …), label and API-group keys under kubernetes.io/k8s.io, and kube-proxy's chain hashes
(KUBE-SVC-…, the 8-character hash of nftables chain names: one-way digests of the Service port name).
"""

import json
import re
from typing import Any

from kpdiag.bundle import sources
from kpdiag.bundle.redact_addr import CACHE_MAX, TOP_GROUPS, AddressMap, addr_regex
from kpdiag.bundle.redact_names import (
    ADDRLIKE,
    CLOUD_SCHEMES,
    CLUSTER_SUFFIXES,
    CONFIG_NAME,
    DNS_NAME,
    INFRA,
    INFRA_RE,
    IPT_COMMENT,
    KEEP_DOMAINS,
    KEEP_IMAGES,
    KLOG_NAME,
    KUBERNETES_DOMAINS,
    NAME_KEYS,
    NFT_NAME,
    NS_NAME_PORT,
    PCT,
    SKIP_NAMES,
    TOKEN,
    UID,
    VERBATIM,
    fqdn_like,
    global_ok,
    kept_domain,
    looks_numeric,
    verbatim_ok,
)
from kpdiag.bundle.scrub import (
    FIELD,
    LABEL_MAPS,
    PIECE_LIMIT,
    REDACTED,
    URL_RUN,
    form_of,
    is_secret_key,
    json_stream,
    pieces,
    redaction_of,
    scrub_objects,
    scrub_pem,
    scrub_piece,
    scrub_yaml_blocks,
    secret_value_kept,
    url_redo,
)
from kpdiag.parse.decode import load_json


class Redactor(AddressMap):
    def __init__(self, salt: str | None = None):
        super().__init__(salt)
        self.names: dict[str, str] = {}  # original → pseudonym (names, label values, hosts)
        self._pseudonyms: set[str] = set()
        self._learning = False
        self.global_names: set[str] = set()  # the names also replaced in free text
        self.ports: dict[str, str] = {}
        self._tokcache: dict[tuple, str] = {}  # a word → its redaction (after learning, it is a function of the word)
        self._settled: set[str] = set()  # names whose free-text standing (global or not) is decided
        self.not_copied: list[str] = []  # "FILE: why": files left out of the redacted copy

    def name(self, value: str, *, free_text: bool = True) -> str:
        """The pseudonym of a name (the same for a namespace, object, node or label value spelled alike)."""
        hit = self.names.get(value)
        if hit is not None and not self._learning and (not free_text or value in self._settled):
            return hit  # the common case: a name seen before
        if not value or value in SKIP_NAMES or value == REDACTED or value in self._pseudonyms:
            return value
        infra = self._infra(value)
        if infra is not None:
            return infra
        if "." in value and value.lower().rstrip(".").endswith(KUBERNETES_DOMAINS):
            return value  # Kubernetes' own component names (endpointslice-controller.k8s.io): no one's, kept
        if "." in value and len(value) <= 253 and DNS_NAME.fullmatch(value) and not looks_numeric(value):
            # a host name / FQDN: its labels are names (ndots and the search list count them); the TLD stays
            low = value.lower().rstrip(".")
            suffix = next((sfx for sfx in CLUSTER_SUFFIXES if low.endswith(sfx)), None)
            head = value[: len(value) - len(suffix)].split(".") if suffix else value.rstrip(".").split(".")[:-1]
            for label in head:
                self.name(label, free_text=free_text)
            return value if self._learning else self.host(value)
        if value not in self.names:
            self.names[value] = f"r{self._h('name:' + value)}"
            self._pseudonyms.add(self.names[value])
        if free_text and value not in self._settled:
            if global_ok(value):
                self.global_names.add(value)
                self._tokcache.clear()  # a word's redaction may change with a new name
            self._settled.add(value)
        return self.names[value]

    def _infra(self, value: str) -> str | None:
        """A component's name as it is — but a node name inside it (etcd-NODE, kube-proxy-NODE) redacted."""
        m = INFRA_RE.match(value)
        if m is None:
            return None
        prefix = m.group(1)
        if value == prefix:
            return value
        rest = value[len(prefix) + 1 :]
        return f"{prefix}-{self.names[rest]}" if rest in self.names else value

    def port(self, value: str) -> str:
        if not value or value == REDACTED:
            return value
        if value not in self.ports:
            self.ports[value] = f"p{self._h('port:' + value, 6)}"
        return self.ports[value]

    def host(self, value: str) -> str:
        """A host name or FQDN that is not a known name: a pseudonym under .redacted.invalid."""
        if value in SKIP_NAMES:
            return value
        if value in self.names:
            return self.names[value]
        low = value.lower().rstrip(".")
        if low in ("svc.cluster.local", "cluster.local"):
            return value
        for suffix in CLUSTER_SUFFIXES:  # web.shop.svc.cluster.local: the Service and namespace, not the suffix
            if low.endswith(suffix):
                head = value[: len(value) - len(suffix)]
                return ".".join(self.name(p) for p in head.split(".")) + value[len(head) :]
        if value not in self.names:
            # label by label (a name keeps its number of dots: resolv.conf's ndots counts them), the top-level domain kept
            labels = value.split(".")
            out = [
                self.names[p] if p in self.global_names else f"h{self._h('label:' + p.lower(), 7)}" for p in labels[:-1]
            ]
            last = self.names[labels[-1]] if labels[-1] in self.global_names else labels[-1]  # web.shop: shop too
            self.names[value] = ".".join(out + [last])
            self._pseudonyms.add(self.names[value])
        return self.names[value]

    def _addr_sub(self, m: re.Match) -> str:
        if m.lastgroup in ("run", "zone", "plen"):
            return self._run(m)
        gd = m.groupdict()
        g = next(k for k in TOP_GROUPS if gd.get(k) is not None)
        if g == "nftp":  # nft -j writes a network as {"prefix": {"addr": A, "len": N}}
            addr, plen = m.group("nftaddr"), int(m.group("nftlen"))
            return m.group("nftp") + self.ip(addr, plen) + m.group("nftmid") + m.group("nftlen")
        if g == "run":
            return self._run(m)
        if g == "arpa6":
            return self._arpa(m.group(0), True)
        if g == "arpa4":
            return self._arpa(m.group(0), False)
        if g == "img":
            return self._image(m.group(0))
        if g == "guid":
            return self.uid(m.group(0))
        if g in ("macd", "cisco"):
            return self.mac(m.group(0))
        if g == "dash4":
            parts = m.group(0).split("-")
            if any(int(p) > 255 for p in parts):
                return m.group(0)
            return "-".join(self._v4_text(parts).split("."))
        if g == "url6":
            raw = re.sub("%3[Aa]", ":", m.group(0))
            out = self._v6_text(raw, "", None)
            return m.group(0) if out is None else out.replace(":", "%3A")
        if g == "awsid":
            prefix, _, rest = m.group(0).rpartition("-")
            return f"{prefix}-{self._h('awsid:' + m.group(0), len(rest))}"
        if g == "arn":
            acct = m.group("arnacct")
            res = m.group("arnres")
            kind, sep, name = res.partition("/") if "/" in res else res.partition(":")
            res_out = f"{kind}{sep}{self.name(name, free_text=False)}" if sep else self.name(res, free_text=False)
            return m.group("arn") + (self.account(acct) if acct else "") + ":" + res_out
        if g == "email":  # the mailbox; its domain is a host name (the host pass that follows)
            local = m.group("email")
            return (local if local == REDACTED else f"u{self._h('email:' + local.lower())}") + "@"
        if g == "ecr":
            return self.account(m.group(0))
        if g == "acctk":
            return m.group("acctk") + self.account(m.group("acct"))
        if g == "gce":
            return (
                f"gce://{self.name(m.group('gceproj'), free_text=False)}/{m.group('gcezone')}/"
                f"{self.name(m.group('gcename'), free_text=False)}"
            )
        if g == "gcp":
            return m.group("gcp") + self.name(m.group("gproj"), free_text=False)
        if g == "az":
            name = m.group("azname")
            return m.group("az") + (name if name.isdigit() else self.name(name, free_text=False))
        return m.group(0)

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
            if form_of(rel) == "api":
                doc = _json(data)
                if doc is not None:
                    self._learn_doc(doc)
        for rel, data in files.items():
            text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
            for m in NFT_NAME.finditer(text):
                self.name(m.group(3))
                self.name(m.group(4))
                self.port(m.group(6))
            for m in IPT_COMMENT.finditer(text):
                self.name(m.group(1))
                self.name(m.group(2))
                self.port(m.group(3) or "")
            if redaction_of(rel).klog_names:
                for m in KLOG_NAME.finditer(text):
                    value = m.group(2)
                    if "/" in value:
                        ns, _, rest = value.partition("/")
                        name, _, port = rest.partition(":")
                        self.name(ns)
                        self.name(name)
                        self.port(port)
                    elif not looks_numeric(value):
                        self.name(value.split(":", 1)[0])
                for m in CONFIG_NAME.finditer(text):
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
                        elif k in NAME_KEYS and key not in ("env",):
                            self.name(v)
                    elif k in LABEL_MAPS and isinstance(v, dict):
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
        text = scrub_yaml_blocks(scrub_pem(text))
        if len(text) <= PIECE_LIMIT and "\n" not in text:
            return self._piece(text, hosts)
        return "".join(self._piece(p, hosts) for p in pieces(text))

    def _piece(self, text: str, hosts: bool) -> str:
        if "%" not in text:
            return self._plain(text, hosts)
        out, pos = [], 0
        for m in URL_RUN.finditer(text):  # a URL-encoded run is redacted decoded, once (never mapped twice)
            run = m.group(0)
            out.append(self._plain(text[pos : m.start()], hosts))
            redone = url_redo(run, lambda t: self.text(t, hosts))
            out.append(self._plain(run, hosts) if redone is None else redone)
            pos = m.end()
        out.append(self._plain(text[pos:], hosts))
        return "".join(out)

    def _plain(self, text: str, hosts: bool) -> str:
        if not text:
            return text
        text = scrub_piece(text)
        if "/" in text:
            text = NFT_NAME.sub(self._nft_sub, text)
            text = NS_NAME_PORT.sub(self._ns_sub, text)
        text = addr_regex(text).sub(self._addr_sub, text)
        if "%" in text:  # URL-encoded: %2F and its kind separate words (…%2Fnamespaces%2Fshop%2F…)
            parts = PCT.split(text)
            return "".join(p if i % 2 else TOKEN.sub(lambda m: self._token(m, hosts), p) for i, p in enumerate(parts))
        return TOKEN.sub(lambda m: self._token(m, hosts), text)

    def _nft_sub(self, m: re.Match) -> str:
        out = f"{m.group(1)}-{m.group(2)}-{self.name(m.group(3))}/{self.name(m.group(4))}/{m.group(5)}/{self.port(m.group(6))}"
        if m.group(7):  # the endpoint's address: left to the address pass that follows (mapped once)
            out += "__" + m.group(7) + "/" + m.group(8)
        return out

    def _ns_sub(self, m: re.Match) -> str:
        ns, name, port = m.group(1), m.group(2), m.group(3)
        if ns not in self.names and ns not in SKIP_NAMES:
            return m.group(0)
        if name not in self.names and name not in SKIP_NAMES:
            return m.group(0)
        return f"{self.name(ns)}/{self.name(name)}" + (f":{self.port(port)}" if port else "")

    def _token(self, m: re.Match, hosts: bool) -> str:
        t = m.group(0)
        if "." not in t and "_" not in t:
            return self.names[t] if t in self.global_names else t
        key = (t, hosts)
        out = self._tokcache.get(key)
        if out is None:
            if len(self._tokcache) > CACHE_MAX:
                self._tokcache.clear()
            out = self._tokcache[key] = self._token_uncached(t, hosts)
        return out

    def _token_uncached(self, t: str, hosts: bool) -> str:
        if t in self.global_names:
            return self.names[t]
        if "_" in t and "." not in t:  # a name inside an identifier: shop_web-frontend, cali_shop_…
            parts = t.split("_")
            if any(p in self.global_names for p in parts):
                return "_".join(self.names[p] if p in self.global_names else p for p in parts)
            return t
        if "." not in t or t in SKIP_NAMES:
            return t
        parts = t.split(".")
        if t in self._pseudonyms:
            return t
        if "-" in t and t.startswith(INFRA):
            return self._infra(t) or t
        if all(p in self.global_names for p in parts) or (hosts and fqdn_like(parts) and not kept_domain(t)):
            return self.host(t)
        if any(p in self.global_names for p in parts):
            return ".".join(self.names[p] if p in self.global_names else p for p in parts)
        return t

    def json_doc(self, doc, key=None):
        """An API object / report / manifest, field by field."""
        if isinstance(doc, dict):
            return self._json_object(doc, key)
        if isinstance(doc, list):
            return [self.json_doc(v, key) for v in doc]
        if isinstance(doc, str):
            return (
                self.names[doc] if doc in self.names else self.text(doc)
            )  # a whole value equal to a name is that name
        return doc

    def _json_object(self, doc: dict, key) -> dict:
        """A JSON object under ``key``: its member names (kept when a schema's, redacted when a map's), its values."""
        is_port = any(k in doc for k in ("port", "containerPort", "targetPort"))
        out: dict[str, Any] = {}
        for k, v in doc.items():
            if k == "managedFields":
                continue
            if key in LABEL_MAPS or key == "annotations":
                nk = self._label_key(k)
            else:  # a field name stays (a key spelled like a name — "client" — is the schema's); map keys are redacted
                nk = k if FIELD.fullmatch(k) else self.text(k)
            if isinstance(v, str):
                out[nk] = self._json_string(k, v, key, is_port)
            elif k == "names" and "sizeBytes" in doc and isinstance(v, list):  # a Node's status.images
                out[nk] = [self._image(x) if isinstance(x, str) else self.json_doc(x, k) for x in v]
            else:
                out[nk] = self.json_doc(v, k)
        return out

    def _json_string(self, k: str, v: str, key, is_port: bool) -> str:
        """The string value of member ``k`` of an object under ``key``: by what the member is."""
        if k in VERBATIM and key not in LABEL_MAPS and key != "annotations" and verbatim_ok(v):
            return self.names.get(v, v)
        if key in LABEL_MAPS:
            return self.name(v)
        if key == "annotations":
            return self.name(v, free_text=False)
        if is_secret_key(k) and not secret_value_kept(v):
            return REDACTED
        if (k == "name" and is_port) or k == "targetPort":
            return self.port(v)
        return self._json_field(k, v, key)

    def _json_field(self, k: str, v: str, key) -> str:
        """A field that holds an id, an image, a cloud's provider id or a name; else a text."""
        if k == "uid":
            return self.uid(v) if UID.match(v) else f"u{self._h('uid:' + v, 12)}"
        if k in ("image", "imageID"):
            return self._image(v)
        if k == "providerID" and v.split("://", 1)[0] in CLOUD_SCHEMES and "://" in v:
            scheme, rest = v.split("://", 1)
            return f"{scheme}://" + "/".join(self.name(p) if p else "" for p in rest.split("/"))
        if k in NAME_KEYS and key != "env" and v and not looks_numeric(v) and not ADDRLIKE.fullmatch(v):
            if "/" in v:  # a Service focus, NS/NAME
                return "/".join(self.name(p) for p in v.split("/"))
            return self.name(v)
        if v in self.names:
            return self.names[v]
        return self.text(v)

    def _label_key(self, k: str) -> str:
        prefix, slash, rest = k.rpartition("/")
        if not slash or prefix.lower().endswith(KEEP_DOMAINS):
            return k
        return f"{self.host(prefix) if '.' in prefix else self.name(prefix)}/{rest}"

    def _image(self, v: str) -> str:
        """An image reference (a container's image or imageID, a Node's status.images): public component registries
        and kpdiag's own image kept; else the registry and repository replaced by one keyed name, the tag kept."""
        scheme = ""
        if "://" in v:  # imageID: docker-pullable://REPO@sha256:…
            scheme, v = v.split("://", 1)
            scheme += "://"
        if re.fullmatch(r"sha256:[0-9a-f]{64}", v) or v.startswith(KEEP_IMAGES):
            return scheme + v
        repo = v.split("@", 1)[0].rsplit("/", 1)[-1]
        if repo.startswith(INFRA):  # a component's image: its name and tag kept, the registry not
            return f"{scheme}registry.redacted.invalid/{repo}"
        tag = ""
        base = v.split("@", 1)[0]
        if ":" in base.rsplit("/", 1)[-1]:
            tag = ":" + base.rsplit(":", 1)[1]
            base = base.rsplit(":", 1)[0]
        if not re.fullmatch(r"[A-Za-z0-9_.-]{0,128}", tag[1:]):
            tag = ""
        return f"{scheme}registry.redacted.invalid/i{self._h('image:' + base)}{tag}"

    def files(self, files: dict[str, bytes]) -> dict[str, bytes]:
        files = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
        self.learn(files)
        out = {}
        for rel, data in files.items():
            if _wide_or_binary(data):  # UTF-16/32 or binary: a secret in it is not text the patterns can see
                self.not_copied.append(f"{rel}: not UTF-8 text (UTF-16, UTF-32 or binary), so it is left out")
                continue
            text = data.decode("utf-8", "surrogateescape")
            form = "api" if rel == "kpdiag.json" else form_of(rel)
            doc = _json(data) if form == "api" else None
            if doc is None and form == "api" and data.strip():
                # its names are learned from its structure only: as text, every name in it would survive
                self.not_copied.append(f"{rel}: {_json_error(data)}: its names cannot be told, so it is left out")
                continue
            if doc is not None:
                scrub_objects(doc)
                red = self.json_doc(doc)
                out[rel] = json.dumps(red, indent=1).encode("utf-8", "surrogateescape")
            elif form != "text" or rel.endswith(".json"):
                out[rel] = json_stream(text, self.text, self.text, self.ip).encode("utf-8", "surrogateescape")
            else:
                out[rel] = self.text(text).encode("utf-8", "surrogateescape")
        return {self.path(rel): data for rel, data in out.items()}

    def path(self, rel: str) -> str:
        """A file's name in the bundle: a declared source's as it is; any other (a hand-made bundle's extra files)
        redacted like text, part by part."""
        if rel in sources.CATALOGUE or rel == "kpdiag.json":
            return rel
        return "/".join(self.text(part) for part in rel.split("/"))


def _json_error(data: bytes) -> str:
    try:
        load_json(data)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({str(exc)[:120]})"
    return "not JSON"


def _json(data: bytes | None):
    if not data:
        return None
    try:
        return load_json(data)
    except (ValueError, RecursionError):
        return None


def _wide_or_binary(data: bytes) -> bool:
    """UTF-16/32 (a byte-order mark, or NULs between the characters) or binary: one byte in eight or more a NUL. A
    few stray NULs (a log padded after a crash) leave a text a text."""
    if data[:4] in (b"\xff\xfe\0\0", b"\0\0\xfe\xff") or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return True
    return data.count(b"\0") * 8 >= len(data) > 0


def redact_files(files: dict[str, bytes], salt: str | None = None) -> tuple[dict[str, bytes], Redactor]:
    r = Redactor(salt)
    return r.files(files), r
