"""The JSON Schemas of what kpdiag writes, and a small checker for the recorded documents a report copies.

A service report carries the bundle's ``probes/service.json`` and ``probes/dns.json`` as they were recorded; a bundle
is somebody else's data (edited by hand, written by an older kpdiag, hostile). Before copying one into a report,
:func:`violation` checks it against its schema, so a report never fails its own schema: a document that does not
conform is left out, and the report says why (a problem). The checker covers the keywords these schemas use — type,
required, properties, additionalProperties, items, enum, const, minimum, maximum, minItems, maxItems, minLength,
oneOf, anyOf, allOf, local $ref — and refuses a schema that uses another (tests/packaging/test_schemas.py compares it
with the jsonschema library on every fixture's documents and on broken ones).
"""

from __future__ import annotations

import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_CACHE: dict[str, dict] = {}
_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}
SUPPORTED = {
    "$schema", "$id", "$ref", "$defs", "title", "description", "type", "required", "properties",
    "additionalProperties", "items", "enum", "const", "minimum", "maximum", "minItems", "maxItems", "minLength",
    "oneOf", "anyOf", "allOf",
}  # fmt: skip


def load(name: str) -> dict:
    """A schema of this folder by file name (``probes.schema.json``)."""
    if name not in _CACHE:
        with open(os.path.join(HERE, os.path.basename(name)), encoding="utf-8") as fh:
            _CACHE[name] = json.load(fh)
    return _CACHE[name]


def _is(value, t: str) -> bool:
    if t in ("integer", "number"):  # JSON has no Infinity or NaN (Python reads 1e999 as inf): never a number here
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return t == "number" or isinstance(value, int) or value.is_integer()  # 5.0 is an integer in JSON Schema
    return isinstance(value, _TYPES[t]) and not (t != "boolean" and isinstance(value, bool))


def _resolve(ref: str, root: dict) -> tuple[dict, dict]:
    doc, _, pointer = ref.partition("#")
    base = load(doc) if doc else root
    node = base
    for part in [p for p in pointer.split("/") if p]:
        node = node[part]
    return node, base


def _check(value, schema: dict, root: dict, where: str) -> str | None:
    """The first way ``value`` breaks ``schema`` (keywords in this order: $ref, the scalar ones, an object's, an
    array's, allOf/oneOf/anyOf), or None."""
    unknown = set(schema) - SUPPORTED
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} not supported by kpdiag.schemas.violation")
    for part in (_check_ref, _check_scalar, _check_object, _check_array, _check_combined):
        why = part(value, schema, root, where)
        if why:
            return why
    return None


def _check_ref(value, schema: dict, root: dict, where: str) -> str | None:
    if "$ref" not in schema:
        return None
    target, base = _resolve(schema["$ref"], root)
    return _check(value, target, base, where)


def _check_scalar(value, schema: dict, root: dict, where: str) -> str | None:
    """type, const, enum, minimum, maximum, minLength."""
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_is(value, x) for x in types):
            return f"{where}: {type(value).__name__} where {' or '.join(types)} is expected"
    if "const" in schema and value != schema["const"]:
        return f"{where}: {value!r:.40} is not {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r:.40} is not one of {schema['enum']}"
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where}: {value} is below {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where}: {value} is above {schema['maximum']}"
    if isinstance(value, str) and "minLength" in schema and len(value) < schema["minLength"]:
        return f"{where}: shorter than {schema['minLength']}"
    return None


def _check_object(value, schema: dict, root: dict, where: str) -> str | None:
    """required, properties, additionalProperties."""
    if not isinstance(value, dict):
        return None
    for key in schema.get("required", ()):
        if key not in value:
            return f"{where}: {key!r} is missing"
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            why = _check(item, props[key], root, f"{where}.{key}")
        elif extra is False:
            why = f"{where}: {key!r:.40} is not expected"
        elif isinstance(extra, dict):
            why = _check(item, extra, root, f"{where}.{key}")
        else:
            why = None
        if why:
            return why
    return None


def _check_array(value, schema: dict, root: dict, where: str) -> str | None:
    """minItems, maxItems, items."""
    if not isinstance(value, list):
        return None
    if "minItems" in schema and len(value) < schema["minItems"]:
        return f"{where}: fewer than {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{where}: more than {schema['maxItems']} items"
    if isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            why = _check(item, schema["items"], root, f"{where}[{i}]")
            if why:
                return why
    return None


def _check_combined(value, schema: dict, root: dict, where: str) -> str | None:
    """allOf, oneOf, anyOf."""
    for sub in schema.get("allOf", ()):
        why = _check(value, sub, root, where)
        if why:
            return why
    for key, exactly_one in (("oneOf", True), ("anyOf", False)):
        if key in schema:
            matched = [s for s in schema[key] if _check(value, s, root, where) is None]
            if not matched or (exactly_one and len(matched) > 1):
                return f"{where}: matches {len(matched)} of the {len(schema[key])} forms allowed"
    return None


def violation(document, name: str) -> str | None:
    """The first way ``document`` breaks the schema ``name`` (``file.schema.json`` or ``file.schema.json#/$defs/x``),
    in one line, or None when it conforms."""
    schema, root = _resolve(name, {}) if "#" in name else (load(name), load(name))
    return _check(document, schema, root, "$")
