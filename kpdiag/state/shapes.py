"""The JSON shape of each kind of API object kpdiag reads: the fields it uses, with the JSON type each must have.

API answers (kpdiag.collect) and bundle API files (kpdiag.state.cluster) are checked against these before anything
reads them (:func:`read_list`: the one reading of a List). Imports only json_type: every layer uses it.
"""

from __future__ import annotations

from typing import Any

from kpdiag.bundle.store import json_type

# The fields kpdiag reads from each kind of API object, with the JSON type each must have. API answers and bundle files
# are checked against these before anything reads them: an object of another shape (a list for `spec`, a string for
# `ports`) is left out with one line that names the field, instead of an AttributeError deep in a check. null is taken
# as absent (as the API server does); unknown fields are not looked at.
_STR, _INT, _BOOL = str, int, bool
_PORTLIKE = (int, str)
_LABELS = {str: str}
_META = {"name": _STR, "namespace": _STR, "labels": _LABELS, "annotations": _LABELS, "ownerReferences": [dict]}
_REQUIRED = {"metadata": dict}  # every object has metadata (and its name: see object_problem)
SHAPES: dict[str, dict[str, Any]] = {
    "Service": {
        "metadata": _META,
        "spec": {
            "selector": _LABELS,
            "ports": [
                {
                    "name": _STR,
                    "port": _INT,
                    "targetPort": _PORTLIKE,
                    "nodePort": _INT,
                    "protocol": _STR,
                    "appProtocol": _STR,
                }
            ],
            "clusterIP": _STR,
            "clusterIPs": [_STR],
            "type": _STR,
            "externalIPs": [_STR],
            "externalName": _STR,
            "externalTrafficPolicy": _STR,
            "internalTrafficPolicy": _STR,
            "healthCheckNodePort": _INT,
            "sessionAffinity": _STR,
            "ipFamilies": [_STR],
            "loadBalancerIP": _STR,
            "loadBalancerSourceRanges": [_STR],
            "trafficDistribution": _STR,
        },
        "status": {"loadBalancer": {"ingress": [{"ip": _STR, "hostname": _STR, "ipMode": _STR}]}},
    },
    "EndpointSlice": {
        "metadata": _META,
        "addressType": _STR,
        "endpoints": [
            {
                "addresses": [_STR],
                "conditions": {"ready": _BOOL, "serving": _BOOL, "terminating": _BOOL},
                "nodeName": _STR,
                "zone": _STR,
                "hostname": _STR,
                "targetRef": {"name": _STR, "namespace": _STR, "kind": _STR},
                "hints": {"forZones": [{"name": _STR}], "forNodes": [{"name": _STR}]},
            }
        ],
        "ports": [{"name": _STR, "port": _INT, "protocol": _STR, "appProtocol": _STR}],
    },
    "Pod": {
        "metadata": _META,
        "spec": {
            "nodeName": _STR,
            "hostNetwork": _BOOL,
            "containers": [
                {"name": _STR, "image": _STR, "ports": [{"name": _STR, "containerPort": _INT, "protocol": _STR}]}
            ],
            "initContainers": [{"name": _STR, "ports": [{"name": _STR, "containerPort": _INT, "protocol": _STR}]}],
        },
        "status": {
            "phase": _STR,
            "podIP": _STR,
            "podIPs": [{"ip": _STR}],
            "hostIP": _STR,
            "conditions": [{"type": _STR, "status": _STR}],
            "containerStatuses": [{"name": _STR, "ready": _BOOL, "restartCount": _INT, "state": dict, "image": _STR}],
        },
    },
    "Node": {
        "metadata": _META,
        "spec": {"podCIDR": _STR, "podCIDRs": [_STR], "unschedulable": _BOOL, "taints": [dict], "providerID": _STR},
        "status": {
            "addresses": [{"type": _STR, "address": _STR}],
            "conditions": [{"type": _STR, "status": _STR}],
            "nodeInfo": {str: _STR},
        },
    },
    "Namespace": {"metadata": _META},
    "NetworkPolicy": {"metadata": _META, "spec": dict},
    "DaemonSet": {"metadata": _META, "spec": dict, "status": dict},
    "ConfigMap": {"metadata": _META, "data": {str: _STR}},
    "Version": {"gitVersion": _STR, "major": _STR, "minor": _STR},
}


def _want(shape: Any) -> str:
    if isinstance(shape, tuple):
        return " or ".join(_want(s) for s in shape)
    if isinstance(shape, list):
        return "a list"
    if isinstance(shape, dict) or shape is dict:
        return "an object"
    return {str: "a string", int: "a number", bool: "a boolean"}.get(shape, str(shape))


def _fits(value: object, kind: Any) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _misfit(value: object, shape: Any) -> tuple[list[str], object, Any] | None:
    """None when ``value`` fits ``shape``; else (the path to the first field that does not, innermost last, reversed as
    it unwinds; that field's value; the shape it should have). Paths are only built on the way out of a misfit: the
    common case (everything fits) builds no string."""
    if isinstance(shape, tuple):
        return None if any(_fits(value, k) for k in shape) else ([], value, shape)
    if type(shape) is list:
        if type(value) is not list:
            return ([], value, shape)
        inner = shape[0]
        for i, item in enumerate(value):
            if item is None and inner is not dict and type(inner) is not dict:
                return ([f"[{i}]"], item, inner)
            bad = _misfit(item, inner)
            if bad:
                bad[0].append(f"[{i}]")
                return bad
        return None
    if type(shape) is dict:
        if type(value) is not dict:
            return ([], value, shape)
        if str in shape:  # a map: every value of that shape
            sub = shape[str]
            for k, v in value.items():
                if v is not None and type(v) is not sub:
                    bad = _misfit(v, sub)
                    if bad:
                        bad[0].append(f".{k}")
                        return bad
            return None
        for key, v in value.items():
            sub = shape.get(key)
            if sub is None or v is None:
                continue
            if sub is str or sub is bool:
                if type(v) is sub:
                    continue
            elif sub is int:
                if type(v) is int:
                    continue
            elif sub is dict:
                if type(v) is dict:
                    continue
            bad = _misfit(v, sub)
            if bad:
                bad[0].append(f".{key}")
                return bad
        return None
    return None if _fits(value, shape) else ([], value, shape)


def _shape_problem(value: object, shape: Any, path: str = "") -> str | None:
    """The first field of ``value`` that does not fit ``shape``, as "path is X, not Y"; None when it fits."""
    bad = _misfit(value, shape)
    if bad is None:
        return None
    parts, got, want = bad
    where = (path + "".join(reversed(parts))).lstrip(".") or "the value"
    return f"{where} is {json_type(got)}, not {_want(want)}"


def object_problem(obj: object, kind: str) -> str | None:
    """Why ``obj`` is not a ``kind`` object kpdiag can read — the first field of the wrong JSON type, named by its path
    (``spec.ports[0].port is a string, not a number``) — or None."""
    if not isinstance(obj, dict):
        return f"the {kind} is {json_type(obj)}, not an object"
    if kind != "Version":
        md = obj.get("metadata")
        if not isinstance(md, dict):
            return f"metadata is {json_type(md)}, not an object"
        if not isinstance(md.get("name"), str):
            return f"metadata.name is {json_type(md.get('name'))}, not a string"
    bad = _shape_problem(obj, SHAPES.get(kind, {}), "")
    if bad and kind != "Version":
        md = obj["metadata"]
        who = f"{md['namespace']}/{md['name']}" if isinstance(md.get("namespace"), str) else md["name"]
        return f"{kind} {who}: {bad}"
    return bad


def list_problem(doc: object) -> str | None:
    """Why ``doc`` is not a Kubernetes List (an object whose ``items`` is a list, ``metadata.continue`` a string), or
    None."""
    if not isinstance(doc, dict):
        return f"the answer is {json_type(doc)}, not an object with items"
    if not isinstance(doc.get("items"), list):
        return f"items is {json_type(doc.get('items'))}, not a list"
    md = doc.get("metadata")
    if md is not None and not isinstance(md, dict):
        return f"metadata is {json_type(md)}, not an object"
    token = (md or {}).get("continue")
    if token is not None and not isinstance(token, str):
        return f"metadata.continue is {json_type(token)}, not a string"
    return None


MAX_NAMED = 5  # malformed objects named one by one per List; the rest are counted


def read_list(doc: Any, kind: str | None = None) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """A Kubernetes List read the one way kpdiag reads one — an API answer (kpdiag.collect.cluster, kpdiag.fleet) or a
    bundle file (kpdiag.state.cluster): ``(objects, problems)``. ``objects`` is None when ``doc`` is not a List
    (``problems`` holds why: :func:`list_problem`); otherwise its items that are ``kind`` objects of a shape kpdiag
    reads (:func:`object_problem`; without ``kind``, any JSON object), and ``problems`` names each item left out
    (``items[3] left out, malformed: …``; the first :data:`MAX_NAMED`, then how many more)."""
    bad = list_problem(doc)
    if bad:
        return None, [bad]
    good, problems, dropped = [], [], 0
    for i, item in enumerate(doc["items"]):
        why = (
            object_problem(item, kind)
            if kind
            else (None if isinstance(item, dict) else f"{json_type(item)}, not an object")
        )
        if why is None:
            good.append(item)
            continue
        dropped += 1
        if dropped <= MAX_NAMED:
            problems.append(f"items[{i}] left out, malformed: {why}")
    if dropped > MAX_NAMED:
        problems.append(f"{dropped - MAX_NAMED} more malformed items left out")
    return good, problems
