"""The one reading of a Kubernetes List (kpdiag.state.shapes.read_list): what it keeps, what it names, and the bundle's
API view (ClusterView) reading a file through it."""

from __future__ import annotations

import json

from kpdiag.bundle import sources
from kpdiag.bundle.store import Bundle
from kpdiag.state.cluster import ClusterView
from kpdiag.state.shapes import MAX_NAMED, read_list


def _svc(name: str, **spec) -> dict:
    return {
        "kind": "Service",
        "metadata": {"namespace": "shop", "name": name},
        "spec": {"clusterIP": "10.96.0.9", **spec},
    }


def test_a_list_keeps_the_objects_of_its_kind_and_names_the_others():
    doc = {"items": [_svc("web"), _svc("api", ports="80"), 7, _svc("db")]}
    objects, problems = read_list(doc, "Service")
    assert [o["metadata"]["name"] for o in objects] == ["web", "db"]
    assert problems == [
        "items[1] left out, malformed: Service shop/api: spec.ports is a string, not a list",
        "items[2] left out, malformed: the Service is a number, not an object",
    ]


def test_without_a_kind_any_object_is_kept():
    objects, problems = read_list({"items": [{"a": 1}, "x"]})
    assert objects == [{"a": 1}]
    assert problems == ["items[1] left out, malformed: a string, not an object"]


def test_what_is_not_a_list_says_why():
    assert read_list([1, 2], "Pod") == (None, ["the answer is a list, not an object with items"])
    assert read_list({"items": {}}, "Pod") == (None, ["items is an object, not a list"])
    assert read_list({"items": [], "metadata": {"continue": 3}}) == (
        None,
        ["metadata.continue is a number, not a string"],
    )


def test_past_the_first_few_malformed_objects_are_counted():
    objects, problems = read_list({"items": [None] * (MAX_NAMED + 3)}, "Pod")
    assert objects == []
    assert len(problems) == MAX_NAMED + 1
    assert problems[-1] == "3 more malformed items left out"


def _view(doc) -> tuple[ClusterView, Bundle]:
    bundle = Bundle.from_files("t", {sources.SERVICES: json.dumps(doc).encode()})
    return ClusterView(bundle), bundle


def test_the_bundle_view_reads_its_files_the_same_way_and_records_what_it_left_out():
    view, bundle = _view({"apiVersion": "v1", "kind": "List", "items": [_svc("web"), _svc("bad", selector=[])]})
    assert [s.name for s in view.services()] == ["web"]
    assert [p.error for p in bundle.problems] == [
        "items[1] left out, malformed: Service shop/bad: spec.selector is a list, not an object"
    ]


def test_one_object_reads_as_a_list_of_it_and_anything_else_is_a_problem():
    view, _ = _view(_svc("web"))
    assert [s.name for s in view.services()] == ["web"]
    view, bundle = _view({"hello": "world"})
    assert view.services() is None
    assert [p.error for p in bundle.problems] == ['not a Kubernetes List or object (expected {"items": [...]})']
