"""The check catalogue: a table, JSON, the Markdown of docs/checks.md, and one check's docs."""

from __future__ import annotations

import json
import textwrap


def catalogue_table(checks) -> str:
    from tabulate import tabulate

    rows = [[c.id, c.slug, c.severity.value, c.scope, c.title] for c in checks]
    return tabulate(rows, headers=["id", "slug", "severity", "scope", "title"], tablefmt="simple") + "\n"


def catalogue_json(checks) -> str:
    return json.dumps([{"id": c.id, "slug": c.slug, "severity": c.severity.value, "title": c.title, "scope": c.scope, "needs": list(c.needs),
                        "symptom": c.docs.symptom, "why": c.docs.why, "fix": c.docs.fix, "references": list(c.references)}
                       for c in checks], indent=2) + "\n"


def _para(text: str) -> str:
    return " ".join(text.split())


def catalogue_markdown(checks) -> str:
    out = ["# kpdiag checks", "", "Generated from the check registry by `kpdiag checks -o markdown`; do not edit by hand.", "",
           "Scope *node*: run on one node's state (`kpdiag node`, `svc`, `analyze BUNDLE`). Scope *cluster*: run on the",
           "reports of many nodes (`kpdiag cluster`, `kpdiag analyze DIR-OF-NODE-REPORTS`).", "",
           "| id | slug | severity | scope | title |", "|---|---|---|---|---|"]
    out += [f"| [{c.id}](#{c.id.lower()}-{c.slug}) | {c.slug} | {c.severity.value} | {c.scope} | {c.title} |" for c in checks]
    for c in checks:
        out += ["", f"## {c.id} {c.slug}", "", f"**{c.title}** — severity *{c.severity.value}*, scope *{c.scope}*"
                + (f"; needs {', '.join(c.needs)}" if c.needs else ""), "",
                "### Symptom", "", _para(c.docs.symptom), "", "### Why", "", _para(c.docs.why), "", "### Fix", "", _para(c.docs.fix)]
        if c.references:
            out += ["", "### References", ""] + [f"- {r}" for r in c.references]
    return "\n".join(out) + "\n"


def explain_text(c) -> str:
    def block(title: str, text: str) -> list[str]:
        return [title] + textwrap.wrap(_para(text), 96, initial_indent="  ", subsequent_indent="  ") + [""]

    out = [f"{c.id} {c.slug} — {c.title} ({c.severity.value}; {c.scope} scope)", ""]
    out += block("Symptom", c.docs.symptom) + block("Why", c.docs.why) + block("Fix", c.docs.fix)
    if c.needs:
        out += ["Needs", "  " + ", ".join(c.needs), ""]
    if c.references:
        out += ["References"] + [f"  {r}" for r in c.references] + [""]
    return "\n".join(out)
