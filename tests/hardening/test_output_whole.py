"""Outputs are whole or not at all (issue 38): a bundle or report directory is written beside its place and renamed
into it only when complete — an older bundle's files never mix with this run's, a failed or interrupted write leaves
no bundle whose manifest says ``errors: []`` — and a --force target that is another user's, or that others may
write to, is refused."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from kpdiag.bundle.safeio import OutputExists
from kpdiag.bundle.store import write_bundle
from kpdiag.cli import main
from kpdiag.fleet.aggregate import write_report_dir

FILES = {"node/sysctl.txt": b"net.ipv4.ip_forward = 0\n", "node/kube-proxy/config.yaml": b"mode: iptables\n"}


def _tree(d) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def test_force_into_an_older_bundle_keeps_only_this_runs_files(tmp_path):
    out = tmp_path / "b"
    write_bundle(
        {"node/ipvsadm.txt": b"-A -t 10.96.0.1:443 -s rr\n", "node/kube-proxy/proxy-mode.txt": b"ipvs\n"},
        str(out),
        {"node": "old"},
    )
    write_bundle(FILES, str(out), {"node": "new", "errors": []}, force=True)
    assert _tree(out) == ["kpdiag.json", "node/kube-proxy/config.yaml", "node/sysctl.txt"]
    assert json.loads((out / "kpdiag.json").read_text())["node"] == "new"
    assert sorted(os.listdir(tmp_path)) == ["b"]  # no temporary sibling left
    assert oct(os.stat(out).st_mode & 0o777) == "0o700"


def test_a_write_that_fails_midway_leaves_no_bundle(tmp_path):
    """The manifest sorts before node/…: written first, it said ``errors: []`` over a bundle that stopped there."""
    out = tmp_path / "b"
    with pytest.raises(OSError):
        write_bundle({**FILES, "zz/../escape": b"x"}, str(out), {"node": "n", "errors": []})
    assert os.listdir(tmp_path) == []
    # over an older bundle (--force): the older one is left whole
    write_bundle(FILES, str(out), {"node": "old", "errors": []})
    with pytest.raises(OSError):
        write_bundle({"node/a.txt": b"a", "zz/../escape": b"x"}, str(out), {"node": "new", "errors": []}, force=True)
    assert _tree(out) == ["kpdiag.json", "node/kube-proxy/config.yaml", "node/sysctl.txt"]
    assert json.loads((out / "kpdiag.json").read_text())["node"] == "old"
    assert sorted(os.listdir(tmp_path)) == ["b"]


@pytest.mark.parametrize("name", ["b", "b.tar.gz"])
def test_a_full_disk_midway_leaves_no_bundle(tmp_path, name):
    """A real write failure (the file size limit: EFBIG, as a full disk gives ENOSPC) in a real process."""
    out = tmp_path / name
    code = (
        "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536));"
        "from kpdiag.bundle.store import write_bundle;"
        "import os; big = os.urandom(1 << 20);"
        "write_bundle({'node/sysctl.txt': b'x', 'node/zz-big.txt': big}, sys.argv[1], {'node': 'n', 'errors': []})"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "File too large" in proc.stderr, proc.stderr[-500:]
    assert os.listdir(tmp_path) == []


def _foreign(path, how):
    if how == "owner":
        os.chown(path, 12345, 12345)
    else:
        os.chmod(path, 0o777)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
@pytest.mark.parametrize("how,said", [("owner", "owned by another user (uid 12345)"), ("mode", "writable by everyone")])
def test_force_refuses_a_target_of_another_user_or_open_to_others(tmp_path, capsys, how, said):
    out = tmp_path / "b"
    write_bundle(FILES, str(out), {"node": "old"})
    _foreign(out, how)
    with pytest.raises(OutputExists, match=re.escape(said)):
        write_bundle(FILES, str(out), {"node": "new"}, force=True)
    rc = main(["collect", "-o", str(out), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and "refused" in err, err
    run = tmp_path / "run"
    write_report_dir(str(run), [], {"api_version": "v1.31.4"})
    _foreign(run, how)
    with pytest.raises(OutputExists, match=re.escape(said)):
        write_report_dir(str(run), [], {"api_version": "v1.31.4"}, force=True)
    archive = tmp_path / "b.tar.gz"
    write_bundle(FILES, str(archive), {"node": "old"})
    _foreign(archive, how)
    with pytest.raises(OutputExists, match=re.escape(said)):
        write_bundle(FILES, str(archive), {"node": "new"}, force=True)
