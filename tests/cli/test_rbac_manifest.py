"""deploy/rbac-svc.yaml allows exactly the calls kpdiag svc makes (read-only, no Secrets)."""

import os

import yaml

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import ROOT


def _rules():
    with open(os.path.join(ROOT, "deploy", "rbac-svc.yaml")) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]


def test_rbac_is_read_only_and_covers_every_call(tmp_path):
    rules = _rules()
    verbs = {v for r in rules for v in r["verbs"]}
    assert verbs <= {"get", "list"}
    assert not any("secrets" in r.get("resources", []) or "*" in r.get("resources", []) for r in rules)
    import subprocess
    import sys

    objs = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}), k8s.node("node-a"),
            k8s.kube_proxy_configmap()]
    with ApiServer(objs) as api:
        subprocess.run([sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--kubeconfig", api.kubeconfig(tmp_path),
                        "--no-probe", "--node", "node-a", "-o", "json"], capture_output=True, timeout=120)
        calls = list(api.requests)
    allowed = {("services", "get"), ("endpointslices", "list"), ("pods", "list"), ("nodes", "get"), ("configmaps", "get"), ("daemonsets", "get")}
    granted = {(res, v) for r in rules for res in r.get("resources", []) for v in r["verbs"]}
    assert allowed <= granted
    for method, path in calls:
        if path.rstrip("/") == "/version":
            continue
        parts = path.strip("/").split("/")
        resource = parts[-2] if parts[-2] in ("services", "nodes", "configmaps", "daemonsets") else parts[-1]
        verb = "get" if parts[-2] in ("services", "nodes", "configmaps", "daemonsets") else "list"
        assert (resource, verb) in granted, (method, path)
