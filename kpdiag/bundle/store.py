"""The support bundle (``kpdiag-bundle/1``): a directory or ``.tar.gz`` of plain command outputs.

Every file is optional. Reading never raises for a missing, unreadable or oversized file:
the reason is recorded in :attr:`Bundle.problems` (with the manifest's own ``errors``), and
the caller gets ``None``.

A bundle is someone else's data. From a directory only regular files are read, each resolved beneath
the bundle's root with no symbolic link anywhere on the way (a link to a secret, a FIFO, a device: refused,
never opened for reading), each with a single hard link and owned by the bundle directory's owner — or by the
invoking user when that is not root (:func:`member_owners`). An archive is streamed once: members over
:data:`MAX_FILE_BYTES` are skipped (named, with the limit, as "could not read"), the rest is kept in memory up to :data:`SPOOL_IN_MEMORY` each and
:data:`SPOOL_MEMORY_TOTAL` in all, and in an unnamed temporary file beyond, and reading stops at
:data:`MAX_TOTAL_BYTES` — so a gzip bomb or a thousand middle-sized members cost decompression time and
temporary disk, not memory. Members that are links, devices, or named outside the bundle make
the whole archive refused.
"""

from __future__ import annotations

import contextlib
from typing import Any
import errno
import io
import os
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from kpdiag.bundle import safeio
from kpdiag.parse import decode
from kpdiag.errors import InputError
from kpdiag.bundle import sources

FORMAT = "kpdiag-bundle/1"
MANIFEST = "kpdiag.json"

MAX_FILE_BYTES = 128 * 1024 * 1024  # one file (a 20,000-Service node's iptables-save is ~60 MB, its nft JSON ~100 MB)
MAX_TOTAL_BYTES = 1024 * 1024 * 1024  # everything read from one bundle (an archive: every member, skipped ones too)
MAX_TAR_FILES = 10000
SPOOL_IN_MEMORY = 4 * 1024 * 1024  # archive members above this wait in a temporary file, not in memory
SPOOL_MEMORY_TOTAL = 32 * 1024 * 1024  # and once the members kept in memory reach this, every further one does too
MAX_JSON_DEPTH = decode.MAX_DEPTH
MAX_DEPTH_DIRS = 16  # folders below a bundle's root (its own layout is 2 deep)

# the bundle layout (docs/architecture.md §3): path → what produced it, from the source catalogue
LAYOUT = sources.layout()


@dataclass(frozen=True)
class Problem:
    """Something kpdiag could not read or collect: where, and why (one line)."""

    source: str
    error: str

    def __str__(self) -> str:
        return f"{self.source}: {self.error}"

    def to_dict(self) -> dict:
        return {"source": self.source, "error": self.error}


def json_type(value) -> str:
    """A JSON value's type in words ("a list", "an object", …), for messages that name a field of the wrong type."""
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), "null" if value is None else type(value).__name__)


def list_items(doc: Any) -> list[dict[str, Any]] | None:
    """The objects of a Kubernetes List (an API answer, or a bundle file as `kubectl get -o json` prints it): its
    ``items`` that are JSON objects; None when ``doc`` is not a List. Every reader of a List starts here;
    ``kpdiag.state.shapes.read_list`` adds the shape of each object."""
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return [i for i in doc["items"] if isinstance(i, dict)]
    return None


_STR_FIELDS = ("format", "created", "node", "kpdiag_version", "zone", "headline", "client_ip", "client_unknown", "api")
_OBJ_FIELDS = ("truncated", "api_status", "written")


def _noting_repeats(repeats: list[list[str]]):
    """A json ``object_pairs_hook`` that notes, per object, the keys it holds more than once (the outermost object
    comes last); JSON allows them, and the last one is read."""
    from collections import Counter

    def pairs(items):
        repeats.append(sorted(k for k, n in Counter(k for k, _ in items).items() if n > 1))
        return dict(items)

    return pairs


def manifest_problems(data: dict) -> list[tuple[str, str]]:
    """(key, why) for each field of a manifest (kpdiag.json) that does not have the type kpdiag reads it as — the field
    named, so that one bad field is ignored and the rest of the bundle is read (docs/architecture.md §3)."""
    out = []
    for key in _STR_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], str):
            out.append((key, f"{key} is {json_type(data[key])}, not a string"))
    for key in _OBJ_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            out.append((key, f"{key} is {json_type(data[key])}, not an object"))
    errors = data.get("errors")
    if errors is not None:
        if not isinstance(errors, list):
            out.append(("errors", f"errors is {json_type(errors)}, not a list"))
        else:
            for i, err in enumerate(errors):
                if not _error_entry(err):
                    out.append((f"errors[{i}]", f"errors[{i}] is not a source and an error (strings)"))
    service = data.get("service")
    if service is not None and not (isinstance(service, str) and (not service or _ns_name(service))):
        out.append(
            (
                "service",
                f"service is {json_type(service) if not isinstance(service, str) else repr(service)}, not NAMESPACE/NAME",
            )
        )
    client = data.get("client")
    if client is not None and not (
        isinstance(client, dict) and isinstance(client.get("namespace"), str) and isinstance(client.get("pod"), str)
    ):
        out.append(("client", "client is not {namespace, pod} strings"))
    partial = data.get("partial")
    if partial is not None and not (
        isinstance(partial, dict) and isinstance(partial.get("service"), str) and _ns_name(partial["service"])
    ):
        out.append(("partial", "partial is not an object naming its service (NAMESPACE/NAME)"))
    redacted = data.get("redacted")
    if redacted is not None and not isinstance(redacted, (bool, dict)):
        out.append(("redacted", f"redacted is {json_type(redacted)}, not true/false or an object"))
    return out


def _error_entry(err) -> bool:
    return (
        isinstance(err, dict)
        and isinstance(err.get("source"), str)
        and bool(err["source"])
        and isinstance(err.get("error", ""), (str, type(None)))
    )


def _ns_name(text: str) -> bool:
    """NAMESPACE/NAME: two non-empty parts (the names themselves are whatever the bundle holds: escaped when shown)."""
    ns, _, name = text.partition("/")
    return bool(ns and name) and len(text) <= 512


def member_owners(root_uid: int, euid: int) -> frozenset[int]:
    """Whose files a bundle directory owned by ``root_uid`` may hold, read by ``euid``.

    The rule: a member is read only when it has one hard link (:func:`kpdiag.bundle.safeio.check_owned`) and is
    owned by the bundle directory's owner, or by the invoking user when that user is not root. Reading as root is
    what the rule is for: root can read every file, so another user's file in a bundle (a hard link to it, or a file
    moved in from a shared folder) would be shown and copied by ``redact`` for whoever owns the bundle. A root-owned
    file in a bundle owned by someone else is refused too: its owner could not have written it there, and a hard
    link whose other name was since replaced (as /etc/shadow is on every password change) shows one link only. A
    user who is not root reads nothing through kpdiag that they could not read themselves, so their own files count
    as the bundle's."""
    return frozenset({root_uid} | ({euid} if euid != 0 else set()))


class Bundle:
    """Read access to a bundle directory or archive, recording every problem."""

    def __init__(self, name: str, root: str | None = None, files: Mapping[str, bytes] | None = None):
        self.name = name
        self.root = root
        self.path: str | None = None  # the directory or archive it was opened from (None: collected in memory)
        self._files = files
        self.problems: list[Problem] = []
        self._seen_problem: set[str] = set()
        self._read_sizes: dict[str, int] = {}  # directory bundles: bytes read per file, for MAX_TOTAL_BYTES
        self.manifest: dict[str, Any] = {}
        self._owners = member_owners(os.stat(root).st_uid, os.geteuid()) if root is not None else None
        for source, error in getattr(files, "problems", ()):  # what the archive reader skipped
            self.problem(source, error)
        self._load_manifest()

    # ----------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str) -> "Bundle":
        if not os.path.exists(path):
            raise InputError(path, "no such file or directory")
        if os.path.isdir(path):
            if not os.access(path, os.R_OK | os.X_OK):
                raise InputError(path, "permission denied")
            bundle = cls(path, root=path)
            bundle.path = path
            return bundle
        import lzma

        try:
            bundle = cls(path, files=_read_tar(path))
        except (tarfile.TarError, OSError, EOFError, ValueError, lzma.LZMAError) as exc:
            raise InputError(path, f"not a readable bundle archive ({exc.__class__.__name__}: {exc})") from None
        bundle.path = path
        return bundle

    @classmethod
    def from_files(cls, name: str, files: dict[str, bytes]) -> "Bundle":
        return cls(name, files=files)

    def _load_manifest(self) -> None:
        raw = self.read_bytes(MANIFEST, record_missing=False)
        if raw is None:
            return
        repeats: list[list[str]] = []
        try:
            data = decode.load_json(raw.decode("utf-8"), object_pairs_hook=_noting_repeats(repeats))
            if not isinstance(data, dict):
                raise ValueError("the manifest is not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            self.problem(MANIFEST, f"unreadable manifest: {str(exc).splitlines()[0]}")
            return
        for key in repeats[-1]:  # the top-level object's: which one was meant is not known
            self.problem(MANIFEST, f"key {key!r} appears twice: the last one is read")
        for key, why in manifest_problems(data):
            self.problem(MANIFEST, f"{why}: ignored")
            data.pop(key, None)
        if isinstance(data.get("errors"), list):
            data["errors"] = [e for e in data["errors"] if _error_entry(e)]
        self.manifest = data
        fmt = data.get("format")
        if fmt and fmt != FORMAT:
            self.problem(MANIFEST, f"format {fmt!r} is not {FORMAT!r}; reading it anyway")
        for err in data.get("errors", []) or []:
            why = err.get("error") or "unknown reason"
            source = err["source"]
            try:  # a note about a file that is there (what was left out of it, how it was read) is not a failure
                there = isinstance(source, str) and self.exists(source)
            except Exception:
                there = False
            self.problem(source, f"collected, with a note: {why}" if there else f"not collected: {why}")

    def service_focus(self) -> tuple[str, str] | None:
        """(namespace, name) when this is a ``kpdiag svc --save`` bundle of that Service, decided from its files — the
        manifest's ``service`` is a claim: it is believed when the files are a Service's (probe results, the lookup of
        that Service, or cluster/services.json holding that one Service), or when nothing contradicts it; a bundle that
        holds a node's files and none of those is a node bundle whatever the manifest says (said in one line)."""
        claim = self.manifest.get("service")
        if not isinstance(claim, str) or "/" not in claim:
            return None
        ns, name = claim.split("/", 1)
        if self.list(sources.PROBES):
            return ns, name
        lookup = self.read_json(sources.SERVICE_LOOKUP) if self.exists(sources.SERVICE_LOOKUP) else None
        if isinstance(lookup, dict) and lookup.get("namespace") == ns and lookup.get("name") == name:
            return ns, name
        doc = self.read_json(sources.SERVICES) if self.exists(sources.SERVICES) else None
        items = list_items(doc) or []
        if len(items) == 1:
            md = items[0].get("metadata")
            if isinstance(md, dict) and md.get("namespace") == ns and md.get("name") == name:
                return ns, name
        if self.list(sources.NODE):
            self.problem(
                MANIFEST,
                f"says this is a bundle of Service {claim} (kpdiag svc --save), but its files are a node's ({sources.NODE}"
                "…) with no probe result and no such Service: read as a node bundle",
            )
            return None
        return ns, name

    # ----------------------------------------------------------- reading
    def problem(self, source: str, error: str) -> None:
        key = f"{source}\0{error}"
        if key not in self._seen_problem:
            self._seen_problem.add(key)
            self.problems.append(Problem(self.display(source), error))

    def display(self, rel: str) -> str:
        """How a bundle file is named in evidence and problems: relative to the bundle's root, so a report says the
        same whether the bundle was given as fixtures/x, ./fixtures/x/ or an absolute path (the subject names it)."""
        return rel

    def _dir(self) -> str:
        """The bundle's directory (a bundle that is not in memory was opened from one)."""
        if self.root is None:
            raise ValueError(f"{self.name}: a bundle with neither files nor a directory")
        return self.root

    def exists(self, rel: str) -> bool:
        if self._files is not None:
            return rel in self._files
        return safeio.exists_regular(self._dir(), rel, safeio.BENEATH)

    def list(self, prefix: str = "") -> list[str]:
        if self._files is not None:
            return sorted(k for k in self._files if k.startswith(prefix))
        root = self._dir()
        out: list[str] = []
        base = os.path.join(root, prefix)
        if not os.path.isdir(base):
            return out
        # an iterative walk, bounded in depth: a bundle is a few folders deep, a hostile one may be thousands
        stack = [(base, 0)]
        while stack:
            folder, depth = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                self.problem(os.path.relpath(folder, self.root), f"cannot list: {safeio.describe(exc)}")
                continue
            for entry in entries:
                rel = os.path.relpath(entry.path, self.root)
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 >= MAX_DEPTH_DIRS:
                        self.problem(rel, f"more than {MAX_DEPTH_DIRS} folders deep: not read")
                    else:
                        stack.append((entry.path, depth + 1))
                else:
                    out.append(rel)
        return sorted(out)

    def read_bytes(self, rel: str, record_missing: bool = False) -> bytes | None:
        if self._files is not None:
            data = self._files.get(rel)
            if data is None and record_missing:
                self.problem(rel, "missing from the bundle")
            return data
        try:
            data = safeio.read_file(self._dir(), rel, MAX_FILE_BYTES, safeio.BENEATH, self._owners)
        except safeio.TooLarge as exc:
            self.problem(
                rel,
                f"larger than the {safeio.human_bytes(MAX_FILE_BYTES)} per-file limit ({exc.size} bytes or more): not read",
            )
            return None
        except FileNotFoundError:
            if record_missing:
                self.problem(rel, "missing from the bundle")
            return None
        except PermissionError:
            self.problem(rel, "permission denied")
            return None
        except safeio.NotRegular as exc:
            self.problem(rel, f"{exc.strerror}: not read (a bundle holds regular files only)")
            return None
        except safeio.NotOwned as exc:
            self.problem(rel, f"{exc.strerror}: not read (a bundle holds its owner's files only, one link each)")
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                self.problem(rel, "is or passes a symbolic link: not followed (a bundle holds regular files only)")
            else:
                self.problem(rel, f"cannot read: {safeio.describe(exc)}")
            return None
        if rel not in self._read_sizes:
            self._read_sizes[rel] = len(data)
            total = sum(self._read_sizes.values())
            if total > MAX_TOTAL_BYTES:
                self.problem(
                    rel, f"not read: the bundle's files reach the {safeio.human_bytes(MAX_TOTAL_BYTES)} total limit"
                )
                self._read_sizes[rel] = 0
                return None
        return data

    def read_text(self, rel: str, record_missing: bool = False) -> str | None:
        data = self.read_bytes(rel, record_missing)
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            if not _bytes_in_comments(rel) or b"\x00" in data:  # a NUL: binary, not a dump with a stray byte
                self.problem(f"{rel}:{line}", f"not text (byte 0x{data[exc.start]:02x} is not UTF-8)")
                return None
            # iptables keeps a rule's comment as bytes (a host firewall's, in Latin-1): the rules are still read
            text = data.decode("utf-8", "replace")
            self.problem(
                f"{rel}:{line}",
                f"collected, with a note: byte 0x{data[exc.start]:02x} is not UTF-8 (a rule's comment?): read as U+FFFD",
            )
        if "\x00" in text:
            self.problem(f"{rel}:{text.count(chr(10), 0, text.index(chr(0))) + 1}", "not text (contains a NUL byte)")
            return None
        return text

    def read_json(self, rel: str, record_missing: bool = False) -> Any:
        text = self.read_text(rel, record_missing)
        if text is None:
            return None
        try:
            return decode.load_json(text, MAX_JSON_DEPTH)
        except decode.TooDeep as exc:
            self.problem(rel, f"JSON {exc}")
            return None
        except ValueError as exc:  # json.JSONDecodeError
            self.problem(
                f"{rel}:{getattr(exc, 'lineno', 1)}",
                f"invalid JSON: {getattr(exc, 'msg', exc)} (column {getattr(exc, 'colno', 0)})",
            )
            return None


class _Spool(Mapping):
    """An archive's members by name: small ones in memory while they total at most SPOOL_MEMORY_TOTAL, every other
    one in an unnamed temporary file (read back with pread when asked for: one member in memory at a time) — so the
    memory an archive costs is bounded whatever its members' number and sizes (250 members of 4 MiB were 1 GB)."""

    def __init__(self):
        self._mem: dict[str, bytes] = {}
        self._mem_bytes = 0
        self._disk: dict[str, tuple[int, int]] = {}  # name → (offset, length) in _tmp
        self._tmp = None
        self._end = 0
        self.problems: list[tuple[str, str]] = []

    def add(self, name: str, fh, size: int) -> None:
        self._mem_bytes -= len(self._mem.pop(name, b""))
        self._disk.pop(name, None)
        if size <= SPOOL_IN_MEMORY and self._mem_bytes + size <= SPOOL_MEMORY_TOTAL:
            data = fh.read(size)
            self._mem[name] = data
            self._mem_bytes += len(data)
            return
        if self._tmp is None:
            self._tmp = tempfile.TemporaryFile(prefix="kpdiag-")
        start = self._end
        self._tmp.seek(start)
        left = size
        while left > 0:
            block = fh.read(min(left, 1 << 20))
            if not block:
                break
            self._tmp.write(block)
            left -= len(block)
        self._end = self._tmp.tell()
        self._disk[name] = (start, self._end - start)

    def rename(self, fn) -> None:
        self._mem = {fn(k): v for k, v in self._mem.items()}
        self._disk = {fn(k): v for k, v in self._disk.items()}

    def __getitem__(self, name: str) -> bytes:
        if name in self._mem:
            return self._mem[name]
        off, length = self._disk[name]
        self._tmp.flush()
        return os.pread(self._tmp.fileno(), length, off)

    def __iter__(self):
        yield from self._mem
        yield from self._disk

    def __len__(self) -> int:
        return len(self._mem) + len(self._disk)

    def __contains__(self, name) -> bool:
        return name in self._mem or name in self._disk


@contextlib.contextmanager
def _decompressed(path: str):
    """The archive's tar stream. The decompressors of gzip/bz2/lzma return bounded pieces (tarfile's own gzip
    layer re-joins a growing buffer on every read: a member of zeros took minutes to skip)."""
    import bz2
    import gzip
    import lzma

    try:  # a FIFO is never opened (it would block), a device never (its driver would run)
        fd = safeio.open_regular("/", os.path.abspath(path), safeio.IN_ROOT)
    except safeio.NotRegular as exc:
        raise InputError(path, f"{exc.strerror}: not a bundle (a directory or a .tar.gz)") from None
    with os.fdopen(fd, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        stream: io.BufferedIOBase
        if magic[:2] == b"\x1f\x8b":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        elif magic[:3] == b"BZh":
            stream = bz2.BZ2File(raw)
        elif magic == b"\xfd7zXZ\x00":
            stream = lzma.LZMAFile(raw)
        else:
            stream = raw
        try:
            yield stream
        finally:
            if stream is not raw:
                stream.close()


MAX_TAR_HEADER = (
    1 << 20
)  # bytes of one special tar header (a GNU long name or link, a pax header): real ones are < 4 KiB
MAX_SPARSE_MAP = 64 << 10  # bytes of one member's sparse map (GNU extension blocks, a pax 1.0 map)


class _CappedReads:
    """A tar stream whose reads are counted: past ``cap`` bytes, an InputError (what a sparse map may take)."""

    def __init__(self, raw, cap: int, why: str, path: str):
        self.raw, self.left, self.why, self.path = raw, cap, why, path

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > self.left:
            raise InputError(self.path, self.why)
        self.left -= n
        return self.raw.read(n)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def _bounded_tarinfo(path: str, spent: list[int]):
    """A TarInfo class that refuses oversized special headers *before* tarfile reads them (it reads a GNU long name,
    a pax header or a sparse map whole into memory: a 900 MiB one in a 900 KB .tar.gz is a MemoryError), and adds
    their bytes to ``spent`` (the archive's total budget counts them)."""
    special = {
        tarfile.GNUTYPE_LONGNAME: "GNU long-name",
        tarfile.GNUTYPE_LONGLINK: "GNU long-link",
        tarfile.XHDTYPE: "pax",
        tarfile.XGLTYPE: "pax global",
        tarfile.SOLARIS_XHDTYPE: "pax",
    }

    class BoundedInfo(tarfile.TarInfo):
        def _proc_member(self, tar):
            kind = special.get(self.type)
            if kind is not None:
                if self.size > MAX_TAR_HEADER:
                    raise InputError(
                        path,
                        f"a {kind} header of {self.size} bytes (over kpdiag's {safeio.human_bytes(MAX_TAR_HEADER)} "
                        "cap; a real one is a few hundred): refused (a header bomb?)",
                    )
                spent[0] += self.size
            return super()._proc_member(tar)

        def _capped(self, tar, method, *args):
            raw = tar.fileobj
            why = f"a sparse map over {safeio.human_bytes(MAX_SPARSE_MAP)}: refused (a header bomb?)"
            tar.fileobj = _CappedReads(raw, MAX_SPARSE_MAP, why, path)
            try:
                return method(*args, tar)
            finally:
                spent[0] += MAX_SPARSE_MAP - tar.fileobj.left
                tar.fileobj = raw

        def _proc_sparse(self, tar):
            return self._capped(tar, super()._proc_sparse)

        def _proc_gnusparse_10(self, next, pax_headers, tar):  # noqa: A002 (tarfile's own parameter name)
            return self._capped(tar, super()._proc_gnusparse_10, next, pax_headers)

    return BoundedInfo


def _read_tar(path: str) -> _Spool:
    """Stream a bundle archive once, refusing traversal, links and devices and oversized special headers (before
    tarfile reads them), skipping what is over the caps; headers count in the total budget."""
    files = _Spool()
    total = 0
    spent = [0]  # bytes of special headers and sparse maps read so far
    info = _bounded_tarinfo(path, spent)
    with _decompressed(path) as stream, tarfile.open(fileobj=stream, mode="r|", bufsize=1 << 20, tarinfo=info) as tar:
        for count, member in enumerate(tar, 1):
            if total + spent[0] > MAX_TOTAL_BYTES:
                files.problems.append(
                    (
                        os.path.normpath(member.name),
                        f"not read, nor anything after it: the archive's headers and files reach the "
                        f"{safeio.human_bytes(MAX_TOTAL_BYTES)} total limit",
                    )
                )
                break
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
            if member.issparse():
                files.problems.append((norm, "a sparse archive member: not read"))
                continue
            total += member.size
            if total > MAX_TOTAL_BYTES:
                files.problems.append(
                    (
                        norm,
                        f"not read, nor anything after it: the archive holds more than the "
                        f"{safeio.human_bytes(MAX_TOTAL_BYTES)} total limit",
                    )
                )
                break
            if member.size > MAX_FILE_BYTES:  # skipped: the stream decompresses it in small blocks and drops them
                files.problems.append(
                    (
                        norm,
                        f"larger than the {safeio.human_bytes(MAX_FILE_BYTES)} per-file limit "
                        f"({member.size} bytes): not read",
                    )
                )
                continue
            fh = tar.extractfile(member)
            if fh is not None:
                if norm in files:  # tar allows it (an archive appended to): which copy is meant is not known
                    files.problems.append((norm, "in the archive twice: the last copy is read"))
                files.add(norm, fh, member.size)
    # the archive may wrap everything in one top folder: strip it when a manifest is inside
    roots = {k.split("/", 1)[0] for k in files}
    if MANIFEST not in files and len(roots) == 1:
        (root,) = roots
        if f"{root}/{MANIFEST}" in files or any(k.startswith(f"{root}/node/") for k in files):
            inner = [k for k in files if "/" in k]
            if len(inner) == len(files):
                files.rename(lambda k: k[len(root) + 1 :])
            files.problems = [(k[len(root) + 1 :] if k.startswith(root + "/") else k, e) for k, e in files.problems]
    return files


def write_bundle(files: dict[str, bytes | str], out: str, manifest: dict, force: bool = False) -> str:
    """Write ``files`` and the manifest to a new directory or ``.tar.gz`` (chosen by the name).

    The output is created fresh (see :mod:`kpdiag.bundle.safeio`): files 0600, directories 0700, no symlink
    followed; an existing path is refused unless ``force`` (and a symlink even then)."""
    import json

    blobs = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
    blobs[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    from kpdiag.bundle.scrub import scrub_secrets

    blobs = scrub_secrets(blobs)  # tokens, keys and passwords never land in a bundle, --redact or not
    if out.endswith((".tar.gz", ".tgz")):
        with safeio.create_file(out, force) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for rel in sorted(blobs):
                info = tarfile.TarInfo(rel)
                info.size = len(blobs[rel])
                info.mode = safeio.FILE_MODE
                tar.addfile(info, io.BytesIO(blobs[rel]))
        return out
    with safeio.OutputDir(out, force) as d:
        for rel in sorted(blobs):
            d.write(rel, blobs[rel])
    return out


def _bytes_in_comments(rel: str) -> bool:
    """An iptables-save dump: its rules' comments are whatever bytes were given to iptables."""
    src = sources.declared(rel)
    return src is not None and src.parser == "kpdiag.parse.iptables:parse_iptables_save"
