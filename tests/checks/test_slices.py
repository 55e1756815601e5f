"""KP160: the API's Pods and EndpointSlices disagree for longer than the EndpointSlice controller's normal lag.

The base bundle was collected at 2026-12-03T00:10:00Z (its manifest); the threshold is 60 s."""

from tests import k8sobjects as k8s
from tests.given import given

SVC = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})
PORTS = [("http", 8080, "TCP")]


def pod(name, ip, ready_since="2026-12-03T00:00:00Z", uid=None, created="2026-12-02T23:59:00Z", ready=True):
    p = k8s.pod("shop", name, ip, {"app": "web"}, ready=ready)
    p["metadata"]["uid"] = uid or f"uid-{name}"
    p["metadata"]["creationTimestamp"] = created
    if ready_since:
        p["status"]["conditions"][0]["lastTransitionTime"] = ready_since
    return p


def slice_of(*eps, uid=None):
    sl = k8s.endpointslice("shop", "web", [(ip, ready, "node-a", name) for name, ip, ready in eps], PORTS)
    sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
    sl["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-02T23:59:30Z"}
    for ep, (name, _ip, _r) in zip(sl["endpoints"], eps):
        ep["targetRef"]["uid"] = (uid or {}).get(name, f"uid-{name}")
    return sl


def case(pods, sl, **more):
    return given(services=[SVC], pods=pods, endpointslices=[sl], **more)


def test_a_ready_pod_missing_for_ten_minutes_is_a_stall():
    (f,) = case(
        [pod("web-1", "10.244.1.11"), pod("web-2", "10.244.1.12")], slice_of(("web-1", "10.244.1.11", True))
    ).fires("KP160")
    assert f.severity.value == "warning"  # web-1 still serves
    assert "for 600 s" in f.summary and "1 Ready pod(s) missing" in f.summary
    assert f.data["missing_ready_pods"] == ["web-2"] and f.data["threshold_seconds"] == 60
    assert any("web-2 (10.244.1.12) Ready since 2026-12-03T00:00:00Z: in no slice" in e.text for e in f.evidence)
    assert any("last-change-trigger-time=2026-12-02T23:59:30Z" in e.text for e in f.evidence)
    assert any("get lease kube-controller-manager" in s for s in f.fix)


def test_a_replaced_pod_still_listed_is_an_error():
    # web-1 was deleted and recreated (new uid, new IP) five minutes ago; the slice still lists the old one, ready
    new = pod(
        "web-1", "10.244.1.21", uid="uid-web-1-new", created="2026-12-03T00:05:00Z", ready_since="2026-12-03T00:05:10Z"
    )
    (f,) = case([new], slice_of(("web-1", "10.244.1.11", True))).fires("KP160")
    assert f.severity.value == "error"
    assert "traffic still goes to addresses no pod of the Service has" in f.summary
    assert f.data["stale"] == [{"pod": "web-1", "address": "10.244.1.11", "ready": True}]


def test_the_normal_short_lag_is_silent():
    # web-2 became Ready 20 s before the collection: within the controller's lag
    fresh = pod("web-2", "10.244.1.12", ready_since="2026-12-03T00:09:40Z")
    case([pod("web-1", "10.244.1.11"), fresh], slice_of(("web-1", "10.244.1.11", True))).silent("KP160")


def test_pods_and_slices_that_agree_are_silent():
    case(
        [pod("web-1", "10.244.1.11"), pod("web-2", "10.244.1.12", ready=False)],
        slice_of(("web-1", "10.244.1.11", True), ("web-2", "10.244.1.12", False)),
    ).silent("KP160")


def test_a_disagreement_without_timestamps_is_skipped_not_guessed():
    untimed = pod("web-2", "10.244.1.12", ready_since=None)
    reason = case([pod("web-1", "10.244.1.11"), untimed], slice_of(("web-1", "10.244.1.11", True))).skips("KP160")
    assert "cannot be told from the controller's normal lag" in reason and "web-2" in reason


def test_no_collection_time_is_skipped():
    reason = case(
        [pod("web-1", "10.244.1.11"), pod("web-2", "10.244.1.12")],
        slice_of(("web-1", "10.244.1.11", True)),
        manifest={"created": None},
    ).skips("KP160")
    assert "no collection time" in reason


def test_slices_of_another_manager_are_not_judged():
    sl = slice_of(("web-1", "10.244.1.11", True))
    sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] = "my-controller.example.com"
    case([pod("web-1", "10.244.1.11"), pod("web-2", "10.244.1.12")], sl).silent("KP160")


def test_without_pods_it_is_skipped():
    reason = given(
        services=[SVC], endpointslices=[slice_of(("web-1", "10.244.1.11", True))], drop=("cluster/pods",)
    ).skips("KP160")
    assert "pods" in reason
