"""`kpdiag svc` against a real HTTP server speaking the Kubernetes API, through the real client.

Each case builds real API objects; kpdiag reads them through a kubeconfig. Failures of the API
(unreachable, 403, 401, 500, no credentials) and of raw sockets each give one clear line, and
the rest of the diagnosis still runs.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer, write_kubeconfig


def svc(kc, name="web", ns="shop", *extra, env=None, prefix=()):
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "kpdiag", "svc", name, "-n", ns, "--kubeconfig", kc, "-o", "json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


def ids(report):
    return {f["id"] for f in report["findings"]}


WEB_POD = k8s.pod(
    "shop", "web-1", "10.244.1.11", {"app": "web", "tier": "front"}, ports=[{"name": "http", "containerPort": 8080}]
)


def test_kp101_kp103_selector_typo(tmp_path):
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web", "tier": "frontend"}),
        WEB_POD,
    ]
    with ApiServer(objs) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
        calls = list(api.requests)
    assert proc.returncode == 1
    assert {"KP101", "KP103"} <= ids(report)
    kp103 = next(f for f in report["findings"] if f["id"] == "KP103")
    assert "closest: pod web-1 (tier: wants 'frontend', pod has 'front')" in kp103["summary"]
    # only what one Service needs: no cluster-wide lists — but for the one pod list that finds the client by its
    # source address (fieldSelector status.podIP: the API answers with the pods that have it, not every pod)
    paths = [p for _, p in calls]
    assert not any(p in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices") for p in paths), paths
    assert paths.count("/api/v1/pods") <= 1, paths
    assert (
        len(calls) <= 20
    )  # the Service's own objects, its namespace's policies, kube-system's DNS: never a cluster-wide object list


def test_kp104_target_port_named_mismatch(tmp_path):
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, "web-http", "http")], {"app": "web"}),
        WEB_POD,
        k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
    ]
    with ApiServer(objs) as api:
        _, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    kp104 = next(f for f in report["findings"] if f["id"] == "KP104")
    assert "'web-http'" in kp104["summary"] and "they name: http" in kp104["summary"]


def test_kp105_external_local_without_local_endpoint(tmp_path):
    objs = [
        k8s.service(
            "shop",
            "web",
            "10.96.0.20",
            [k8s.port(80, 8080, "http", node_port=30080)],
            {"app": "web"},
            type_="NodePort",
            externalTrafficPolicy="Local",
        ),
        WEB_POD,
        k8s.node("node-b"),
        k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
    ]
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        _, report = svc(kc, "web", "shop", "--no-probe", "--node", "node-b")
        assert "KP105" in ids(report)
        assert "NodePort 30080" in next(f for f in report["findings"] if f["id"] == "KP105")["summary"]
        _, report = svc(kc, "web", "shop", "--no-probe", "--node", "node-a")
        assert "KP105" not in ids(report)


def test_healthy_service_has_no_service_findings(tmp_path):
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        WEB_POD,
        k8s.endpointslice("shop", "web", [("10.244.1.11", True, "node-a", "web-1")], [("http", 8080, "TCP")]),
    ]
    with ApiServer(objs) as api:
        _, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    assert not ids(report) & {"KP101", "KP102", "KP103", "KP104", "KP105", "KP106", "KP107"}
    assert report["extra"]["verdict"][0].startswith("shop/web: ClusterIP 10.96.0.20; 1 ready endpoint(s) of 1")


@pytest.mark.parametrize("status,words", [(403, "403 Forbidden — RBAC"), (401, "401 Unauthorized"), (500, "HTTP 500")])
def test_api_errors_are_one_clear_line(tmp_path, status, words):
    with ApiServer([], fail={"*": status}) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    assert any(words in p["error"] for p in report["problems"]), report["problems"]
    assert any(words in line for line in proc.stderr.splitlines()) or report["problems"]
    assert proc.returncode == 3  # nothing about the Service could be read


def test_rbac_denied_on_pods_only_still_diagnoses(tmp_path):
    objs = [k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})]
    with ApiServer(objs, fail={"pods": 403}) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "web", "shop", "--no-probe")
    assert any("list pods in shop: 403 Forbidden" in p["error"] for p in report["problems"])
    assert "KP101" in ids(report)  # the Service and its (missing) endpoints were still read
    skipped = {c["id"]: c for c in report["checks"]}
    assert skipped["KP103"]["status"] == "skipped"


def test_unreachable_api_and_no_credentials(tmp_path):
    kc = tmp_path / "kc"
    write_kubeconfig(str(kc), "http://127.0.0.1:9")  # nothing listens on the discard port
    proc, report = svc(str(kc), "web", "shop", "--no-probe")
    assert proc.returncode == 3
    assert any("unreachable" in p["error"] for p in report["problems"]), report["problems"]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "svc", "web", "-n", "shop", "--no-probe", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert any("no usable Kubernetes credentials" in p["error"] for p in report["problems"])


def test_without_cap_net_raw_probes_say_why(tmp_path):
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to drop CAP_NET_RAW")
    objs = [
        k8s.service("shop", "web", "127.0.0.1", [k8s.port(9, 9, "discard")], {"app": "web"}),
        WEB_POD,
        k8s.endpointslice("shop", "web", [("127.0.0.1", True, "node-a", "web-1")], [("discard", 9, "TCP")]),
    ]
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        # the same user, without CAP_NET_RAW (what a pod without NET_RAW gets)
        proc, report = svc(kc, "web", "shop", prefix=("setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw"))
    probes = report["extra"]["probes"]
    assert (
        probes["raw"] is False
        and "CAP_NET_RAW" in probes["raw_skipped_reason"]
        and "kubectl debug" in probes["raw_skipped_reason"]
    )
    assert any(
        r["kind"] == "tcp-connect" and r["result"] == "refused" for r in probes["results"]
    )  # the socket probe still ran
    assert {c["id"]: c["status"] for c in report["checks"]}["KP201"] == "skipped"


def test_service_not_found_is_an_error_finding_with_the_nearest_names(tmp_path):
    objs = [
        k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"}),
        k8s.service("shop", "cart", "10.96.0.30", [k8s.port(80, 8080, "http")], {"app": "cart"}),
        k8s.service("staging", "webb", "10.96.0.40", [k8s.port(80, 8080, "http")], {"app": "web"}),
    ]
    with ApiServer(objs) as api:
        proc, report = svc(api.kubeconfig(tmp_path), "webb", "shop", "--no-probe")
        calls = list(api.requests)
    assert proc.returncode == 1, proc.stderr
    kp110 = [f for f in report["findings"] if f["id"] == "KP110"]
    assert len(kp110) == 1 and kp110[0]["severity"] == "error"
    assert "did you mean web?" in kp110[0]["summary"] and "namespace staging" in kp110[0]["summary"], kp110[0][
        "summary"
    ]
    assert report["extra"]["verdict"][0].startswith("Service shop/webb does not exist"), report["extra"]["verdict"]
    assert report["extra"]["status"] == "not-found"
    assert not any("404" in p["error"] for p in report["problems"])  # not a source kpdiag failed to read: an answer
    # and nothing else was asked once the API said there is no such Service (no node, configmap, version calls)
    assert len(calls) <= 3, calls
