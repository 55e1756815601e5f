"""`kpdiag policy` end to end: Services (per endpoint, after DNAT), JSON Schema, exit codes, bad input, the CNI,
and the live path through the real kubernetes client against the test API server."""

from __future__ import annotations

import json
import os

import pytest

from tests import k8sobjects as k8s
from tests.conftest import ROOT
from tests.netpol.world import as_list, ask, namespace, pod, policy, pod_ip, run_cli, world_objects, write_bundle

SCHEMA = os.path.join(ROOT, "kpdiag", "schemas", "policy.schema.json")


def validate(doc):
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA) as fh:
        jsonschema.validate(doc, json.load(fh))


def svc_extra(selector=None, target="serve-80-tcp", extra_pod_ready=True):
    """A Service x/web (port 8000 → the pods' serve-80-tcp) whose endpoints are x/a and x/b."""
    svc = k8s.service("x", "web", "10.96.0.50", [k8s.port(8000, target, "web")], selector or {"role": "web"})
    sl = k8s.endpointslice(
        "x",
        "web",
        [(pod_ip("x", "a"), True, "node-a", "a"), (pod_ip("x", "b"), extra_pod_ready, "node-a", "b")],
        [("web", 80, "TCP")],
    )
    return {"cluster/services.json": as_list([svc]), "cluster/endpointslices.json": as_list([sl])}


ALLOW_80_FROM_Y = policy(
    "x",
    "web-from-y",
    {
        "podSelector": {"matchLabels": {"role": "web"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], "ports": [{"port": 80}]}],
    },
)


def web_pods():
    nss, pods = world_objects()
    for p in pods:
        if p["metadata"]["namespace"] == "x" and p["metadata"]["name"] in ("a", "b"):
            p["metadata"]["labels"]["role"] = "web"
    return nss, pods


def test_service_is_judged_per_endpoint_at_its_target_port(tmp_path):
    nss, pods = web_pods()
    bundle = write_bundle(tmp_path, [ALLOW_80_FROM_Y], nss, pods, svc_extra())
    doc = ask(bundle, "y/c", "x/web", "8000")  # Service port 8000: the policy admits 80, the targetPort
    validate(doc)
    assert doc["allowed"] is True and doc["service"] == "x/web" and doc["port"] == "8000/TCP"
    assert [(e["endpoint"], e["pod"], e["allowed"], e["port"]) for e in doc["endpoints"]] == [
        ("10.244.1.10:80", "x/a", True, 80),
        ("10.244.1.11:80", "x/b", True, 80),
    ]
    assert doc["ingress"]["admitted_by"]["policy"] == "x/web-from-y"
    doc = ask(bundle, "z/c", "x/web", "web")  # by the Service port's name
    validate(doc)
    assert doc["allowed"] is False and all(not e["allowed"] for e in doc["endpoints"])
    assert doc["ingress"]["policies"] == ["x/web-from-y"] and "z/c" in doc["ingress"]["missing"]
    assert "namespaceSelector" in doc["ingress"]["patch"] and "port: 80" in doc["ingress"]["patch"]


def test_service_allowed_only_when_every_endpoint_admits(tmp_path):
    nss, pods = web_pods()
    only_a = policy(
        "x", "only-a", {"podSelector": {"matchLabels": {"pod": "b"}}, "ingress": []}
    )  # b isolated, admits nothing
    bundle = write_bundle(tmp_path, [only_a], nss, pods, svc_extra())
    code, out, _ = run_cli(
        "policy", "--bundle", bundle, "--from", "y/a", "--to", "x/svc/web", "--port", "8000/tcp", "-o", "json"
    )
    doc = json.loads(out)
    validate(doc)
    assert code == 1 and doc["allowed"] is False
    assert {e["pod"]: e["allowed"] for e in doc["endpoints"]} == {"x/a": True, "x/b": False}
    code, out, _ = run_cli("policy", "--bundle", bundle, "--from", "y/a", "--to", "x/web", "--port", "8000")
    assert (
        code == 1 and "endpoint 10.244.1.10:80 (x/a): allowed" in out and "endpoint 10.244.1.11:80 (x/b): DENIED" in out
    )


def test_service_without_slices_uses_its_selector_and_named_target_port(tmp_path):
    nss, pods = web_pods()
    extra = svc_extra()
    extra["cluster/endpointslices.json"] = as_list([])
    bundle = write_bundle(tmp_path, [ALLOW_80_FROM_Y], nss, pods, extra)
    doc = ask(bundle, "y/b", "x/web", "8000")
    assert doc["allowed"] and sorted(e["pod"] for e in doc["endpoints"]) == ["x/a", "x/b"]
    assert any("no EndpointSlice" in n for n in doc["notes"])


def test_ip_client_and_ip_destination(tmp_path):
    bundle = write_bundle(
        tmp_path,
        [policy("x", "p", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]}]})],
    )
    doc = ask(bundle, "192.168.7.7", "x/a", "80")
    validate(doc)
    assert doc["allowed"] and doc["egress"]["applies"] is False
    assert not ask(bundle, "172.16.0.1", "x/a", "80")["allowed"]
    doc = ask(bundle, pod_ip("y", "b"), "x/a", "80")  # a pod's IP is that pod
    assert doc["from"].startswith("y/b") and not doc["allowed"]
    doc = ask(bundle, "x/a", "8.8.8.8", "53/udp")  # to an address outside: egress only
    validate(doc)
    assert doc["allowed"] and doc["ingress"]["applies"] is False


def test_bad_policies_one_line_each_and_the_rest_evaluated(tmp_path):
    bad_op = policy(
        "x",
        "bad-operator",
        {"podSelector": {"matchExpressions": [{"key": "pod", "operator": "Equals", "values": ["a"]}]}},
    )
    bad_cidr = policy(
        "x", "bad-cidr", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}
    )
    good = policy("x", "deny-a", {"podSelector": {"matchLabels": {"pod": "a"}}})
    bundle = write_bundle(tmp_path, [bad_op, good, bad_cidr])
    code, out, err = run_cli("policy", "--bundle", bundle, "--from", "x/b", "--to", "x/a", "--port", "80")
    assert code == 1 and "Traceback" not in out + err
    unwrapped = out.replace("\n    ", " ")  # a "could not read" line wrapped to the width goes on indented
    lines = [line for line in unwrapped.splitlines() if "could not read" in line or "bad-" in line]
    assert "could not read (2):" in out
    assert (
        sum("NetworkPolicy x/bad-operator (item 0)" in line and "invalid operator 'Equals'" in line for line in lines)
        == 1
    )
    assert (
        sum("NetworkPolicy x/bad-cidr (item 2)" in line and "invalid CIDR '10.0.0.0/33'" in line for line in lines) == 1
    )
    assert "x/deny-a" in out  # the readable one is evaluated and blamed
    doc = ask(bundle, "x/b", "x/c", "80")
    validate(doc)
    assert doc["allowed"] and len(doc["problems"]) == 2


def test_not_enforced_cni_is_said(tmp_path):
    cni = {
        "apiVersion": "kpdiag/v1",
        "kind": "CNIComponents",
        "items": [{"kind": "DaemonSet", "namespace": "kube-flannel", "name": "kube-flannel-ds"}],
    }
    bundle = write_bundle(
        tmp_path, [policy("x", "deny", {"podSelector": {}})], extra={"cluster/cni.json": json.dumps(cni)}
    )
    doc = ask(bundle, "y/a", "x/a", "80")
    validate(doc)
    assert doc["allowed"] is False and doc["enforcement"] == {
        "cni": "flannel",
        "enforced": False,
        "evidence": ["DaemonSet kube-flannel/kube-flannel-ds: flannel"],
    }
    assert any("does not enforce them" in n for n in doc["notes"])


def test_cni_from_kubectl_pods_list(tmp_path):
    nss, pods = world_objects()
    cal = pod("kube-system", "calico-node-4xk2p", "192.168.50.1", {"k8s-app": "calico-node"}, host_network=True)
    cal["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "calico-node"}]
    bundle = write_bundle(tmp_path, [], nss, pods + [cal])
    doc = ask(bundle, "y/a", "x/a", "80")
    assert doc["enforcement"]["cni"] == "calico" and doc["enforcement"]["enforced"] is True and not doc["notes"]


@pytest.mark.parametrize(
    "argv, code, words",
    [
        (["--from", "x/b", "--to", "x/a", "--port", "80/icmp"], 2, "tcp, udp or sctp"),
        (["--from", "x/b", "--to", "x/a", "--port", "99999"], 2, "out of range"),
        (["--from", "b", "--to", "x/a", "--port", "80"], 2, "NS/POD or an IP"),
        (["--from", "x/b", "--to", "x/a/b/c", "--port", "80"], 2, "--to"),
        (["--from", "x/nope", "--to", "x/a", "--port", "80"], 3, "pod x/nope is not in the pods read"),
        (["--from", "x/b", "--to", "x/nope", "--port", "80"], 3, "no pod or Service x/nope"),
        (["--from", "x/b", "--to", "x/a", "--port", "nosuchname"], 3, "no TCP containerPort named 'nosuchname'"),
    ],
)
def test_usage_and_cannot_evaluate(tmp_path, argv, code, words):
    bundle = write_bundle(tmp_path, [])
    got, out, err = run_cli("policy", "--bundle", bundle, *argv)
    assert got == code and words in err and not out, (got, out, err)
    assert err.count("\n") == 1  # one line


def test_missing_policies_file_and_partial_collection(tmp_path):
    bundle = write_bundle(tmp_path, [])
    os.remove(os.path.join(bundle, "cluster", "networkpolicies.json"))
    code, _, err = run_cli("policy", "--bundle", bundle, "--from", "x/b", "--to", "x/a", "--port", "80")
    assert code == 3 and "networkpolicies.json: missing or unreadable" in err
    partial = json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"namespaces": ["x"]}, "items": []})
    bundle = write_bundle(tmp_path / "p", [], extra={"cluster/networkpolicies.json": partial})
    code, _, err = run_cli("policy", "--bundle", bundle, "--from", "y/b", "--to", "x/a", "--port", "80")
    assert code == 3 and "NetworkPolicies of namespace y were not collected" in err
    assert run_cli("policy", "--bundle", bundle, "--from", "x/b", "--to", "x/a", "--port", "80")[0] == 0


def test_both_sources_is_a_usage_error(tmp_path):
    code, _, err = run_cli(
        "policy", "--bundle", str(tmp_path), "--kubeconfig", "kc", "--from", "x/a", "--to", "x/b", "--port", "80"
    )
    assert code == 2 and "not both" in err


def test_untrusted_names_are_escaped_in_text(tmp_path):
    nss, pods = world_objects()
    pods[0]["metadata"]["labels"]["evil"] = "\x1b]0;owned\x07"
    bundle = write_bundle(tmp_path, [policy("x", "deny", {"podSelector": {}})], nss, pods)
    code, out, _ = run_cli("policy", "--bundle", bundle, "--from", "y/a", "--to", "x/a", "--port", "80")
    assert code == 1 and "\x1b" not in out and "\x07" not in out and ("\\x1b" in out or "\\u001b" in out)


def test_unknown_namespace_labels_are_noted(tmp_path):
    bundle = write_bundle(tmp_path, [], namespaces=[namespace("x", {"ns": "x"})])
    doc = ask(bundle, "y/a", "x/a", "80")
    assert any("namespace y is not in cluster/namespaces.json" in n for n in doc["notes"])


# ---------------------------------------------------------------- live
def live_objects():
    nss, pods = web_pods()
    svc = k8s.service("x", "web", "10.96.0.50", [k8s.port(8000, 80, "web")], {"role": "web"})
    sl = k8s.endpointslice(
        "x",
        "web",
        [(pod_ip("x", "a"), True, "node-a", "a"), (pod_ip("x", "b"), True, "node-a", "b")],
        [("web", 80, "TCP")],
    )
    calico = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "calico-node", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "calico-node", "image": "calico/node:v3.28"}]}}},
    }
    pols = [
        dict(ALLOW_80_FROM_Y),
        policy("y", "y-egress", {"podSelector": {"matchLabels": {"pod": "c"}}, "policyTypes": ["Egress"]}),
    ]
    return nss + pods + [svc, sl, calico] + pols


def test_live_through_the_api(tmp_path):
    from tests.apiserver import ApiServer

    with ApiServer(live_objects()) as api:
        kc = api.kubeconfig(tmp_path)
        code, out, err = run_cli(
            "policy", "--kubeconfig", kc, "--from", "y/a", "--to", "x/web", "--port", "8000", "-o", "json"
        )
        assert code == 0, err
        doc = json.loads(out)
        validate(doc)
        assert doc["allowed"] and doc["enforcement"]["cni"] == "calico" and len(doc["endpoints"]) == 2
        code, out, err = run_cli(
            "policy", "--kubeconfig", kc, "--from", "y/c", "--to", "x/a", "--port", "80", "-o", "json"
        )
        doc = json.loads(out)
        assert code == 1 and doc["egress"]["policies"] == ["y/y-egress"] and doc["ingress"]["allowed"]
        code, out, err = run_cli("policy", "--kubeconfig", kc, "--from", "z/a", "--to", "x/a", "--port", "80")
        assert code == 1 and "x/web-from-y" in out
        asked = {p for _, p in api.requests}
        assert "/apis/networking.k8s.io/v1/namespaces/x/networkpolicies" in asked and "/api/v1/namespaces" in asked
        assert not any(
            p.endswith("/networkpolicies")
            and "/namespaces/z/" not in p
            and "/namespaces/x/" not in p
            and "/namespaces/kube-system/" not in p
            for p in asked
            if "/namespaces/y/" not in p
        )


def test_live_unreachable_api_is_exit_3(tmp_path):
    from tests.apiserver import write_kubeconfig

    kc = str(tmp_path / "kc")
    write_kubeconfig(kc, "http://127.0.0.1:9")  # nothing listens on the discard port
    code, out, err = run_cli("policy", "--kubeconfig", kc, "--from", "y/a", "--to", "x/a", "--port", "80")
    assert code == 3 and not out and "Traceback" not in err


def test_policy_objects_collects_what_the_checks_read(tmp_path):
    from kpdiag.collect.cluster import ClusterCollector
    from tests.apiserver import ApiServer

    with ApiServer(live_objects()) as api:
        cc = ClusterCollector(api.kubeconfig(tmp_path))
        assert cc.policy_objects(["x", "y"], client_pod=("y", "a"))
        calls = list(api.requests)
    files = {k: json.loads(v) for k, v in cc.out.files.items()}
    assert sorted(n["metadata"]["name"] for n in files["cluster/namespaces.json"]["items"]) == ["x", "y", "z"]
    nps = files["cluster/networkpolicies.json"]
    assert nps["metadata"]["namespaces"] == ["kube-system", "x", "y"]
    assert sorted(p["metadata"]["name"] for p in nps["items"]) == ["web-from-y", "y-egress"]
    assert [c["name"] for c in files["cluster/cni.json"]["items"]] == ["calico-node"]
    assert [p["metadata"]["name"] for p in files["cluster/client-pod.json"]["items"]] == ["a"]
    assert not cc.out.errors, cc.out.errors
    # every call is one deploy/rbac-svc.yaml grants, or its opt-in deploy/rbac-svc-kube-system.yaml (list daemonsets)
    import yaml

    rules = []
    for name in ("rbac-svc.yaml", "rbac-svc-kube-system.yaml"):
        with open(os.path.join(ROOT, "deploy", name)) as fh:
            rules += [
                r for d in yaml.safe_load_all(fh) if d and d["kind"] in ("ClusterRole", "Role") for r in d["rules"]
            ]
    granted = {(res, v) for r in rules for res in r.get("resources", []) for v in r["verbs"]}
    for method, path in calls:
        parts = path.strip("/").split("/")
        assert method == "GET" and ((parts[-1], "list") in granted), (method, path)


def test_ipblock_matching_a_pod_is_noted(tmp_path):
    bundle = write_bundle(
        tmp_path,
        [policy("x", "by-cidr", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.244.0.0/16"}}]}]})],
    )
    doc = ask(bundle, "y/b", "x/a", "80")
    assert doc["allowed"] and doc["ingress"]["admitted_by"]["peer"] == "ipBlock 10.244.0.0/16"
    assert any("x/by-cidr admits y/b by its pod IP through an ipBlock" in n for n in doc["notes"])
    assert not any(
        "through an ipBlock" in n for n in ask(bundle, "10.244.9.9", "x/a", "80")["notes"]
    )  # a plain address: nothing to say


def test_cluster_ip_destination_is_its_service(tmp_path):
    nss, pods = web_pods()
    bundle = write_bundle(tmp_path, [ALLOW_80_FROM_Y], nss, pods, svc_extra())
    doc = ask(bundle, "z/a", "10.96.0.50", "8000")
    validate(doc)
    assert doc["service"] == "x/web" and not doc["allowed"] and len(doc["endpoints"]) == 2
    assert any("ClusterIP of Service x/web" in n for n in doc["notes"])


def test_a_finished_pods_address_is_not_the_running_ones(tmp_path):
    nss, pods = world_objects()
    done = pod("z", "job-1", pod_ip("y", "b"), {"pod": "job"})
    done["status"]["phase"] = "Succeeded"
    bundle = write_bundle(tmp_path, [], nss, [done] + pods)  # listed first, same IP as y/b
    assert ask(bundle, pod_ip("y", "b"), "x/a", "80")["from"].startswith("y/b")


def _svc_objects(with_policy: bool):
    web_ports = [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    objs = [
        namespace("shop", {"team": "shop"}),
        namespace("debug"),
        namespace("kube-system"),
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
        k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}, "node-a", web_ports),
        k8s.pod("debug", "client", "10.244.1.50", {"app": "debug"}, "node-a"),
        k8s.kube_proxy_configmap(),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "calico-node", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "calico-node"}]}}},
        },
    ]
    if with_policy:
        objs.append(
            policy(
                "shop",
                "web-allow-frontend",
                {
                    "podSelector": {"matchLabels": {"app": "web"}},
                    "ingress": [
                        {"from": [{"podSelector": {"matchLabels": {"app": "frontend"}}}], "ports": [{"port": 8080}]}
                    ],
                },
            )
        )
    return objs


@pytest.mark.parametrize("with_policy", [True, False])
def test_svc_through_the_api_names_the_policy(tmp_path, with_policy):
    """kpdiag svc (no probes, no root) collects the policies and the client through the API; KP120 names the policy."""
    from tests.apiserver import ApiServer

    with ApiServer(_svc_objects(with_policy)) as api:
        code, out, err = run_cli(
            "svc",
            "web",
            "-n",
            "shop",
            "--kubeconfig",
            api.kubeconfig(tmp_path),
            "--no-probe",
            "--from",
            "debug/client",
            "--node",
            "node-a",
            "--save",
            str(tmp_path / "b"),
            "-o",
            "json",
        )
    doc = json.loads(out)
    kp120 = [f for f in doc["findings"] if f["id"] == "KP120"]
    if with_policy:
        assert code == 1 and len(kp120) == 1 and kp120[0]["severity"] == "error"
        assert "NetworkPolicy shop/web-allow-frontend admits only pods app=frontend" in kp120[0]["summary"]
        assert "debug/client" in kp120[0]["summary"]
        code, out, _ = run_cli(
            "policy",
            "--bundle",
            str(tmp_path / "b"),
            "--from",
            "debug/client",
            "--to",
            "shop/web",
            "--port",
            "80",
            "-o",
            "json",
        )
        assert code == 1 and json.loads(out)["ingress"]["policies"] == ["shop/web-allow-frontend"]
    else:
        assert not kp120 and not [f for f in doc["findings"] if f["id"] in ("KP121", "KP122", "KP123")]
        assert {r["id"]: r["status"] for r in doc["checks"]}["KP120"] == "ran"
