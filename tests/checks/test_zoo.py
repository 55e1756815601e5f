"""The healthy zoo (fixtures/zoo-*, recorded by fixtures/zoo.py on the real kernel): healthy nodes of every common CNI
shape must stay silent — no warning, no error — and kpdiag must recognise each node's CNI from the node itself."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kpdiag.commands.pipeline import analyze_bundle

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")
ZOO = sorted(d for d in os.listdir(FIXTURES) if d.startswith("zoo-"))

# the shapes the issue asks the zoo to hold, each at least once
SHAPES = {
    "flannel (VXLAN)",
    "flannel (host-gw)",
    "Calico (IPIP)",
    "Calico (VXLAN)",
    "Calico (BGP, no encapsulation)",
    "Calico (eBPF dataplane)",
    "Cilium (VXLAN)",
    "AWS VPC CNI",
    "Antrea",
    "kube-router",
}


def _scenario(name: str) -> dict:
    with open(os.path.join(FIXTURES, name, "scenario.json"), encoding="utf-8") as fh:
        return json.load(fh)


def test_the_zoo_holds_every_common_shape():
    assert SHAPES <= {_scenario(n)["cni"] for n in ZOO}
    modes = set()
    for n in ZOO:
        with open(os.path.join(FIXTURES, n, "scenario.json"), encoding="utf-8") as fh:
            modes.add(
                "nftables" if "nft" in n else "none" if "KP708" in json.load(fh)["expect"]["fires"] else "iptables"
            )
    assert {"iptables", "nftables", "none"} <= modes


@pytest.mark.parametrize("name", ZOO)
def test_a_healthy_zoo_node_gets_no_warning_or_error(name):
    report = analyze_bundle(os.path.join(FIXTURES, name))
    loud = [(f.id, f.summary) for f in report.findings if f.severity in ("warning", "error")]
    assert loud == [], name
    assert not report.problems, report.problems


@pytest.mark.parametrize("name", ZOO)
def test_the_cni_is_recognised_from_the_node(name, tmp_path):
    """Recognised from the node's own interfaces, routes, processes and maps: without the API's DaemonSets too."""
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

    want = _scenario(name)["cni"]
    copy = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), copy)
    assert NodeState(Bundle.open(str(copy))).cni.label == want
    if (copy / "cluster" / "cni.json").exists():
        os.unlink(copy / "cluster" / "cni.json")
    state = NodeState(Bundle.open(str(copy)))
    assert state.cni.label == want
    assert state.cni.signs


def test_pod_cidr_route_verdicts_only_where_the_cni_routes_node_pod_cidrs():
    """KP610 runs on the flannel and kube-router nodes and is skipped, with the CNI named, everywhere else."""
    for name in ZOO:
        runs = {r.id: r for r in analyze_bundle(os.path.join(FIXTURES, name)).checks}
        cni = _scenario(name)["cni"]
        if cni.startswith(("flannel", "kube-router")):
            assert runs["KP610"].status == "ran", (name, runs["KP610"])
        else:
            assert runs["KP610"].status == "skipped" and cni in runs["KP610"].reason, (name, runs["KP610"])
