"""The RBAC in deploy/ grants exactly what each command uses.

Each command runs against the loopback API server (tests/apiserver.py, the real kubernetes client), in scenarios that
take each of its paths; every request the server receives is turned into what the API server's authorizer sees
(verb, API group, resource, subresource, namespace, name — or a non-resource URL) and must be allowed by the grants
bound to that command's subject in the manifests. And the other way round: every grant (each verb × resource × scope
of every rule bound to the subject) must allow at least one of those requests — a grant nothing uses fails the test.

Subjects: kpdiag cluster's operator (Group kpdiag-operators, deploy/rbac-cluster.yaml), the node pods' ServiceAccount
(kpdiag/kpdiag-node, the same file), and kpdiag svc / kpdiag policy's ServiceAccount (default/kpdiag,
deploy/rbac-svc.yaml with the opt-ins deploy/rbac-svc-whoami.yaml and deploy/rbac-svc-kube-system.yaml).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import yaml

from kpdiag.cli import main
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES, ROOT


# ------------------------------------------------------------------ the manifests
def _docs(*names: str) -> list[dict]:
    docs = []
    for name in names:
        with open(os.path.join(ROOT, "deploy", name)) as fh:
            docs += [d for d in yaml.safe_load_all(fh) if d]
    return docs


@dataclass(frozen=True)
class Grant:
    """One verb on one resource (or a non-resource URL) in one scope: namespace, or None for cluster-wide."""

    verb: str
    group: str | None  # None: a non-resource URL
    resource: str  # "pods", "pods/log", or the URL
    scope: str | None
    names: tuple[str, ...] = ()
    role: str = ""

    def allows(self, req: "Request") -> bool:
        if self.verb not in (req.verb, "*"):
            return False
        if self.group is None or req.url is not None:
            return self.group is None and req.url is not None and self.resource == req.url
        res = req.resource + (f"/{req.sub}" if req.sub else "")
        if self.group != req.group or self.resource not in (res, "*"):
            return False
        if self.scope is not None and req.namespace != self.scope:
            return False  # a RoleBinding: its namespace only (never cluster-scoped resources or all-namespace lists)
        return not self.names or (req.name in self.names and req.verb not in ("list", "create", "watch"))


def grants(docs: list[dict], kind: str, name: str, namespace: str | None = None) -> list[Grant]:
    """The grants bound to a subject by the bindings of ``docs``."""
    roles = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs if "rules" in d}
    out = []
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(
            s.get("kind") == kind
            and s.get("name") == name
            and (kind != "ServiceAccount" or s.get("namespace") == namespace)
            for s in b.get("subjects") or []
        ):
            continue
        scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        role = roles[(ref["kind"], ref["name"], scope if ref["kind"] == "Role" else None)]
        for rule in role["rules"]:
            for verb in rule["verbs"]:
                for url in rule.get("nonResourceURLs", []):
                    out.append(Grant(verb, None, url, None, role=ref["name"]))
                for group in rule.get("apiGroups", []):
                    for res in rule.get("resources", []):
                        out.append(Grant(verb, group, res, scope, tuple(rule.get("resourceNames", [])), ref["name"]))
    return out


# ------------------------------------------------------------------ the requests
@dataclass(frozen=True)
class Request:
    verb: str
    group: str = ""
    resource: str = ""
    sub: str = ""
    namespace: str | None = None
    name: str | None = None
    url: str | None = None  # a non-resource request


def request(method: str, path: str) -> Request:
    """What the API server's authorizer sees for METHOD PATH (as k8s.io/apiserver's RequestInfo resolves it)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return Request(verb="get" if method == "GET" else method.lower(), url="/" + "/".join(parts))
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else ""
    if namespace is None and resource == "namespaces" and name:  # GET /api/v1/namespaces/NAME
        namespace = name
    verb = {
        "GET": "get" if name else "list",
        "POST": "create",
        "DELETE": "delete" if name else "deletecollection",
        "PUT": "update",
        "PATCH": "patch",
    }[method]
    return Request(verb, group, resource, sub, namespace, name)


def check(subject: str, grant_list: list[Grant], calls: list[tuple[str, str]]) -> None:
    """Every call allowed, every grant used."""
    reqs = [request(m, p) for m, p in calls]
    assert reqs, f"{subject}: no request was made"
    denied = sorted(
        {(m, p.split("?")[0]) for (m, p), r in zip(calls, reqs) if not any(g.allows(r) for g in grant_list)}
    )
    assert not denied, f"{subject}: requests no grant allows: {denied}"
    unused = sorted(
        {
            f"{g.role}: {g.verb} {g.group + '/' if g.group else ''}{g.resource} in {g.scope or 'cluster'}"
            for g in grant_list
        }
        - {
            f"{g.role}: {g.verb} {g.group + '/' if g.group else ''}{g.resource} in {g.scope or 'cluster'}"
            for g in grant_list
            if any(g.allows(r) for r in reqs)
        }
    )
    assert not unused, f"{subject}: grants no request uses: {unused}"


def test_request_mapping_follows_the_api_servers_request_info():
    assert request("GET", "/api/v1/namespaces/kpdiag/pods/p1/log?limitBytes=5") == Request(
        "get", "", "pods", "log", "kpdiag", "p1"
    )
    assert request("GET", "/apis/apps/v1/namespaces/kube-system/daemonsets") == Request(
        "list", "apps", "daemonsets", "", "kube-system", None
    )
    assert request("GET", "/api/v1/pods?fieldSelector=status.podIP%3D1.2.3.4") == Request("list", "", "pods")
    assert request("GET", "/api/v1/namespaces") == Request("list", "", "namespaces")
    assert request("DELETE", "/api/v1/namespaces/kpdiag/configmaps/x") == Request(
        "delete", "", "configmaps", "", "kpdiag", "x"
    )
    assert request("GET", "/version/") == Request("get", url="/version")
    # a RoleBinding's grant does not reach other namespaces, nor cluster-wide lists; resourceNames narrow gets only
    g = Grant("list", "", "pods", "shop")
    assert g.allows(request("GET", "/api/v1/namespaces/shop/pods")) and not g.allows(request("GET", "/api/v1/pods"))
    named = Grant("get", "", "configmaps", "kube-system", ("kube-proxy",))
    assert named.allows(request("GET", "/api/v1/namespaces/kube-system/configmaps/kube-proxy"))
    assert not named.allows(request("GET", "/api/v1/namespaces/kube-system/configmaps/coredns"))


# ------------------------------------------------------------------ kpdiag cluster
def test_cluster_rbac_grants_exactly_the_calls_kpdiag_cluster_makes(tmp_path, capsys):
    """A run over three nodes (one hangs past --timeout), then --cleanup: the operator's grants cover each request
    and each is used; writes only in the kpdiag namespace, no Secrets, no exec."""
    from kpdiag.commands.pipeline import analyze_bundle

    docs = _docs("rbac-cluster.yaml")
    ns_doc = next(d for d in docs if d["kind"] == "Namespace")
    assert ns_doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    operator = grants(docs, "Group", "kpdiag-operators")
    assert all(g.scope == "kpdiag" for g in operator if g.verb in ("create", "delete", "update", "patch"))
    assert not any(g.resource in ("secrets", "*", "pods/exec", "pods/attach") for g in operator)

    report = json.dumps(analyze_bundle(os.path.join(FIXTURES, "healthy-iptables")).to_dict())
    nodes = [k8s.node(n, ready=True) for n in ("a", "b", "c")]
    with ApiServer(nodes, kubelet={"a": {"log": report}, "b": {"hang": True}, "c": {"log": report}}) as api:
        kc = api.kubeconfig(tmp_path)
        main(["cluster", "--kubeconfig", kc, "--poll", "0.05", "--timeout", "2", "-o", "json"])
        main(["cluster", "--kubeconfig", kc, "--cleanup"])
        calls = list(api.requests)
    capsys.readouterr()
    check("kpdiag cluster (Group kpdiag-operators)", operator, calls)


def test_node_service_account_grants_exactly_what_kpdiag_node_reads(tmp_path):
    """The node pods' ServiceAccount (kpdiag/kpdiag-node) is bound to grants that allow every call `kpdiag node` makes
    with the API (kpdiag.commands.nodeapi.api_files, the code the node command runs) — and nothing else."""
    from kpdiag.commands.nodeapi import api_files

    docs = _docs("rbac-cluster.yaml")
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == ("kpdiag", "kpdiag-node")
    node_sa = grants(docs, "ServiceAccount", "kpdiag-node", "kpdiag")
    assert {g.verb for g in node_sa} <= {"get", "list"}

    objs = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}), k8s.node("node-a")]
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        files, errors, _ = api_files("node-a", kubeconfig=kc)
        assert errors == [] and {"cluster/services.json", "cluster/endpointslices.json", "cluster/nodes.json"} <= set(
            files
        )
        # kpdiag node --service: that Service, its EndpointSlices, the Node; one that is not there: the lookup
        files, errors, _ = api_files("node-a", kubeconfig=kc, service="shop/web")
        assert errors == [] and {"cluster/services.json", "cluster/endpointslices.json", "cluster/nodes.json"} <= set(
            files
        )
        files, errors, _ = api_files("node-a", kubeconfig=kc, service="shop/nope")
        assert errors == [] and json.loads(files["cluster/service-lookup.json"])["found"] is False
        calls = list(api.requests)
    check("kpdiag node in the node pod (ServiceAccount kpdiag/kpdiag-node)", node_sa, calls)


# ------------------------------------------------------------------ kpdiag svc, kpdiag policy
def _svc_objects(dns_label: bool = True) -> list[dict]:
    dns_svc = k8s.service(
        "kube-system", "kube-dns", "10.96.0.10", [k8s.port(53, 53, "dns", "UDP")], {"k8s-app": "kube-dns"}
    )
    dns_svc["metadata"]["labels"] = {"k8s-app": "kube-dns"} if dns_label else {}
    coredns = k8s.pod("kube-system", "coredns-abc", "10.244.0.3", {"k8s-app": "kube-dns"})
    coredns["spec"]["containers"][0]["name"] = "coredns"
    coredns["status"]["containerStatuses"] = [{"name": "coredns", "restartCount": 1, "ready": True}]
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.31.4"}]}
            }
        },
    }
    calico = json.loads(json.dumps(ds))
    calico["metadata"]["name"] = "calico-node"
    calico["spec"]["template"]["spec"]["containers"] = [
        {"name": "calico-node", "image": "docker.io/calico/node:v3.28.0"}
    ]
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}}
        for n in ("shop", "kube-system", "default")
    ]
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "web-from-frontend", "namespace": "shop"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "frontend"}}}]}],
            "policyTypes": ["Ingress"],
        },
    }
    return [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice("shop", "web", [("10.244.0.7", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
        k8s.pod("shop", "web-1", "10.244.0.7", {"app": "web"}),
        k8s.pod("shop", "client", "10.244.0.9", {"app": "frontend"}),
        k8s.node("node-a"),
        k8s.kube_proxy_configmap(),
        ds,
        calico,
        *namespaces,
        policy,
        dns_svc,
        k8s.endpointslice(
            "kube-system", "kube-dns", [("10.244.0.3", True, "node-a", "coredns-abc")], [("dns", 53, "UDP")]
        ),
        coredns,
    ]


_COREDNS_LOGS = {
    "kube-system/coredns-abc": "[INFO] plugin/reload: Running configuration\n",
    "kube-system/coredns-abc#previous": "x\n",
}
# what the API server's authorizer refuses to a subject bound by deploy/rbac-svc.yaml alone: the opt-in lists and logs
_NOT_IN_DEFAULT = {
    "GET /api/v1/pods$": 403,  # who is asking (rbac-svc-whoami.yaml)
    "GET /apis/apps/v1/namespaces/kube-system/daemonsets$": 403,  # rbac-svc-kube-system.yaml
    "GET /api/v1/namespaces/kube-system/pods$": 403,
    "GET /api/v1/namespaces/kube-system/pods/coredns-abc/log": 403,
    # (tests/apiserver.py answers no namespace list when it injects errors: kpdiag then asks these namespaces too,
    # where deploy/rbac-svc.yaml binds nothing unless edited)
    "GET /api/v1/namespaces/kube-flannel/pods$": 403,
    "GET /api/v1/namespaces/calico-system/pods$": 403,
}


def _svc_and_policy_calls(tmp_path, objects=None, fail=None) -> list[tuple[str, str]]:
    """kpdiag svc on a Service with pods, a client, a NetworkPolicy, a CNI DaemonSet, the cluster DNS and a restarted
    CoreDNS pod; on a Service that does not exist; with an unlabelled DNS Service; and kpdiag policy from a pod's IP:
    every request the loopback API server received."""
    calls = []
    for dns_label in (True, False):
        with ApiServer(objects or _svc_objects(dns_label), pod_logs=_COREDNS_LOGS, fail=fail) as api:
            kc = api.kubeconfig(tmp_path)
            base = ["--kubeconfig", kc, "-o", "json"]
            main(["svc", "web", "-n", "shop", "--no-probe", "--node", "node-a", "--from", "shop/client", *base])
            if dns_label:
                main(["svc", "nope", "-n", "shop", "--no-probe", *base])
                main(["policy", "--from", "10.244.0.9", "--to", "shop/web", "--port", "8080", *base])
            calls += list(api.requests)
    return calls


def test_svc_rbac_grants_exactly_the_calls_kpdiag_svc_and_policy_make(tmp_path, capsys):
    """With every opt-in (deploy/rbac-svc.yaml, rbac-svc-whoami.yaml, rbac-svc-kube-system.yaml) each request is
    allowed; with deploy/rbac-svc.yaml alone, the server refuses (403) exactly the requests its grants do not allow,
    and kpdiag reads the CNI DaemonSets by name instead; together the runs use every grant."""
    docs = _docs("rbac-svc.yaml", "rbac-svc-whoami.yaml", "rbac-svc-kube-system.yaml")
    svc_sa = grants(docs, "ServiceAccount", "kpdiag", "default")
    assert {g.verb for g in svc_sa} <= {"get", "list"}
    assert not any(g.resource in ("secrets", "*") for g in svc_sa)
    everything = _svc_and_policy_calls(tmp_path)
    default_only = _svc_and_policy_calls(tmp_path, fail=_NOT_IN_DEFAULT)
    capsys.readouterr()
    base = grants(_docs("rbac-svc.yaml"), "ServiceAccount", "kpdiag", "default")
    refused = {(m, p.split("?")[0]) for m, p in default_only if not any(g.allows(request(m, p)) for g in base)}
    # every refusal injected, except the CoreDNS log: with kube-system's pods refused, no CoreDNS pod is known to ask
    assert refused == {(k.split()[0], k.split()[1].rstrip("$")) for k in _NOT_IN_DEFAULT if "/log" not in k}, refused
    # refused by the list, the CNI DaemonSets kpdiag knows are read by name (404: not this cluster's CNI)
    gets = {p for m, p in default_only if p.startswith("/apis/apps/v1/namespaces/kube-system/daemonsets/")}
    assert "/apis/apps/v1/namespaces/kube-system/daemonsets/calico-node" in gets
    assert {p for m, p in everything if p.startswith("/apis/apps/v1/namespaces/kube-system/daemonsets/")} == {
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy"  # the list answered: no CNI read by name
    }
    check(
        "kpdiag svc / kpdiag policy (ServiceAccount default/kpdiag)",
        svc_sa,
        everything + [c for c in default_only if c not in refused],
    )
    # the who-is-asking lookup is the one cluster-wide pod list, and only in the opt-in file
    assert any(request(m, p) == Request("list", "", "pods") for m, p in everything)


def test_svc_rbac_reads_by_name_only_the_daemonsets_kpdiag_recognises():
    """The default grant on DaemonSets is `get` of kube-proxy's and of the CNI DaemonSets kpdiag recognises
    (kpdiag.collect.cni.KNOWN_DAEMONSETS), by name; the list of them all is only in the opt-in file."""
    from kpdiag.collect.cni import KNOWN_DAEMONSETS

    base = grants(_docs("rbac-svc.yaml"), "ServiceAccount", "kpdiag", "default")
    ds = [g for g in base if g.resource == "daemonsets"]
    assert [(g.verb, g.scope) for g in ds] == [("get", "kube-system")]
    assert set(ds[0].names) == {"kube-proxy", *KNOWN_DAEMONSETS}
    assert not [g for g in base if g.resource == "pods/log" or (g.resource == "pods" and g.scope == "kube-system")]
    opt_in = grants(_docs("rbac-svc-kube-system.yaml"), "ServiceAccount", "kpdiag", "default")
    assert sorted((g.verb, g.resource, g.scope) for g in opt_in) == [
        ("get", "pods/log", "kube-system"),
        ("list", "daemonsets", "kube-system"),
        ("list", "pods", "kube-system"),
    ]
    text = open(os.path.join(ROOT, "deploy", "rbac-svc-kube-system.yaml")).read()
    assert "EVERY DaemonSet" in text and "etcd" in text and "environment" in text


def test_svc_rbac_lists_pods_only_per_namespace_unless_opted_in():
    """A pod list shows every container's environment: deploy/rbac-svc.yaml grants it through RoleBindings in the
    namespaces named, never through a ClusterRoleBinding; the cluster-wide list (who is asking) is only in the opt-in
    deploy/rbac-svc-whoami.yaml, which says what it costs."""
    base = grants(_docs("rbac-svc.yaml"), "ServiceAccount", "kpdiag", "default")
    pods = [g for g in base if g.resource == "pods"]
    assert pods and all(g.scope for g in pods)
    whoami = grants(_docs("rbac-svc-whoami.yaml"), "ServiceAccount", "kpdiag", "default")
    assert [(g.verb, g.resource, g.scope) for g in whoami] == [("list", "pods", None)]
    text = open(os.path.join(ROOT, "deploy", "rbac-svc-whoami.yaml")).read()
    assert "status.podIP" in text and "EVERY pod" in text and "environment" in text
