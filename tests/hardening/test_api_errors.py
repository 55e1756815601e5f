"""API failures say, whole and in one line, what was tried and what to do — each produced by a real failure.

A port nothing listens on, a name that does not resolve, a TLS server whose certificate another CA signed, a server
that never answers, a real 403 and 401 Status, a --context that is not in the kubeconfig, no credentials at all, a pod
without a token. The library's own text (``(Caused by NewConnectionError("HTTPSCon``, ``Service host/port is not
set.``) never reaches the user.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer, write_kubeconfig
from tests.hardening import hostile_api as H

OBJECTS = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})]
LIBRARY_WORDS = ("Caused by", "HTTPSConnection", "HTTPConnection", "MaxRetryError", "urllib3", "Service host/port")


def svc(*args, env=None, budget=4):
    e = dict(os.environ if env is None else env, KPDIAG_API_BUDGET=str(budget))
    if env is None:
        e.pop("KUBECONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--no-probe", "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=e,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    return proc, report


def the_line(report) -> str:
    """The first line: the headline, which carries the reason."""
    line = (report.get("extra") or {}).get("headline") or report["findings"][0]["summary"]
    assert "\n" not in line and len(line) < 700, line
    assert not any(w in line for w in LIBRARY_WORDS), line
    assert line.rstrip()[-1] in ".)?'\"" or line.rstrip()[-1].isalnum(), line  # whole: not cut mid-word
    return line


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connection_refused(tmp_path):
    port = _free_port()
    write_kubeconfig(str(tmp_path / "kc"), f"https://127.0.0.1:{port}")
    proc, report = svc("--kubeconfig", str(tmp_path / "kc"))
    line = the_line(report)
    assert proc.returncode == 3
    assert f"the API server https://127.0.0.1:{port} is unreachable: connection refused" in line
    assert f"nothing listens on 127.0.0.1:{port}" in line


def test_name_does_not_resolve(tmp_path):
    write_kubeconfig(str(tmp_path / "kc"), "https://kpdiag-no-such-host.invalid:6443")
    proc, report = svc("--kubeconfig", str(tmp_path / "kc"))
    line = the_line(report)
    assert proc.returncode == 3
    assert "its name 'kpdiag-no-such-host.invalid' does not resolve (DNS:" in line


def _cert(tmp_path, name: str) -> tuple[str, str]:
    key, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(crt), str(key)


def test_tls_with_a_certificate_of_another_ca(tmp_path):
    server_crt, server_key = _cert(tmp_path, "server")
    other_ca, _ = _cert(tmp_path, "other-ca")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server_crt, server_key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                ctx.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    kc = tmp_path / "kc"
    kc.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": other_ca}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    try:
        proc, report = svc("--kubeconfig", str(kc))
    finally:
        stop.set()
        t.join(5)
        listener.close()
    line = the_line(report)
    assert proc.returncode == 3
    assert f"TLS: the certificate of the API server https://127.0.0.1:{port} is not trusted" in line
    assert "certificate-authority" in line


def test_a_server_that_never_answers(tmp_path):
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/services/web": H.silent()}) as bad:
        proc, report = svc("--kubeconfig", bad.kubeconfig(tmp_path), budget=3)
    line = the_line(report)
    assert proc.returncode == 3
    # the deadline (or the per-call read timeout, cut to the same time left): either way said, and when
    assert f"the API server {bad.url} did not answer in time" in line or (
        f"the API server {bad.url} accepted the connection, then timed out" in line
    )


FORBIDDEN = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Forbidden",
    "code": 403,
    "message": 'services "web" is forbidden: User "system:serviceaccount:prod:debug" cannot get resource "services" '
    'in API group "" in the namespace "shop"',
}


def test_403_names_what_was_denied_and_how_to_check(tmp_path):
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/services/web": H.answer(FORBIDDEN, 403)}) as bad:
        proc, report = svc("--kubeconfig", bad.kubeconfig(tmp_path))
    line = the_line(report)
    assert proc.returncode == 3
    problem = next(p["error"] for p in report["problems"] if "403" in p["error"])
    assert 'User "system:serviceaccount:prod:debug" cannot get resource "services"' in problem
    assert "kubectl auth can-i get services -n shop" in problem
    assert "RBAC" in line and "services" in line


def test_403_on_a_secondary_list_names_its_verb_and_resource(tmp_path):
    denied = dict(FORBIDDEN, message='pods is forbidden: User "u" cannot list resource "pods" in the namespace "shop"')
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/namespaces/shop/pods": H.answer(denied, 403)}) as bad:
        proc, report = svc("--kubeconfig", bad.kubeconfig(tmp_path))
    problem = next(p["error"] for p in report["problems"] if "403" in p["error"])
    assert problem.startswith("not collected: list pods in shop: 403 Forbidden — RBAC does not allow it")
    assert "kubectl auth can-i list pods -n shop" in problem


def test_401(tmp_path):
    body = {"kind": "Status", "apiVersion": "v1", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/services/web": H.answer(body, 401)}) as bad:
        proc, report = svc("--kubeconfig", bad.kubeconfig(tmp_path))
    line = the_line(report)
    assert proc.returncode == 3 and "401 Unauthorized" in line


def _two_contexts(path: str, url: str) -> None:
    write_kubeconfig(path, url)
    doc = json.load(open(path))
    doc["contexts"].append({"name": "staging", "context": {"cluster": "test", "user": "test"}})
    json.dump(doc, open(path, "w"))


def test_a_mistyped_context_lists_the_contexts_there_are(tmp_path):
    kc = str(tmp_path / "kc")
    _two_contexts(kc, "http://127.0.0.1:9")
    proc, report = svc("--kubeconfig", kc, "--context", "prdo")
    line = the_line(report)
    assert proc.returncode == 3
    assert f"kubeconfig {kc} has no context 'prdo' — its contexts: 'test', 'staging' (give one with --context)" in line
    assert "give --kubeconfig" not in line


def test_a_context_naming_a_missing_cluster(tmp_path):
    kc = str(tmp_path / "kc")
    write_kubeconfig(kc, "http://127.0.0.1:9")
    doc = json.load(open(kc))
    doc["contexts"][0]["context"]["cluster"] = "gone"
    json.dump(doc, open(kc, "w"))
    proc, report = svc("--kubeconfig", kc)
    assert "context 'test' names cluster 'gone', which it does not define" in the_line(report)


def test_no_credentials_at_all(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc, report = svc(env=env)
    line = the_line(report)
    assert proc.returncode == 3
    assert "no usable Kubernetes credentials" in line and "KUBERNETES_SERVICE_HOST is unset" in line


@pytest.mark.skipif(
    os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"), reason="this host is a pod with a token"
)
def test_a_pod_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(HOME=str(tmp_path), KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT="1")
    proc, report = svc(env=env)
    line = the_line(report)
    assert proc.returncode == 3 and "no service-account token is mounted" in line


def test_a_kubeconfig_with_an_unclosed_quote_names_where_it_starts(tmp_path):
    """YAML finds an unclosed quote only where the file ends: the line said is where the value starts, then where it
    was found (it said 'line 3' for a mistake on line 1)."""
    kc = tmp_path / "kc"
    kc.write_text('apiVersion: "v1\nkind: Config\n')
    proc, report = svc("--kubeconfig", str(kc))
    line = the_line(report)
    assert proc.returncode == 3
    assert "not valid YAML (lines 1–3: while scanning a quoted scalar)" in line, line
