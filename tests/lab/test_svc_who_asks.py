"""Who is asking, in the lab (issue 25.1): kpdiag svc runs in a pod with no hints at all — no $POD_NAMESPACE/$POD_NAME,
no service-account namespace, a hostname that is not the pod's name — as in `kubectl debug -it POD --image=…`. A
NetworkPolicy admits only app=frontend to shop/web and the backends drop this client for real. kpdiag finds its own pod
by the address its packets leave from, names the policy on the first line, and KP120 is an error naming it; when RBAC
refuses that lookup, one plain line says so (and the policy cannot be judged for an unknown client)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .netlab import KubeNodeLab
from .test_svc_truth import ROOT, _both, _build, _policy_objects

pytestmark = pytest.mark.lab

NO_HINTS = ("-u", "POD_NAMESPACE", "-u", "POD_NAME", "-u", "KUBERNETES_SERVICE_HOST", "COLUMNS=200")  # whole lines


def _no_service_account():
    if os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/namespace"):
        pytest.skip("this host has a service-account namespace file: the lab's pods would see it")


def test_no_hints_the_client_is_found_by_its_address_and_the_policy_is_named_first(lab, tmp_path):
    _no_service_account()
    k = KubeNodeLab.build(lab, pod_count=3)
    pod1, pod2, me = k.pods["pod1"], k.pods["pod2"], k.pods["pod0"]
    k, kc = _build(lab, tmp_path, objects=_policy_objects(pod1, pod2, me, True), lab_built=k)
    for role in ("pod1", "pod2"):  # the CNI enforcing the policy: this client's SYNs are dropped at the backends
        lab.sh(role, ["iptables", "-A", "INPUT", "-s", me, "-p", "tcp", "--dport", "8080", "-j", "DROP"])
    report, text, code = _both(lab, kc, env=NO_HINTS)
    assert code == 1, report["findings"]
    assert report["extra"]["client"] == {
        "namespace": "debug",
        "pod": "client",
        "identified": True,
        "how": f"source address {me}: the only pod with it",
    }
    first = text[0].strip(" »")
    assert first.startswith("shop/web does NOT work"), text[:3]
    assert "a NetworkPolicy drops it: NetworkPolicy shop/web-allow-frontend" in first, first
    verdict = report["extra"]["verdict"][0]
    assert "admits only pods app=frontend" in verdict and verdict.endswith("(KP120)"), verdict
    assert "endpoints do not answer" not in verdict and "KP112" not in verdict  # the backend is not blamed
    kp120 = next(f for f in report["findings"] if f["id"] == "KP120")
    assert kp120["severity"] == "error" and "shop/web-allow-frontend" in kp120["summary"]
    assert "debug/client" in kp120["summary"]
    assert report["findings"][0]["id"] == "KP120"  # the root cause is the first finding
    runs = {r["id"]: r for r in report["checks"]}
    assert runs["KP120"]["status"] == "ran" and runs["KP121"]["status"] == "ran"  # not "no client named"
    assert any(f"client (for NetworkPolicy): debug/client — source address {me}" in line for line in text), text[:12]


def test_no_hints_and_the_lookup_denied_is_one_plain_line(lab, tmp_path):
    _no_service_account()
    k = KubeNodeLab.build(lab, pod_count=3)
    pod1, pod2, me = k.pods["pod1"], k.pods["pod2"], k.pods["pod0"]
    k, _ = _build(lab, tmp_path, objects=_policy_objects(pod1, pod2, me, True), lab_built=k)
    # a second API server that refuses listing pods in all namespaces (RBAC without the cluster-wide grant)
    (tmp_path / "denied").mkdir()
    d = tmp_path / "denied"
    (d / "objects.json").write_text(json.dumps(_policy_objects(pod1, pod2, me, True)))
    lab.background(
        "pod0",
        ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "tests.apiserver", str(d / "objects.json"), str(d / "url")]
        + [json.dumps({"GET /api/v1/pods": 403})],
        subprocess.DEVNULL,
    )
    for _ in range(150):
        if (d / "url").exists() and (d / "url").read_text():
            break
        time.sleep(0.1)
    from tests.apiserver import write_kubeconfig

    kc = str(d / "kubeconfig")
    write_kubeconfig(kc, (d / "url").read_text())
    report, text, code = _both(lab, kc, "--no-probe", env=NO_HINTS)
    assert report["extra"]["client"]["identified"] is False
    problems = [p["error"] for p in report["problems"] if p["source"] == "cluster/client-pod.json"]
    assert len(problems) == 1, report["problems"]
    assert f"looking up the client pod by its address {me} was refused (403 Forbidden)" in problems[0]
    assert "\n" not in problems[0] and "Traceback" not in " ".join(text)
    joined = " ".join(line.strip() for line in text)  # the text is wrapped to the terminal's width
    assert "was refused (403 Forbidden): grant 'list pods' cluster-wide" in joined, text
    runs = {r["id"]: r for r in report["checks"]}
    assert runs["KP120"]["status"] == "skipped" and "403 Forbidden" in runs["KP120"]["reason"]
