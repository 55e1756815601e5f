"""Issue 16 item 5: what kpdiag writes (as root) lands in a fresh path it created, nowhere else.

Before: ``collect -o LINK`` with a dangling symlink wrote where the link pointed; an empty directory was
accepted and then written into by path (a user could plant ``node -> /etc`` in between); ``svc --save``
overwrote whatever was there; ``cluster --save-dir`` wrote ``<node>.json`` beside ``cluster.json``, so a node
named ``cluster`` replaced the run summary (and one named ``scenario`` was never read back).
"""

import json
import os
import subprocess
import sys
import stat
import tarfile

import pytest

from kpdiag.bundle.store import write_bundle
from kpdiag.cli import main
from kpdiag.fleet.aggregate import NodeResult, write_report_dir
from kpdiag.bundle.safeio import OutputExists

FILES = {"node/sysctl.txt": b"net.ipv4.ip_forward = 0\n", "node/kube-proxy/config.yaml": b"mode: iptables\n"}


@pytest.fixture
def victim(tmp_path):
    """A file and a directory an attacker would like root to write into."""
    v = tmp_path / "victim"
    v.mkdir()
    (v / "file").write_text("precious\n")
    return v


def _untouched(victim):
    assert sorted(os.listdir(victim)) == ["file"] and (victim / "file").read_text() == "precious\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["collect", "-o", "{out}"],
        ["collect", "-o", "{out}", "--force"],
        ["svc", "web", "--no-probe", "--kubeconfig", "{kc}", "--save", "{out}"],
        ["svc", "web", "--no-probe", "--kubeconfig", "{kc}", "--save", "{out}", "--force"],
        ["cluster", "--kubeconfig", "{kc}", "--save-dir", "{out}"],
        ["cluster", "--kubeconfig", "{kc}", "--save-dir", "{out}", "--force"],
    ],
    ids=["collect", "collect-force", "svc", "svc-force", "cluster", "cluster-force"],
)
@pytest.mark.parametrize("target", ["dangling", "to-dir", "to-file"])
def test_a_symlink_as_output_is_refused_before_anything_runs(tmp_path, victim, capsys, argv, target):
    out = tmp_path / ("out.tar.gz" if target == "to-file" else "out")
    os.symlink({"dangling": str(victim / "new"), "to-dir": str(victim), "to-file": str(victim / "file")}[target], out)
    kc = tmp_path / "no-kubeconfig"  # never read: the output is refused first
    rc = main([a.format(out=out, kc=kc) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and ("is a symbolic link: refused" in err or (argv[0] == "cluster" and "is a file" in err)), (
        err
    )  # click's own check
    _untouched(victim)
    assert os.path.islink(out)


@pytest.mark.parametrize(
    "argv",
    [
        ["collect", "-o", "{out}"],
        ["svc", "web", "--no-probe", "--kubeconfig", "{kc}", "--save", "{out}"],
        ["cluster", "--kubeconfig", "{kc}", "--save-dir", "{out}"],
    ],
    ids=["collect", "svc", "cluster"],
)
def test_an_existing_output_needs_force(tmp_path, capsys, argv):
    out = tmp_path / "out"
    out.mkdir()  # empty and user-owned: accepted before, then written by path
    rc = main([a.format(out=out, kc=tmp_path / "none") for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and "exists" in err and "--force" in err, err
    assert os.listdir(out) == []


@pytest.mark.parametrize("name", ["b.zip", "b.tar", "b.json", "b.gz", "B.ZIP"])
def test_collect_takes_a_directory_or_a_tar_gz_only(tmp_path, capsys, name):
    rc = main(["collect", "-o", str(tmp_path / name)])
    err = capsys.readouterr().err
    assert rc == 2 and "directory or a FILE.tar.gz" in err, err
    assert os.listdir(tmp_path) == []


def test_force_into_a_directory_never_follows_what_was_planted(tmp_path, victim):
    """--force on an existing directory: planted file links are replaced (not followed), a planted directory
    link stops the write (O_NOFOLLOW), a hard link to someone's file is unlinked, not truncated."""
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim / "file", out / "kpdiag.json")  # file link
    os.link(victim / "file", out / "hard")  # a hard link to the victim, under a name kpdiag writes
    write_bundle({"hard": b"kpdiag's\n"}, str(out), {"node": "n"}, force=True)
    _untouched(victim)
    assert not os.path.islink(out / "kpdiag.json") and json.loads((out / "kpdiag.json").read_text())["node"] == "n"
    assert (out / "hard").read_text() == "kpdiag's\n" and os.stat(out / "hard").st_ino != os.stat(
        victim / "file"
    ).st_ino
    os.symlink(victim, out / "node")  # directory link: where node/sysctl.txt would go
    with pytest.raises(OSError):
        write_bundle(FILES, str(out), {"node": "n"}, force=True)
    _untouched(victim)


def test_force_over_an_archive_replaces_it_afresh(tmp_path, victim):
    out = tmp_path / "b.tar.gz"
    os.link(victim / "file", out)  # hard link to the victim under the output's name
    with pytest.raises(OutputExists):
        write_bundle(FILES, str(out), {"node": "n"})
    write_bundle(FILES, str(out), {"node": "n"}, force=True)
    _untouched(victim)
    with tarfile.open(out) as tar:
        assert "node/sysctl.txt" in tar.getnames()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_a_fresh_directory_is_created_by_kpdiag(tmp_path):
    out = tmp_path / "new"
    write_bundle(FILES, str(out), {"node": "n"})
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    with pytest.raises(OutputExists):
        write_bundle(FILES, str(out), {"node": "n"})  # twice: refused, not merged


def _node(name):
    from tests.fleet.test_aggregate import _node as real

    return real(name)


def test_cluster_save_dir_keeps_nodes_named_cluster_and_scenario(tmp_path, capsys):
    d = tmp_path / "run"
    results = [
        _node("cluster"),
        _node("scenario"),
        _node("a"),
        _node(".."),
        NodeResult("down", failure="ImagePullBackOff: x", kind="image pull"),
    ]
    write_report_dir(str(d), results, {"api_version": "v1.31.4", "local_itp": []})
    assert sorted(os.listdir(d)) == ["cluster.json", "nodes"]
    assert sorted(os.listdir(d / "nodes")) == ["_...json", "a.json", "cluster.json", "scenario.json"]
    rc = main(["analyze", str(d), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["facts"]["nodes_diagnosed"] == 4, doc["facts"]
    kp806 = [f for f in doc["findings"] if f["id"] == "KP806"]  # the node not diagnosed is named, as a warning
    assert rc == 0 and [f["severity"] for f in kp806] == ["warning"], (rc, kp806)
    assert {f["node"] for f in doc["extra"]["failures"]} == {"down"}
    with pytest.raises(OutputExists):
        write_report_dir(str(d), results, {})


def test_analyze_still_reads_the_old_layout(tmp_path, capsys):
    """Runs saved before nodes/ existed: <node>.json beside cluster.json."""
    d = tmp_path / "old"
    d.mkdir()
    for r in (_node("a"), _node("b")):
        (d / f"{r.node}.json").write_text(json.dumps(r.report))
    (d / "cluster.json").write_text(
        json.dumps({"api_version": "v1.31.4", "failures": [{"node": "c", "kind": "timeout", "reason": "slow"}]})
    )
    rc = main(["analyze", str(d), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and any(f["id"] == "KP806" for f in doc["findings"]), rc
    assert doc["facts"]["nodes_diagnosed"] == 2 and {f["node"] for f in doc["extra"]["failures"]} == {"c"}


def test_report_dir_reads_no_symlink(tmp_path, capsys):
    """A report directory is someone else's too: a node report that is a symlink (to a root-only file) is a failure."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"schema": "kpdiag.report/v1", "SECRET": 1}')
    os.chmod(secret, 0o600)
    d = tmp_path / "run"
    write_report_dir(str(d), [_node("a")], {"api_version": "v1.31.4", "local_itp": []})
    os.symlink(secret, d / "nodes" / "b.json")
    main(["analyze", str(d), "-o", "json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert "SECRET" not in out
    failures = {f["node"]: f["reason"] for f in doc["extra"]["failures"]}
    assert "symbolic link" in failures["b"]


def test_collect_into_a_bundle_whose_node_folder_is_a_link_names_it(tmp_path):
    """kpdiag collect -o DIR --force where DIR/node is a symbolic link (to somewhere else): refused — the link is
    never followed — and the error names the part, not only DIR."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "node").symlink_to(elsewhere)
    (out / "kpdiag.json").write_text("{}")
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "collect", "-o", str(out), "--force"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"{out}: cannot write node: not a folder (a file, or a symbolic link" in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == []
