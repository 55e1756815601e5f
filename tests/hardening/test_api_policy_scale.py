"""`kpdiag policy` to a Service with thousands of endpoints: linear work, one proposal, the same answers; YAML documents
(kube-proxy's config, a kubeconfig) bounded in size and nodes before any parse work.

The time itself is measured in benchmarks/bench_policy.py (never timed here); these tests pin what makes it linear:
past SCAN_LOOKUPS look-ups the pod files are read once, and the answers are the ones the per-look-up search gives.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from kpdiag.parse import decode
from kpdiag.bundle.store import Bundle
from kpdiag.commands import listscan
from kpdiag.commands import policy as P
from kpdiag.errors import InputError
from kpdiag.parse.node import parse_kube_proxy_config
from tests.conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from bench_policy import write  # noqa: E402

SCHEMA = os.path.join(ROOT, "kpdiag", "schemas", "policy.schema.json")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("policy") / "b")
    write(d, 800, 20)  # pods.json over LAZY_BYTES: searched, not parsed whole
    assert os.path.getsize(os.path.join(d, "cluster", "pods.json")) > listscan.LAZY_BYTES
    return d


def _ask(d):
    return P.evaluate(Bundle.open(d), "client/app1-7f9c4d8b6-00800", "prod/svc/web", "80")


def test_many_endpoints_read_the_pods_once_and_answer_as_the_search_does(bundle, monkeypatch):
    reads = []
    real = decode.load_json
    monkeypatch.setattr(decode, "load_json", lambda text, *a, **kw: reads.append(len(text)) or real(text, *a, **kw))
    fast = _ask(bundle)
    big = [n for n in reads if n > listscan.LAZY_BYTES]
    assert len(big) == 1, reads  # pods.json decoded whole once, not searched 800 times
    monkeypatch.setattr(P, "SCAN_LOOKUPS", 10**9)  # every look-up a search of the file (the old way)
    slow = _ask(bundle)
    assert fast == slow
    assert len(fast["endpoints"]) == 800 and fast["allowed"] is False


def test_identical_proposals_are_merged(bundle):
    doc = _ask(bundle)
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA) as fh:
        jsonschema.validate(doc, json.load(fh))
    patches = [e["ingress"]["patch"] for e in doc["endpoints"]]
    proposed = [p for p in patches if p]
    assert len(proposed) == 1, len(proposed)
    assert proposed[0].startswith("# one policy for the 800 endpoints of Service prod/web that need it\n")
    assert "name: allow-app1-7f9c4d8b6-00800-to-web-80" in proposed[0]
    assert "app: web" in proposed[0] and "pod-template-hash" not in proposed[0]
    assert doc["ingress"]["patch"] == proposed[0]  # the Service-level summary proposes the same one
    assert any("the 800 denied endpoints need the same NetworkPolicy: it is proposed once" in n for n in doc["notes"])


def test_different_proposals_stay_apart(bundle, tmp_path):
    import shutil

    d = str(tmp_path / "b")
    shutil.copytree(bundle, d)
    path = os.path.join(d, "cluster", "pods.json")
    pods = json.load(open(path))
    pods["items"][3]["metadata"]["labels"]["canary"] = "yes"  # this endpoint's policy must select other labels
    json.dump(pods, open(path, "w"))
    doc = _ask(d)
    proposed = [e["ingress"]["patch"] for e in doc["endpoints"] if e["ingress"]["patch"]]
    assert len(proposed) == 2
    assert sum("canary: 'yes'" in p or 'canary: "yes"' in p or "canary: yes" in p for p in proposed) == 1


def test_a_large_yaml_config_is_refused_before_parsing():
    text = "kind: KubeProxyConfiguration\nmode: iptables\nx:\n" + "  - {a: 1, b: [x, y]}\n" * 100_000
    with pytest.raises(InputError) as exc:
        parse_kube_proxy_config(text, "node/kube-proxy/config.yaml")
    assert "larger than 1024 KiB (kpdiag's cap on a YAML document): refused, not parsed" in str(exc.value)


def test_a_yaml_config_of_too_many_nodes_is_refused():
    text = "kind: KubeProxyConfiguration\nx: [" + ", ".join(["1"] * (decode.MAX_YAML_NODES + 10)) + "]\n"
    assert len(text) < decode.MAX_YAML_BYTES
    with pytest.raises(InputError) as exc:
        parse_kube_proxy_config(text, "node/kube-proxy/config.yaml")
    assert f"more than {decode.MAX_YAML_NODES} nodes" in str(exc.value)


def test_alias_expansion_is_bounded():
    laughs = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")
    )
    with pytest.raises(decode.TooDeep, match="aliases are expanded"):
        decode.load_yaml(laughs)


def test_a_real_config_still_parses():
    cfg = parse_kube_proxy_config(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
        "mode: ipvs\nipvs: {strictARP: true}\nclusterCIDR: 10.244.0.0/16\n"
    )
    assert cfg.get("mode") == "ipvs"


class _Counted(bytes):
    """The file's bytes, counting the backward searches ListScan makes."""

    rfinds = 0

    def rfind(self, *args):
        type(self).rfinds += 1
        return super().rfind(*args)


@pytest.mark.parametrize("n", [500, 2000])
def test_a_value_in_many_small_items_is_searched_in_linear_work(n):
    """100,000 small items each holding the searched name (issue 38: past 30 s): each hit's walk back to its item
    stops where the previous hit's ended, so the work grows with the hits, not with their square; the answers (the
    real pod, and one problem line per hit outside any item) are the same."""
    pod = {"kind": "Pod", "metadata": {"name": "x", "namespace": "a"}, "status": {"podIP": "10.0.0.1"}}
    doc = {"apiVersion": "v1", "kind": "List", "items": [pod] + [{"name": "x"}] * n}
    raw = _Counted(json.dumps(doc, indent=1).encode())
    _Counted.rfinds = 0
    found = listscan.ListScan(raw).where("name", "x")
    items = [obj for _, obj in found if obj is not None]
    assert items == [pod] and len(found) == n + 1
    assert _Counted.rfinds <= 4 * (n + 1), _Counted.rfinds
