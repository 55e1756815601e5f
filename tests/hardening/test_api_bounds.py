"""Unbounded reads from the API and the kubeconfig end within the command's deadline, with one plain line, exit 3.

Each attack is played by a real HTTP server on loopback (tests/hardening/hostile_api.py, in front of the emulated API
of tests/apiserver.py) to kpdiag's real kubernetes client, through a real kubeconfig: a body that never ends, an answer
one byte a second, headers one byte a second, a server that never answers, continue tokens that never end (or come
back), an exec credential plugin that never returns, a kubeconfig that is a FIFO. Every test is bounded to seconds.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import time

import pytest
from kubernetes.client.api import core_v1_api  # noqa: F401  # loaded once here: the bound is on waiting, not importing

from kpdiag.collect import kubeapi
from kpdiag.collect.cluster import ClusterCollector
from kpdiag.cli import main
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer, write_kubeconfig
from tests.hardening import hostile_api as H

SVC_PATH = r"^/api/v1/namespaces/shop/services/web\b"
OBJECTS = [
    k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
    k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}),
]
BUDGET = 4  # seconds: KPDIAG_API_BUDGET of the runs below


def _svc(kc, budget=BUDGET, extra_env=None):
    env = dict(os.environ, KPDIAG_API_BUDGET=str(budget), **(extra_env or {}))
    env.pop("KUBECONFIG", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", kc, "--no-probe", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    took = time.monotonic() - t0
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout), took


def _problems(report) -> list[str]:
    return [p["error"] for p in report["problems"]]


def _one_line(text: str) -> None:
    assert "\n" not in text and len(text) < 600, text


def test_a_body_that_never_ends_stops_at_the_cap(tmp_path):
    """3 GiB then MemoryError before: now the read stops at kpdiag's cap on one answer, named, and memory stays low."""
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {SVC_PATH: H.endless()}) as bad:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc, report, took = _svc(bad.kubeconfig(tmp_path), budget=20)
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert proc.returncode == 3
    why = next(p for p in _problems(report) if "get service shop/web" in p)
    _one_line(why)
    assert f"larger than {kubeapi.MAX_BODY >> 20} MiB (kpdiag's cap on one API answer)" in why
    assert (
        report["summary"]["headline"].startswith("kpdiag could not diagnose shop/web")
        if "headline" in report["summary"]
        else True
    )
    assert max(before, peak_kib) < 600 * 1024, peak_kib  # KiB: far from gigabytes
    assert took < 20


@pytest.mark.parametrize(
    "attack,words",
    [
        (H.trickle(OBJECTS[0], 0.5), "did not answer in time"),
        (H.trickle_headers(0.5), "did not answer in time"),
        (H.silent(), "did not answer in time"),
    ],
    ids=["body-1-byte-a-half-second", "headers-1-byte-a-half-second", "never-answers"],
)
def test_slow_answers_end_at_the_deadline(tmp_path, attack, words):
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {SVC_PATH: attack}) as bad:
        proc, report, took = _svc(bad.kubeconfig(tmp_path))
    assert proc.returncode == 3
    why = next(p for p in _problems(report) if "get service shop/web" in p)
    _one_line(why)
    assert words in why and "deadline" in why, why
    assert took < BUDGET + 8, took  # the budget, plus starting Python and the client


def test_a_slow_secondary_read_leaves_the_rest_of_the_diagnosis(tmp_path):
    """The pods list trickles: the Service is still diagnosed, the pods' line says why they are missing."""
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"^/api/v1/namespaces/shop/pods": H.silent()}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=3)
        t0 = time.monotonic()
        svc = cc.service("shop", "web")
        took = time.monotonic() - t0
    assert svc is not None and svc["metadata"]["name"] == "web"
    assert any("list pods in shop" in e["error"] and "in time" in e["error"] for e in cc.out.errors), cc.out.errors
    assert took < 3 + 5  # the budget, and slack for a loaded machine: the server itself would wait 120 s


@pytest.mark.parametrize("same", [False, True], ids=["new-token-every-page", "same-token-again"])
def test_continue_tokens_that_never_end(tmp_path, monkeypatch, same):
    """22,000 requests before: now a paged list stops at the page cap (or at once when a token comes back)."""
    monkeypatch.setattr(kubeapi, "MAX_PAGES", 30)  # kpdiag's own cap, made small for a test that lasts seconds
    item = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"^/api/v1/services": H.pages([item], same)}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=20)
        t0 = time.monotonic()
        assert cc.node_view("node-a") is False  # an incomplete Service list is not used
        took = time.monotonic() - t0
        asked = sum(1 for p in bad.hits if p.startswith("/api/v1/services"))
    why = next(e["error"] for e in cc.out.errors if "list services in all namespaces" in e["error"])
    _one_line(why)
    if same:
        assert "same continue token again after 2 pages (a paging loop)" in why and asked == 2
    else:
        assert "after 30 pages of 500 (kpdiag's cap on pages of one list)" in why and asked == 30
    assert took < 15


def test_too_many_objects_stop_at_the_object_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(kubeapi, "MAX_OBJECTS", 50)
    items = [k8s.service("shop", f"s{i}", f"10.96.1.{i}", [k8s.port(80)]) for i in range(20)]
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"^/api/v1/services": H.pages(items)}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=20)
        assert cc.node_view(None) is False
    why = next(e["error"] for e in cc.out.errors if "list services" in e["error"])
    assert "more than 50 objects (kpdiag's cap on one list)" in why


def _plugin_kubeconfig(tmp_path, url: str, script: str, via_env: bool = False) -> str:
    """A kubeconfig whose user's exec credential plugin is ``script``; ``via_env``: run as ``env -u X VAR=1 SCRIPT``
    (env replaces itself by the script: no process is then named like the kubeconfig's command)."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(script)
    plugin.chmod(0o755)
    exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    if via_env:
        exec_ = {"apiVersion": exec_["apiVersion"], "command": "env", "args": ["-u", "NOPE", "A=1", str(plugin)]}
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [
                    {
                        "name": "u",
                        "user": {"exec": exec_},
                    }
                ],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return str(kc)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_an_exec_credential_plugin_that_never_returns(tmp_path):
    pids = tmp_path / "pids"
    script = f"#!/bin/sh\necho $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n"
    with ApiServer(OBJECTS) as api:
        kc = _plugin_kubeconfig(tmp_path, api.url, script)
        proc, report, took = _svc(kc)
    assert proc.returncode == 3
    why = next(p for p in _problems(report) if "plugin" in p)
    _one_line(why)
    assert f"its credential plugin '{tmp_path / 'plugin.sh'}' did not finish in time" in why
    assert took < BUDGET + 8
    time.sleep(0.2)
    assert not any(_alive(int(p)) for p in pids.read_text().split()), "the plugin (or its child) is still running"


def test_a_failing_credential_plugin_is_named(tmp_path):
    with ApiServer(OBJECTS) as api:
        kc = _plugin_kubeconfig(tmp_path, api.url, "#!/bin/sh\necho 'token expired: run login' >&2\nexit 1\n")
        proc, report, _ = _svc(kc)
    assert proc.returncode == 3
    why = next(p for p in _problems(report) if "plugin" in p)
    assert "failed (process returned 1. token expired: run login)" in why


def test_a_kubeconfig_that_is_a_fifo(tmp_path):
    fifo = tmp_path / "kc.fifo"
    os.mkfifo(fifo)
    # nobody writes: the open does not block, the read finds nothing
    proc, report, took = _svc(str(fifo))
    assert proc.returncode == 3 and took < BUDGET + 6
    why = next(p for p in _problems(report) if "kubeconfig" in p)
    _one_line(why)
    assert str(fifo) in why
    # a writer holds it open and never writes: the read ends at the deadline
    holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        proc, report, took = _svc(str(fifo))
    finally:
        os.close(holder)
    assert proc.returncode == 3 and took < BUDGET + 6, took
    why = next(p for p in _problems(report) if "kubeconfig" in p)
    assert "not readable in time" in why, why


def test_a_kubeconfig_through_a_pipe_is_read_once(tmp_path):
    """--kubeconfig <(cat FILE): a pipe is read (bounded) and handed to the client, not opened twice."""
    with ApiServer(OBJECTS) as api:
        write_kubeconfig(str(tmp_path / "real"), api.url)
        fifo = tmp_path / "kc.fifo"
        os.mkfifo(fifo)
        writer = subprocess.Popen(["sh", "-c", f"cat {tmp_path / 'real'} > {fifo}"])
        try:
            proc, report, _ = _svc(str(fifo))
        finally:
            writer.wait(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert proc.returncode in (0, 1), report["problems"]
    assert report["facts"].get("service") or report["findings"] is not None


def test_a_huge_kubeconfig_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big"
    big.write_text("clusters: []\n" + "# " + "x" * (2 << 20) + "\n")
    proc, report, took = _svc(str(big))
    assert proc.returncode == 3 and took < 10
    assert any("larger than 1 MiB (kpdiag's cap)" in p for p in _problems(report))


def _nodes(n):
    return [k8s.node(f"node-{i:03d}", ip=f"192.168.0.{i + 1}", ready=True) for i in range(n)]


@pytest.mark.parametrize(
    "attack", [H.endless(), H.silent(), H.trickle_headers(0.5)], ids=["endless", "silent", "slow-headers"]
)
def test_kpdiag_cluster_timeout_is_a_hard_bound(capsys, tmp_path, attack):
    with ApiServer(_nodes(2)) as api, H.HostileApi(api.url, {r"^/api/v1/nodes": attack}) as bad:
        kc = bad.kubeconfig(tmp_path)
        t0 = time.monotonic()
        rc = main(["cluster", "--kubeconfig", kc, "--poll", "0.05", "--timeout", "3", "-o", "json"])
        took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert rc == 3
    line = err.strip().splitlines()[-1]
    _one_line(line)
    assert "list nodes" in line and ("cap" in line or "in time" in line), line
    assert took < 3 + 3, took  # --timeout 3 (and slack for a loaded machine); the attacks last 60 s and more


def test_kpdiag_cluster_timeout_bounds_the_credential_plugin(capsys, tmp_path):
    with ApiServer(_nodes(1)) as api:
        kc = _plugin_kubeconfig(tmp_path, api.url, "#!/bin/sh\nexec sleep 300\n")
        t0 = time.monotonic()
        rc = main(["cluster", "--kubeconfig", kc, "--timeout", "2", "-o", "json"])
        took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert rc == 3 and "credential plugin" in err and took < 2 + 3, (took, err)


def _cluster_peak(kc: str, *args: str) -> tuple[int, int, str, str, float]:
    """``kpdiag cluster`` in a small helper process: (exit code, peak RSS in KiB, stdout, stderr, seconds). Measured
    from the helper: a child of this (big) pytest process would inherit its high-water mark at exec."""
    helper = (
        "import os, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "out, err = p.communicate()\n"
        "_, status, usage = os.wait4(p.pid, 0) if p.returncode is None else (0, p.returncode << 8, None)\n"
        "import resource\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(p.returncode, peak, round(time.monotonic() - t, 2))\n"
        "sys.stdout.write(out.decode()); sys.stderr.write(err.decode())\n"
    )
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    cmd = [sys.executable, "-m", "kpdiag", "cluster", "--kubeconfig", kc, "--poll", "0.05", *args]
    res = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True, timeout=120, env=env)
    first, _, out = res.stdout.partition("\n")
    rc, peak, took = first.split()
    return int(rc), int(peak), out, res.stderr, float(took)


@pytest.mark.parametrize(
    "where,status",
    [(r"^POST /api/v1/namespaces/kpdiag/pods$", 403), (r"^POST /api/v1/namespaces/kpdiag/configmaps$", 500)],
    ids=["create-pod-403", "create-owner-500"],
)
def test_an_error_answer_whose_body_never_ends_is_read_bounded(tmp_path, where, status):
    """The generated client classes read an error answer's body whole: a 403 (or 500) to a write whose body never
    ends held gigabytes. kpdiag reads at most 64 KiB of it, names the refusal in one line, and ends."""
    with ApiServer(_nodes(1)) as api, H.HostileApi(api.url, {where: H.endless_error(status)}) as bad:
        rc, peak_kib, out, err, took = _cluster_peak(bad.kubeconfig(tmp_path), "--timeout", "20", "-o", "json")
        hits = list(bad.hits)
    assert "Traceback" not in err, err
    assert any(h.startswith("POST ") for h in hits), hits  # the attack was met
    assert peak_kib < 300 * 1024, peak_kib  # KiB: the body is written as fast as the socket takes it, for 60 s
    assert took < 20, took
    text = out + err
    if status == 403:  # the create is refused: every node's line says so, in one line each, and the run fails
        assert rc != 0
        line = next(line for line in text.splitlines() if "403" in line or "forbidden" in line.lower())
        _one_line(line)
    else:  # the run owner could not be created: said once, the run goes on without it
        assert "ConfigMap" in text and "run owner" in text, text


def test_an_error_answer_to_a_delete_whose_body_never_ends(tmp_path):
    """Cleanup meets the same attack: each delete's refusal is read bounded, the leftover pod is named."""
    kubelet = {"node-000": {"log": "", "exit": 0}}
    with (
        ApiServer(_nodes(1), kubelet=kubelet) as api,
        H.HostileApi(api.url, {r"^DELETE /api/v1/namespaces/kpdiag/pods/": H.endless_error(500)}) as bad,
    ):
        rc, peak_kib, out, err, took = _cluster_peak(bad.kubeconfig(tmp_path), "--timeout", "20", "-o", "json")
    assert "Traceback" not in err, err
    assert peak_kib < 300 * 1024, peak_kib
    assert took < 40, took
    assert "kpdiag-" in out + err and ("left" in (out + err).lower() or "could not" in (out + err).lower()), out + err


@pytest.mark.parametrize("command,via_env", [("svc", False), ("cluster", False), ("svc", True)])
def test_a_credential_plugin_that_hangs_when_run_again_to_refresh_the_token(tmp_path, command, via_env):
    """The first token expires at once (within the client's 5-minute skew), so the client runs the plugin again from
    inside the next API call; that second run never returns. Before, the caller was released at its deadline but the
    plugin (and what it started) kept running; now the refresh is bounded, the plugin is killed, and the line says so."""
    pids, marker = tmp_path / "pids", tmp_path / "ran-once"
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    token = json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"token": "t0ken", "expirationTimestamp": soon},
        }
    )
    script = (
        f"#!/bin/sh\nif [ -e {marker} ]; then echo $$ >> {pids}; sleep 300 & echo $! >> {pids}; wait; fi\n"
        f"touch {marker}\necho '{token}'\n"
    )
    with ApiServer(OBJECTS + _nodes(1)) as api:
        kc = _plugin_kubeconfig(tmp_path, api.url, script, via_env=via_env)
        if command == "svc":
            proc, report, took = _svc(kc)
            lines = _problems(report)
            bound = BUDGET + 8
        else:
            t0 = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "kpdiag", "cluster", "--kubeconfig", kc, "--timeout", "4", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=60,
                env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            )
            took = time.monotonic() - t0
            assert "Traceback" not in proc.stderr, proc.stderr
            lines = (proc.stdout + proc.stderr).splitlines()
            bound = 4 + 8
    assert marker.exists() and pids.exists(), "the plugin was not run again to refresh the token"
    assert proc.returncode == 3, (proc.returncode, lines)
    why = next(line for line in lines if "refreshing the token" in line)
    named = "env" if via_env else tmp_path / "plugin.sh"
    assert f"the credential plugin '{named}' did not finish refreshing the token" in why, why
    assert "was stopped" in why
    assert took < bound, took
    time.sleep(0.2)
    assert not any(_alive(int(p)) for p in pids.read_text().split()), "the plugin (or its child) is still running"


def test_an_error_body_sent_a_byte_at_a_time_is_read_no_longer_than_the_call_may_take():
    """A 500 whose 64 KiB body comes one byte per half second: each byte beats the socket timeout, so a read of the
    whole body would take nine hours. The body is read against the call's timeout; the refusal is raised at once."""
    from kubernetes.client.exceptions import ApiException

    from kpdiag.collect.kubeconfig import api_client

    with H.HostileApi(None, {r"^DELETE /api/v1/namespaces/kpdiag/pods/p$": H.trickle_error(500, 0.5)}) as bad:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            api, why = api_client(bad.kubeconfig(d))
            assert api is not None, why
            t0 = time.monotonic()
            with pytest.raises(ApiException) as exc:
                kubeapi.RawApi(api).delete_namespaced_pod("p", "kpdiag", _request_timeout=2)
            took = time.monotonic() - t0
    assert exc.value.status == 500
    assert took < 2 + 3, took


@pytest.mark.parametrize(
    "argv,names",
    [
        (["/usr/local/bin/kubelogin", "get-token"], {"kubelogin"}),
        (["env", "-i", "-u", "HOME", "AWS_PROFILE=prod", "/usr/bin/aws", "eks", "get-token"], {"env", "aws"}),
        (["/usr/bin/env", "-S", "gke-gcloud-auth-plugin --verbose"], {"env", "gke-gcloud-auth-plugin"}),
        (["env", "--split-string=gke-auth --x"], {"env", "gke-auth"}),
        (["env", "-Sgke-auth --x"], {"env", "gke-auth"}),
        (["env", "A=1"], {"env"}),
        ([], set()),
    ],
)
def test_the_names_a_running_credential_plugin_shows(argv, names):
    from kpdiag.collect.credplugin import plugin_names

    assert plugin_names(argv) == names


def test_a_503_then_the_answer_is_retried_by_urllib3(tmp_path):
    """The Service GET answered 503 (Retry-After: 1) once, then the real answer: urllib3's Retry asks again and the
    Service is read; a 503 that stays is one line, asked three times, not more."""
    seen = []

    def flaky(h, srv, always=False):
        seen.append(h.path)
        if always or len(seen) == 1:
            h.send_response(503)
            h.send_header("Retry-After", "1")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        srv._relay(h)

    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {SVC_PATH: flaky}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=20)
        svc = cc.one_service("shop", "web")[0]
    assert svc is not None and svc["metadata"]["name"] == "web", cc.out.errors
    assert len(seen) == 2
    seen.clear()
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {SVC_PATH: lambda h, s: flaky(h, s, True)}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=20)
        t0 = time.monotonic()
        assert cc.one_service("shop", "web")[0] is None
        took = time.monotonic() - t0
    assert len(seen) == 3 and took < 10, (seen, took)
    assert "answered HTTP 503" in cc.service_error, cc.service_error
