"""Archive header bombs (issue 38): a small .tar.gz whose GNU long-name, pax or sparse-map header claims hundreds of
MiB. Python's tarfile reads those headers whole before kpdiag's per-file limits see a member; the archive reader now
refuses an oversized special header before tarfile reads it, and counts headers in the archive's total budget."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import sys
import tarfile

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.errors import InputError

BIG = 256 << 20  # bytes the header claims (and holds: zeros compress to ~250 KB)
MANIFEST = json.dumps({"format": "kpdiag-bundle/1", "node": "n", "errors": []}).encode()


def _block(n: int) -> int:
    return (n + 511) // 512 * 512


def _special(kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo("././@LongLink" if kind in (b"L", b"K") else "pax_header")
    info.size = size
    info.type = kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (_block(len(data)) - len(data))


def _sparse_bomb(blocks: int):
    """A GNU sparse member whose header says 'extended' and whose extension blocks each say it again."""
    head = bytearray(tarfile.TarInfo("node/sysctl.txt").tobuf(format=tarfile.GNU_FORMAT))
    head[156:157] = tarfile.GNUTYPE_SPARSE
    head[482] = 1  # isextended
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    ext = bytearray(512)
    ext[504] = 1
    yield bytes(head)
    for _ in range(blocks):
        yield bytes(ext)


def _write(path, chunks) -> None:
    with gzip.open(path, "wb", compresslevel=1) as gz:
        for chunk in chunks:
            gz.write(chunk)


def _zeros(n: int):
    while n > 0:
        yield b"\0" * min(n, 1 << 20)
        n -= 1 << 20


def _header_bomb(path, kind: bytes, size: int = BIG) -> None:
    _write(
        path,
        itertools.chain(
            [_member("kpdiag.json", MANIFEST), _special(kind, size)],
            _zeros(_block(size)),  # streamed: the test never holds them either
            [_member("node/sysctl.txt", b"net.ipv4.ip_forward = 1\n"), b"\0" * 1024],
        ),
    )


def _peak_mib(argv) -> tuple[int, str, float]:
    """(exit code, stderr, peak RSS MiB) of a real process."""
    import subprocess

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return os.waitstatus_to_exitcode(status), err, usage.ru_maxrss / 1024


@pytest.mark.parametrize("kind,said", [(b"L", "GNU long-name header"), (b"x", "pax header")])
def test_an_oversized_special_header_is_refused_before_it_is_read(tmp_path, kind, said):
    path = tmp_path / "b.tar.gz"
    _header_bomb(path, kind)
    assert os.path.getsize(path) < 2 << 20
    with pytest.raises(InputError, match=f"a {said} of {BIG} bytes"):
        Bundle.open(str(path))
    code, err, peak = _peak_mib([sys.executable, "-m", "kpdiag", "analyze", str(path), "-o", "json"])
    assert "Traceback" not in err and "MemoryError" not in err and "internal error" not in err, err
    assert f"a {said} of {BIG} bytes" in err and "refused" in err, err
    assert code == 3, err
    assert peak < 224, peak  # MiB: the header is never held (before: its 256 MiB and more); kpdiag itself ~150-180


def test_a_sparse_map_bomb_is_refused(tmp_path):
    path = tmp_path / "b.tar.gz"
    _write(path, itertools.chain([_member("kpdiag.json", MANIFEST)], _sparse_bomb(200_000), [b"\0" * 1024]))
    with pytest.raises(InputError, match="a sparse map over 64 KiB: refused"):
        Bundle.open(str(path))


def test_a_small_special_header_is_still_read(tmp_path):
    """A real long name (over 100 bytes) and a pax header are normal: read as before."""
    path = tmp_path / "b.tar.gz"
    long = "node/" + "x" * 150 + ".txt"
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (("kpdiag.json", MANIFEST), (long, b"hello\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
    b = Bundle.open(str(path))
    assert b.read_bytes(long) == b"hello\n"
    pax = tmp_path / "p.tar.gz"
    with tarfile.open(pax, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("kpdiag.json")
        info.size = len(MANIFEST)
        info.pax_headers = {"comment": "y" * 4000}
        tar.addfile(info, __import__("io").BytesIO(MANIFEST))
    assert Bundle.open(str(pax)).manifest["node"] == "n"


def test_headers_count_in_the_archive_total_budget(tmp_path, monkeypatch):
    """Many pax headers just under the per-header cap: their bytes are spent from the same total as the files'."""
    from kpdiag.bundle import store

    monkeypatch.setattr(store, "MAX_TOTAL_BYTES", 64 << 10)
    path = tmp_path / "b.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for i in range(40):
            data = b"x\n" if i else MANIFEST
            info = tarfile.TarInfo(f"node/f{i}.txt" if i else "kpdiag.json")
            info.size = len(data)
            info.pax_headers = {"comment": "y" * 8000}  # 8 KB of header for 2 bytes of file
            tar.addfile(info, __import__("io").BytesIO(data))
    b = Bundle.open(str(path))
    said = [p for p in b.problems if "headers and files reach the 64 KiB total limit" in p.error]
    assert len(said) == 1, b.problems
    assert 4 <= len([k for k in b.list("node/")]) < 10


@pytest.mark.parametrize(
    "kind,said",
    [(b"K", "GNU long-link header"), (b"g", "pax global header"), (b"X", "pax header"), (b"L", "GNU long-name header")],
)
def test_every_kind_of_special_header_over_the_cap_is_refused(tmp_path, kind, said):
    """Each header kind tarfile reads whole (long link, pax global, Solaris pax, long name): just over the 1 MiB cap."""
    size = (1 << 20) + 1
    path = tmp_path / "b.tar.gz"
    _header_bomb(path, kind, size)
    with pytest.raises(InputError, match=f"a {said} of {size} bytes"):
        Bundle.open(str(path))


def _pax_sparse_10_bomb(numbers: int):
    """A pax 1.0 sparse member (GNU.sparse.major=1, minor=0): its map — a count, then offset/size pairs, one decimal
    number per line at the start of its data — claims a billion pairs; tarfile reads the map before the member."""
    pax = tarfile.TarInfo("node/sysctl.txt")
    pax.size = 1 << 30
    pax.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": "node/sysctl.txt",
        "GNU.sparse.realsize": str(1 << 30),
    }
    yield pax.tobuf(format=tarfile.PAX_FORMAT)
    yield b"1000000000\n"
    for _ in range(numbers // 256):
        yield b"0\n" * 256


def test_a_pax_sparse_map_bomb_is_refused(tmp_path):
    path = tmp_path / "b.tar.gz"
    _write(path, itertools.chain([_member("kpdiag.json", MANIFEST)], _pax_sparse_10_bomb(2_000_000), [b"\0" * 1024]))
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(InputError, match="a sparse map over 64 KiB: refused"):
        Bundle.open(str(path))
