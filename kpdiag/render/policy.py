"""Render a ``kpdiag.policy/v1`` document (kpdiag policy) as text or JSON."""

from __future__ import annotations

import json

from .safe import term, term_lines


def policy_to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def _direction(d: dict, indent: str = "  ") -> list[str]:
    name = d["direction"]
    out = []
    if not d["applies"]:
        out.append(f"{indent}{name}: {term(d['subject'])} is not a pod NetworkPolicy selects: not restricted")
        return out
    if not d["restricted"]:
        out.append(f"{indent}{name}: no NetworkPolicy selects {term(d['subject'])}: open")
        return out
    if d["allowed"]:
        a = d.get("admitted_by")
        how = (
            f"admitted by {term(a['policy'])} rule {a['rule']} ({term(a['peer'])} on {term(a['ports'])})"
            if a
            else "admitted"
        )
        out.append(f"{indent}{name} ({term(d['subject'])}): {how}")
        return out
    out.append(f"{indent}{name} ({term(d['subject'])}): DENIED — {term(d.get('missing') or 'no rule admits it')}")
    for pol, what in sorted((d.get("admits") or {}).items()):
        out.append(f"{indent}  {term(pol)} {term(what)}")
    if d.get("patch"):
        out.append(f"{indent}  to admit exactly this flow (kubectl apply -f - <<'EOF' … EOF):")
        out.extend(f"{indent}    {line}" for line in term_lines(d["patch"]).rstrip("\n").split("\n"))
    return out


def policy_to_text(doc: dict) -> str:
    verdict = "ALLOWED" if doc["allowed"] else "DENIED"
    out = [f"kpdiag policy: {term(doc['from'])} → {term(doc['to'])} port {term(doc['port'])}: {verdict}"]
    if doc.get("endpoints") is not None:
        out.append("  (policies act after the Service's DNAT: each endpoint pod at its targetPort)")
        for ep in doc["endpoints"]:
            if ep.get("error"):
                out.append(f"  endpoint {term(ep['endpoint'])}: cannot evaluate — {term(ep['error'])}")
                continue
            out.append(
                f"  endpoint {term(ep['endpoint'])} ({term(ep.get('pod') or 'no pod')}): {'allowed' if ep['allowed'] else 'DENIED'}"
            )
            out.extend(_direction(ep["egress"], "    "))
            out.extend(_direction(ep["ingress"], "    "))
    else:
        out.extend(_direction(doc["egress"]))
        out.extend(_direction(doc["ingress"]))
    enf = doc.get("enforcement") or {}
    if enf.get("cni"):
        out.append(
            f"  CNI: {term(enf['cni'])} — NetworkPolicy {'enforced' if enf.get('enforced') else 'NOT enforced' if enf.get('enforced') is False else 'enforcement unknown'}"
        )
    for note in doc.get("notes") or []:
        out.append(f"  note: {term(note)}")
    if doc.get("problems"):
        out.append(f"could not read ({len(doc['problems'])}):")
        out.extend(f"  {term(p)}" for p in doc["problems"])
    return "\n".join(out) + "\n"
