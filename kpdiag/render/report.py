"""Render a Report as text (for people), a table, or JSON (kpdiag.report/v1)."""

from __future__ import annotations

import json
import os
import re
import textwrap

from ..model import Report
from .safe import term

_COLOURS = {
    "error": "\033[31m",
    "warning": "\033[33m",
    "info": "\033[36m",
    "bold": "\033[1m",
    "dim": "\033[2m",
    "reset": "\033[0m",
}


def use_colour(stream) -> bool:
    """Colour only on a terminal that can show it: not with NO_COLOR, not on TERM=dumb, not into a pipe or file."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def output_width(width: int | None = None) -> int:
    """The width text output wraps to: the terminal's (COLUMNS, else the terminal, else 100), kept between 40 and 120."""
    if width is None:
        import shutil

        width = shutil.get_terminal_size((100, 24)).columns
    return max(40, min(int(width), 120))


_MARKERS = re.compile(r" (?=(?:\$|-|»|#|>|\*) )|(?<= (?:\$|-|»|#|>|\*)) ")


def _wrap(text, width: int, first: str, rest: str, prose: bool = False) -> list[str]:
    """One value as wrapped lines of at most ``width``, names and addresses never cut. ``prose`` (an explanation,
    written with line breaks): every run of whitespace is one space. Otherwise a newline in the value is shown as
    ``\\n`` like any control (:func:`term`). A marker word of kpdiag's own lines ("$", "-", "»" …) is glued to its
    neighbours, so that no value can start a line that looks like a fix command or a verdict."""
    text = term(" ".join(str(text).split()) if prose else text)
    glued = _MARKERS.sub("\u00a0", text)
    lines = textwrap.wrap(
        glued,
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
        expand_tabs=False,
        replace_whitespace=False,
    ) or [first.rstrip()]
    return [line.replace("\u00a0", " ") for line in lines]


_API_PREFIX = "cluster/"


def skip_group(reason: str | None) -> str:
    """The group a skipped check falls in, from its reason's first need: every need of the Kubernetes API objects is
    one group (a bundle without them skips a score of checks for that one reason), probe results another."""
    text = (reason or "no reason given").strip()
    first = text.split("; ", 1)[0]
    if _API_PREFIX in first:
        return "the Kubernetes API objects (cluster/…)"
    if "probes/" in first:
        return "probe results (probes/…; kpdiag svc without --no-probe)"
    if first.startswith("needs "):
        first = first[len("needs ") :]
        return (
            first[: -len(", which is missing or unreadable")]
            if first.endswith(", which is missing or unreadable")
            else first
        )
    return first


def report_to_text(report: Report, colour: bool = False, verbose: bool = False, width: int | None = None) -> str:
    """The report for people. The first line answers: the headline when kpdiag could not diagnose, else the verdict,
    else the subject; every value from the bundle, the API or a node is escaped (:func:`~kpdiag.render.safe.term`)."""
    width = output_width(width)

    def c(name: str, text: str) -> str:
        return f"{_COLOURS[name]}{text}{_COLOURS['reset']}" if colour else text

    out: list[str] = []
    counts = report.counts()
    f = report.facts
    headline = report.extra.get("headline")
    if headline:
        out.extend(c("bold", line) for line in _wrap(headline, width, "", "  "))
    verdict = report.extra.get("verdict") or []
    for line in verdict:
        out.extend(c("bold", w) for w in _wrap(line, width, "» ", "  "))
    if headline or verdict:
        out.append("")
    bits = []
    if f.get("proxy_mode"):
        bits.append(f"mode {term(f['proxy_mode'])} ({term(f.get('proxy_mode_source'))})")
    if f.get("kernel"):
        bits.append(f"kernel {term(f['kernel'])}")
    if f.get("iptables_rules") is not None:
        bits.append(
            f"{term(f['iptables_rules'])} iptables rules, {term(f.get('service_ports_programmed', 0))} service ports"
        )
    if f.get("nodes") is not None:
        modes = ", ".join(f"{term(m)} {term(n)}" for m, n in (f.get("proxy_modes") or {}).items())
        bits.append(
            f"{term(f['nodes_diagnosed'])} of {term(f['nodes'])} nodes diagnosed"
            + (f"; modes: {modes}" if modes else "")
            + (f"; API server {term(f['api_server_version'])}" if f.get("api_server_version") else "")
        )
    out.extend(c("bold", line) for line in _wrap(f"kpdiag: {report.subject}", width, "", "  "))
    if bits:
        out.extend(_wrap("; ".join(bits), width, "  ", "    "))
    out.append(f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    who = report.extra.get("client")
    if isinstance(who, dict) and who.get("how"):
        name = f"{who['namespace']}/{who['pod']}" if who.get("pod") else who.get("ip")
        line = (
            f"client (for NetworkPolicy): {name} — {who['how']}"
            if who.get("identified")
            else f"client (for NetworkPolicy): not identified — {who['how']}"
        )
        out.extend(_wrap(line, width, "  ", "    "))
    if report.extra.get("nodes"):
        out.append("")
        rows, hidden = notable_rows(report.extra["nodes"], verbose)
        out.extend("  " + line for line in nodes_table(rows, width - 2).splitlines())
        if hidden:
            out.append(
                f"  … and {hidden} more node(s) like the majority: ok, no error or warning (-v lists every node)"
            )
    traces = report.extra.get("traces") or []
    notes = report.extra.get("notes") or []
    if traces or notes:
        out.append("")
    for t in traces:
        pk = t["packet"]
        ends = ", ".join(
            f"{p['probability'] * 100:.0f}% {term(p['verdict'])}" + (f" → {term(p['dnat'])}" if p["dnat"] else "")
            for p in t["paths"][:6]
        )
        out.extend(
            _wrap(
                f"trace {term(t['target'])} from {term(pk['from'])} {term(pk['src'])}: {ends}"
                + (" …" if len(t["paths"]) > 6 else ""),
                width,
                "  ",
                "    ",
            )
        )
    for note in notes:
        out.extend(_wrap(note, width, "  note: ", "        "))
    for severity, trees in _finding_trees(report.findings):
        out.append("")
        out.append(c(severity, f"{severity.upper()}S" if severity != "info" else "INFO"))
        for x, depth in trees:
            out.append("")
            out.extend(_finding_lines(x, depth, width, c))
    out.extend(_skipped_lines(report, verbose, c, width))
    if report.problems:
        out.append("")
        out.append(c("dim", f"could not read ({len(report.problems)}):"))
        for p in report.problems:
            out.append(c("dim", f"  {term(p.get('source'))}: {term(p.get('error'))}"))
    if not report.findings and not headline:
        out.append("")
        out.append("No problems found by the checks that ran.")
    return "\n".join(out) + "\n"


def _finding_trees(findings) -> list[tuple[str, list]]:
    """The findings as (severity, [(finding, depth)]) sections: each root cause with its consequences under it (depth
    ≥ 1), in the section of the most severe finding of its tree, so a root cause is never listed after what it
    explains (kpdiag/rootcause.py)."""
    from ..rootcause import index_of, root_of

    index = index_of(findings)
    trees: dict[int, list] = {}
    order: list = []
    for x in findings:
        r = root_of(findings, x, index)
        if id(r) not in trees:
            trees[id(r)] = []
            order.append(r)
        trees[id(r)].append(x)

    def depth(x) -> int:
        d, seen = 0, set()
        while x.caused_by and (x.id, x.subject) not in seen and d < 8:
            seen.add((x.id, x.subject))
            up = index.get((x.caused_by["id"], x.caused_by["subject"]))
            if up is None:
                break
            x, d = up, d + 1
        return d

    out = []
    for severity in ("error", "warning", "info"):
        group = [
            (x, depth(x))
            for r in order
            if max(trees[id(r)], key=lambda y: y.severity.rank).severity.value == severity
            for x in trees[id(r)]
        ]
        if group:
            out.append((severity, group))
    return out


def _finding_lines(x, depth: int, width: int, c) -> list[str]:
    """One finding; a consequence (depth ≥ 1) indented under its cause and saying what it follows from."""
    pad = "    " * min(depth, 2)
    severity = x.severity.value
    out: list[str] = []
    name = f"{term(x.id)} {term(x.slug)}"
    lead = f"{pad}↳ " if depth else ""
    follows = f" (follows from {x.caused_by['id']}; {severity})" if depth and x.caused_by else ""
    head = _wrap(f"{x.id} {x.slug}  {x.summary}{follows}", width - len(lead), "", "    ")
    out.append(lead + c(severity, name) + head[0][len(name) :])
    out.extend(pad + line for line in head[1:])
    out.extend(_wrap(x.explanation, width, f"{pad}  why: ", f"{pad}       ", prose=True))
    if x.fix:
        out.append(f"{pad}  fix:")
        out.extend(
            f"{pad}    $ {term(step['text'])}" if step["kind"] == "command" else f"{pad}    - {term(step['text'])}"
            for step in x.fix_steps()
        )
    if x.evidence:
        out.append(f"{pad}  evidence:")
        out.extend(c("dim", f"{pad}    {term(e)}") for e in x.evidence)
    return out


def _skipped_lines(report: Report, verbose: bool, c, width: int = 100) -> list[str]:
    """Checks that did not run: one line per reason by default (-v: each check and its reason). A check that failed
    with an internal error is always listed."""
    failed = [r for r in report.checks if r.status == "error"]
    skipped = [r for r in report.checks if r.status not in ("ran", "error")]
    out: list[str] = []
    if failed:
        out += ["", c("dim", f"failed ({len(failed)}):")]
        out += [c("dim", f"  {term(r.id)} {term(r.slug)}: {term(r.reason)}") for r in failed]
    if not skipped:
        return out
    out += ["", c("dim", f"not checked ({len(skipped)}):")]
    if verbose:
        return out + [c("dim", f"  {term(r.id)} {term(r.slug)}: {term(r.status)} — {term(r.reason)}") for r in skipped]
    groups: dict[str, list] = {}
    for r in skipped:
        groups.setdefault(skip_group(r.reason), []).append(r)
    for why, runs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        needs = all((r.reason or "").startswith("needs ") for r in runs)
        count = f"{len(runs)} check{'s' if len(runs) != 1 else ''}"
        if needs:
            line = f"{count} need{'s' if len(runs) == 1 else ''} {why}"
        else:
            line = f"{count} skipped: {why}"
        out.extend(
            c("dim", w)
            for w in _wrap(line + " — -v lists " + ("it" if len(runs) == 1 else "them"), width, "  ", "    ")
        )
    return out


TABLE_ALL_UP_TO = 40


def notable_rows(rows: list[dict], verbose: bool = False) -> tuple[list[dict], int]:
    """On a big cluster the text report lists the nodes that stand out (failed, errors or warnings, another mode
    or kube-proxy version than most); -v lists all. Returns (rows to show, how many were left out)."""
    if verbose or len(rows) <= TABLE_ALL_UP_TO:
        return rows, 0
    from collections import Counter

    usual = {
        k: Counter(r.get(k) for r in rows if r.get("status") == "ok").most_common(1) for k in ("mode", "kube_proxy")
    }
    usual = {k: v[0][0] for k, v in usual.items() if v}

    def notable(r: dict) -> bool:
        return (
            r.get("status") != "ok"
            or r.get("error")
            or r.get("warning")
            or any(r.get(k) != v for k, v in usual.items())
        )

    shown = [r for r in rows if notable(r)]
    return shown, len(rows) - len(shown)


def fit_table(
    rows: list[list], headers: list[str], width: int | None = None, floors: dict[int, int] | None = None
) -> str:
    """A plain table whose cells (escaped: :func:`term`) wrap so that it fits ``width`` columns (the terminal's):
    the columns with the most room above their floor (default 6) give way first; below the floors only when nothing
    else fits (4 at least)."""
    import tabulate as tabulate_module

    width = output_width(width)
    body = [[term("" if v is None else v) for v in row] for row in rows]
    heads = [term(h) for h in headers]
    n = len(heads)
    natural = [max([len(heads[i])] + [len(r[i]) for r in body]) for i in range(n)]
    floor = [min(natural[i], (floors or {}).get(i, 6)) for i in range(n)]
    limits = list(natural)
    budget = width - 2 * (n - 1)  # two spaces between columns
    while sum(limits) > budget:
        i = max(range(n), key=lambda k: (limits[k] - floor[k], limits[k]))
        if limits[i] <= floor[i]:
            if all(f <= 4 for f in floor):
                break  # as narrow as it gets
            floor = [min(f, 4) for f in floor]
            continue
        limits[i] -= 1

    def fit(text: str, limit: int) -> str:
        if len(text) <= limit:
            return text
        return "\n".join(textwrap.wrap(text, limit, break_long_words=True, break_on_hyphens=True)) or text

    if limits != natural:  # wrap only the cells that need it (tabulate's own wrapping is slow on big tables)
        body = [[fit(v, limits[i]) for i, v in enumerate(r)] for r in body]
        heads = [fit(h, limits[i]) for i, h in enumerate(heads)]
    padding = tabulate_module.MIN_PADDING
    tabulate_module.MIN_PADDING = 0  # tabulate widens every column to its header + 2: the column gap is enough
    try:
        return tabulate_module.tabulate(body, headers=heads, tablefmt="simple", disable_numparse=True) + "\n"
    finally:
        tabulate_module.MIN_PADDING = padding


def nodes_table(rows: list[dict], width: int | None = None) -> str:
    """The per-node summary of a cluster report."""
    cols = [
        ("node", "node"),
        ("status", "status"),
        ("mode", "mode"),
        ("kube_proxy", "kube-proxy"),
        ("kernel", "kernel"),
        ("iptables_rules", "rules"),
        ("service_ports", "svc ports"),
        ("conntrack", "conntrack"),
        ("findings", "E/W/I"),
    ]
    if any(r.get("service") for r in rows):
        cols.append(("service", "service trace"))

    def cell(r: dict, k: str):
        if k == "findings":
            return (
                "/".join("" if r.get(s) is None else str(r.get(s)) for s in ("error", "warning", "info"))
                if r.get("status") == "ok"
                else ""
            )
        return r.get(k)

    body = [[cell(r, k) for k, _ in cols] for r in rows]
    return fit_table(
        body, [h for _, h in cols], width, floors={0: 12, 1: 11, 2: 8, 3: 5, 4: 7, 5: 5, 6: 5, 7: 9, 8: 5, 9: 16}
    )


def report_to_table(report: Report, width: int | None = None) -> str:
    rows = [[x.severity.value, x.id, x.slug, x.subject or "", x.summary] for x in report.findings]
    head = nodes_table(report.extra["nodes"], width) + "\n" if report.extra.get("nodes") else ""
    if not rows:
        return head + "no findings\n"
    return head + fit_table(
        rows, ["severity", "id", "check", "subject", "summary"], width, floors={0: 7, 1: 5, 2: 12, 3: 10, 4: 24}
    )


def report_to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
