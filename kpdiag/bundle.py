"""The support bundle (``kpdiag-bundle/1``): a directory or ``.tar.gz`` of plain command outputs.

Every file is optional. Reading never raises for a missing, unreadable or oversized file:
the reason is recorded in :attr:`Bundle.problems` (with the manifest's own ``errors``), and
the caller gets ``None``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass

from .errors import InputError

FORMAT = "kpdiag-bundle/1"
MANIFEST = "kpdiag.json"

MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_TAR_TOTAL = 1024 * 1024 * 1024
MAX_TAR_FILES = 10000
MAX_JSON_DEPTH = 200

# the layout of DESIGN §3: path → what produced it
LAYOUT = {
    "node/uname.txt": "uname -r",
    "node/modules.txt": "cat /proc/modules",
    "node/sysctl.txt": "sysctl -a",
    "node/ip-addr.json": "ip -j addr",
    "node/ip-route.json": "ip -j route show table all",
    "node/ip-link.json": "ip -j link",
    "node/iptables-save.txt": "iptables-save",
    "node/iptables-legacy-save.txt": "iptables-legacy-save",
    "node/iptables-nft-save.txt": "iptables-nft-save",
    "node/ip6tables-save.txt": "ip6tables-save",
    "node/nft-ruleset.json": "nft -j list ruleset",
    "node/ipvsadm.txt": "ipvsadm -Sn (or the same, read through IPVS netlink)",
    "node/ipvsadm-list.txt": "ipvsadm -Ln (or the same, read through IPVS netlink)",
    "node/ipvs-conn.json": "/proc/net/ip_vs_conn counted by virtual service, real server and state",
    "node/ipset.txt": "ipset save",
    "node/conntrack-stats.txt": "conntrack -S",
    "node/conntrack-count.txt": "cat /proc/sys/net/netfilter/nf_conntrack_count",
    "node/conntrack.txt": "conntrack -L",
    "node/kube-proxy/proxy-mode.txt": "GET http://127.0.0.1:10249/proxyMode",
    "node/kube-proxy/metrics.txt": "GET http://127.0.0.1:10249/metrics",
    "node/kube-proxy/healthz.json": "GET http://127.0.0.1:10256/healthz",
    "node/kube-proxy/config.yaml": "the KubeProxyConfiguration in use",
    "node/kube-proxy/log.txt": "kube-proxy's log",
    "cluster/version.json": "GET /version",
    "cluster/services.json": "kubectl get services -A -o json",
    "cluster/endpointslices.json": "kubectl get endpointslices -A -o json",
    "cluster/pods.json": "kubectl get pods -A -o json",
    "cluster/nodes.json": "kubectl get nodes -o json",
    "cluster/kube-proxy-configmap.json": "kubectl -n kube-system get configmap kube-proxy -o json",
}


@dataclass(frozen=True)
class Problem:
    """Something kpdiag could not read or collect: where, and why (one line)."""

    source: str
    error: str

    def __str__(self) -> str:
        return f"{self.source}: {self.error}"

    def to_dict(self) -> dict:
        return {"source": self.source, "error": self.error}


def _json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    depth = peak = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > peak:
                peak = depth
                if peak > limit:
                    return False
        elif ch in "]}":
            depth -= 1
    return True


class Bundle:
    """Read access to a bundle directory or archive, recording every problem."""

    def __init__(self, name: str, root: str | None = None, files: dict[str, bytes] | None = None):
        self.name = name
        self.root = root
        self._files = files
        self.problems: list[Problem] = []
        self._seen_problem: set[str] = set()
        self.manifest: dict = {}
        self._load_manifest()

    # ----------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str) -> "Bundle":
        if not os.path.exists(path):
            raise InputError(path, "no such file or directory")
        if os.path.isdir(path):
            if not os.access(path, os.R_OK | os.X_OK):
                raise InputError(path, "permission denied")
            return cls(path, root=path)
        try:
            return cls(path, files=_read_tar(path))
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InputError(path, f"not a readable bundle archive ({exc.__class__.__name__}: {exc})") from None

    @classmethod
    def from_files(cls, name: str, files: dict[str, bytes]) -> "Bundle":
        return cls(name, files=files)

    def _load_manifest(self) -> None:
        raw = self.read_bytes(MANIFEST, record_missing=False)
        if raw is None:
            return
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("the manifest is not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            self.problem(MANIFEST, f"unreadable manifest: {str(exc).splitlines()[0]}")
            return
        self.manifest = data
        fmt = data.get("format")
        if fmt and fmt != FORMAT:
            self.problem(MANIFEST, f"format {fmt!r} is not {FORMAT!r}; reading it anyway")
        for err in data.get("errors", []) or []:
            if isinstance(err, dict) and err.get("source"):
                self.problem(str(err["source"]), f"not collected: {err.get('error', 'unknown reason')}")

    # ----------------------------------------------------------- reading
    def problem(self, source: str, error: str) -> None:
        key = f"{source}\0{error}"
        if key not in self._seen_problem:
            self._seen_problem.add(key)
            self.problems.append(Problem(self.display(source), error))

    def display(self, rel: str) -> str:
        return os.path.join(self.name, rel) if rel and not rel.startswith(self.name) else rel

    def exists(self, rel: str) -> bool:
        if self._files is not None:
            return rel in self._files
        return os.path.exists(os.path.join(self.root, rel))

    def list(self, prefix: str = "") -> list[str]:
        if self._files is not None:
            return sorted(k for k in self._files if k.startswith(prefix))
        out = []
        base = os.path.join(self.root, prefix)
        if os.path.isdir(base):
            for dirpath, _, names in os.walk(base):
                for n in names:
                    out.append(os.path.relpath(os.path.join(dirpath, n), self.root))
        return sorted(out)

    def read_bytes(self, rel: str, record_missing: bool = False) -> bytes | None:
        if self._files is not None:
            data = self._files.get(rel)
            if data is None and record_missing:
                self.problem(rel, "missing from the bundle")
            return data
        path = os.path.join(self.root, rel)
        try:
            st = os.stat(path)
            if st.st_size > MAX_FILE_BYTES:
                self.problem(rel, f"too large ({st.st_size} bytes > {MAX_FILE_BYTES}); not read")
                return None
            with open(path, "rb") as fh:
                return fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            if record_missing:
                self.problem(rel, "missing from the bundle")
            return None
        except PermissionError:
            self.problem(rel, "permission denied")
            return None
        except IsADirectoryError:
            self.problem(rel, "is a directory, not a file")
            return None
        except OSError as exc:
            self.problem(rel, f"cannot read: {exc.strerror or exc}")
            return None

    def read_text(self, rel: str, record_missing: bool = False) -> str | None:
        data = self.read_bytes(rel, record_missing)
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            self.problem(f"{rel}:{line}", f"not text (byte 0x{data[exc.start]:02x} is not UTF-8)")
            return None
        if "\x00" in text:
            self.problem(f"{rel}:{text.count(chr(10), 0, text.index(chr(0))) + 1}", "not text (contains a NUL byte)")
            return None
        return text

    def read_json(self, rel: str, record_missing: bool = False):
        text = self.read_text(rel, record_missing)
        if text is None:
            return None
        if not _json_depth_ok(text):
            self.problem(rel, f"JSON nested deeper than {MAX_JSON_DEPTH} levels; refused")
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            self.problem(f"{rel}:{exc.lineno}", f"invalid JSON: {exc.msg} (column {exc.colno})")
            return None
        except RecursionError:
            self.problem(rel, "JSON nested too deeply; refused")
            return None


def _read_tar(path: str) -> dict[str, bytes]:
    """Read a bundle archive into memory, refusing traversal, links, devices and bombs."""
    files: dict[str, bytes] = {}
    total = 0
    with tarfile.open(path, "r:*") as tar:
        for count, member in enumerate(tar, 1):
            if count > MAX_TAR_FILES:
                raise InputError(path, f"more than {MAX_TAR_FILES} entries: refused (tar bomb?)")
            name = member.name
            norm = os.path.normpath(name)
            if name.startswith("/") or norm.startswith("..") or "/../" in f"/{name}/":
                raise InputError(path, f"entry {name!r} points outside the bundle: refused")
            if member.issym() or member.islnk():
                raise InputError(path, f"entry {name!r} is a link: refused")
            if member.isdev() or member.isfifo():
                raise InputError(path, f"entry {name!r} is a device or fifo: refused")
            if not member.isfile():
                continue
            total += member.size
            if member.size > MAX_FILE_BYTES or total > MAX_TAR_TOTAL:
                raise InputError(path, f"entry {name!r} makes the archive larger than {MAX_TAR_TOTAL} bytes: refused")
            fh = tar.extractfile(member)
            data = fh.read(MAX_FILE_BYTES + 1) if fh else b""
            # the archive may wrap everything in one top folder: strip it when a manifest is inside
            files[norm] = data
    roots = {k.split("/", 1)[0] for k in files}
    if MANIFEST not in files and len(roots) == 1:
        (root,) = roots
        if f"{root}/{MANIFEST}" in files or any(k.startswith(f"{root}/node/") for k in files):
            files = {k[len(root) + 1:]: v for k, v in files.items() if "/" in k}
    return files


def write_bundle(files: dict[str, bytes | str], out: str, manifest: dict) -> str:
    """Write ``files`` and the manifest to a directory or a ``.tar.gz`` (chosen by the name)."""
    blobs = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
    blobs[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    if out.endswith((".tar.gz", ".tgz")):
        with tarfile.open(out, "w:gz") as tar:
            for rel in sorted(blobs):
                info = tarfile.TarInfo(rel)
                info.size = len(blobs[rel])
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(blobs[rel]))
        return out
    for rel, data in blobs.items():
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    return out
