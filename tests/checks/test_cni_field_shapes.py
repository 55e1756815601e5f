"""Field shapes the healthy zoo does not build, made by editing copies of its recorded nodes: what real clusters do
on purpose must stay silent (a NAT'd flannel public-ip, an etcd-backed flannel, a Node named by the host's FQDN),
and the API's odd values must not crash a check."""

from __future__ import annotations

import json
import os
import shutil

from kpdiag.commands.pipeline import analyze_bundle

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")
FLANNEL = "flannel.alpha.coreos.com/"


def _copy(tmp_path, name: str, edit) -> str:
    out = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), out)
    path = out / "cluster" / "nodes.json"
    doc = json.loads(path.read_text())
    edit(doc["items"])
    path.write_text(json.dumps(doc))
    return str(out)


def _runs(path: str) -> tuple[set, dict]:
    report = analyze_bundle(path)
    return {f.id for f in report.findings}, {r.id: r for r in report.checks}


def test_a_public_ip_published_on_purpose_behind_nat_is_not_foreign(tmp_path):
    def nat(items, overwrite):
        notes = items[0]["metadata"]["annotations"]
        notes[FLANNEL + "public-ip"] = "203.0.113.10"
        if overwrite:
            notes[FLANNEL + "public-ip-overwrite"] = "203.0.113.10"

    fired, _ = _runs(_copy(tmp_path, "zoo-flannel-vxlan-docker", lambda items: nat(items, False)))
    assert "KP632" in fired  # not held by the node, not said to be meant: flannel took the wrong address
    (tmp_path / "zoo-flannel-vxlan-docker").rename(tmp_path / "first")
    fired, runs = _runs(_copy(tmp_path, "zoo-flannel-vxlan-docker", lambda items: nat(items, True)))
    assert "KP632" not in fired and runs["KP632"].status == "ran"


def test_an_etcd_backed_flannel_is_not_judged_by_podcidrs(tmp_path):
    def etcd(items):
        for n in items:
            n["metadata"]["annotations"].pop(FLANNEL + "kube-subnet-manager", None)

    fired, runs = _runs(_copy(tmp_path, "flannel-cni0-stale-address", etcd))
    assert "KP630" not in fired and runs["KP630"].status == "skipped"
    assert "kube-subnet-manager" in runs["KP630"].reason


def test_this_node_is_found_by_its_fqdn_or_another_case(tmp_path):
    def fqdn(items):
        items[0]["metadata"]["name"] = items[0]["metadata"]["name"].upper() + ".example.internal"

    fired, _ = _runs(_copy(tmp_path, "flannel-cni0-stale-address", fqdn))
    assert "KP630" in fired


def test_a_malformed_podcidr_is_no_internal_error(tmp_path):
    def bad(items):
        items[0]["spec"] = {"podCIDR": "10.244.1.0/33", "podCIDRs": ["10.244.1.0/33"]}

    _, runs = _runs(_copy(tmp_path, "flannel-cni0-stale-address", bad))
    assert not [r for r in runs.values() if r.status == "error"], [r for r in runs.values() if r.status == "error"]
