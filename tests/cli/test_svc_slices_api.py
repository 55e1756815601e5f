"""KP160 through `kpdiag svc` against a real HTTP server speaking the Kubernetes API (kmock), read by the real
kubernetes client: the Service's EndpointSlices stopped following its pods, and that — not the pods' readiness — is
the first error."""

import datetime

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.cli.test_svc_api import svc


def _ago(seconds: float) -> str:
    t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _objects(replaced_ago: float) -> list:
    # web-1 was replaced (a new uid and address) `replaced_ago` seconds ago; the slice still lists the old one,
    # terminating and not ready, and never gained the new one
    pod = k8s.pod("shop", "web-1", "10.244.1.21", {"app": "web"}, ports=[{"name": "http", "containerPort": 8080}])
    pod["metadata"].update(uid="uid-web-1-new", creationTimestamp=_ago(replaced_ago))
    pod["status"]["conditions"][0]["lastTransitionTime"] = _ago(replaced_ago - 5)
    sl = k8s.endpointslice("shop", "web", [("10.244.1.11", False, "node-a", "web-1")], [("http", 8080, "TCP")])
    sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
    sl["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": _ago(replaced_ago + 30)}
    sl["endpoints"][0]["conditions"]["terminating"] = True
    sl["endpoints"][0]["targetRef"]["uid"] = "uid-web-1-old"
    return [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        pod,
        sl,
        k8s.kube_proxy_configmap(),
    ]


def test_stalled_slices_are_the_first_error(tmp_path):
    with ApiServer(_objects(replaced_ago=300)) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    assert proc.returncode == 1
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors[0]["id"] == "KP160", [f["id"] for f in errors]
    kp160 = errors[0]
    assert "no ready endpoint although its pods are Ready" in kp160["summary"]
    assert kp160["data"]["missing_ready_pods"] == ["web-1"] and kp160["data"]["stalled_seconds"] >= 290
    # KP102 ("none ready: look at the pods' readiness") is a consequence here, not the cause
    kp102 = next(f for f in report["findings"] if f["id"] == "KP102")
    assert kp102["caused_by"]["id"] == "KP160"
    assert report["extra"]["verdict"][0].startswith("shop/web is broken") and "(KP160)" in report["extra"]["verdict"][0]


def test_a_replacement_seconds_old_is_the_normal_lag(tmp_path):
    with ApiServer(_objects(replaced_ago=15)) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    assert "KP160" not in {f["id"] for f in report["findings"]}
    assert any(c["id"] == "KP160" and c["status"] == "ran" for c in report["checks"])


def _zoned_objects() -> list:
    # shop/web with trafficDistribution: PreferClose; one replica in zone-a (this node's zone), three in zone-b
    svc_obj = k8s.service(
        "shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}, trafficDistribution="PreferClose"
    )
    eps = [("10.244.1.11", True, "node-a", "web-a")] + [
        (f"10.244.2.{i}", True, "node-b", f"web-b{i}") for i in (11, 12, 13)
    ]
    sl = k8s.endpointslice("shop", "web", eps, [("http", 8080, "TCP")])
    for ep in sl["endpoints"]:
        zone = "zone-a" if ep["nodeName"] == "node-a" else "zone-b"
        ep["zone"], ep["hints"] = zone, {"forZones": [{"name": zone}]}
    pods = [
        k8s.pod("shop", pod, ip, {"app": "web"}, node=node, ports=[{"name": "http", "containerPort": 8080}])
        for ip, _, node, pod in eps
    ]
    return [svc_obj, sl, *pods, k8s.node("node-a", labels={"topology.kubernetes.io/zone": "zone-a"})]


def test_topology_hints_leave_this_zone_one_endpoint(tmp_path):
    with ApiServer(_zoned_objects()) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe", "--node", "node-a")
    kp161 = [f for f in report["findings"] if f["id"] == "KP161"]
    assert len(kp161) == 1 and kp161[0]["severity"] == "warning", report["findings"]
    assert "every connection from zone zone-a goes to 1 of its 4 ready endpoint(s) (web-a)" in kp161[0]["summary"]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    # from a node of zone-b the same Service is fine: three endpoints for its zone
    objs = _zoned_objects()[:-1] + [k8s.node("node-b", labels={"topology.kubernetes.io/zone": "zone-b"})]
    (tmp_path / "b").mkdir()
    with ApiServer(objs) as api:
        _, report = svc(api.kubeconfig(tmp_path / "b"), "web", "shop", "--no-probe", "--node", "node-b")
    assert "KP161" not in {f["id"] for f in report["findings"]}
    assert any(c["id"] == "KP161" and c["status"] == "ran" for c in report["checks"])
