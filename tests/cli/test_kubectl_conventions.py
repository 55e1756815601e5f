"""kubectl's conventions, through the real command line: the namespace comes from the kubeconfig context (then
``default``), and every command that takes a namespace takes ``-n``.

The namespace tests talk to a real HTTP server speaking the Kubernetes API (tests/apiserver.py) through a real
kubeconfig whose contexts set (or do not set) a namespace."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer

KPDIAG = [sys.executable, "-m", "kpdiag"]


def _kubeconfig(directory, url: str, current: str = "shop-ctx") -> str:
    """A kubeconfig with three contexts on one cluster: namespace shop, namespace other, and none."""
    contexts = [
        {"name": "shop-ctx", "context": {"cluster": "test", "user": "test", "namespace": "shop"}},
        {"name": "other-ctx", "context": {"cluster": "test", "user": "test", "namespace": "other"}},
        {"name": "bare-ctx", "context": {"cluster": "test", "user": "test"}},
    ]
    kc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": "kpdiag-test"}}],
        "contexts": contexts,
        "current-context": current,
    }
    path = f"{directory}/kubeconfig-{current}"
    with open(path, "w") as fh:
        json.dump(kc, fh)
    return path


def _svc(kc: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [*KPDIAG, "svc", "web", "--kubeconfig", kc, "--no-probe", "-o", "json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


OBJECTS = [
    k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
    k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}, ports=[{"name": "http", "containerPort": 8080}]),
    k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
]


def _service_gets(api) -> list[str]:
    return [p for m, p in api.requests if m == "GET" and p.endswith("/services/web")]


def test_svc_takes_the_namespace_of_the_current_context(tmp_path):
    with ApiServer(OBJECTS) as api:
        proc, report = _svc(_kubeconfig(tmp_path, api.url, "shop-ctx"))
        gets = _service_gets(api)
    assert report["subject"] == "service shop/web", report["subject"]
    assert gets == ["/api/v1/namespaces/shop/services/web"], gets
    assert "KP110" not in {f["id"] for f in report["findings"]}  # found: no "a Service named web exists in shop"
    assert proc.returncode == 0, (proc.stderr, report["findings"])


def test_svc_takes_the_namespace_of_the_context_given(tmp_path):
    with ApiServer(OBJECTS) as api:
        kc = _kubeconfig(tmp_path, api.url, "bare-ctx")
        _, report = _svc(kc, "--context", "shop-ctx")
        assert report["subject"] == "service shop/web"
        _, report = _svc(kc, "--context", "other-ctx")
        assert report["subject"] == "service other/web"
        gets = _service_gets(api)
    assert gets == ["/api/v1/namespaces/shop/services/web", "/api/v1/namespaces/other/services/web"], gets


def test_svc_without_a_context_namespace_looks_in_default(tmp_path):
    with ApiServer(OBJECTS) as api:
        proc, report = _svc(_kubeconfig(tmp_path, api.url, "bare-ctx"))
        gets = _service_gets(api)
    assert report["subject"] == "service default/web"
    assert gets == ["/api/v1/namespaces/default/services/web"], gets
    assert proc.returncode == 1  # not there: KP110 names shop, where it is
    kp110 = next(f for f in report["findings"] if f["id"] == "KP110")
    assert "shop" in kp110["summary"]


def test_namespace_option_wins_over_the_context(tmp_path):
    with ApiServer(OBJECTS) as api:
        kc = _kubeconfig(tmp_path, api.url, "other-ctx")
        _, long_form = _svc(kc, "--namespace", "shop")
        _, short_form = _svc(kc, "-n", "shop")
        gets = _service_gets(api)
    assert long_form["subject"] == short_form["subject"] == "service shop/web"
    assert gets == ["/api/v1/namespaces/shop/services/web"] * 2, gets


def test_svc_help_says_where_the_namespace_comes_from():
    proc = subprocess.run([*KPDIAG, "svc", "--help"], capture_output=True, text=True, timeout=60)
    assert "-n, --namespace" in proc.stdout
    assert "kubeconfig context's" in " ".join(proc.stdout.split())


def _options_of(command: click.Command):
    for param in command.params:
        if isinstance(param, click.Option):
            yield param


def test_every_namespace_option_has_the_short_n():
    from kpdiag.cli import cli

    with_namespace = []
    for name, command in cli.commands.items():
        for option in _options_of(command):
            if "--namespace" in option.opts:
                with_namespace.append(name)
                assert "-n" in option.opts, f"kpdiag {name}: --namespace without -n"
            assert "-n" not in option.opts or "--namespace" in option.opts, f"kpdiag {name}: -n means something else"
    assert {"svc", "cluster"} <= set(with_namespace), with_namespace
