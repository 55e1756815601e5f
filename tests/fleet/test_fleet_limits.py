"""`kpdiag cluster` within kpdiag's own limits: the memory all node reports take together (kpdiag/fleet/budget.py), and
a fixed number of worker threads, fewer when the process cannot start them (kpdiag/fleet/pool.py).

A real HTTP server speaking the Kubernetes API (tests/apiserver.py, with a kubelet that runs the pods) and the real
kubernetes client. Threads that cannot start are made real: the command runs in a pids cgroup whose pids.max leaves
it a few threads, as a container's limit does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from kpdiag.cli import main
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.fleet.budget import TOTAL_REPORTS, mib, weight
from kpdiag.fleet.pool import MAX_WORKERS
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES

NS = "kpdiag"
REPORT = analyze_bundle(os.path.join(FIXTURES, "healthy-iptables")).to_dict()


def _nodes(n):
    return [k8s.node(f"node-{i:03d}", ip=f"192.168.0.{i + 1}", ready=True) for i in range(n)]


def _heavy_report(objects: int) -> str:
    """A valid node report that takes far more memory parsed than its text: ``objects`` small objects in ``extra``."""
    doc = json.loads(json.dumps(REPORT))
    doc["facts"]["node"] = "somewhere-else"
    doc["extra"]["pad"] = [{}] * objects
    return json.dumps(doc)


def test_reports_past_the_total_cap_are_named_and_the_rest_is_diagnosed(capsys, tmp_path):
    """Six valid reports that together would take more than kpdiag's cap in memory: the nodes read first are kept, each
    of the others is one line naming the node and the cap, and the cluster report is made from those kept (before: all
    kept, 25 reports of 33 MB took `cluster` past 2.5 GB)."""
    text = _heavy_report(400_000)
    each = weight(text.encode())
    fit = TOTAL_REPORTS // each
    assert 1 <= fit < 6, (each, fit)
    with ApiServer(_nodes(6), kubelet={f"node-{i:03d}": {"log": text} for i in range(6)}) as api:
        rc = main(["cluster", "--kubeconfig", api.kubeconfig(tmp_path), "--poll", "0.05", "-o", "json"])
        out, err = capsys.readouterr()
        live = api.live_pods(NS)
    doc = json.loads(out)
    assert doc["facts"]["nodes_diagnosed"] == fit, err
    over = [f for f in doc["extra"]["failures"] if f["kind"] == "not read"]
    assert len(over) == 6 - fit and len(doc["extra"]["failures"]) == 6 - fit
    for f in over:
        assert f"kpdiag's cap of {mib(TOTAL_REPORTS)} in memory" in f["reason"] and "\n" not in f["reason"]
        assert {"source": f"node {f['node']}", "error": f["reason"]} in doc["problems"]
    assert any(f["id"] == "KP806" for f in doc["findings"])  # the nodes not diagnosed, said by the cluster check
    assert live == [] and rc in (0, 1), err


def test_analyze_dir_keeps_the_same_cap(capsys, tmp_path):
    """`kpdiag analyze DIR` over the same reports saved as files: the same cap, the same one line per report left out."""
    text = _heavy_report(400_000)
    fit = TOTAL_REPORTS // weight(text.encode())
    d = tmp_path / "reports"
    d.mkdir()
    for i in range(6):
        (d / f"node-{i}.json").write_text(text)
    main(["analyze", str(d), "-o", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["facts"]["nodes_diagnosed"] == fit
    over = [p for p in doc["problems"] if "not read" in p["error"]]
    assert len(over) == 6 - fit
    assert all(f"cap of {mib(TOTAL_REPORTS)}" in p["error"] and p["source"].startswith("node ") for p in over)


def test_parallel_is_capped_and_the_help_says_so(capsys, tmp_path):
    """--parallel above the cap runs MAX_WORKERS at a time, said once; --help states the cap."""
    assert main(["cluster", "--help"]) == 0
    assert f"at most {MAX_WORKERS}" in " ".join(capsys.readouterr().out.split())
    with open(os.path.join(os.path.dirname(FIXTURES), "README.md")) as fh:
        readme = " ".join(fh.read().split())
    assert f"at most {MAX_WORKERS}, kpdiag's cap on its worker threads" in readme
    assert f"within {mib(TOTAL_REPORTS)} of memory together" in readme
    kubelet = {f"node-{i:03d}": {"log": json.dumps(REPORT)} for i in range(3)}
    with ApiServer(_nodes(3), kubelet=kubelet) as api:
        rc = main(["cluster", "--kubeconfig", api.kubeconfig(tmp_path), "--poll", "0.05", "--parallel", "500"])
        out, err = capsys.readouterr()
    assert f"--parallel 500: {MAX_WORKERS} nodes at a time" in err and f"{MAX_WORKERS} at a time" in err
    assert rc == 0, err


def _pids_hierarchy() -> str | None:
    """A writable cgroup hierarchy with the pids controller: v1's /sys/fs/cgroup/pids, or v2 with pids enabled."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if not os.access(root, os.W_OK):
            continue
        if root.endswith("/pids") and os.path.exists(f"{root}/tasks"):
            return root
        try:
            with open(f"{root}/cgroup.subtree_control") as fh:
                if "pids" in fh.read().split():
                    return root
        except OSError:
            continue
    return None


def _in_pids_cgroup(limit: int):
    root = _pids_hierarchy()
    if root is None or os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("no writable pids cgroup (needs root and the pids controller)")
        pytest.skip("needs root and a writable pids cgroup")
    path = f"{root}/kpdiag-test-{uuid.uuid4().hex[:12]}"
    os.mkdir(path)
    with open(f"{path}/pids.max", "w") as fh:
        fh.write(str(limit))

    def enter():
        with open(f"{path}/cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    return path, enter


@pytest.mark.parametrize("limit", [1, 2, 8])
def test_threads_that_cannot_start_are_said_and_cleanup_still_happens(tmp_path, limit):
    """`kpdiag cluster --parallel 500` in a cgroup whose pids.max leaves it a few threads (a container's limit): the
    run goes on with the workers that started (one line says how many) and diagnoses every node; with no thread for a
    worker, each node is named as not run; with no thread at all, one line says the credentials could not be read.
    Never an internal error (before: "internal error: RuntimeError: can't start new thread"), and no pod is left."""
    kubelet = {f"node-{i:03d}": {"log": json.dumps(REPORT)} for i in range(12)}
    path, enter = _in_pids_cgroup(limit)
    try:
        with ApiServer(_nodes(12), kubelet=kubelet, kubelet_delay=0.2) as api:
            proc = subprocess.run(
                [sys.executable, "-m", "kpdiag", "cluster", "--kubeconfig", api.kubeconfig(tmp_path)]
                + ["--poll", "0.1", "--timeout", "120", "--parallel", "500", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=240,
                preexec_fn=enter,
            )
            live = api.live_pods(NS)
            created = api.count("POST", "/pods")
            owners = api.count("POST", "/configmaps"), api.count("DELETE", "/configmaps/")
    finally:
        for _ in range(100):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.05)
    err = proc.stderr
    assert "internal error" not in err and "Traceback" not in err, err
    assert live == [] and owners[0] == owners[1], (live, owners)  # every pod and the run's ConfigMap deleted
    if created:  # some workers started: fewer than asked, said once, and every node diagnosed
        assert "worker threads could start" in err and "pids.max" in err, err
        assert json.loads(proc.stdout)["facts"]["nodes_diagnosed"] == 12 and proc.returncode == 0, err
    elif proc.stdout.strip():  # not one worker: each node is named with why, and nothing was diagnosed
        doc = json.loads(proc.stdout)
        assert proc.returncode == 3 and doc["facts"]["nodes_diagnosed"] == 0
        reasons = {f["reason"] for f in doc["extra"]["failures"]}
        assert all("no worker thread could start" in r and "pids.max" in r for r in reasons), reasons
    else:  # not even a thread to read the credentials with: one line, before anything exists in the cluster
        assert proc.returncode == 3 and owners == (0, 0), err
        assert err.count("\n") == 1 and "could not start a thread" in err and "pids.max" in err, err
    if limit >= 8:
        assert created, err  # room for the setup's threads and at least one worker
