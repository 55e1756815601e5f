"""kpdiag svc reads which CNI runs with the grants deploy/rbac-svc.yaml gives (kpdiag/collect/cni.py): where listing
kube-system's DaemonSets is refused (403: the list is opt-in), the CNI DaemonSets kpdiag knows are read by name; a CNI
under another name is then not recognised, and the report says so in one line naming the opt-in. Against the loopback
API server (tests/apiserver.py) through the real kubernetes client."""

from __future__ import annotations

import json

from kpdiag.cli import main
from tests.apiserver import ApiServer
from tests.cli.test_rbac_manifest import _COREDNS_LOGS, _svc_objects

LIST = "GET /apis/apps/v1/namespaces/kube-system/daemonsets$"
BY_NAME = "/apis/apps/v1/namespaces/kube-system/daemonsets/"


def _svc(tmp_path, capsys, objects, fail):
    with ApiServer(objects, pod_logs=_COREDNS_LOGS, fail=fail) as api:
        kc = api.kubeconfig(tmp_path)
        main(["svc", "web", "-n", "shop", "--no-probe", "--node", "node-a", "--kubeconfig", kc, "-o", "json"])
        calls = list(api.requests)
    doc = json.loads(capsys.readouterr().out)
    cni = [p["error"] for p in doc["problems"] if p["source"] == "cluster/cni.json"]
    return doc, cni, calls


def _renamed(objects):
    for o in objects:
        if o.get("kind") == "DaemonSet" and o["metadata"]["name"] == "calico-node":
            o["metadata"]["name"] = "tigera-node"  # a CNI DaemonSet under a name kpdiag does not know
    return objects


def test_list_refused_the_known_cni_is_read_by_name_without_a_problem(tmp_path, capsys):
    doc, cni, calls = _svc(tmp_path, capsys, _svc_objects(), {LIST: 403})
    gets = {p[len(BY_NAME) :] for m, p in calls if p.startswith(BY_NAME)}
    assert {"calico-node", "aws-node", "cilium", "kube-proxy"} <= gets
    assert cni == []  # neither the refused list nor the names that are not there (404) are a problem


def test_list_refused_a_renamed_cni_is_named_as_not_recognisable(tmp_path, capsys):
    doc, cni, calls = _svc(tmp_path, capsys, _renamed(_svc_objects()), {LIST: 403})
    assert len(cni) == 1, cni
    assert "listing them is not granted" in cni[0] and "another name is not recognised" in cni[0]
    assert "kpdiag rbac svc-kube-system | kubectl apply -f -" in cni[0]


def test_list_granted_no_daemonset_is_read_by_name(tmp_path, capsys):
    doc, cni, calls = _svc(tmp_path, capsys, _renamed(_svc_objects()), None)
    assert {p for m, p in calls if p.startswith(BY_NAME)} == {BY_NAME + "kube-proxy"}
    assert cni == []


def test_by_name_refused_too_is_one_reason_not_eleven(tmp_path, capsys):
    doc, cni, calls = _svc(tmp_path, capsys, _svc_objects(), {LIST: 403, "GET " + BY_NAME + "calico-node": 403})
    gets = [p for m, p in calls if p.startswith(BY_NAME) and not p.endswith("/kube-proxy")]
    assert gets == [BY_NAME + "calico-node"]  # the first refusal stops the reads by name
    assert len(cni) == 1 and "403" in cni[0] and "calico-node" in cni[0]
