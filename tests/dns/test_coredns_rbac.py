"""Without the opt-in deploy/rbac-svc-kube-system.yaml the API refuses (403) CoreDNS's log: KP132 says what it could
not read, why the grant is opt-in and how to grant it — through kpdiag svc against the loopback API server
(tests/apiserver.py, the real kubernetes client)."""

from __future__ import annotations

import json

from kpdiag.cli import main
from tests.apiserver import ApiServer
from tests.cli.test_rbac_manifest import _COREDNS_LOGS, _svc_objects


def _kp132(tmp_path, capsys, fail):
    with ApiServer(_svc_objects(), pod_logs=_COREDNS_LOGS, fail=fail) as api:
        kc = api.kubeconfig(tmp_path)
        main(["svc", "web", "-n", "shop", "--no-probe", "--node", "node-a", "--kubeconfig", kc, "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    (check,) = [c for c in doc["checks"] if c["id"] == "KP132"]
    return check


def test_coredns_log_refused_names_the_opt_in_and_what_is_not_looked_for(tmp_path, capsys):
    check = _kp132(tmp_path, capsys, {"GET /api/v1/namespaces/kube-system/pods/coredns-abc/log": 403})
    assert check["status"] == "skipped"
    reason = check["reason"]
    assert "CoreDNS's log could not be read: get pods/log in kube-system is not granted (403)" in reason
    assert "kpdiag rbac svc-kube-system | kubectl apply -f -" in reason and "etcd" in reason
    assert "a forwarding loop in CoreDNS is not known" in reason


def test_coredns_log_read_runs_the_check(tmp_path, capsys):
    check = _kp132(tmp_path, capsys, None)
    assert check["status"] == "ran" and check["reason"] is None


def test_another_failure_is_not_called_a_refusal(tmp_path, capsys):
    check = _kp132(tmp_path, capsys, {"GET /api/v1/namespaces/kube-system/pods/coredns-abc/log": 500})
    assert check["status"] == "skipped" and "no CoreDNS log could be read" in check["reason"]
    assert "svc-kube-system" not in check["reason"]
