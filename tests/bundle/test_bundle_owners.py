"""A bundle directory holds its owner's files, one link each (issue 38): read as root, a hard link to a root-only
file, a root file whose other name is gone, or another user's file inside a bundle owned by someone else is named in
one line and not read — not shown by ``analyze``, not copied by ``redact`` — and the rest of the bundle is read."""

from __future__ import annotations

import json
import os

import pytest

from kpdiag.bundle import store
from kpdiag.bundle.store import Bundle, write_bundle
from kpdiag.cli import main

OWNER = 12345  # the bundle's author: not root, not the test
OTHER = 23456  # a third user
CANARY = "canary-root-only-9f3e"
FILES = {
    "node/sysctl.txt": b"net.ipv4.ip_forward = 1\n",
    "node/kube-proxy/config.yaml": b"mode: iptables\n",
}


def _root_or_skip() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root (to give files to other users), and CI runs as root")
        pytest.skip("needs root to give files to other users")


def _bundle(tmp_path, owner: int = OWNER):
    """A bundle written by kpdiag, then given (folders and files) to ``owner``; and a root-only secret beside it."""
    b = tmp_path / "b"
    write_bundle(FILES, str(b), {"format": "kpdiag-bundle/1", "node": "n1", "errors": []})
    for folder, dirs, files in os.walk(b):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), owner, owner)
    os.chown(b, owner, owner)
    secret = tmp_path / "shadow"
    secret.write_text(f"root:{CANARY}:19000::::::\n")
    os.chmod(secret, 0o600)
    return b, secret


def _redact(b, tmp_path, capsys) -> tuple[str, str]:
    capsys.readouterr()
    out = tmp_path / "red"
    assert main(["redact", str(b), "-o", str(out), "--salt", "s"]) == 0
    err = capsys.readouterr().err
    copied = "".join(
        open(os.path.join(d, f), encoding="utf-8", errors="replace").read() for d, _, fs in os.walk(out) for f in fs
    )
    return copied, err


def test_a_hard_link_to_a_root_only_file_is_neither_copied_nor_shown(tmp_path, capsys):
    _root_or_skip()
    b, secret = _bundle(tmp_path)
    os.link(secret, b / "node" / "processes.txt")  # as fs.protected_hardlinks=0 lets its owner do
    copied, err = _redact(b, tmp_path, capsys)
    assert CANARY not in copied
    said = [line for line in err.splitlines() if "node/processes.txt" in line]
    assert len(said) == 1 and "has 2 hard links" in said[0] and "not read" in said[0], err
    assert "ip_forward" in copied and "mode: iptables" in copied  # the rest of the bundle is copied
    capsys.readouterr()
    main(["analyze", str(b), "-o", "json"])
    out, err = capsys.readouterr()
    assert CANARY not in out + err
    assert "node/processes.txt" in out and "has 2 hard links" in out, out


def test_a_root_file_whose_other_name_is_gone_is_refused_by_its_owner(tmp_path):
    """The link was made while the secret had its other name; it was then replaced (as /etc/shadow is on every
    password change): one link left, owned by root, in a bundle root does not own."""
    _root_or_skip()
    b, secret = _bundle(tmp_path)
    os.link(secret, b / "node" / "processes.txt")
    os.unlink(secret)
    bundle = Bundle.open(str(b))
    assert bundle.read_bytes("node/processes.txt") is None
    said = [str(p) for p in bundle.problems if p.source == "node/processes.txt"]
    assert said == [
        f"node/processes.txt: is owned by uid 0, not by uid {OWNER}: not read "
        "(a bundle holds its owner's files only, one link each)"
    ]
    assert bundle.manifest["node"] == "n1" and bundle.read_bytes("node/sysctl.txt") == FILES["node/sysctl.txt"]


def test_another_users_file_in_a_bundle_is_refused_and_the_rest_read(tmp_path, capsys):
    _root_or_skip()
    b, _ = _bundle(tmp_path)
    planted = b / "node" / "kube-proxy" / "kube-proxy.log"
    planted.write_text(f"E1208 {CANARY}\n")
    os.chown(planted, OTHER, OTHER)
    bundle = Bundle.open(str(b))
    assert bundle.read_bytes("node/kube-proxy/kube-proxy.log") is None
    assert [p.error for p in bundle.problems] == [
        f"is owned by uid {OTHER}, not by uid {OWNER}: not read (a bundle holds its owner's files only, one link each)"
    ]
    assert bundle.read_bytes("node/kube-proxy/config.yaml") == FILES["node/kube-proxy/config.yaml"]
    copied, err = _redact(b, tmp_path, capsys)
    assert CANARY not in copied and f"uid {OTHER}" in err and "kube-proxy.log" in err
    assert "mode: iptables" in copied


def test_a_bundle_of_its_owners_files_is_read_whole(tmp_path):
    _root_or_skip()
    b, _ = _bundle(tmp_path)
    bundle = Bundle.open(str(b))
    assert {rel: bundle.read_bytes(rel) for rel in bundle.list("node/")} == FILES
    assert bundle.problems == [] and json.loads(bundle.read_bytes("kpdiag.json"))["node"] == "n1"


def test_two_names_for_one_file_are_refused_in_ones_own_bundle_too(tmp_path):
    b = tmp_path / "b"
    write_bundle(FILES, str(b), {"format": "kpdiag-bundle/1", "errors": []})
    os.link(b / "node" / "sysctl.txt", b / "node" / "sysctl-copy.txt")
    bundle = Bundle.open(str(b))
    assert bundle.read_bytes("node/sysctl.txt") is None and bundle.read_bytes("node/sysctl-copy.txt") is None
    assert sorted(p.source for p in bundle.problems if "has 2 hard links" in p.error) == [
        "node/sysctl-copy.txt",
        "node/sysctl.txt",
    ]
    assert bundle.read_bytes("node/kube-proxy/config.yaml") == FILES["node/kube-proxy/config.yaml"]


def test_whose_files_count_as_the_bundles():
    assert store.member_owners(OWNER, 0) == {
        OWNER
    }  # root: the bundle owner's only (root's own files too, in its bundles)
    assert store.member_owners(0, 0) == {0}
    assert store.member_owners(OWNER, 1000) == {
        OWNER,
        1000,
    }  # not root: nothing read that the user could not read anyway
