"""What kpdiag believes about kube-proxy and the node (issues 25.3, 26.3, 26.5–26.7), on the kernel-built fixtures and
on copies of them changed in one place: each finding names the right cause and its data says which case it is."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kpdiag import exitcodes
from kpdiag.commands.pipeline import analyze_bundle
from tests.conftest import FIXTURES
from tests.given import base_text, given
from kpdiag.bundle import sources
from kpdiag.commands.diagnose import analyze_state


def _report(name_or_path):
    path = name_or_path if os.path.isabs(str(name_or_path)) else os.path.join(FIXTURES, name_or_path)
    return analyze_bundle(str(path))


def _findings(report, fid):
    return [f for f in report.findings if f.id == fid]


def _run(report, fid):
    return next(r for r in report.checks if r.id == fid)


def _copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), dest)
    return dest


def _edit_json(path, fn):
    with open(path) as fh:
        doc = json.load(fh)
    fn(doc)
    with open(path, "w") as fh:
        json.dump(doc, fh)


# ---------------------------------------------------------------- KP707: absent vs crash-looping (26.3)


def test_absent_kube_proxy_is_absent():
    (f,) = _findings(_report("kube-proxy-absent"), "KP707")
    assert f.data["kube_proxy"] == "absent" and f.data["implementer"] == "kube-proxy"
    assert f.summary.startswith("kube-proxy is not running on this node (no process; :10249 and :10256 do not answer)")
    assert "crash" not in f.summary


def test_crash_looping_kube_proxy_is_not_called_absent():
    (f,) = _findings(_report("kube-proxy-oomkilled"), "KP707")
    assert f.data["kube_proxy"] == "crash-looping"
    assert f.data["kube_proxy_pod"] == {
        "pod": "kube-system/kube-proxy-7xk2p",
        "phase": "Running",
        "waiting": "CrashLoopBackOff",
        "restarts": 17,
        "last_termination": "OOMKilled",
        "last_exit_code": 137,
        "memory_limit": "64Mi",
    }
    assert f.summary.startswith("kube-proxy is crash-looping on this node, not absent")
    assert "OOMKilled" in f.summary and "64Mi" in f.summary and "17 restarts" in f.summary
    assert "not running on this node (no process" not in f.summary
    assert any("set resources daemonset kube-proxy" in step for step in f.fix)
    assert not any("taint" in step or "manifests" in step for step in f.fix)  # the absent-kube-proxy advice
    assert any(e.source == "cluster/pods.json" for e in f.evidence)


def test_crash_loop_that_is_not_oom_points_at_the_previous_log(tmp_path):
    b = _copy(tmp_path, "kube-proxy-oomkilled")

    def error_exit(doc):
        cs = doc["items"][0]["status"]["containerStatuses"][0]
        cs["lastState"]["terminated"].update(reason="Error", exitCode=1)

    _edit_json(b / "cluster" / "pods.json", error_exit)
    (f,) = _findings(_report(b), "KP707")
    assert f.data["kube_proxy"] == "crash-looping" and "keeps exiting (Error, exit code 1)" in f.summary
    assert any("logs kube-proxy-7xk2p -c kube-proxy --previous" in step for step in f.fix)
    assert not any("set resources" in step for step in f.fix)


def test_a_healthy_pod_on_another_node_says_nothing_about_this_one(tmp_path):
    b = _copy(tmp_path, "kube-proxy-oomkilled")
    _edit_json(b / "cluster" / "pods.json", lambda d: d["items"][0]["spec"].update(nodeName="other-node"))
    (f,) = _findings(_report(b), "KP707")
    assert f.data["kube_proxy"] == "absent" and "kube_proxy_pod" not in f.data


# ---------------------------------------------------------------- KP704: the xtables lock is not a rejected ruleset


def _causes(report):
    return {f.data["cause"]: f for f in _findings(report, "KP704")}


def test_xtables_lock_is_not_a_rejected_ruleset():
    causes = _causes(_report("kube-proxy-log-errors"))
    assert "xtables-lock" in causes and "restore-rejected" not in causes, list(causes)
    lock = causes["xtables-lock"]
    assert "exit status 4" in lock.summary and "the ruleset was not rejected" in lock.summary
    assert "fuser -v /run/xtables.lock" in lock.fix[0] and "KP204" not in lock.fix[0]


def test_a_rejected_ruleset_is_not_the_lock():
    causes = _causes(_report("kube-proxy-restore-rejected"))
    assert set(causes) == {"restore-rejected"}, list(causes)
    assert "rejected kube-proxy's ruleset" in causes["restore-rejected"].summary
    # two failed syncs: the first logged with a multi-line err=< … > value (one entry, not three lines)
    assert causes["restore-rejected"].data["lines"] == 2


# ---------------------------------------------------------------- KP708/KP710: the replacement first (26.6)


def test_cilium_with_kube_proxy_leftovers_is_cilium():
    report = _report("cilium-kube-proxy-leftovers")
    (kp708,) = _findings(report, "KP708")
    assert kp708.data == {"implementer": "cilium", "kube_proxy": "replaced", "leftover_rules": ["iptables"]}
    (kp710,) = _findings(report, "KP710")
    assert "leftovers" in kp710.summary and "do not restart kube-proxy" in kp710.summary
    assert _run(report, "KP203").status == "skipped" and "not in charge" in _run(report, "KP203").reason
    assert not _findings(report, "KP707")
    for f in report.findings:  # no advice to act on a kube-proxy the report says is replaced
        for step in f.fix:
            assert "restart" not in step or "do not restart" in step or "never restart" in step, (f.id, step)
            assert "delete pod" not in step, (f.id, step)


def test_cilium_without_leftovers_has_no_leftover_finding():
    report = _report("cilium-kube-proxy-replacement")
    assert _run(report, "KP710").status == "ran" and not _findings(report, "KP710")
    assert _findings(report, "KP708")[0].data["kube_proxy"] == "replaced"


def test_leftovers_without_visible_processes_are_not_guessed():
    """Without the host's processes (no hostPID), kube-proxy cannot be ruled out: no leftover claim."""
    given(base="cilium-kube-proxy-leftovers", files={sources.PROCESSES: None}).silent("KP710")


# ---------------------------------------------------------------- KP711: hostnameOverride (26.7)


def test_hostname_override_mismatch_is_an_error_naming_the_services():
    (f,) = _findings(_report("hostname-override-mismatch"), "KP711")
    assert f.severity.value == "error"
    assert "'node-1' is not this node's name 'lab-hostname-override-mismatch'" in f.summary
    assert "finds no local endpoints" in f.summary and "shop/api, shop/front" in f.summary
    assert f.data == {
        "hostname_override": "node-1",
        "node": "lab-hostname-override-mismatch",
        "node_from": "the Node object in cluster/nodes.json",
        "services": ["shop/api", "shop/front"],
    }


@pytest.mark.parametrize("override", ["lab-hostname-override-mismatch", "LAB-Hostname-Override-Mismatch "])
def test_hostname_override_that_names_this_node_is_silent(override):
    given(base="hostname-override-mismatch", kube_proxy={"hostnameOverride": override}).silent("KP711")


def test_the_hostname_override_flag_wins_over_the_file():
    """kubeadm's DaemonSet passes --hostname-override=$(NODE_NAME) with --config: kube-proxy uses the flag, so a stale
    hostnameOverride in the ConfigMap is not what it runs with (before: a false error). And the flag alone counts."""
    cmd = "kube-proxy\n--config=/var/lib/kube-proxy/config.conf\n--hostname-override=lab-hostname-override-mismatch\n"
    given(base="hostname-override-mismatch", files={sources.KP_CMDLINE: cmd}).silent("KP711")
    wrong = "kube-proxy\n--config=/var/lib/kube-proxy/config.conf\n--hostname-override=Node-2\n"
    (f,) = given(
        base="hostname-override-mismatch", kube_proxy={"hostnameOverride": None}, files={sources.KP_CMDLINE: wrong}
    ).fires("KP711")
    assert "'node-2' is not this node's name" in f.summary
    assert (f.evidence[0].source, f.evidence[0].line) == (sources.KP_CMDLINE, 3)


def test_hostname_override_without_the_api_is_not_judged():
    assert "Node object" in given(base="hostname-override-mismatch", drop=("cluster/",)).skips("KP711")


# ---------------------------------------------------------------- KP709: not a Kubernetes node (25.3)


def test_not_a_node_says_so_first_and_exits_3():
    report = _report("not-a-node")
    assert [f.id for f in report.findings] == ["KP709"]
    assert report.extra["headline"].split(": ", 1)[1].startswith("this does not look like a Kubernetes node")
    assert exitcodes.for_findings(report.severities(), "error", report.readable) == exitcodes.NO_DIAGNOSIS
    kp501 = _run(report, "KP501")
    assert kp501.status == "skipped" and "does not look like a Kubernetes node" in kp501.reason


def test_without_the_hosts_processes_a_host_is_not_called_no_node():
    g = given(base="not-a-node", processes={})  # no hostPID: pid 1 is not seen, a kubelet cannot be ruled out
    assert "cannot be ruled out" in g.skips("KP709")
    g.fires("KP501")  # then the node checks speak
    assert "headline" not in analyze_state(g.state()).extra


def test_preflight_on_a_host_that_is_not_a_node_yet_still_answers():
    """--preflight asks whether the host can run a mode (a node to be): not-a-node does not silence it."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.commands.diagnose import analyze_state
    from kpdiag.state.node import NodeState

    state = NodeState(Bundle.open(os.path.join(FIXTURES, "not-a-node")), preflight="ipvs")
    report = analyze_state(state)
    assert "headline" not in report.extra and report.readable
    assert not _findings(report, "KP709")
    assert _findings(report, "KP301")  # no ip_vs module here: the preflight answer


# ---------------------------------------------------------------- KP706: typed inputs, both optional


def test_kp706_judges_from_the_config_or_from_the_rules_alone():
    no_masq = "".join(line for line in base_text(sources.IPTABLES_SAVE).splitlines(True) if "! -s 10.244" not in line)
    (f,) = given(kube_proxy={"clusterCIDR": None}, iptables=no_masq).fires("KP706")
    assert f.evidence[0].text == 'detectLocalMode: ""' and "has no '! -s <clusterCIDR>" in f.evidence[-1].text
    given().silent("KP706")
    given(files={sources.KP_CONFIG: None}).silent("KP706")  # the rules alone: they masquerade by clusterCIDR
    (f,) = given(files={sources.KP_CONFIG: None}, iptables=no_masq).fires("KP706")
    assert "ClusterCIDR" in f.summary
