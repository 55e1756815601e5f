"""Issue 16 item 6: a bundle is someone else's data — regular files only, capped, and archives streamed.

Before: ``kpdiag analyze DIR`` (as root) followed a symlink ``node/iptables-save.txt -> /etc/shadow`` and echoed
its first line in the "could not read" message; a FIFO hung it; a 1 MB gzip bomb (4 × 250 MB of zeros) took
4.2 GB of memory.
"""

import io
import json
import os
import stat
import struct
import subprocess
import sys
import tarfile
import time
import zlib

import pytest

from kpdiag.bundle import store as bundle_mod
from kpdiag.bundle.store import Bundle
from kpdiag.errors import InputError

SECRET = "root:$6$CANARYsecretHASH:19000:0:99999:7:::"


def _dir_bundle(tmp_path):
    b = tmp_path / "b"
    (b / "node").mkdir(parents=True)
    (b / "kpdiag.json").write_text(json.dumps({"format": "kpdiag-bundle/1", "node": "n", "errors": []}))
    (b / "node" / "uname.txt").write_text("6.1.0\n")
    return b


@pytest.fixture
def secret(tmp_path):
    p = tmp_path / "shadow"
    p.write_text(SECRET + "\n")
    os.chmod(p, 0o600)
    return p


def _analyze(path, timeout=60):
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    return proc


def _problems(proc) -> list[str]:
    if not proc.stdout.strip():
        return [proc.stderr]
    return [f"{p['source']}: {p['error']}" for p in json.loads(proc.stdout).get("problems", [])]


@pytest.mark.parametrize("rel", ["node/iptables-save.txt", "node/sysctl.txt", "cluster/services.json", "kpdiag.json"])
def test_symlinked_file_is_not_read(tmp_path, secret, rel):
    b = _dir_bundle(tmp_path)
    (b / rel).parent.mkdir(exist_ok=True)
    if (b / rel).exists():
        (b / rel).unlink()
    os.symlink(secret, b / rel)
    proc = _analyze(b)
    assert "CANARY" not in proc.stdout + proc.stderr
    assert any(rel in p and "symbolic link" in p for p in _problems(proc)), _problems(proc)


def test_symlinked_directory_inside_the_bundle_is_not_followed(tmp_path):
    """node -> a directory elsewhere: nothing under it is read, though each file there is a regular file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "sysctl.txt").write_text("net.ipv4.ip_forward = 0\n")  # would make KP501 fire if read
    b = tmp_path / "b"
    b.mkdir()
    os.symlink(elsewhere, b / "node")
    (b / "cluster").mkdir()
    (b / "cluster" / "version.json").write_text('{"gitVersion": "v1.31.0"}')
    proc = _analyze(b)
    doc = json.loads(proc.stdout)
    assert "KP501" not in {f["id"] for f in doc["findings"]}
    assert any("node/sysctl.txt" in p and "symbolic link" in p for p in _problems(proc)), _problems(proc)


def test_fifo_does_not_hang_analyze(tmp_path):
    b = _dir_bundle(tmp_path)
    os.mkfifo(b / "node" / "sysctl.txt")
    os.mkfifo(b / "node" / "iptables-save.txt")
    t = time.monotonic()
    proc = _analyze(b, timeout=60)
    assert time.monotonic() - t < 60
    probs = _problems(proc)
    assert any("node/sysctl.txt" in p and "is a FIFO, not a regular file" in p for p in probs), probs


def test_device_is_never_opened(tmp_path):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mknod needs root")
        pytest.skip("mknod needs root")
    b = _dir_bundle(tmp_path)
    os.mknod(b / "node" / "iptables-save.txt", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless
    proc = _analyze(b)
    assert any("node/iptables-save.txt" in p and "character device" in p for p in _problems(proc)), _problems(proc)


def test_per_file_and_total_caps_are_named(tmp_path, monkeypatch):
    b = _dir_bundle(tmp_path)
    (b / "node" / "sysctl.txt").write_text("net.ipv4.ip_forward = 0\n" + "#" * 3000 + "\n")
    (b / "node" / "modules.txt").write_text("ip_tables 32768 0 - Live 0x0\n")
    monkeypatch.setattr(bundle_mod, "MAX_FILE_BYTES", 1000)
    bun = Bundle.open(str(b))
    assert bun.read_text("node/sysctl.txt") is None
    assert any(
        "node/sysctl.txt" in str(p) and "larger than the 1000 bytes per-file limit" in str(p) for p in bun.problems
    ), bun.problems
    monkeypatch.setattr(bundle_mod, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", 3100)
    bun = Bundle.open(str(b))  # the manifest (~60 bytes) and sysctl (3 KB) fit; modules.txt then passes the total
    assert bun.read_text("node/sysctl.txt") is not None
    assert bun.read_text("node/modules.txt") is None
    assert any("node/modules.txt" in str(p) and "3100 bytes total limit" in str(p) for p in bun.problems), bun.problems


def write_zero_bomb(path, members, size):
    """A .tar.gz whose members are SIZE zero bytes each, made in about a second: the deflate of 1 MiB of zeros is
    computed once and replayed (each piece ends with a full flush, so each stands alone); CRC and length are real."""
    chunk = bytes(1 << 20)

    def piece(data):
        c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)

    zeros = piece(chunk)
    crc = total = 0
    with open(path, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")

        def put(data, packed=None):
            nonlocal crc, total
            crc = zlib.crc32(data, crc)
            total += len(data)
            out.write(packed if packed is not None else piece(data))

        for name in members:
            info = tarfile.TarInfo(name)
            info.size = size
            put(info.tobuf(format=tarfile.GNU_FORMAT))
            full, rest = divmod(size, len(chunk))
            for _ in range(full):
                put(chunk, zeros)
            put(bytes(rest + (-size) % 512))
        put(bytes(1024))  # end of archive
        out.write(zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS).flush(zlib.Z_FINISH))
        out.write(struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF))


def test_gzip_bomb_stays_under_300_mb(tmp_path):
    members = ("node/iptables-save.txt", "node/nft-ruleset.json", "cluster/services.json", "node/sysctl.txt")
    bomb = tmp_path / "bomb.tar.gz"
    write_zero_bomb(bomb, members, 250_000_000)
    assert bomb.stat().st_size < 2_000_000  # ~1 MB holding 1 GB
    # the peak RSS of kpdiag alone, from wait4 in a small helper process: a child of this (big) pytest process would
    # inherit pytest's own peak into ru_maxrss at exec (Linux keeps the high-water mark across exec)
    helper = (
        "import json, os, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "err = p.stderr.read(); out = p.stdout.read()\n"
        "_, status, usage = os.wait4(p.pid, 0)\n"
        "print(json.dumps([usage.ru_maxrss, out.decode(), err.decode()]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", helper, sys.executable, "-m", "kpdiag", "analyze", str(bomb), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    maxrss, out, err = json.loads(res.stdout)
    out, err = out.encode(), err.encode()
    peak_mb = maxrss / 1024  # KiB on Linux
    print(f"gzip bomb ({bomb.stat().st_size} bytes, 4 × 250 MB inside): kpdiag analyze peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 300, peak_mb
    assert b"internal error" not in err and b"Traceback" not in err, err
    problems = {p["source"]: p["error"] for p in json.loads(out)["problems"]}
    for name in members:  # each named, with the limit
        assert problems[name] == "larger than the 128 MiB per-file limit (250000000 bytes): not read", problems


def test_archive_members_over_the_spool_threshold_wait_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "SPOOL_IN_MEMORY", 1000)
    path = tmp_path / "b.tar.gz"
    big = ("net.ipv4.ip_forward = 0\n" + "# padding\n" * 500).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("top/kpdiag.json", b'{"node": "n"}'), ("top/node/sysctl.txt", big)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    b = Bundle.open(str(path))
    assert b.manifest == {"node": "n"} and b.read_bytes("node/sysctl.txt") == big
    assert b.list("node/") == ["node/sysctl.txt"]


@pytest.mark.parametrize(
    "name,kind", [("./node/../../x", "outside"), ("node/./../../../etc/passwd", "outside"), ("/abs", "outside")]
)
def test_archive_traversal_refused(tmp_path, name, kind):
    path = tmp_path / "t.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InputError, match=kind):
        Bundle.open(str(path))


def test_archive_hard_link_refused(tmp_path):
    path = tmp_path / "t.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("node/iptables-save.txt")
        info.type = tarfile.LNKTYPE
        info.linkname = "/etc/shadow"
        tar.addfile(info)
    with pytest.raises(InputError, match="is a link"):
        Bundle.open(str(path))


def test_analyze_of_a_fifo_or_device_path_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "b.tar.gz"
    os.mkfifo(fifo)
    proc = _analyze(fifo, timeout=30)
    assert proc.returncode == 3 and "is a FIFO, not a regular file" in proc.stderr, proc.stderr
    proc = _analyze("/dev/zero", timeout=30)
    assert proc.returncode == 3 and "is a character device" in proc.stderr, proc.stderr
