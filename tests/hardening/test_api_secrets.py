"""Nothing secret is echoed or left behind: a kubeconfig's token, the password in a server URL and the decoded client
key, against kmock's API server (tests/apiserver.py) over real HTTP(S) and a real kubeconfig, in real processes (the
signals are real too)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer, self_signed

OBJECTS = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})]


def _kubeconfig(path, server: str, user: dict, cluster: dict | None = None, yaml_text: str | None = None) -> str:
    if yaml_text is None:
        yaml_text = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    path.write_text(yaml_text)
    return str(path)


def _svc_cmd(kc: str, *extra) -> list[str]:
    return [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", kc, "--no-probe", *extra]


def _run(kc: str, *extra, env=None):
    proc = subprocess.run(_svc_cmd(kc, *extra), capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_a_token_ending_in_a_newline_is_not_echoed_and_no_request_is_blamed(tmp_path):
    """A YAML ``token: |`` block keeps the newline: the token cannot be a header value. It is refused before any
    request, in one line that neither quotes the token nor blames the server."""
    secret = "s3cr3t-TOKEN-abcdef123456"
    with ApiServer(OBJECTS) as api:
        text = (
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
            f"    server: {api.url}\nusers:\n- name: u\n  user:\n    token: |\n      {secret}\n"
            "contexts:\n- name: ctx\n  context: {cluster: c, user: u}\ncurrent-context: ctx\n"
        )
        kc = _kubeconfig(tmp_path / "kc", "", {}, yaml_text=text)
        for fmt in ("json", "text"):
            proc = _run(kc, "-o", fmt)
            assert secret not in proc.stdout + proc.stderr
            assert proc.returncode == 3
            said = proc.stderr if fmt == "text" else json.loads(proc.stdout)["extra"]["headline"]
            assert "token ends in a newline" in said and "no request was sent" in said, said
            assert "API server" not in said and "answered" not in said, said
        assert api.requests == []


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_password_in_the_server_url_is_never_shown(tmp_path, fmt):
    """``server: https://user:PASSWORD@host``: every error line and the JSON headline name the server without it."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: connection refused
    kc = _kubeconfig(tmp_path / "kc", f"https://admin:Hunter2Secret@127.0.0.1:{port}", {"token": "t0ken-value-xyz"})
    proc = _run(kc, "-o", fmt)
    assert proc.returncode == 3
    both = proc.stdout + proc.stderr
    assert "Hunter2Secret" not in both and "admin:" not in both
    assert f"https://***@127.0.0.1:{port}" in both  # the server is still named
    if fmt == "json":
        assert "connection refused" in json.loads(proc.stdout)["extra"]["headline"]
    # a server that answers, with errors naming it: the password is not in them either
    with ApiServer(OBJECTS, fail={"configmaps": 500}) as api:
        url = api.url.replace("http://", "http://admin:Hunter2Secret@")
        kc = _kubeconfig(tmp_path / "kc2", url, {"token": "t0ken-value-xyz"})
        proc = _run(kc, "-o", fmt)
    both = proc.stdout + proc.stderr
    assert "Hunter2Secret" not in both and "t0ken-value-xyz" not in both
    assert "HTTP 500" in both


def _client_pair(tmp_path) -> tuple[str, str]:
    crt, key = self_signed(tmp_path, "client")
    return (
        base64.b64encode(open(crt, "rb").read()).decode(),
        base64.b64encode(open(key, "rb").read()).decode(),
    )


def _left_keys(tmpdir) -> list[str]:
    """Files under ``tmpdir`` that hold a private key (and every directory kpdiag left there)."""
    found = []
    for dirpath, dirnames, names in os.walk(tmpdir):
        found += [os.path.join(dirpath, d) for d in dirnames]
        for n in names:
            try:
                if b"PRIVATE KEY" in open(os.path.join(dirpath, n), "rb").read():
                    found.append(os.path.join(dirpath, n))
            except OSError:
                pass
    return found


def _wait_for(api, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not what(api) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert what(api), "kpdiag never reached the API"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_client_key_is_not_left_in_tmpdir_after_a_signal(tmp_path, sig, code):
    """kubeconfig client-key-data, a real `kpdiag svc` waiting on a slow HTTPS API: after Ctrl-C or SIGTERM, nothing
    of the key is left in $TMPDIR (nor while it runs)."""
    cert_data, key_data = _client_pair(tmp_path)
    crt, key = self_signed(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    with ApiServer(OBJECTS, tls=(crt, key), hang={"services": 60}) as api:
        ca = base64.b64encode(open(crt, "rb").read()).decode()
        kc = _kubeconfig(
            tmp_path / "kc",
            api.url,
            {"client-certificate-data": cert_data, "client-key-data": key_data},
            {"certificate-authority-data": ca},
        )
        proc = subprocess.Popen(_svc_cmd(kc), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        _wait_for(api, lambda a: any("/services/web" in p for _, p in a.requests))
        assert _left_keys(tmpdir) == []  # the key is in memory while the request waits
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode in (code, -sig), (proc.returncode, err)
    assert "Traceback" not in err
    assert _left_keys(tmpdir) == []


def test_the_client_key_is_not_left_after_sigterm_to_cluster(tmp_path):
    from tests.fleet.test_cluster_api import _nodes

    cert_data, key_data = _client_pair(tmp_path)
    crt, key = self_signed(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    kubelet = {f"node-{i:03d}": {"hang": True} for i in range(2)}
    with ApiServer(_nodes(2), kubelet=kubelet, tls=(crt, key)) as api:
        kc = _kubeconfig(
            tmp_path / "kc",
            api.url,
            {"client-certificate-data": cert_data, "client-key-data": key_data},
            {"certificate-authority-data": base64.b64encode(open(crt, "rb").read()).decode()},
        )
        argv = [sys.executable, "-m", "kpdiag", "cluster", "--kubeconfig", kc, "--poll", "0.1", "--timeout", "300"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        _wait_for(api, lambda a: len(a.live_pods("kpdiag")) >= 1)
        assert _left_keys(tmpdir) == []
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert _left_keys(tmpdir) == []


def test_tls_verification_off_is_said_in_the_report_not_warned_on_stderr(tmp_path):
    """insecure-skip-tls-verify against a self-signed HTTPS server: the token was sent to a server whose certificate
    was not checked — one line in the report says so, and no urllib3 warning block reaches stderr."""
    crt, key = self_signed(tmp_path)
    with ApiServer(OBJECTS, tls=(crt, key)) as api:
        kc = _kubeconfig(tmp_path / "kc", api.url, {"token": "t0ken-value-xyz"}, {"insecure-skip-tls-verify": True})
        proc = _run(kc, "-o", "json")
        text = _run(kc)
        assert api.requests  # it did talk to the server
    report = json.loads(proc.stdout)
    lines = [p["error"] for p in report["problems"] if "TLS verification is off" in p["error"]]
    assert len(lines) == 1 and "insecure-skip-tls-verify" in lines[0], report["problems"]
    assert "TLS verification is off" in text.stdout
    for p in (proc, text):
        assert "InsecureRequestWarning" not in p.stderr and "Unverified HTTPS request" not in p.stderr, p.stderr
