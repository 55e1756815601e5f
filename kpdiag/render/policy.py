"""Render a ``kpdiag.policy/v1`` document (kpdiag policy) as text or JSON."""

from __future__ import annotations

import json

from .report import _wrap, output_width
from .safe import term, term_lines


def policy_to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def _line(text: str, indent: str, width: int) -> list[str]:
    """One line of the policy report, wrapped to ``width`` (continuation lines indented two more)."""
    return _wrap(text, width, indent, indent + "  ")


def _direction(d: dict, indent: str = "  ", width: int | None = None) -> list[str]:
    width = output_width(width)
    name = d["direction"]
    out: list[str] = []
    if not d["applies"]:
        out.extend(
            _line(f"{name}: {term(d['subject'])} is not a pod NetworkPolicy selects: not restricted", indent, width)
        )
        return out
    if not d["restricted"]:
        out.extend(_line(f"{name}: no NetworkPolicy selects {term(d['subject'])}: open", indent, width))
        return out
    if d["allowed"]:
        a = d.get("admitted_by")
        how = (
            f"admitted by {term(a['policy'])} rule {a['rule']} ({term(a['peer'])} on {term(a['ports'])})"
            if a
            else "admitted"
        )
        out.extend(_line(f"{name} ({term(d['subject'])}): {how}", indent, width))
        return out
    out.extend(
        _line(f"{name} ({term(d['subject'])}): DENIED — {term(d.get('missing') or 'no rule admits it')}", indent, width)
    )
    for pol, what in sorted((d.get("admits") or {}).items()):
        out.extend(_line(f"{term(pol)} {term(what)}", indent + "  ", width))
    if d.get("patch"):
        out.extend(_line("to admit exactly this flow (kubectl apply -f - <<'EOF' … EOF):", indent + "  ", width))
        out.extend(f"{indent}    {line}" for line in term_lines(d["patch"]).rstrip("\n").split("\n"))
    return out


def policy_to_text(doc: dict, width: int | None = None) -> str:
    width = output_width(width)
    verdict = "ALLOWED" if doc["allowed"] else "DENIED"
    out = _line(
        f"kpdiag policy: {term(doc['from'])} → {term(doc['to'])} port {term(doc['port'])}: {verdict}", "", width
    )
    if doc.get("endpoints") is not None:
        out.extend(_line("(policies act after the Service's DNAT: each endpoint pod at its targetPort)", "  ", width))
        for ep in doc["endpoints"]:
            if ep.get("error"):
                out.extend(
                    _line(f"endpoint {term(ep['endpoint'])}: cannot evaluate — {term(ep['error'])}", "  ", width)
                )
                continue
            verdict = "allowed" if ep["allowed"] else "DENIED"
            out.extend(
                _line(f"endpoint {term(ep['endpoint'])} ({term(ep.get('pod') or 'no pod')}): {verdict}", "  ", width)
            )
            out.extend(_direction(ep["egress"], "    ", width))
            out.extend(_direction(ep["ingress"], "    ", width))
    else:
        out.extend(_direction(doc["egress"], "  ", width))
        out.extend(_direction(doc["ingress"], "  ", width))
    enf = doc.get("enforcement") or {}
    if enf.get("cni"):
        how = (
            "enforced"
            if enf.get("enforced")
            else "NOT enforced"
            if enf.get("enforced") is False
            else "enforcement unknown"
        )
        out.extend(_line(f"CNI: {term(enf['cni'])} — NetworkPolicy {how}", "  ", width))
    for note in doc.get("notes") or []:
        out.extend(_wrap(note, width, "  note: ", "        "))
    if doc.get("problems"):
        out.append(f"could not read ({len(doc['problems'])}):")
        out.extend(w for p in doc["problems"] for w in _line(p, "  ", width))
    return "\n".join(out) + "\n"
