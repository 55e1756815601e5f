"""kpdiag analyze FILE.tar.gz refuses traversal, links, devices and bombs; oversized JSON is refused politely."""

import io
import json
import tarfile

import pytest

from kpdiag.bundle import store as bundle_mod
from kpdiag.bundle.store import Bundle
from kpdiag.cli import main
from kpdiag.errors import InputError


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


@pytest.mark.parametrize(
    "make,words",
    [
        (lambda: [_file("../evil.txt")], "outside the bundle"),
        (lambda: [_file("/etc/passwd")], "outside the bundle"),
        (lambda: [_file("node/../../x")], "outside the bundle"),
        (lambda: [(_link("node/iptables-save.txt", "/etc/shadow"), None)], "is a link"),
        (lambda: [(_dev("node/sda"), None)], "device"),
    ],
)
def test_hostile_archives_refused(tmp_path, make, words, capsys):
    path = tmp_path / "b.tar.gz"
    _tar(path, make())
    with pytest.raises(InputError) as exc:
        Bundle.open(str(path))
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert main(["analyze", str(path)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def _link(name, target):
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


def _dev(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.BLKTYPE
    return info


def test_tar_bomb_caps(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_TAR_FILES", 50)
    path = tmp_path / "many.tar.gz"
    _tar(path, [_file(f"node/f{i}.txt") for i in range(60)])
    with pytest.raises(InputError) as exc:
        Bundle.open(str(path))
    assert "more than 50 entries" in str(exc.value)
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", 1000)
    path = tmp_path / "big.tar.gz"
    _tar(
        path, [_file("node/small.txt", b"1" * 600), _file("node/big.txt", b"0" * 2000)]
    )  # compresses to almost nothing
    b = Bundle.open(str(path))  # what came before the cap is read; the rest is a named problem
    assert b.read_text("node/small.txt") == "1" * 600 and b.read_bytes("node/big.txt") is None
    assert any("node/big.txt" in str(p) and "1000 bytes total limit" in str(p) for p in b.problems), b.problems


def test_deep_and_garbage_json_are_recorded_not_fatal(tmp_path):
    b = tmp_path / "b"
    (b / "node").mkdir(parents=True)
    (b / "node" / "ip-addr.json").write_text("[" * 5000 + "]" * 5000)
    (b / "node" / "ip-route.json").write_text('{"a": ')
    (b / "kpdiag.json").write_text("not json at all")
    (b / "node" / "sysctl.txt").write_text("net.ipv4.ip_forward = 0\n")
    state_bundle = Bundle.open(str(b))
    assert state_bundle.read_json("node/ip-addr.json") is None
    assert state_bundle.read_json("node/ip-route.json") is None
    msgs = [str(p) for p in state_bundle.problems]
    assert any("nested deeper than" in m for m in msgs)
    assert any("ip-route.json:1: invalid JSON" in m for m in msgs)
    assert any("kpdiag.json: unreadable manifest" in m for m in msgs)
    assert main(["analyze", str(b), "-o", "json"]) == 1  # KP501 still found from the readable sysctl


def test_wrapped_archive_with_top_folder_is_read(tmp_path):
    path = tmp_path / "wrapped.tar.gz"
    manifest = json.dumps({"format": "kpdiag-bundle/1", "node": "n"}).encode()
    _tar(path, [_file("bundle/kpdiag.json", manifest), _file("bundle/node/sysctl.txt", b"net.ipv4.ip_forward = 0\n")])
    b = Bundle.open(str(path))
    assert b.manifest["node"] == "n" and b.read_text("node/sysctl.txt")


def test_a_member_twice_in_an_archive_is_said():
    """tar allows a name twice (an archive appended to): the last copy is read — and a problem says so, since
    which copy was meant is not known (the first was read silently over)."""
    import os
    import tempfile

    manifest = json.dumps({"format": "kpdiag-bundle/1", "node": "n"}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "twice.tar.gz")
        _tar(
            path,
            [
                _file("kpdiag.json", manifest),
                _file("node/sysctl.txt", b"net.ipv4.ip_forward = 1\n"),
                _file("node/sysctl.txt", b"net.ipv4.ip_forward = 0\n"),
            ],
        )
        b = Bundle.open(path)
        assert b.read_text("node/sysctl.txt") == "net.ipv4.ip_forward = 0\n"
        said = [(p.source, p.error) for p in b.problems]
        assert any("sysctl.txt" in s and "in the archive twice: the last copy is read" in e for s, e in said), said
