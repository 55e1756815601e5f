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

    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.node("node-a"),
        k8s.kube_proxy_configmap(),
    ]
    with ApiServer(objs) as api:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kpdiag",
                "svc",
                "web",
                "-n",
                "shop",
                "--kubeconfig",
                api.kubeconfig(tmp_path),
                "--no-probe",
                "--node",
                "node-a",
                "-o",
                "json",
            ],
            capture_output=True,
            timeout=120,
        )
        calls = list(api.requests)
    allowed = {
        ("services", "get"),
        ("endpointslices", "list"),
        ("pods", "list"),
        ("nodes", "get"),
        ("configmaps", "get"),
        ("daemonsets", "get"),
    }
    granted = {(res, v) for r in rules for res in r.get("resources", []) for v in r["verbs"]}
    assert allowed <= granted
    for method, path in calls:
        if path.rstrip("/") == "/version":
            continue
        parts = path.strip("/").split("/")
        resource = parts[-2] if parts[-2] in ("services", "nodes", "configmaps", "daemonsets") else parts[-1]
        verb = "get" if parts[-2] in ("services", "nodes", "configmaps", "daemonsets") else "list"
        assert (resource, verb) in granted, (method, path)


def test_cluster_rbac_covers_every_call_kpdiag_cluster_makes(tmp_path):
    """Run `kpdiag cluster` (3 nodes, one per failure path too) and map each API request to (verb, resource,
    namespace): deploy/rbac-cluster.yaml must grant exactly those, pod writes only in its own namespace."""
    import json
    import subprocess
    import sys

    from kpdiag.commands.pipeline import analyze_bundle
    from tests.conftest import FIXTURES

    with open(os.path.join(ROOT, "deploy", "rbac-cluster.yaml")) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    ns_doc = next(d for d in docs if d["kind"] == "Namespace")
    assert ns_doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    ns_rules = [r for d in docs if d["kind"] == "Role" for r in d["rules"]]
    assert all(d["metadata"]["namespace"] == "kpdiag" for d in docs if d["kind"] == "Role")
    granted_cluster = {(res, v) for r in cluster_rules for res in r.get("resources", []) for v in r["verbs"]}
    granted_ns = {(res, v) for r in ns_rules for res in r.get("resources", []) for v in r["verbs"]}
    assert not any(v in ("create", "delete", "update", "patch") for _, v in granted_cluster)  # no writes outside kpdiag
    assert not any(res in ("secrets", "*", "pods/exec") for res, _ in granted_cluster | granted_ns)

    report = json.dumps(analyze_bundle(os.path.join(FIXTURES, "healthy-iptables")).to_dict())
    nodes = [k8s.node(n, ready=True) for n in ("a", "b", "c")]
    with ApiServer(nodes, kubelet={"a": {"log": report}, "b": {"hang": True}, "c": {"log": report}}) as api:
        kc = api.kubeconfig(tmp_path)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kpdiag",
                "cluster",
                "--kubeconfig",
                kc,
                "--poll",
                "0.05",
                "--timeout",
                "2",
                "-o",
                "json",
            ],
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [sys.executable, "-m", "kpdiag", "cluster", "--kubeconfig", kc, "--cleanup"],
            capture_output=True,
            timeout=60,
        )
        calls = list(api.requests)
    used = set()
    for method, path in calls:
        p = path.rstrip("/")
        if p == "/version":
            used.add(("/version", "get"))
            continue
        parts = p.strip("/").split("/")
        if parts[-1] == "log":
            used.add(("kpdiag", "pods/log", "get"))
        elif "namespaces" in parts:
            ns = parts[parts.index("namespaces") + 1]
            named = len(parts) > parts.index("namespaces") + 3
            verb = {"POST": "create", "DELETE": "delete", "GET": "get" if named else "list"}[method]
            used.add((ns, parts[parts.index("namespaces") + 2], verb))
        else:
            used.add(("", parts[-1], "list" if method == "GET" else method.lower()))
    for call in used:
        if call[0] == "/version":
            assert any("/version" in r.get("nonResourceURLs", []) for r in cluster_rules)
        elif call[0] == "":
            assert (call[1], call[2]) in granted_cluster, call
        else:
            assert call[0] == "kpdiag" and (call[1], call[2]) in granted_ns, call
    assert {
        ("kpdiag", "pods", "create"),
        ("kpdiag", "pods", "delete"),
        ("kpdiag", "pods/log", "get"),
        ("", "nodes", "list"),
    } <= used


def test_svc_rbac_lists_pods_only_per_namespace():
    """A pod list shows every container's environment: deploy/rbac-svc.yaml grants it through RoleBindings in the
    namespaces named, never through a ClusterRoleBinding."""
    with open(os.path.join(ROOT, "deploy", "rbac-svc.yaml")) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    with_pods = {key for key, d in roles.items() if any("pods" in r.get("resources", []) for r in d["rules"])}
    assert with_pods == {("ClusterRole", "kpdiag-svc-pods")}
    for d in docs:
        if d["kind"] == "ClusterRoleBinding":
            assert (d["roleRef"]["kind"], d["roleRef"]["name"]) not in with_pods, d["metadata"]["name"]
    bound = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "kpdiag-svc-pods"]
    assert bound and all(d["metadata"].get("namespace") for d in bound)


def test_node_service_account_grants_exactly_what_kpdiag_node_reads(tmp_path):
    """The node pods' ServiceAccount (kpdiag/kpdiag-node) is bound to a ClusterRole that grants every call `kpdiag
    node` makes with the API (kpdiag.commands.nodeapi.api_files, the code the node command runs) — and nothing else."""
    from kpdiag.commands.nodeapi import api_files

    with open(os.path.join(ROOT, "deploy", "rbac-cluster.yaml")) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == ("kpdiag", "kpdiag-node")
    binding = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and any(s.get("kind") == "ServiceAccount" and s.get("name") == "kpdiag-node" for s in d["subjects"])
    )
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == binding["roleRef"]["name"])
    granted = {(g, res, v) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert granted == {("", "services", "list"), ("discovery.k8s.io", "endpointslices", "list"), ("", "nodes", "get")}

    objs = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}), k8s.node("node-a")]
    with ApiServer(objs) as api:
        files, errors, _ = api_files("node-a", kubeconfig=api.kubeconfig(tmp_path))
        calls = list(api.requests)
    assert errors == [] and {"cluster/services.json", "cluster/endpointslices.json", "cluster/nodes.json"} <= set(files)
    for method, path in calls:
        parts = path.split("?")[0].strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        if parts[-2] == "nodes":
            call = (group, "nodes", "get")
        else:
            call = (group, parts[-1], "list")
        assert method == "GET" and call in granted, (method, path)
