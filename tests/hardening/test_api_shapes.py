"""API answers, bundle API files and the manifest of the wrong JSON type: one line naming the field, the rest runs.

A list where an object belongs, a string for ``items``, ``"errors": 5`` in kpdiag.json — AttributeError and TypeError
before. Served by a real HTTP server on loopback to the real client (tests/hardening/hostile_api.py), or written into
a copy of a fixture bundle. A fuzz (hypothesis) replaces one field of the API's answers by a value of another type and
runs `kpdiag svc`, `kpdiag cluster` and `kpdiag analyze` (the node checks on the API files) on it: never an internal
error, always a report.
"""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdiag.bundle.store import Bundle
from kpdiag.cli import main
from kpdiag.collect.cluster import ClusterCollector
from kpdiag.commands.pipeline import analyze_bundle
from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.conftest import FIXTURES
from tests.hardening import hostile_api as H

SVC = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})
POD = k8s.pod("shop", "web-1", "10.244.1.11", {"app": "web"}, ports=[{"name": "http", "containerPort": 8080}])
SLICE = k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")])
NODE = k8s.node("node-a", ip="192.168.0.1", ready=True)
OBJECTS = [SVC, POD, SLICE, NODE]


def _list(*items):
    return {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": list(items)}


def _svc_run(capsys, kc, *extra):
    capsys.readouterr()
    rc = main(["svc", "web", "-n", "shop", "--kubeconfig", kc, "--no-probe", "-o", "json", *extra])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    return rc, json.loads(out), err


def test_a_list_where_the_service_object_belongs(capsys, tmp_path):
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/services/web$": H.answer([1, 2])}) as bad:
        rc, report, _ = _svc_run(capsys, bad.kubeconfig(tmp_path))
    assert rc == 3
    assert (
        "get service shop/web: the API's answer is malformed: the Service is a list, not an object"
        in (report["extra"]["headline"])
    )


@pytest.mark.parametrize(
    "doc,named",
    [
        ({"kind": "PodList", "items": "web-1"}, "list pods in shop: the API's answer is malformed: items is a string"),
        ([POD], "list pods in shop: the API's answer is malformed: the answer is a list, not an object with items"),
        (
            _list(dict(POD, spec={"containers": {"name": "c"}})),
            "list pods in shop: items[0] left out, malformed: Pod shop/web-1: spec.containers is an object, not a list",
        ),
        (
            _list(dict(POD, metadata=["web-1"])),
            "list pods in shop: items[0] left out, malformed: metadata is a list, not an object",
        ),
    ],
    ids=["items-a-string", "a-list", "containers-an-object", "metadata-a-list"],
)
def test_a_malformed_pod_list_is_named_and_the_rest_runs(capsys, tmp_path, doc, named):
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/namespaces/shop/pods": H.answer(doc)}) as bad:
        rc, report, _ = _svc_run(capsys, bad.kubeconfig(tmp_path))
    assert any(named in p["error"] for p in report["problems"]), report["problems"]
    ran = {c["id"] for c in report["checks"] if c["status"] == "ran"}
    assert "KP101" in ran  # the Service and its EndpointSlices were still judged


def test_a_malformed_endpoint_is_left_out_by_name(capsys, tmp_path):
    broken = copy.deepcopy(SLICE)
    broken["endpoints"][0]["addresses"] = "10.244.1.11"
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"/endpointslices": H.answer(_list(broken))}) as bad:
        cc = ClusterCollector(bad.kubeconfig(tmp_path), budget=10)
        assert cc.service("shop", "web") is not None
    assert any(
        "EndpointSlice shop/web-abc12: endpoints[0].addresses is a string, not a list" in e["error"]
        for e in cc.out.errors
    ), cc.out.errors


def test_node_view_keeps_the_good_services(tmp_path):
    bad_svc = copy.deepcopy(SVC)
    bad_svc["metadata"]["name"] = "bad"
    bad_svc["spec"]["ports"] = {"port": 80}
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {r"^/api/v1/services": H.answer(_list(SVC, bad_svc))}) as x:
        cc = ClusterCollector(x.kubeconfig(tmp_path), budget=10)
        assert cc.node_view("node-a") is True
    names = [s["metadata"]["name"] for s in json.loads(cc.out.files["cluster/services.json"])["items"]]
    assert names == ["web"]
    assert any("Service shop/bad: spec.ports is an object, not a list" in e["error"] for e in cc.out.errors)


def _copy(tmp_path, fixture: str) -> str:
    dst = str(tmp_path / fixture)
    shutil.copytree(os.path.join(FIXTURES, fixture), dst)
    return dst


def _ids(report) -> list[str]:
    return sorted(f.id for f in report.findings)


def test_errors_5_in_the_manifest(tmp_path):
    want = _ids(analyze_bundle(os.path.join(FIXTURES, "ip-forward-off")))
    b = _copy(tmp_path, "ip-forward-off")
    doc = json.load(open(f"{b}/kpdiag.json"))
    doc.update(errors=5, node=["x"], client="me", truncated="yes", service=7)
    json.dump(doc, open(f"{b}/kpdiag.json", "w"))
    report = analyze_bundle(b)
    assert _ids(report) == want
    said = {p["error"] for p in report.problems if p["source"] == "kpdiag.json"}
    assert {
        "errors is a number, not a list: ignored",
        "node is a list, not a string: ignored",
        "client is not {namespace, pod} strings: ignored",
        "truncated is a string, not an object: ignored",
        "service is a number, not NAMESPACE/NAME: ignored",
    } <= said


def test_bad_entries_of_errors_are_dropped_one_by_one(tmp_path):
    b = _copy(tmp_path, "ip-forward-off")
    doc = json.load(open(f"{b}/kpdiag.json"))
    doc["errors"] = [{"source": "node/x.txt", "error": "gone"}, 5, {"source": ["a"]}]
    json.dump(doc, open(f"{b}/kpdiag.json", "w"))
    bundle = Bundle.open(b)
    errors = {(p.source, p.error) for p in bundle.problems}
    assert ("node/x.txt", "not collected: gone") in errors
    assert ("kpdiag.json", "errors[1] is not a source and an error (strings): ignored") in errors
    assert ("kpdiag.json", "errors[2] is not a source and an error (strings): ignored") in errors


def test_a_node_bundle_that_claims_a_service_is_read_as_a_node_bundle(tmp_path, capsys):
    b = _copy(tmp_path, "ip-forward-off")
    doc = json.load(open(f"{b}/kpdiag.json"))
    doc["service"] = "shop/web"
    json.dump(doc, open(f"{b}/kpdiag.json", "w"))
    rc = main(["analyze", b, "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["kind"] != "service"
    assert "KP501" in {f["id"] for f in report["findings"]}
    assert any(
        p["source"] == "kpdiag.json"
        and "says this is a bundle of Service shop/web" in p["error"]
        and "read as a node bundle" in p["error"]
        for p in report["problems"]
    )


def test_a_service_bundle_stays_one(tmp_path):
    report = analyze_bundle(os.path.join(FIXTURES, "svc-selector-typo"))
    assert report.subject.startswith("service shop/web")


def test_a_malformed_object_in_a_bundle_api_file(tmp_path):
    b = _copy(tmp_path, "cluster-node-drift")
    doc = json.load(open(f"{b}/cluster/services.json"))
    doc["items"][0]["spec"] = ["not", "a", "spec"]
    name = doc["items"][0]["metadata"]["name"]
    json.dump(doc, open(f"{b}/cluster/services.json", "w"))
    report = analyze_bundle(b)
    assert any(
        p["source"] == "cluster/services.json"
        and "items[0] left out, malformed: Service" in p["error"]
        and f"/{name}: spec is a list, not an object" in p["error"]
        for p in report.problems
    ), report.problems


# ------------------------------------------------------------------------------------------------ fuzz
WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "items"]), st.integers(0, 3), max_size=2),
)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    cur = doc
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return doc


@st.composite
def mutated(draw, doc):
    paths = list(_paths(doc))
    return _mutate(doc, draw(st.sampled_from(paths)), draw(WRONG))


@pytest.fixture(scope="module")
def servers():
    with ApiServer(OBJECTS) as api, H.HostileApi(api.url, {}) as bad:
        yield api, bad


FUZZ = settings(
    max_examples=int(os.environ.get("KPDIAG_FUZZ_EXAMPLES", "25")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(
    which=st.sampled_from(["svc", "slices", "pods", "node"]),
    data=st.data(),
)
def test_fuzz_svc_answers(servers, capsys, tmp_path_factory, which, data):
    api, bad = servers
    docs = {
        "svc": (r"/services/web$", SVC),
        "slices": (r"/namespaces/shop/endpointslices", _list(SLICE)),
        "pods": (r"/namespaces/shop/pods", _list(POD)),
        "node": (r"^/api/v1/nodes/node-a", NODE),
    }
    rx, doc = docs[which]
    bad.attacks = [(__import__("re").compile(rx), H.answer(data.draw(mutated(doc))))]
    kc = bad.kubeconfig(tmp_path_factory.mktemp("kc"))
    rc, report, _ = _svc_run(capsys, kc, "--node", "node-a")
    assert rc in (0, 1, 3)
    assert report["kind"] == "service"


@FUZZ
@given(data=st.data())
def test_fuzz_cluster_node_list(servers, capsys, tmp_path_factory, data):
    api, bad = servers
    bad.attacks = [(__import__("re").compile(r"^/api/v1/nodes"), H.answer(data.draw(mutated(_list(NODE)))))]
    kc = bad.kubeconfig(tmp_path_factory.mktemp("kc"))
    capsys.readouterr()
    rc = main(["cluster", "--kubeconfig", kc, "--dry-run", "--nodes", "kubernetes.io/os=linux", "--timeout", "10"])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc in (0, 2, 3)


@FUZZ
@given(which=st.sampled_from(["services", "endpointslices", "nodes"]), data=st.data())
def test_fuzz_node_bundle_api_files(tmp_path_factory, which, data):
    base = os.path.join(FIXTURES, "cluster-node-drift")
    doc = json.load(open(os.path.join(base, "cluster", f"{which}.json")))
    small = dict(doc, items=doc["items"][:3])
    b = str(tmp_path_factory.mktemp("b") / "bundle")
    shutil.copytree(base, b)
    json.dump(data.draw(mutated(small)), open(os.path.join(b, "cluster", f"{which}.json"), "w"))
    report = analyze_bundle(b)  # no exception: a report, with problems named
    assert report.to_dict()["kind"]
