"""Reading what others wrote, and writing outputs, as root without being led elsewhere.

kpdiag runs as root and reads files that unprivileged processes, pods and bundle authors control. Every
such read goes through :func:`open_regular`:

* the path is resolved *inside* a root directory and can never leave it: ``openat2(RESOLVE_IN_ROOT |
  RESOLVE_NO_MAGICLINKS)`` (symlinks followed as if the root were ``/``) or ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS`` (no symlink at all), and where the kernel has no openat2 a component-wise walk
  over directory file descriptors that does the same;
* only a regular file is opened for reading: the path is first opened with ``O_PATH`` (which opens
  nothing: no FIFO blocks, no device driver runs) and checked with ``fstat``; the read descriptor is
  then made from that very inode, non-blocking;
* reads are capped (:func:`read_capped`);
* in a tree someone else controls (a bundle directory), ``owners`` also refuses a file with more than one hard link
  or owned by a user not named (:func:`check_owned`).

Outputs are created fresh (:class:`OutputDir`, :func:`create_file`): ``O_CREAT | O_EXCL | O_NOFOLLOW``,
directories by ``mkdir``, everything relative to directory descriptors opened with ``O_NOFOLLOW``, files
0600 and directories 0700.

What is read is decoded by kpdiag/parse/decode.py (JSON and YAML with bounds on depth and size).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import platform
import stat

# ---------------------------------------------------------------- openat2
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

# openat2 has the same number on every architecture of the unified syscall table (Linux ≥ 5.6)
_SYS_OPENAT2 = {
    "x86_64": 437,
    "aarch64": 437,
    "arm64": 437,
    "armv7l": 437,
    "armv8l": 437,
    "ppc64le": 437,
    "ppc64": 437,
    "s390x": 437,
    "riscv64": 437,
    "i686": 437,
    "i386": 437,
    "mips64": 437,
    "loongarch64": 437,
}
MAX_SYMLINKS = 40  # as the kernel: a path with more links is a loop

IN_ROOT = "in-root"  # resolve inside the root as if it were '/': symlinks followed, never out of it
BENEATH = "beneath"  # no symlink anywhere on the way, no '..' out of the root


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_state: dict = {}


def _libc():
    if "libc" not in _openat2_state:
        try:
            _openat2_state["libc"] = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _openat2_state["libc"] = None
    return _openat2_state["libc"]


def openat2_available() -> bool:
    """Does this kernel (and seccomp profile) let us call openat2?"""
    if "ok" not in _openat2_state:
        ok = False
        if platform.machine() in _SYS_OPENAT2 and _libc() is not None:
            try:
                fd = _openat2(
                    os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC),
                    ".",
                    os.O_PATH | os.O_CLOEXEC,
                    RESOLVE_BENEATH,
                    close_dirfd=True,
                )
                os.close(fd)
                ok = True
            except OSError as exc:
                ok = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)
        _openat2_state["ok"] = ok
    return _openat2_state["ok"]


def _openat2(dirfd: int, path: str, flags: int, resolve: int, close_dirfd: bool = False) -> int:
    libc = _libc()
    how = _OpenHow(flags, 0, resolve)
    raw = os.fsencode(path)
    try:
        for _ in range(8):  # EAGAIN: a rename or mount raced the lookup; the kernel asks to retry
            fd = libc.syscall(
                _SYS_OPENAT2[platform.machine()],
                ctypes.c_int(dirfd),
                ctypes.c_char_p(raw),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            if err != errno.EAGAIN:
                raise OSError(err, os.strerror(err), path)
        raise OSError(errno.EAGAIN, "the path kept changing while it was resolved", path)
    finally:
        if close_dirfd:
            os.close(dirfd)


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _walk(rootfd: int, path: str, how: str) -> int:
    """The O_PATH descriptor of PATH under rootfd, resolved one component at a time (no openat2)."""
    parts = _split(path)
    stack = [os.dup(rootfd)]
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                elif how == BENEATH:
                    raise OSError(errno.EXDEV, "leads outside its root", path)
                continue  # '..' of the root is the root, as for '/'
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1])
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                os.close(fd)
                if how == BENEATH:
                    raise OSError(errno.ELOOP, "is or passes a symbolic link (not followed)", path)
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):  # absolute: from the root we were given, never from kpdiag's own '/'
                    while len(stack) > 1:
                        os.close(stack.pop())
                parts = _split(target) + parts
                continue
            if parts and not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise OSError(errno.ENOTDIR, "not a directory", path)
            stack.append(fd)
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


class NotRegular(OSError):
    """The path names something other than a regular file (FIFO, device, socket, directory)."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a character device" …)."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return what
    return "not a regular file"


class NotOwned(OSError):
    """A regular file that is not plainly its tree's: more than one hard link, or an owner not allowed there."""


def check_owned(st: os.stat_result, owners: frozenset[int], path: str) -> None:
    """Refuse a file with more than one hard link or whose owner is not in ``owners``.

    A hard link is the same inode under a second name: whoever can write the tree can link a file of someone
    else's into it (where fs.protected_hardlinks is off), and it keeps the file's owner and mode — read as root it
    would be shown, and copied by ``redact``. And a file of another user's is not the tree owner's to hand over.
    The link count is checked on the very inode that is then read."""
    if st.st_nlink > 1:
        raise NotOwned(
            errno.EPERM, f"has {st.st_nlink} hard links (the same file under another name, maybe not this tree's)", path
        )
    if st.st_uid not in owners:
        allowed = " or ".join(f"uid {u}" for u in sorted(owners))
        raise NotOwned(errno.EPERM, f"is owned by uid {st.st_uid}, not by {allowed}", path)


def _root_fd(root: str | int) -> tuple[int, bool]:
    """A descriptor of ROOT (a directory path, opened O_PATH, or a descriptor as it is), and whether it is ours."""
    if isinstance(root, str):
        return os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), True
    return root, False


def open_path(root: str | int, path: str, how: str = IN_ROOT) -> int:
    """An O_PATH descriptor of PATH resolved under ROOT (a directory path or descriptor) without leaving it."""
    rootfd, own = _root_fd(root)
    try:
        rel = path.lstrip("/") or "."
        if openat2_available():
            resolve = RESOLVE_NO_MAGICLINKS | (
                RESOLVE_IN_ROOT if how == IN_ROOT else RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
            )
            return _openat2(rootfd, rel, os.O_PATH | os.O_CLOEXEC, resolve)
        return _walk(rootfd, rel, how)
    finally:
        if own:
            os.close(rootfd)


def open_regular(root: str | int, path: str, how: str = IN_ROOT, owners: frozenset[int] | None = None) -> int:
    """A read-only, non-blocking descriptor of the regular file PATH under ROOT.

    Raises :class:`NotRegular` for a FIFO, device, socket or directory (which is never opened for reading),
    :class:`NotOwned` (with ``owners``) for a file with several hard links or of another owner (never opened for
    reading either), and OSError (ELOOP, EXDEV, ENOENT, …) when the path cannot be resolved inside the root."""
    pfd = open_path(root, path, how)
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, f"is {file_kind(st.st_mode)}, not a regular file", path)
        if owners is not None:
            check_owned(st, owners, path)
        # the read descriptor is made from this inode (kpdiag's own /proc/self/fd), not by a second lookup
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:  # no /proc here: a second lookup, checked to be the same inode below
            fd = _reopen_by_path(root, path, how)
        st2 = os.fstat(fd)
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(st2.st_mode):
            os.close(fd)
            raise OSError(errno.ESTALE, "changed while it was opened", path)
        return fd
    finally:
        os.close(pfd)


def _reopen_by_path(root: str | int, path: str, how: str) -> int:
    rootfd, own = _root_fd(root)
    try:
        parent, name = os.path.split(path.lstrip("/"))
        dfd = open_path(rootfd, parent or ".", how)
        try:
            return os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
    finally:
        if own:
            os.close(rootfd)


class TooLarge(OSError):
    """A file over the cap it was read with."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(errno.EFBIG, f"larger than the {human_bytes(limit)} limit ({size} bytes or more)", path)
        self.size = size
        self.limit = limit


def read_capped(fd: int, limit: int, path: str = "") -> bytes:
    """All of fd, or :class:`TooLarge` when it holds more than ``limit`` bytes (at most limit + 1 are read)."""
    chunks: list[bytes] = []
    got = 0
    while True:
        block = os.read(fd, min(1 << 20, limit + 1 - got))
        if not block:
            return b"".join(chunks)
        chunks.append(block)
        got += len(block)
        if got > limit:
            size = max(got, os.fstat(fd).st_size)
            raise TooLarge(path, size, limit)


def read_until(fd: int, limit: int, deadline: float) -> bytes:
    """All of ``fd`` — opened O_NONBLOCK: a pipe, a FIFO, whose writer may be slow or absent — to its end, at most
    ``limit`` + 1 bytes (more than ``limit`` is the caller's to refuse), never past ``deadline`` (time.monotonic()):
    TimeoutError then, saying how much was read."""
    import select
    import time

    chunks, got = [], 0
    while got <= limit:
        try:  # no writer (a FIFO nobody opened, or all closed): its end at once
            block = os.read(fd, min(1 << 20, limit + 1 - got))
        except BlockingIOError:  # a writer, nothing yet
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"nothing more to read after {got} bytes") from None
            select.select([fd], [], [], min(left, 1.0))
            continue
        if not block:
            break
        chunks.append(block)
        got += len(block)
    return b"".join(chunks)


def read_file(
    root: str | int, path: str, limit: int, how: str = IN_ROOT, owners: frozenset[int] | None = None
) -> bytes:
    """The bytes of the regular file PATH under ROOT (see :func:`open_regular`), at most ``limit``."""
    fd = open_regular(root, path, how, owners)
    try:
        return read_capped(fd, limit, path)
    finally:
        os.close(fd)


def exists_regular(root: str | int, path: str, how: str = BENEATH) -> bool:
    try:
        fd = open_path(root, path, how)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def describe(exc: OSError) -> str:
    """One line for a refused or failed open."""
    if isinstance(exc, (NotRegular, TooLarge, NotOwned)):
        return exc.strerror or str(exc)
    if exc.errno == errno.ELOOP:
        return "is or passes a symbolic link that is not followed here"
    if exc.errno == errno.EXDEV:
        return "leads outside its root: not followed"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENOTDIR:
        return "not a folder (a file, or a symbolic link, which is not followed here)"
    return exc.strerror or str(exc)


# ---------------------------------------------------------------- outputs
FILE_MODE = 0o600
DIR_MODE = 0o700
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputExists(OSError):
    pass


def check_new_output(path: str, force: bool = False) -> None:
    """Refuse an output path that exists (unless ``force``), a symbolic link always (even dangling), and with
    ``force`` an existing path that is not this user's or that others may write to (they could change what kpdiag
    writes there, or what a later ``analyze`` reads)."""
    if os.path.islink(path):
        raise OutputExists(
            errno.EEXIST, "is a symbolic link: refused (kpdiag never writes through one, even with --force)", path
        )
    if os.path.lexists(path) and not force:
        raise OutputExists(
            errno.EEXIST, "exists: give a new name, or --force to replace what kpdiag writes there", path
        )
    if force and os.path.lexists(path):
        st = os.lstat(path)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise OutputExists(errno.EEXIST, f"is {file_kind(st.st_mode)}: refused", path)
        _check_ours(st, path)


def _check_ours(st: os.stat_result, path: str) -> None:
    if st.st_uid != os.geteuid():
        raise OutputExists(errno.EPERM, f"is owned by another user (uid {st.st_uid}): refused, even with --force", path)
    if st.st_mode & 0o022:
        who = "everyone" if st.st_mode & 0o002 else "its group"
        raise OutputExists(
            errno.EPERM,
            f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): refused, even with --force — give a new name",
            path,
        )


def _parent_fd(path: str) -> tuple[int, str]:
    parent, name = os.path.split(os.path.abspath(path))
    if not name or name in (".", ".."):
        raise OSError(errno.EINVAL, "not a name for a new output", path)
    return os.open(parent or "/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), name


def _create_at(dirfd: int, name: str, force: bool, path: str) -> int:
    """A fresh file NAME in dirfd: O_EXCL|O_NOFOLLOW; with force an existing entry is unlinked first (a link
    planted there is removed, never written through; a hard link's other names are left alone)."""
    try:
        return os.open(name, _CREATE, FILE_MODE, dir_fd=dirfd)
    except FileExistsError:
        if not force:
            raise OutputExists(errno.EEXIST, "exists: give a new name, or --force", path) from None
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise OutputExists(errno.EISDIR, "is a directory: not replaced", path) from None
        os.unlink(name, dir_fd=dirfd)
        return os.open(name, _CREATE, FILE_MODE, dir_fd=dirfd)  # raced by a new entry: fail, do not follow


def _sibling(name: str, what: str) -> str:
    import secrets

    return f".{name}.kpdiag-{what}-{secrets.token_hex(4)}"


class _AtomicFile(io.FileIO):
    """A new file written under a temporary name beside PATH and put in place only when closed after a complete
    write (``with``): an interrupted or failed write leaves PATH as it was."""

    def __init__(self, path: str, force: bool):
        check_new_output(path, force)
        self.path, self.force = path, force
        self._pfd, self._name = _parent_fd(path)
        self._tmp = _sibling(self._name, "partial")
        try:
            fd = os.open(self._tmp, _CREATE, FILE_MODE, dir_fd=self._pfd)
        except BaseException:
            os.close(self._pfd)
            raise
        super().__init__(fd, "wb", closefd=True)

    def __exit__(self, kind, value, tb):
        try:
            super().__exit__(kind, value, tb)
            if kind is None:
                self._commit()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp, dir_fd=self._pfd)
            os.close(self._pfd)

    def _commit(self) -> None:
        try:  # a new name: linked in place, which fails if anything took the name meanwhile (never replaced)
            os.link(self._tmp, self._name, src_dir_fd=self._pfd, dst_dir_fd=self._pfd, follow_symlinks=False)
        except FileExistsError:
            if not self.force:
                raise OutputExists(errno.EEXIST, "exists: give a new name, or --force", self.path) from None
            st = os.stat(self._name, dir_fd=self._pfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise OutputExists(
                    errno.EEXIST, f"became {file_kind(st.st_mode)} while written: refused", self.path
                ) from None
            _check_ours(st, self.path)
            os.rename(self._tmp, self._name, src_dir_fd=self._pfd, dst_dir_fd=self._pfd)


def create_file(path: str, force: bool = False):
    """A new file at PATH (mode 0600) open for binary writing, to be used in ``with``: written under a temporary
    name beside it and put in place only after a complete write; never follows a symlink, never truncates."""
    return _AtomicFile(path, force)


class OutputDir:
    """A new directory (0700) to write files into, every step relative to directory descriptors, put in place whole.

    The files go into a temporary directory beside PATH, which takes PATH's place only when the ``with`` block ends
    without an error: an interrupted or failed run leaves no partial output (a manifest that says ``errors: []``
    over half the files). Without ``force`` PATH must not exist (``mkdir`` reserves it, and fails on anything
    already there, a dangling symlink included). With ``force`` an existing directory of this user's that no one
    else may write to is replaced whole: files an older run wrote there are gone, never mixed with this run's. A
    symbolic link where this output has a folder is refused (never followed, never silently dropped)."""

    def __init__(self, path: str, force: bool = False):
        self.path = path
        self.force = force
        check_new_output(path, force)
        self._pfd, self._name = _parent_fd(path)
        self._old_fd: int | None = None
        self._reserved = False
        try:
            try:
                os.mkdir(self._name, DIR_MODE, dir_fd=self._pfd)
                self._reserved = True
            except FileExistsError:
                if not force:
                    raise OutputExists(errno.EEXIST, "exists: give a new name, or --force", path) from None
                self._old_fd = os.open(
                    self._name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._pfd
                )
                _check_ours(os.fstat(self._old_fd), path)
            if self._reserved:
                reserved = os.stat(self._name, dir_fd=self._pfd, follow_symlinks=False)
                if reserved.st_uid != os.geteuid() or not stat.S_ISDIR(reserved.st_mode):
                    raise OutputExists(errno.EEXIST, "was replaced by someone else's while it was created", path)
            self._tmp = _sibling(self._name, "partial")
            os.mkdir(self._tmp, DIR_MODE, dir_fd=self._pfd)
            self.fd = os.open(self._tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._pfd)
        except BaseException:
            self._abandon()
            raise
        self._dirs: dict[str, int] = {"": self.fd}

    def _dir(self, rel: str) -> int:
        if rel in self._dirs:
            return self._dirs[rel]
        parent, name = os.path.split(rel)
        if name in ("", ".", ".."):
            raise OSError(errno.EINVAL, "not a name inside the output", rel)
        pfd = self._dir(parent)
        self._planted(rel)
        os.mkdir(name, DIR_MODE, dir_fd=pfd)
        self._dirs[rel] = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        return self._dirs[rel]

    def _planted(self, rel: str) -> None:
        """A symbolic link (or a file) where the output being replaced has this folder: someone put it there — the
        run stops and names it."""
        if self._old_fd is None:
            return
        try:
            st = os.stat(rel, dir_fd=self._old_fd, follow_symlinks=False)
        except OSError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)

    def open(self, rel: str):
        """A fresh file REL (with its folders) inside the directory, open for binary writing."""
        parent, name = os.path.split(rel)
        if rel.startswith("/") or ".." in rel.split("/") or not name:
            raise OSError(errno.EINVAL, "not a name inside the output", rel)
        return os.fdopen(_create_at(self._dir(parent), name, False, os.path.join(self.path, rel)), "wb")

    def write(self, rel: str, data: bytes) -> None:
        with self.open(rel) as fh:
            fh.write(data)

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}

    def _commit(self) -> None:
        """The temporary directory takes PATH's place: over the empty directory reserved for it, or — with
        ``force`` — the old output is moved aside, the new one moved in, the old one removed."""
        if self._reserved:
            os.rename(self._tmp, self._name, src_dir_fd=self._pfd, dst_dir_fd=self._pfd)
            self._reserved = False
            return
        aside = _sibling(self._name, "old")
        os.rename(self._name, aside, src_dir_fd=self._pfd, dst_dir_fd=self._pfd)
        os.rename(self._tmp, self._name, src_dir_fd=self._pfd, dst_dir_fd=self._pfd)
        _remove_tree(self._pfd, aside)

    def _abandon(self) -> None:
        """Nothing of a run that did not finish is left: the temporary directory, and the name reserved for it."""
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            _remove_tree(self._pfd, tmp)
        if self._reserved:
            with contextlib.suppress(OSError):
                os.rmdir(self._name, dir_fd=self._pfd)
        if self._old_fd is not None:
            os.close(self._old_fd)
            self._old_fd = None
        os.close(self._pfd)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close()
        try:
            if kind is None:
                self._commit()
                self._tmp = None
        finally:
            self._abandon()


def _remove_tree(dirfd: int, name: str) -> None:
    """Remove NAME under dirfd and everything in it, following no symbolic link."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except FileNotFoundError:
        return
    except OSError:  # not a directory (a link, a file): the name alone
        os.unlink(name, dir_fd=dirfd)
        return
    try:
        for _root, dirs, files, rootfd in os.fwalk(".", topdown=False, dir_fd=fd):
            for entry in files:
                os.unlink(entry, dir_fd=rootfd)
            for entry in dirs:  # a link to a directory is listed here, and not followed
                try:
                    os.rmdir(entry, dir_fd=rootfd)
                except NotADirectoryError:
                    os.unlink(entry, dir_fd=rootfd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dirfd)
