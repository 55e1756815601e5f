"""The check catalogue: a table, JSON, the Markdown of docs/checks.md, and one check's docs."""

from __future__ import annotations

import json
import textwrap


def severities(c) -> str:
    """The severities a check may emit (its contract), mildest first: "warning", "info/warning"."""
    return "/".join(x.value for x in getattr(c, "may_emit", (c.severity,)))


def catalogue_table(checks, width: int | None = None) -> str:
    """The catalogue as a table that fits the terminal (cells wrap); plugin texts are escaped (render.safe.term)."""
    from .report import fit_table

    rows = [[c.id, c.slug, severities(c), c.scope, c.title] for c in checks]
    return fit_table(
        rows, ["id", "slug", "severity", "scope", "title"], width, floors={0: 5, 1: 20, 2: 13, 3: 7, 4: 24}
    )


def catalogue_json(checks) -> str:
    return (
        json.dumps(
            [
                {
                    "id": c.id,
                    "slug": c.slug,
                    "severity": c.severity.value,
                    "severities": [x.value for x in getattr(c, "may_emit", (c.severity,))],
                    "title": c.title,
                    "scope": c.scope,
                    "needs": list(c.needs),
                    "uses": list(getattr(c, "uses", ())),
                    "modes": list(getattr(c, "modes", ())),
                    "explains": list(getattr(c, "explains", ())),
                    "absent": list(getattr(c, "absent", ())),
                    "symptom": c.docs.symptom,
                    "why": c.docs.why,
                    "fix": c.docs.fix,
                    "references": list(c.references),
                }
                for c in checks
            ],
            indent=2,
        )
        + "\n"
    )


def _para(text: str) -> str:
    return " ".join(text.split())


def catalogue_markdown(checks) -> str:
    out = [
        "# kpdiag checks",
        "",
        "Generated from the check registry by `kpdiag checks -o markdown`; do not edit by hand.",
        "",
        "Scope *node*: run on one node's state (`kpdiag node`, `svc`, `analyze BUNDLE`). Scope *cluster*: run on the",
        "reports of many nodes (`kpdiag cluster`, `kpdiag analyze DIR-OF-NODE-REPORTS`).",
        "",
        "| id | slug | severity | scope | title |",
        "|---|---|---|---|---|",
    ]
    out += [
        f"| [{c.id}](#{c.id.lower()}-{c.slug}) | {c.slug} | {severities(c)} | {c.scope} | {c.title} |" for c in checks
    ]
    for c in checks:
        out += [
            "",
            f"## {c.id} {c.slug}",
            "",
            f"**{c.title}** — severity *{severities(c)}*, scope *{c.scope}*"
            + (f"; kube-proxy mode {', '.join(c.modes)}" if getattr(c, "modes", ()) else "")
            + (f"; needs {', '.join(c.needs)}" if c.needs else "")
            + (f"; uses {', '.join(c.uses)}" if getattr(c, "uses", ()) else "")
            + (f"; explains {', '.join(c.explains)}" if getattr(c, "explains", ()) else "")
            + (f"; says absent: {', '.join(c.absent)}" if getattr(c, "absent", ()) else ""),
            "",
            "### Symptom",
            "",
            _para(c.docs.symptom),
            "",
            "### Why",
            "",
            _para(c.docs.why),
            "",
            "### Fix",
            "",
            _para(c.docs.fix),
        ]
        if c.references:
            out += ["", "### References", ""] + [f"- {r}" for r in c.references]
    return "\n".join(out) + "\n"


def explain_text(c, width: int | None = None) -> str:
    """One check's documentation, re-flowed to the terminal's width; a plugin's texts are escaped (render.safe.term)."""
    from .report import output_width
    from .safe import term

    width = output_width(width)

    def flow(text: str, first: str = "  ", rest: str = "  ") -> list[str]:
        return textwrap.wrap(
            term(_para(text)),
            width,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=False,
            break_on_hyphens=False,
        )

    out = flow(f"{c.id} {c.slug} — {c.title} ({severities(c)}; {c.scope} scope)", "", "  ") + [""]
    for title, text in (("Symptom", c.docs.symptom), ("Why", c.docs.why), ("Fix", c.docs.fix)):
        out += [title] + flow(text) + [""]
    if getattr(c, "modes", ()):
        out += ["Proxy modes"] + flow(", ".join(c.modes) + " (skipped on a node in another mode)") + [""]
    if c.needs:
        out += ["Needs"] + flow(", ".join(c.needs) + " (skipped, saying which, when one is missing)") + [""]
    if getattr(c, "uses", ()):
        out += ["Uses"] + flow(", ".join(c.uses) + " (when they are there)") + [""]
    if getattr(c, "explains", ()):
        out += (
            ["Explains"]
            + flow(
                ", ".join(c.explains) + " (their findings in the same report follow from this one's: ranked under it, "
                "their fixes say to fix it first)"
            )
            + [""]
        )
    if getattr(c, "absent", ()):
        out += (
            ["Says absent"]
            + flow(", ".join(c.absent) + " (no other finding of the report advises acting on it)")
            + [""]
        )
    if c.references:
        out += ["References"] + [f"  {term(r)}" for r in c.references] + [""]
    return "\n".join(out)
