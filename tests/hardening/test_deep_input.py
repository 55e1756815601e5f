"""Issue 16 item 7: JSON and YAML nested 5,000 deep (or a YAML alias bomb) is a "could not read" line naming the
file, and the rest of the report is still there — never a RecursionError, never "internal error".

Before: ``kpdiag analyze`` of a bundle whose node/kube-proxy/config.yaml (or the ConfigMap's config.conf) was
nested 5,000 deep printed ``internal error: RecursionError`` and no report.
"""

import json
import subprocess
import sys

import pytest

from kpdiag.parse import decode
from kpdiag.fleet.aggregate import write_report_dir

DEEP = 5000
BLOCK_YAML = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nx:\n" + "".join(
    "  " * i + "k:\n" for i in range(1, DEEP)
)
BLOCK_DEEP_SMALL = BLOCK_YAML[: BLOCK_YAML.index("  " * 300 + "k:")]  # 300 levels, under the 1 MiB YAML cap
FLOW_YAML = "kind: KubeProxyConfiguration\nmode: ipvs\nx: " + "[" * DEEP + "]" * DEEP + "\n"
JSON_DEEP = '{"a":' * DEEP + "1" + "}" * DEEP
LAUGHS = "kind: KubeProxyConfiguration\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


def _bundle(tmp_path, files: dict[str, str]):
    b = tmp_path / "b"
    base = {
        "kpdiag.json": json.dumps({"format": "kpdiag-bundle/1", "node": "n1", "errors": []}),
        "node/sysctl.txt": "net.ipv4.ip_forward = 0\n",
    }  # KP501 fires from this: the rest of the report
    for rel, text in {**base, **files}.items():
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        (b / rel).write_text(text)
    return b


def _analyze(path) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "RecursionError" not in proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _problems(doc) -> list[str]:
    return [f"{p['source']}: {p['error']}" if isinstance(p, dict) else str(p) for p in doc.get("problems", [])]


@pytest.mark.parametrize(
    "text,words",
    [
        (BLOCK_DEEP_SMALL, "YAML nested deeper than 200 levels"),
        (BLOCK_YAML, "YAML larger than 1024 KiB (kpdiag's cap on a YAML document): refused, not parsed"),
        (FLOW_YAML, "YAML nested deeper than 200 levels"),
        (JSON_DEEP, "nested deeper than 200 levels"),
        (LAUGHS, "nodes once its aliases are expanded"),
    ],
    ids=["block", "block-big", "flow", "json", "laughs"],
)
def test_deep_kube_proxy_config_is_a_could_not_read_line(tmp_path, text, words):
    rc, doc, _ = _analyze(_bundle(tmp_path, {"node/kube-proxy/config.yaml": text}))
    probs = _problems(doc)
    assert any("node/kube-proxy/config.yaml" in p and words in p for p in probs), probs
    assert "KP501" in {f["id"] for f in doc["findings"]} and rc == 1  # the rest of the report is intact


@pytest.mark.parametrize(
    "configmap,words",
    [
        (JSON_DEEP, "cluster/kube-proxy-configmap.json: JSON nested deeper than 200 levels"),
        (
            json.dumps({"kind": "ConfigMap", "data": {"config.conf": BLOCK_DEEP_SMALL}}),
            "kube-proxy-configmap.json#config.conf: YAML nested deeper",
        ),
        (
            json.dumps({"kind": "ConfigMap", "data": {"config.conf": FLOW_YAML}}),
            "kube-proxy-configmap.json#config.conf: YAML nested deeper",
        ),
    ],
    ids=["json", "block-yaml", "flow-yaml"],
)
def test_deep_configmap_is_a_could_not_read_line(tmp_path, configmap, words):
    rc, doc, _ = _analyze(_bundle(tmp_path, {"cluster/kube-proxy-configmap.json": configmap}))
    probs = _problems(doc)
    assert any(words in p for p in probs), probs
    assert "KP501" in {f["id"] for f in doc["findings"]} and rc == 1


@pytest.mark.parametrize(
    "rel",
    [
        "cluster/services.json",
        "cluster/endpointslices.json",
        "node/ip-addr.json",
        "node/kube-proxy/healthz.json",
        "kpdiag.json",
    ],
)
def test_deep_json_anywhere_in_a_bundle(tmp_path, rel):
    rc, doc, _ = _analyze(_bundle(tmp_path, {rel: JSON_DEEP}))
    probs = _problems(doc)
    assert any(rel in p and "nested deeper than" in p for p in probs), probs
    assert "KP501" in {f["id"] for f in doc["findings"]}


@pytest.mark.parametrize(
    "text",
    [
        '{"nftables": [{"metainfo": {}}, ' + JSON_DEEP + "]}",  # streamed item by item
        '{"x": 1, "nftables": [' + JSON_DEEP + "]}",
    ],
    ids=["streamed", "whole"],
)
def test_deep_nft_ruleset(tmp_path, text):
    from kpdiag.bundle.store import Bundle
    from kpdiag.state.node import NodeState

    state = NodeState(Bundle.open(str(_bundle(tmp_path, {"node/nft-ruleset.json": text}))))
    assert state.nft() is None
    assert any("nft-ruleset.json" in str(p) and "nested deeper than 200" in str(p) for p in state.problems), (
        state.problems
    )


def test_deep_node_reports_and_cluster_json(tmp_path):
    """kpdiag cluster --save-dir output (or reports from pods' logs) nested 5,000 deep: named failures, the rest aggregated."""
    from tests.fleet.test_aggregate import _node  # a real node report from a fixture

    d = tmp_path / "run"
    write_report_dir(str(d), [_node("a"), _node("b")], {"api_version": "v1.31.4", "local_itp": []})
    (d / "nodes" / "deep.json").write_text(JSON_DEEP)
    (d / "nodes" / "wrapped.json").write_text(
        "kpdiag: collecting\n" + '{"schema": "kpdiag.report/v1", "x": ' + "[" * DEEP + "]" * DEEP + "}\n"
    )
    rc, doc, _ = _analyze(d)
    failures = {f["node"]: f["reason"] for f in doc["extra"]["failures"]}
    assert "nested deeper than 200 levels" in failures["deep"] and "nodes/deep.json" in failures["deep"]
    assert "nested deeper than 200 levels" in failures["wrapped"]
    assert doc["facts"]["nodes_diagnosed"] == 2
    (d / "cluster.json").write_text(JSON_DEEP)
    rc, doc, _ = _analyze(d)
    failures = {f["node"]: f["reason"] for f in doc["extra"]["failures"]}
    assert "unreadable run summary" in failures["cluster.json"] and "nested deeper" in failures["cluster.json"]
    assert doc["facts"]["nodes_diagnosed"] == 2


def test_the_depth_check_agrees_with_the_decoder():
    """json_too_deep never says 'shallow' for a document deeper than the limit (strings with brackets and escapes)."""
    import random

    rnd = random.Random(16)

    def gen(d):
        if d == 0:
            return rnd.choice(["[", '\\"', "\\\\", "]{", "x", 1, '""', "\\"])
        if rnd.random() < 0.5:
            return [gen(d - 1) for _ in range(rnd.randint(0, 3))]
        return {rnd.choice(["[", "k", '"', "\\", "{"]): gen(d - 1) for _ in range(rnd.randint(0, 3))}

    def depth(o):
        if isinstance(o, (list, dict)):
            return 1 + max([depth(v) for v in (o.values() if isinstance(o, dict) else o)] or [0])
        return 0

    for _ in range(1500):
        o = gen(rnd.randint(0, 10))
        text = json.dumps(o, ensure_ascii=rnd.random() < 0.5)
        for limit in (1, 2, 3, 5, 8):
            for t in (text, text + " " * 70000):  # the short-text shortcut and the C-speed path
                assert decode.json_too_deep(t, limit) == (depth(o) > limit), (text, limit)


def test_bounded_loaders_accept_real_documents():
    assert decode.load_yaml("mode: ipvs\nipvs: {strictARP: true}\nx: &x [1]\ny: *x\n")["y"] == [1]
    assert decode.load_json('{"a": [[[]]], "s": "[[[[[[\\"]]"}')["a"] == [[[]]]
    doc = {
        "items": [
            {"metadata": {"name": f"s{i}", "labels": {"a": "[{"}}, "spec": {"ports": [{"port": i}]}}
            for i in range(5000)
        ]
    }
    assert decode.load_json(json.dumps(doc)) == doc
