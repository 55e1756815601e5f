"""kpdiag.bundle.store.list_items — the objects of a Kubernetes List, the first step of every reader of one — and
json_type, the words every shape message uses."""

from __future__ import annotations

from kpdiag.bundle.store import json_type, list_items


def test_the_objects_of_a_list():
    pod = {"kind": "Pod", "metadata": {"name": "a"}}
    assert list_items({"kind": "List", "items": [pod, "junk", None, {}]}) == [pod, {}]
    assert list_items({"items": []}) == []


def test_anything_else_is_not_a_list():
    for doc in (None, [], {"items": None}, {"items": {"a": 1}}, {"kind": "Pod", "metadata": {}}, "items"):
        assert list_items(doc) is None, doc


def test_json_types_in_words():
    assert [json_type(v) for v in ([], {}, "", 1, 1.5, True, None)] == [
        "a list",
        "an object",
        "a string",
        "a number",
        "a number",
        "a boolean",
        "null",
    ]
