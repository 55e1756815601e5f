"""Is a node report a well-formed kpdiag.report/v1 document? The schema's types and patterns for what the cluster
report copies from it, checked before a node's report is used (kpdiag/fleet/runner.py)."""

from __future__ import annotations

import re

from kpdiag.bundle.store import json_type

_ID = re.compile(r"KP[0-9]{3}")
_SLUG = re.compile(r"[a-z0-9-]+")
_TYPES = {
    "schema": str,
    "kpdiag_version": str,
    "subject": str,
    "readable": bool,
    "summary": dict,
    "facts": dict,
    "findings": list,
    "checks": list,
    "problems": list,
    "extra": dict,
}


def report_problem(doc: dict) -> str | None:
    """Why a node report is not a well-formed kpdiag.report/v1 document (the schema's types and patterns for what the
    cluster report copies from it), in a few words; None when it is."""
    for key, kind in _TYPES.items():
        if key not in doc:
            if key == "extra":
                continue
            return f'"{key}" is missing'
        if not isinstance(doc[key], kind) or (kind is not bool and isinstance(doc[key], bool)):
            return f'"{key}" is {json_type(doc[key])}, not {json_type(kind())}'
    for key in ("error", "warning", "info"):
        value = doc["summary"].get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f'"summary.{key}" is {json_type(value)}, not a count'
    for i, f in enumerate(doc["findings"]):
        why = _finding_problem(f, f"findings[{i}]")
        if why is not None:
            return why
    for i, p in enumerate(doc["problems"]):
        if not isinstance(p, dict) or not isinstance(p.get("source"), str) or not isinstance(p.get("error"), str):
            return f"problems[{i}] is not a source and an error"
    for i, c in enumerate(doc["checks"]):
        if (
            not isinstance(c, dict)
            or not isinstance(c.get("id"), str)
            or c.get("status") not in ("ran", "skipped", "error")
        ):
            return f"checks[{i}] is not a check run"
    return None


def _finding_problem(f: object, where: str) -> str | None:
    """Why one finding is not of the schema, or None."""
    if not isinstance(f, dict):
        return f"{where} is {json_type(f)}, not an object"
    if not isinstance(f.get("id"), str) or not _ID.fullmatch(f["id"]):
        return f"{where}.id is not a check id (KPnnn)"
    if not isinstance(f.get("slug"), str) or not _SLUG.fullmatch(f["slug"]):
        return f"{where}.slug is not a check slug"
    if f.get("severity") not in ("error", "warning", "info"):
        return f"{where}.severity is not error, warning or info"
    for key in ("title", "summary", "explanation"):
        if not isinstance(f.get(key), str):
            return f"{where}.{key} is {json_type(f.get(key))}, not a string"
    if not f["summary"] or not f["explanation"]:
        return f"{where} has an empty summary or explanation"
    if f.get("subject") is not None and not isinstance(f.get("subject"), str):
        return f"{where}.subject is {json_type(f.get('subject'))}, not a string"
    for key in ("fix", "references"):
        if not isinstance(f.get(key), list) or not all(isinstance(x, str) for x in f[key]):
            return f"{where}.{key} is not a list of strings"
    if not f["fix"]:
        return f"{where}.fix is empty"
    return _evidence_problem(f.get("evidence"), f"{where}.evidence")


def _evidence_problem(evidence: object, where: str) -> str | None:
    """Why a finding's evidence is not a list of sources and texts (with line numbers), or None."""
    if not isinstance(evidence, list):
        return f"{where} is {json_type(evidence)}, not a list"
    for j, e in enumerate(evidence):
        if not isinstance(e, dict) or not isinstance(e.get("source"), str) or not isinstance(e.get("text"), str):
            return f"{where}[{j}] is not a source and a text"
        line = e.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
            return f"{where}[{j}].line is not a line number"
    return None
