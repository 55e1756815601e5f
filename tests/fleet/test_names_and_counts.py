"""`kpdiag cluster` counts what it did and says so in its exit code: node names as long as Kubernetes allows are saved
(their file names hashed, the full name kept), a node named twice is diagnosed once, a node that could not be
diagnosed fails the run, and a --save-dir that cannot be written is not a success."""

from __future__ import annotations

import json
import os

from kpdiag import exitcodes
from kpdiag.cli import main
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.fleet.aggregate import FILE_NAME_MAX, report_file_name
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES

NS = "kpdiag"
REPORT = json.dumps(analyze_bundle(os.path.join(FIXTURES, "healthy-iptables")).to_dict())
# a valid node name of the longest length Kubernetes allows (a DNS subdomain: 253 characters, labels of 63 at most)
LONG = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
LONG2 = LONG[:-1] + "e"  # differs only in its last character: the two files must not collide


def _run(capsys, api, tmp_path, *args):
    rc = main(["cluster", "--kubeconfig", api.kubeconfig(tmp_path), "--poll", "0.05", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_253_character_node_names_are_saved_and_read_back_whole(capsys, tmp_path):
    assert len(LONG) == 253 and len(LONG2) == 253
    nodes = [k8s.node(LONG, ready=True), k8s.node(LONG2, ready=True), k8s.node("short", ready=True)]
    with ApiServer(nodes, kubelet={n["metadata"]["name"]: {"log": REPORT} for n in nodes}) as api:
        rc, out, err = _run(capsys, api, tmp_path, "-o", "json", "--save-dir", str(tmp_path / "run"))
        pods = [p["metadata"]["name"] for p in api.created]
    assert rc == exitcodes.OK, err
    assert "File name too long" not in err and "cannot write" not in err
    assert all(len(p) <= 63 for p in pods) and len(set(pods)) == 3
    files = sorted(os.listdir(tmp_path / "run" / "nodes"))
    assert len(files) == 3 and all(len(f.encode()) <= FILE_NAME_MAX + len(".json") for f in files)
    meta = json.load(open(tmp_path / "run" / "cluster.json"))
    assert sorted(meta["files"].values()) == sorted([LONG, LONG2, "short"])
    # read back: the nodes keep their full names
    rc = main(["analyze", str(tmp_path / "run"), "-o", "json"])
    again = json.loads(capsys.readouterr().out)
    assert rc == exitcodes.OK
    assert sorted(r["node"] for r in again["extra"]["nodes"]) == sorted([LONG, LONG2, "short"])


def test_long_file_names_are_distinct_and_bounded():
    taken: set[str] = set()
    names = {report_file_name(n, taken) for n in (LONG, LONG2, LONG, "x" * 400, "é" * 200)}
    assert len(names) == 5 and all(len(n.encode()) <= FILE_NAME_MAX + 7 for n in names)


def test_a_node_named_twice_is_diagnosed_once(capsys, tmp_path):
    nodes = [k8s.node(f"node-{i}", ready=True) for i in range(3)]
    with ApiServer(nodes, kubelet={f"node-{i}": {"log": REPORT} for i in range(3)}) as api:
        rc, out, err = _run(capsys, api, tmp_path, "-o", "json", "--nodes", "node-0,node-0, node-1,node-0")
        posts = api.count("POST", "/pods")
    report = json.loads(out)
    assert posts == 2 and rc == exitcodes.OK, err
    assert report["facts"]["nodes"] == 2 and report["facts"]["nodes_diagnosed"] == 2
    assert sorted(r["node"] for r in report["extra"]["nodes"]) == ["node-0", "node-1"]


def test_a_node_not_diagnosed_fails_the_run_and_is_counted(capsys, tmp_path):
    """One node of three cannot be diagnosed (its pod's create is refused by a 409 as if the name were taken): 2
    diagnosed, 1 failed, KP806, exit 1 — even though KP806 is a warning and --fail-on is error."""
    nodes = [k8s.node(f"node-{i}", ready=True) for i in range(3)]
    kubelet = {"node-0": {"log": REPORT}, "node-1": {"log": REPORT}, "node-2": {"log": "not a report", "exit": 2}}
    with ApiServer(nodes, kubelet=kubelet) as api:
        rc, out, err = _run(capsys, api, tmp_path, "-o", "json")
    report = json.loads(out)
    assert report["facts"]["nodes_diagnosed"] == 2 and report["facts"]["nodes_failed"] == 1
    assert "KP806" in {f["id"] for f in report["findings"]}
    assert rc == exitcodes.FINDINGS == exitcodes.for_fleet(1, 0)


def test_a_save_dir_that_cannot_be_written_is_not_a_success(capsys, tmp_path):
    nodes = [k8s.node("node-0", ready=True)]
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory's parent should be")
    with ApiServer(nodes, kubelet={"node-0": {"log": REPORT}}) as api:
        rc, out, err = _run(capsys, api, tmp_path, "-o", "json", "--save-dir", str(blocker / "run"))
        created = [p for m, p in api.requests if m == "POST"]
    # found before any pod is made (an argument error: exit 2, one line naming the folder), not after the run
    assert rc == exitcodes.USAGE, err
    assert str(blocker) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert created == [] and out == ""
