"""Wrong answers on data kpdiag already has (issue 26): KP603 counts only ClusterIPs, KP101 pairs ports by name."""

import os

from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.state.node import NodeState
from tests import k8sobjects as k8s
from tests.conftest import FIXTURES
from tests.given import given

NODEPORT_CNI = os.path.join(FIXTURES, "ipvs-nodeport-cni-no-api")
CLUSTER_IPS = ["10.96.0.1", "10.96.0.10", "10.96.0.20"]


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            full = os.path.join(root, n)
            rel = os.path.relpath(full, path)
            if rel != "scenario.json":
                with open(full, "rb") as fh:
                    out[rel] = fh.read()
    return out


def _run(files: dict[str, bytes], select=("KP603",), focus=None):
    report = analyze_state(NodeState(Bundle.from_files("t", files), focus=focus), select=select)
    return report.findings, {r.id: r for r in report.checks}


def test_kp603_ipvs_nodeport_servers_on_pod_cidr_addresses_are_not_cluster_ips():
    files = _files(NODEPORT_CNI)
    vs = files["node/ipvsadm.txt"].decode()
    assert "-A -t 10.244.1.1:30080" in vs and "-A -t 10.244.1.0:30080" in vs  # cni0 and flannel.1 NodePorts
    findings, runs = _run(files)
    assert runs["KP603"].status == "ran" and not findings
    # without the ipset, kube-ipvs0's addresses say which virtual servers are ClusterIPs
    files.pop("node/ipset.txt")
    findings, runs = _run(files)
    assert runs["KP603"].status == "ran" and not findings
    # a clusterCIDR that does hold the Service range: exactly the ClusterIPs, never the NodePort addresses
    cfg = files["node/kube-proxy/config.yaml"].decode().replace("clusterCIDR: 10.244.0.0/16", "clusterCIDR: 10.0.0.0/8")
    files["node/kube-proxy/config.yaml"] = cfg.encode()
    for ipset in (None, _files(NODEPORT_CNI)["node/ipset.txt"]):
        if ipset is not None:
            files["node/ipset.txt"] = ipset
        findings, _ = _run(files)
        assert [f.id for f in findings] == ["KP603"]
        assert findings[0].data["cluster_ips_inside"] == CLUSTER_IPS, findings[0].data


def _db(svc_ports, slice_ports):
    """shop/db with these ports, and its EndpointSlice: given() arguments."""
    return {
        "services": [k8s.service("shop", "db", "10.96.0.70", svc_ports, None)],
        "endpointslices": [k8s.endpointslice("shop", "db", [("192.168.60.20", True, None, None)], slice_ports)],
    }


def test_kp101_pairs_ports_by_name_as_kube_proxy_does():
    # an unnamed Service port and a slice port named 'pg': kube-proxy finds no endpoint for the port
    (f,) = given(**_db([k8s.port(5432, 5432)], [("pg", 5432, "TCP")])).fires("KP101")
    assert "(unnamed)" in f.summary and "'pg'" in f.summary and "nobody creates" not in f.summary, f.summary
    assert f.data["endpoint_port_names"] == ["pg"]
    given(**_db([k8s.port(5432, 5432, "pg")], [("pg", 5432, "TCP")])).silent("KP101")  # the names equal


def test_kp101_without_any_endpoint_says_nobody_creates_them():
    db = _db([k8s.port(5432, 5432, "pg")], [("pg", 5432, "TCP")])
    (f,) = given(services=db["services"], endpointslices=[]).fires("KP101")  # no EndpointSlice at all
    assert "no selector: nobody creates its endpoints" in f.summary


def test_fixture_selectorless_port_name():
    from kpdiag.commands.pipeline import analyze_bundle

    report = analyze_bundle(os.path.join(FIXTURES, "svc-selectorless-port-name"))
    first = report.extra["verdict"][0]
    assert "'pg'" in first and "'postgres'" in first and "(KP101)" in first, first
    assert "0 ready endpoint(s) of 0 (1 more listed under port names no Service port has)" in report.extra["verdict"][1]


def _two_service_cidrs() -> dict:
    """healthy-nftables' ruleset with a second ServiceCIDR: nft -j prints kube-proxy's drop rule with a set of two
    prefixes then (one CIDR it prints as a plain prefix: tests/lab/test_nft_focused_oracle.py loads both forms)."""
    import json

    from tests.given import base_files

    doc = json.loads(base_files("healthy-nftables")["node/nft-ruleset.json"])
    for item in doc["nftables"]:
        rule = item.get("rule") or {}
        if rule.get("chain") == "cluster-ips-check" and "unallocated" in (rule.get("comment") or ""):
            match = rule["expr"][0]["match"]
            match["right"] = {"set": [match["right"], {"prefix": {"addr": "10.200.0.0", "len": 16}}]}
    return {"node/nft-ruleset.json": json.dumps(doc)}


def test_kp603_reads_the_service_cidrs_of_kube_proxys_nftables_rule():
    """kube-proxy's nftables rule names the Service CIDR exactly. A clusterCIDR overlapping it with no ClusterIP inside
    is found: the rule's one CIDR is a plain prefix as the kernel lists it (a set form only was read, so KP603 was
    silent); with two ServiceCIDRs, an overlap with the second is found too."""
    (f,) = given(base="healthy-nftables", kube_proxy={"clusterCIDR": "10.96.128.0/17"}).fires("KP603")
    assert f.summary.startswith("kube-proxy's clusterCIDR 10.96.128.0/17 overlaps the Service CIDR 10.96.0.0/12"), f
    assert "table ip kube-proxy chain cluster-ips-check: ip daddr 10.96.0.0/12 drop" in [e.text for e in f.evidence]
    given(base="healthy-nftables").silent("KP603")
    (f,) = given(
        base="healthy-nftables", kube_proxy={"clusterCIDR": "10.200.64.0/18"}, files=_two_service_cidrs()
    ).fires("KP603")
    assert f.data["service_cidr"] == "10.200.0.0/16" and f.data["overlap"] == "10.200.64.0/18", f.data
    assert "ip daddr { 10.96.0.0/12, 10.200.0.0/16 } drop" in " ".join(e.text for e in f.evidence)
    given(base="healthy-nftables", files=_two_service_cidrs()).silent("KP603")


def _service_cidrs_as_listed(right: dict) -> dict:
    """healthy-nftables' ruleset with the drop rule's right side as nft -j lists it (see the test below)."""
    import json

    from tests.given import base_files

    doc = json.loads(base_files("healthy-nftables")["node/nft-ruleset.json"])
    for item in doc["nftables"]:
        rule = item.get("rule") or {}
        if rule.get("chain") == "cluster-ips-check" and "unallocated" in (rule.get("comment") or ""):
            rule["expr"][0]["match"]["right"] = right
    return {"node/nft-ruleset.json": json.dumps(doc)}


def test_kp603_reads_adjacent_service_cidrs_the_kernel_merged_into_a_range():
    """kube-proxy writes "ip daddr { 10.96.0.0/12, 10.112.0.0/16 } drop"; nft merges adjacent intervals of the
    anonymous set and lists one range, not two prefixes (nft 1.0.6, a real kernel: nft -j prints
    {"set": [{"range": ["10.96.0.0", "10.112.255.255"]}]}). A clusterCIDR overlapping the second ServiceCIDR with no
    ClusterIP inside is still an overlap."""
    files = _service_cidrs_as_listed({"set": [{"range": ["10.96.0.0", "10.112.255.255"]}]})
    (f,) = given(base="healthy-nftables", kube_proxy={"clusterCIDR": "10.112.128.0/17"}, files=files).fires("KP603")
    assert f.data["service_cidr"] == "10.112.0.0/16" and f.data["overlap"] == "10.112.128.0/17", f.data
    given(base="healthy-nftables", files=files).silent("KP603")
