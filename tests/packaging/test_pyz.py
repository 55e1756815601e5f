"""dist/kpdiag.pyz (deploy/build-pyz.sh): one file that runs with Python interpreters other than the one that built
it — a fresh venv without kpdiag, Debian's /usr/bin/python3 and any other python3.X >= 3.10 on PATH — and gives the
same JSON as the installed kpdiag; its kubernetes client talks to the API emulator."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES, ROOT

BUNDLES = ("ipvs-fallback", "healthy-nftables", "no-endpoints")


@pytest.fixture(scope="module")
def pyz(tmp_path_factory):
    out = tmp_path_factory.mktemp("pyz") / "kpdiag.pyz"
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "deploy", "build-pyz.sh"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sys.stderr.write(proc.stdout)
    return str(out)


def _interpreters(tmp_path):
    """Other interpreters than the one that built it: a fresh venv (no kpdiag in it) and system ones >= 3.10."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    found = [str(venv / "bin" / "python")]
    seen = {os.path.realpath(sys.executable)}
    for name in ("/usr/bin/python3", "python3.10", "python3.12", "python3.13"):
        exe = shutil.which(name)
        if not exe or os.path.realpath(exe) in seen:
            continue
        ver = subprocess.run(
            [exe, "-c", "import sys; print(sys.version_info >= (3, 10))"], capture_output=True, text=True
        )
        if ver.stdout.strip() == "True":
            seen.add(os.path.realpath(exe))
            found.append(exe)
    return found


def _installed(*args, cwd):
    return subprocess.run([sys.executable, "-m", "kpdiag", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_pyz_runs_with_other_interpreters_and_agrees_with_the_installed_kpdiag(pyz, tmp_path):
    pythons = _interpreters(tmp_path)
    sys.stderr.write(f"pyz {os.path.getsize(pyz) / 1e6:.1f} MB, run with {pythons}\n")
    venv_py = pythons[0]
    assert (
        subprocess.run([venv_py, "-c", "import kpdiag"], capture_output=True, cwd=tmp_path).returncode != 0
    )  # not there
    trace_args = [
        "trace",
        "--bundle",
        os.path.join(FIXTURES, "healthy-iptables"),
        "--src",
        "192.168.50.2",
        "--dst",
        "10.96.0.20",
        "--dport",
        "80",
        "-o",
        "json",
    ]
    expected = {b: _installed("analyze", os.path.join(FIXTURES, b), "-o", "json", cwd=tmp_path) for b in BUNDLES}
    expected_trace = _installed(*trace_args, cwd=tmp_path)
    for py in pythons:
        helped = subprocess.run([py, pyz, "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert helped.returncode == 0 and "analyze" in helped.stdout, (py, helped.stderr)
        for b in BUNDLES:
            got = subprocess.run(
                [py, pyz, "analyze", os.path.join(FIXTURES, b), "-o", "json"],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp_path,
            )
            assert got.returncode == expected[b].returncode, (py, b, got.stderr[-2000:])
            assert json.loads(got.stdout) == json.loads(expected[b].stdout), (py, b)
        got = subprocess.run([py, pyz, *trace_args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert got.returncode == expected_trace.returncode and json.loads(got.stdout) == json.loads(
            expected_trace.stdout
        ), py


def test_pyz_kubernetes_client_works(pyz, tmp_path):
    """The pyz carries its own kubernetes client (held below 36 by deploy/constraints.txt): `svc` against the API
    emulator gives the same report from a venv without kpdiag as the installed kpdiag."""
    py = _interpreters(tmp_path)[0]
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.node("node-a"),
        k8s.kube_proxy_configmap(),
    ]
    args = ["svc", "web", "-n", "shop", "--no-probe", "--node", "node-a", "-o", "json"]
    typo = ["svc", "webb", "-n", "shop", "--no-probe", "--node", "node-a", "-o", "json"]  # a 404, then lists (KP110)
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        got = subprocess.run(
            [py, pyz, *args, "--kubeconfig", kc], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        want = _installed(*args, "--kubeconfig", kc, cwd=tmp_path)
        got404 = subprocess.run(
            [py, pyz, *typo, "--kubeconfig", kc], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        want404 = _installed(*typo, "--kubeconfig", kc, cwd=tmp_path)
    assert got404.returncode == want404.returncode == 1, (got404.stderr[-2000:], want404.stderr[-2000:])
    nearest = [f for f in json.loads(got404.stdout)["findings"] if f["id"] == "KP110"]
    assert (
        nearest
        and "web" in nearest[0]["summary"]
        and nearest == [f for f in json.loads(want404.stdout)["findings"] if f["id"] == "KP110"]
    )
    assert got.returncode == want.returncode, got.stderr[-2000:]
    mine, theirs = json.loads(got.stdout), json.loads(want.stdout)
    assert mine["subject"] == theirs["subject"] and [f["id"] for f in mine["findings"]] == [
        f["id"] for f in theirs["findings"]
    ]
    assert "could not" not in json.dumps(mine["problems"]).lower() or mine["problems"] == theirs["problems"]
