"""Issue 15's node checks beyond their fixtures: the default IPVS node, who implements Services (k3s's embedded
kube-proxy, Cilium beside kube-proxy, no host PIDs), the host firewall in IPVS mode, older kube-proxy log wordings."""

from __future__ import annotations

import json
import os
import shutil

from kpdiag.bundle.store import write_bundle
from kpdiag.commands.pipeline import analyze_bundle
from tests.synth import Endpoint, Port, Service, ipvs_files
from tests.conftest import FIXTURES
from tests.given import base_text, given
from kpdiag.bundle import sources


def _copy(tmp_path, fixture, files: dict[str, str] | None = None, drop=(), manifest_errors=None):
    out = tmp_path / fixture
    shutil.copytree(os.path.join(FIXTURES, fixture), out)
    for rel, text in (files or {}).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    for rel in drop:
        (out / rel).unlink()
    if manifest_errors is not None:
        m = json.loads((out / "kpdiag.json").read_text())
        m["errors"] = manifest_errors
        (out / "kpdiag.json").write_text(json.dumps(m))
    return str(out)


def _ids(report) -> set[str]:
    return {f.id for f in report.findings}


def _status(report, check_id):
    return next(c for c in report.checks if c.id == check_id)


def test_default_ipvs_node_without_loadbalancer_ips_has_no_warning():
    report = analyze_bundle(os.path.join(FIXTURES, "ipvs-healthy"))
    cfg = open(os.path.join(FIXTURES, "ipvs-healthy", "node", "kube-proxy", "config.yaml")).read()
    assert "strictARP: false" in cfg  # kube-proxy's default
    assert report.counts() == {"error": 0, "warning": 0, "info": 0}, [f.summary for f in report.findings]
    assert _status(report, "KP307").status == "ran"


HTTP_ERRORS = [
    {"source": rel, "error": f"GET http://127.0.0.1:{port}/{path}: [Errno 111] Connection refused"}
    for rel, port, path in (
        ("node/kube-proxy/proxy-mode.txt", 10249, "proxyMode"),
        ("node/kube-proxy/metrics.txt", 10249, "metrics"),
        ("node/kube-proxy/healthz.json", 10256, "healthz"),
    )
]
KP_FILES = ["node/kube-proxy/proxy-mode.txt", "node/kube-proxy/metrics.txt", "node/kube-proxy/healthz.json"]


def test_k3s_embedded_kube_proxy_is_kube_proxy_in_charge():
    g = given(processes={1: "systemd", 812: "k3s-server"})
    impl = g.state().service_implementer
    assert impl.name == "k3s" and impl.kube_proxy_in_charge and "k3s" in impl.label
    assert not g.run("KP707").findings and not g.run("KP708").findings
    assert g.run("KP701").status == "ran"  # kube-proxy advice applies


def test_kube_proxy_absent_needs_to_see_the_hosts_processes(tmp_path):
    # the same rules, kube-proxy's endpoints refused, but pid 1 is not visible (no hostPID): kube-proxy may run elsewhere
    path = _copy(tmp_path, "kube-proxy-absent", {"node/processes.txt": "4242 kpdiag\n"})
    assert "KP707" not in _ids(analyze_bundle(path))
    # pid 1 visible and kube-proxy among the processes: not absent
    path = _copy(tmp_path / "b", "kube-proxy-absent", {"node/processes.txt": "1 systemd\n777 kube-proxy\n"})
    assert "KP707" not in _ids(analyze_bundle(path))


def test_cilium_beside_kube_proxy_leaves_kube_proxy_in_charge():
    # CILIUM_* chains and cilium_host exist, but so do kube-proxy's KUBE-SVC rules: Cilium without its replacement
    rules = base_text(sources.IPTABLES_SAVE).replace(
        ":KUBE-FIREWALL - [0:0]", ":CILIUM_FORWARD - [0:0]\n:KUBE-FIREWALL - [0:0]", 1
    )
    addrs = json.loads(base_text(sources.IP_ADDR)) + [
        {"ifindex": 99, "ifname": "cilium_host", "mtu": 1500, "addr_info": []}
    ]
    g = given(iptables=rules, files={sources.IP_ADDR: addrs})
    impl = g.state().service_implementer
    assert impl.kube_proxy_in_charge and "cilium" in impl.present
    assert not g.run("KP708").findings


def test_replacement_fixture_skips_kube_proxy_checks_with_the_reason():
    report = analyze_bundle(os.path.join(FIXTURES, "cilium-kube-proxy-replacement"))
    for check_id in ("KP701", "KP706", "KP601"):
        run = _status(report, check_id)
        assert run.status == "skipped" and "Cilium's kube-proxy replacement" in run.reason, run
    assert "KP707" not in _ids(report)


def test_host_firewall_in_ipvs_mode(tmp_path):
    """IPVS delivers NodePort traffic to the node (INPUT): an INPUT policy DROP without an accept drops it."""
    svcs = [
        Service("shop", "front", "10.96.0.40", [Port("http", 80, 8080, node_port=30080)], [Endpoint("10.244.1.11")])
    ]
    files = ipvs_files(svcs)
    files["node/kube-proxy/proxy-mode.txt"] = "ipvs\n"
    out = str(tmp_path / "ok")
    write_bundle(
        {k: v.encode() for k, v in files.items()}, out, {"format": "kpdiag-bundle/1", "node": "n", "errors": []}
    )
    report = analyze_bundle(out)
    assert _status(report, "KP509").status == "ran" and "KP509" not in _ids(report)
    files["node/iptables-save.txt"] = files["node/iptables-save.txt"].replace(":INPUT ACCEPT", ":INPUT DROP", 1)
    assert ":INPUT DROP" in files["node/iptables-save.txt"]
    out = str(tmp_path / "drop")
    write_bundle(
        {k: v.encode() for k, v in files.items()}, out, {"format": "kpdiag-bundle/1", "node": "n", "errors": []}
    )
    found = [f for f in analyze_bundle(out).findings if f.id == "KP509"]
    assert len(found) == 1 and "30080/tcp" in found[0].summary and "INPUT" in found[0].summary, [
        f.summary for f in found
    ]


def test_kp704_reads_older_kube_proxy_wordings():
    log = (
        "E0521 10:00:00.000000       1 proxier.go:770] Failed to delete stale service IP 10.96.0.10 connections, error: "
        "error deleting connection tracking state for UDP service IP: 10.96.0.10, error: exit status 1\n"
        "E0521 10:00:01.000000       1 reflector.go:178] k8s.io/client-go/informers/factory.go:135: Failed to list *v1.Service: "
        'Get "https://10.0.0.1:6443/api/v1/services": dial tcp 10.0.0.1:6443: connect: no route to host\n'
    )
    found = given(files={sources.KP_LOG: log}).fires("KP704")
    text = " ".join(f.summary for f in found)
    assert "stale conntrack" in text and "API server" in text, text


def test_journald_lines_of_k3s_are_filtered_to_kube_proxys():
    from kpdiag.collect.kube_proxy import kube_proxy_lines as _kube_proxy_lines

    journal = (
        b'2026-12-03T00:00:00+0000 node k3s[812]: E1203 00:00:00.1 812 proxier.go:1522] "Failed to execute iptables-restore"\n'
        b"2026-12-03T00:00:00+0000 node k3s[812]: E1203 00:00:00.2 812 reflector.go:1] Failed to watch *v1.Pod\n"
        b"2026-12-03T00:00:00+0000 node kube-proxy[99]: E1203 00:00:00.3 99 reflector.go:1] Failed to watch *v1.Service\n"
    )
    kept = _kube_proxy_lines(journal).decode().splitlines()
    assert (
        len(kept) == 2 and "proxier.go" in kept[0] and "kube-proxy[99]" in kept[1]
    )  # kubelet's watch error inside k3s is not kube-proxy's


def test_ufw_dropping_health_checks_is_named():
    """ufw sets INPUT's policy to DROP and hangs its chains off it; kube-proxy's /healthz (:10256) is not allowed."""
    text = base_text(sources.IPTABLES_SAVE, base="nodeport-etp-local")
    head, sep, rest = text.partition("*filter\n")
    rest = rest.replace(":INPUT ACCEPT", ":INPUT DROP", 1)
    ufw = (
        ":ufw-before-input - [0:0]\n:ufw-user-input - [0:0]\n"
        "-A INPUT -j ufw-before-input\n-A ufw-before-input -i lo -j ACCEPT\n"
        "-A ufw-before-input -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A ufw-before-input -j ufw-user-input\n"
        "-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT\n"
    )
    rest = rest.replace("COMMIT", ufw + "COMMIT", 1)
    found = given(base="nodeport-etp-local", iptables=head + sep + rest).fires("KP509")
    assert len(found) == 1 and "10256/tcp" in found[0].summary and "ufw (filter INPUT" in found[0].summary, [
        f.summary for f in found
    ]
    assert any(f.startswith("ufw allow 30000:32767/tcp") for f in found[0].fix)
    # NodePort 30080 is forwarded to its pod (FORWARD, which ufw left alone here): not blamed
    assert "30080" not in found[0].summary


def test_kp601_refuses_the_service_cidr_not_the_span_of_the_cluster_ips_seen():
    """KP601's fix blackholes the service CIDR: kube-apiserver's --service-cluster-ip-range when its pod is in the
    bundle; else it says how to learn it, since the ClusterIPs seen only span a part of it (10.96.0.0/27 here, where
    the range is a /12 — Services created later would still loop)."""
    from tests.given import given

    (f,) = given(base="ip-forward-off").fires("KP601")
    assert "--service-cluster-ip-range" in f.fix[0] and "10.96.0.0/27" in f.fix[0], f.fix
    assert any("add blackhole <service CIDR>" in c for c in f.fix), f.fix
    assert f.data["service_cidr_guess"] == "10.96.0.0/27"
    apiserver = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver-cp", "namespace": "kube-system"},
        "spec": {
            "containers": [
                {"name": "kube-apiserver", "command": ["kube-apiserver", "--service-cluster-ip-range=10.96.0.0/12"]}
            ]
        },
    }
    (f,) = given(base="ip-forward-off", pods=[apiserver]).fires("KP601")
    assert any("add blackhole 10.96.0.0/12" in c for c in f.fix) and "cluster-info" not in f.fix[0], f.fix
    assert f.data["service_cidr"] == "10.96.0.0/12" and "service_cidr_guess" not in f.data
