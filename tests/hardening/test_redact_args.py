"""A secret given to a container as two arguments — `args: ["--db-password", "hunter2"]`, the usual way in a pod spec —
is the flag-space form of docs/redaction.md split over two strings of a list: the value is redacted in every bundle
kpdiag writes (before: only `--db-password=hunter2` or both in one string were). And `bearer: Bearer TOKEN` hides
TOKEN, not the word Bearer. Through the real client: `kpdiag svc --save` against the loopback API server."""

from __future__ import annotations

import os
import subprocess
import sys

from kpdiag.bundle.scrub import scrub_text
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer


def test_secret_flag_and_its_value_as_two_arguments(tmp_path):
    pod = k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}, ports=[{"name": "http", "containerPort": 8080}])
    pod["spec"]["containers"][0]["args"] = ["--db-password", "canaryPW01", "--port", "8080", "-token", "canaryTK02"]
    pod["spec"]["containers"][0]["command"] = ["/app", "--api-key", "canaryAK03", "--verbose", "--log-file", "/x"]
    objs = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}), pod]
    out = tmp_path / "bundle"
    with ApiServer(objs) as api:
        proc = subprocess.run(
            [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--no-probe"]
            + ["--kubeconfig", api.kubeconfig(tmp_path), "--save", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode in (0, 1), proc.stderr
    pods = (out / "cluster/pods.json").read_text()
    assert "canary" not in pods
    for kept in ('"--db-password"', '"--port"', '"8080"', '"--verbose"', '"/x"', '"/app"'):
        assert kept in pods, kept  # the flags, and what is not a secret's value, stay
    for dirpath, _, names in os.walk(out):
        for name in names:
            assert b"canary" not in open(os.path.join(dirpath, name), "rb").read(), name


def test_bearer_after_a_key_named_bearer():
    assert scrub_text("# bearer: Bearer canaryBR04") == "# bearer: Bearer REDACTED"
    assert scrub_text("basic: Basic Y2FuYXJ5OnB3") == "basic: Basic REDACTED"
