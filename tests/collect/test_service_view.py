"""`kpdiag node --service NS/NAME` with the API reads that Service only (ClusterCollector.service_view).

Against the loopback API server (tests/apiserver.py, the real kubernetes client) holding each fixture's API objects
and many other Services: the focused read's requests are the Service's GET, its EndpointSlices' list in its namespace
and this node's GET — nothing that lists the cluster — and the bundle it makes (the focused rules of
tests/checks/test_partial_bundles.py, the focused API objects, the manifest's partial "holds" naming both) judges the
Service exactly as the whole rules with every Service and EndpointSlice do; a check that judges every Service is
skipped there, saying so.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from tests import k8sobjects as k8s
from tests.apiserver import ApiServer
from tests.checks.test_partial_bundles import FIXTURE_NAMES, FIXTURES, _key, _partial_bundle, _service, _services

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle
from kpdiag.checkapi import load_registry
from kpdiag.commands.diagnose import analyze_state
from kpdiag.commands.nodeapi import api_files, api_holds
from kpdiag.state.node import NodeState

API_FIXTURES = [n for n in FIXTURE_NAMES if os.path.isfile(os.path.join(FIXTURES, n, sources.SERVICES))]
API_SOURCES = (sources.SERVICES, sources.ENDPOINTSLICES, sources.NODES)
WHOLE_SERVICES = {c.id for c in load_registry().checks if "whole-services" in c.needs}


def filler(n: int) -> list[dict]:
    """``n`` Services (and an EndpointSlice each) in namespaces of their own: what a big cluster holds besides."""
    out = []
    for i in range(n):
        ns, name = f"fill{i % 50}", f"svc{i}"
        ip = f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}"
        out.append(k8s.service(ns, name, ip, [k8s.port(80, 8080, "http")], {"app": name}))
        out.append(
            k8s.endpointslice(
                ns, name, [(f"10.250.{i // 256 % 256}.{i % 256}", True, "n2", f"p{i}")], [("http", 8080, "TCP")]
            )
        )
    return out


def _objects(d: str) -> list[dict]:
    b = Bundle.open(d)
    out = []
    for src, kind in zip(API_SOURCES, ("Service", "EndpointSlice", "Node")):
        for item in (b.read_json(src) or {}).get("items") or []:
            out.append({"kind": kind, **item})
    return out


def _allowed(svc: str, node: str | None) -> set[tuple[str, str]]:
    ns, name = svc.split("/")
    out = {
        ("GET", f"/api/v1/namespaces/{ns}/services/{name}"),
        ("GET", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
    }
    if node:
        out.add(("GET", f"/api/v1/nodes/{node}"))
    return out


def _bundle(base: dict, manifest: dict, api: dict) -> NodeState:
    files = {k: v for k, v in base.items() if k not in API_SOURCES}
    files.update(api)
    files["kpdiag.json"] = json.dumps(manifest).encode()
    return NodeState(Bundle.from_files("node", files))


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(d):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), d)
            if rel != "scenario.json":
                out[rel] = open(os.path.join(dirpath, n), "rb").read()
    return out


def test_api_fixtures_found():
    assert len(API_FIXTURES) >= 8, API_FIXTURES
    assert {"KP509", "KP520", "KP603"} <= WHOLE_SERVICES  # NodePorts, endpoints, ClusterIPs of every Service


@pytest.mark.parametrize("name", API_FIXTURES)
def test_focused_api_read_judges_the_service_as_a_full_read(name, tmp_path, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    d = os.path.join(FIXTURES, name)
    whole = _files(d)
    manifest = json.loads(whole.pop("kpdiag.json"))
    node = manifest.get("node")
    api_svcs = [s for s in _services(d, whole[sources.IPTABLES_SAVE].decode()) if s.count("/") == 1][:4]
    objects = _objects(d) + filler(300)
    with ApiServer(objects) as api:
        kc = api.kubeconfig(tmp_path)
        full_api, errors, _ = api_files(node, kubeconfig=kc)
        node_errors = [e for e in errors if e["source"] == sources.NODES]  # a fixture without its Node: both say so
        assert errors == node_errors
        for svc in api_svcs:
            before = len(api.requests)
            focused_api, errors, _ = api_files(node, kubeconfig=kc, service=svc)
            calls = set(api.requests[before:])
            known = Bundle.from_files("x", full_api).read_json(sources.SERVICES)["items"]
            if not any(f"{i['metadata']['namespace']}/{i['metadata']['name']}" == svc for i in known):
                continue  # a Service only the rules name (a leftover): the lookup lists its namespace (KP110's)
            assert errors == node_errors, errors
            assert calls <= _allowed(svc, node), calls - _allowed(svc, node)
            out = tmp_path / re.sub(r"\W", "_", svc)
            assert _partial_bundle(d, str(out), svc)
            part_files = _files(str(out))
            part_manifest = json.loads(part_files.pop("kpdiag.json"))
            part_manifest["partial"]["holds"].update(api_holds(svc, focused_api))
            part = analyze_state(_bundle(part_files, part_manifest, focused_api))
            full = analyze_state(_bundle(whole, manifest, full_api))
            # what the focused read can judge of this Service (a check of every Service is skipped on it, below)
            mine = lambda r, svc=svc: sorted(  # noqa: E731
                _key(f) for f in r.findings if _service(f) == svc and f.id not in WHOLE_SERVICES
            )
            assert mine(part) == mine(full), (name, svc)
            assert all(_service(f) in (None, svc) for f in part.findings), (name, svc)
            assert {f.id for f in part.findings} <= {f.id for f in full.findings}, (name, svc)
            skipped = {c.id: c.reason or "" for c in part.checks if c.status == "skipped"}
            for cid in WHOLE_SERVICES:  # never run on one Service's read: skipped as partial, or as not for this mode
                reason = skipped.get(cid, "")
                assert "partial bundle" in reason or "this check is about" in reason, (cid, reason)


def test_ten_thousand_services_one_read(tmp_path, monkeypatch):
    """10,000 Services in the server: the focused read makes three requests, all for that Service and this node, and
    reads the same Service and EndpointSlices as the paged lists of everything."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    objs = filler(10_000) + [k8s.node("node-a")]
    with ApiServer(objs) as api:
        kc = api.kubeconfig(tmp_path)
        focused, errors, _ = api_files("node-a", kubeconfig=kc, service="fill7/svc5007")
        calls = list(api.requests)
        assert errors == []
        assert len(calls) == 3 and set(calls) == _allowed("fill7/svc5007", "node-a"), calls
        full, errors, _ = api_files("node-a", kubeconfig=kc)
        assert errors == [] and ("GET", "/api/v1/services") in api.requests[3:]  # a full run lists everything
    got = {src: json.loads(focused[src])["items"] for src in API_SOURCES}
    every = {src: json.loads(full[src])["items"] for src in API_SOURCES}
    assert len(every[sources.SERVICES]) == 10_000
    assert [s["metadata"]["name"] for s in got[sources.SERVICES]] == ["svc5007"]
    assert got[sources.SERVICES] == [s for s in every[sources.SERVICES] if s["metadata"]["name"] == "svc5007"]
    assert got[sources.ENDPOINTSLICES] == [
        s
        for s in every[sources.ENDPOINTSLICES]
        if s["metadata"]["labels"]["kubernetes.io/service-name"] == "svc5007" and s["metadata"]["namespace"] == "fill7"
    ]
    assert got[sources.NODES] == every[sources.NODES]
    holds = api_holds("fill7/svc5007", focused)
    assert set(holds) == {sources.SERVICES, sources.ENDPOINTSLICES}


def test_a_service_the_api_does_not_have(tmp_path, monkeypatch):
    """Not found: an empty Service list and the lookup (the namespace's names, the same name elsewhere) — never the
    cluster's whole lists."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    with ApiServer(filler(200) + [k8s.node("node-a")]) as api:
        files, errors, _ = api_files("node-a", kubeconfig=api.kubeconfig(tmp_path), service="fill3/nope")
        calls = list(api.requests)
    assert errors == []
    assert json.loads(files[sources.SERVICES])["items"] == []
    lookup = json.loads(files[sources.SERVICE_LOOKUP])
    assert lookup["found"] is False and "svc3" in lookup["names_in_namespace"]
    assert ("GET", "/api/v1/endpointslices") not in calls
    assert all(p != "/api/v1/services" or m != "GET" for m, p in calls[:2])
