"""The JSON Schemas under kpdiag/schemas, with their cross-references resolved (by $id, from the files themselves —
never fetched), for the tests that validate what kpdiag prints."""

from __future__ import annotations

import glob
import os

from kpdiag.schemas import load  # the same files, read by the same function as kpdiag's own checker

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "kpdiag", "schemas")


def validator(name: str):
    """A Draft 2020-12 validator for ``name`` that resolves ``report.schema.json``, ``trace.schema.json`` … locally."""
    import jsonschema
    from referencing import Registry, Resource

    resources = []
    for path in glob.glob(os.path.join(SCHEMAS, "*.schema.json")):
        doc = load(os.path.basename(path))
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return jsonschema.Draft202012Validator(load(name), registry=Registry().with_resources(resources))


def report_validator(report: dict):
    """The validator of a report's own kind (node, service, cluster)."""
    return validator(f"{report.get('kind', 'node')}-report.schema.json")
