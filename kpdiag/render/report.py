"""Render a Report as text (for people), a table, or JSON (kpdiag.report/v1)."""

from __future__ import annotations

import json
import os
import re
import textwrap

from ..model import Report
from .safe import term

PROBLEMS_SHOWN = 50  # "could not read" lines of a text report without -v (a forged manifest can hold 200,000)

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
    """The width text output is laid out at: COLUMNS, else the terminal's — of stdout, or, when stdout is a pipe or a
    file, of stderr or stdin (``kpdiag … | less`` still fits the window) —, else 80; kept between 40 and 120."""
    if width is None:
        width = _terminal_columns()
    return max(40, min(int(width), 120))


def _terminal_columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
        if columns > 0:
            return columns
    except ValueError:
        pass
    for fd in (1, 2, 0):
        try:
            columns = os.get_terminal_size(fd).columns
        except (OSError, ValueError):
            continue
        if columns > 0:
            return columns
    return 80


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


def _shell_words(text: str) -> list[str]:
    """A command's words as written (quotes kept): split at blanks outside quotes, so a quoted string is one word."""
    words, cur, quote = [], "", None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            cur += ch
            if ch == "\\" and quote == '"' and i + 1 < len(text):
                cur += text[i + 1]
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == "\\" and i + 1 < len(text):
            cur += ch + text[i + 1]
            i += 1
        elif ch == " ":
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        words.append(cur)
    return words


def wrap_command(text: str, width: int, first: str = "    $ ", rest: str = "        ") -> list[str]:
    """A fix command fitted to ``width`` and still pasteable: broken between words outside quotes, each broken line
    ending in " \\" (the shell joins the lines again); a trailing "# comment" goes on lines of its own after it. A
    word longer than the room (a long quoted string) is never cut: that line is longer. Operators and marker words
    ("&&", "|", "$", "-" …) stay at the end of their line, so no continuation line starts with one."""
    if len(first) + len(text) <= width:
        return [first + text]
    words = _shell_words(text)
    comment: list[str] = []
    for k, w in enumerate(words):
        if w.startswith("#") and k:
            words, comment = words[:k], words[k:]
            break
    units: list[str] = []
    for w in words:
        if units and (w in _GLUED or _takes_value(units[-1], w)):
            units[-1] += " " + w  # an option stays with its value ("-o wide"), an operator with what precedes it
        else:
            units.append(w)
    lines: list[str] = []
    line = first + (units[0] if units else "")
    for k, w in enumerate(units[1:], 2):
        # room for " \\" unless this is the last word, or it ends in "|", "&&" or "||" (the shell reads on after one)
        tail = 0 if k == len(units) or w.endswith(_CONTINUES) else 2
        if len(line) + 1 + len(w) + tail <= width:
            line += " " + w
        else:
            lines.append(line if line.endswith(_CONTINUES) else line + " \\")
            line = rest + w
    lines.append(line)
    if comment:
        lines.extend(_wrap(" ".join(comment), width, rest, rest + "  "))
    return lines


def _takes_value(option: str, word: str) -> bool:
    """Does ``word`` read as the value of ``option`` (-n shop, --image X)? Kept on one line with it."""
    return (
        option.startswith("-")
        and " " not in option
        and "=" not in option
        and not word.startswith("-")
        and word not in _GLUED
        and len(option) + 1 + len(word) <= 40
    )


_CONTINUES = (" |", " &&", " ||")  # a line ending in one of these goes on in the next without a backslash
_GLUED = frozenset(("&&", "||", "|", ";", "$", "-", "»", "#", ">", "*", ">>", "2>&1"))


_API_PREFIX = "cluster/"


def _first_reason(text: str) -> str:
    """The first of the reasons run_checks joins with "; " — never cut inside a parenthesis of one reason."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and text.startswith("; ", i):
            return text[:i]
    return text


def skip_group(reason: str | None) -> str:
    """The group a skipped check falls in, from its reason's first need: every need of the Kubernetes API objects is
    one group (a bundle without them skips a score of checks for that one reason), probe results another."""
    text = (reason or "no reason given").strip()
    first = _first_reason(text)
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
    headline = report.extra.get("headline")
    if headline:
        out.extend(c("bold", line) for line in _wrap(headline, width, "", "  "))
    verdict = report.extra.get("verdict") or []
    for line in verdict:
        out.extend(c("bold", w) for w in _wrap(line, width, "» ", "  "))
    if headline or verdict:
        out.append("")
    bits = _fact_bits(report.facts)
    out.extend(c("bold", line) for line in _wrap(f"kpdiag: {report.subject}", width, "", "  "))
    if bits:
        out.extend(_wrap("; ".join(bits), width, "  ", "    "))
    if not verbose and _quiet(report):
        return "\n".join(out + [c("dim", w) for w in _wrap(_quiet_line(report), width, "", "  ")]) + "\n"
    out.append(f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    out.extend(_scope_lines(report, width))
    out.extend(_node_lines(report, width, verbose))
    out.extend(_trace_lines(report, width))
    for severity, trees in _finding_trees(report.findings):
        if severity == "info" and not verbose:
            out += ["", *(c("dim", w) for w in _wrap(hidden_info_line(trees), width, "", "  "))]
            continue
        out.append("")
        out.append(c(severity, f"{severity.upper()}S" if severity != "info" else "INFO"))
        for x, depth in trees:
            out.append("")
            out.extend(_finding_lines(x, depth, width, c))
    out.extend(_skipped_lines(report, verbose, c, width))
    out.extend(_problem_lines(report, verbose, c, width))
    if not headline and not any(x.severity.value in ("error", "warning") for x in report.findings):
        out.append("")
        out.append("No problems found by the checks that ran.")
    return "\n".join(out) + "\n"


def _fact_bits(f: dict) -> list[str]:
    """The facts of the subject line: proxy mode, kernel, CNI, rule counts, nodes diagnosed."""
    bits = []
    if f.get("proxy_mode"):
        bits.append(f"mode {term(f['proxy_mode'])} ({term(f.get('proxy_mode_source'))})")
    if f.get("kernel"):
        bits.append(f"kernel {term(f['kernel'])}")
    cni = f.get("cni")
    if isinstance(cni, dict) and cni.get("cni"):
        bits.append(f"CNI {term(cni.get('shape'))}")
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
    return bits


def _scope_lines(report: Report, width: int) -> list[str]:
    """What the report covers: a focused read (partial), and the client NetworkPolicy was judged for."""
    out: list[str] = []
    partial = report.extra.get("partial")
    if isinstance(partial, dict) and partial.get("service"):
        line = (
            f"partial: only the rules {term(partial['service'])}'s packets can meet were read "
            f"({', '.join(term(k) for k in partial.get('holds') or {})}); checks that judge every rule are skipped"
        )
        out.extend(_wrap(line, width, "  ", "    "))
    who = report.extra.get("client")
    if isinstance(who, dict) and who.get("how"):
        name = f"{who['namespace']}/{who['pod']}" if who.get("pod") else who.get("ip")
        line = (
            f"client (for NetworkPolicy): {name} — {who['how']}"
            if who.get("identified")
            else f"client (for NetworkPolicy): not identified — {who['how']}"
        )
        out.extend(_wrap(line, width, "  ", "    "))
    return out


def _node_lines(report: Report, width: int, verbose: bool) -> list[str]:
    """A cluster report's nodes table: the notable nodes (every node with -v)."""
    if not report.extra.get("nodes"):
        return []
    out = [""]
    rows, hidden = notable_rows(report.extra["nodes"], verbose)
    out.extend("  " + line for line in nodes_table(rows, width - 2).splitlines())
    if hidden:
        out.append(f"  … and {hidden} more node(s) like the majority: ok, no error or warning (-v lists every node)")
    return out


def _trace_lines(report: Report, width: int) -> list[str]:
    """One line per trace a report holds (its paths' shares and verdicts), and its notes."""
    traces = report.extra.get("traces") or []
    notes = report.extra.get("notes") or []
    out: list[str] = [""] if traces or notes else []
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
    return out


def _problem_lines(report: Report, verbose: bool, c, width: int) -> list[str]:
    """What could not be read: the first PROBLEMS_SHOWN (all with -v)."""
    if not report.problems:
        return []
    out = ["", c("dim", f"could not read ({len(report.problems)}):")]
    shown = report.problems if verbose else report.problems[:PROBLEMS_SHOWN]
    for p in shown:
        out.extend(c("dim", w) for w in _wrap(f"{p.get('source')}: {p.get('error')}", width, "  ", "    "))
    if len(shown) < len(report.problems):
        more = len(report.problems) - len(shown)
        out.append(c("dim", f"  … and {more} more (-v lists them all; -o json has every one)"))
    return out


def _quiet(report: Report) -> bool:
    """A report with nothing to act on — no error, warning, unreadable input, failed check, note or trace — is a few
    lines: the subject, its facts and one line saying so (-v shows the rest)."""
    e = report.extra
    return not (
        e.get("headline")
        or e.get("verdict")
        or e.get("nodes")
        or e.get("traces")
        or e.get("notes")
        or e.get("partial")
        or e.get("client")
        or report.problems
        or any(x.severity.value in ("error", "warning") for x in report.findings)
        or any(r.status == "error" for r in report.checks)
    )


def _quiet_line(report: Report) -> str:
    """The one line of a quiet report: nothing wrong, and what -v would add (the informational findings by name, how
    many checks did not run)."""
    ran = sum(1 for r in report.checks if r.status == "ran")
    skipped = sum(1 for r in report.checks if r.status not in ("ran", "error"))
    line = f"No problems found by the {ran} check{'s' if ran != 1 else ''} that ran"
    more = []
    infos = list(dict.fromkeys((term(x.id), term(x.slug)) for x in report.findings))
    if infos:  # one by id and name; more by id (-v shows each in full)
        named = " ".join(infos[0]) if len(infos) == 1 else ", ".join(i for i, _ in infos[:4])
        named += ", …" if len(infos) > 4 else ""
        more.append(f"{len(report.findings)} info ({named})")
    if skipped:
        more.append(f"{skipped} check{'s' if skipped != 1 else ''} not run")
    return line + (
        f"; {' and '.join(more)} — -v shows {'them' if len(more) > 1 or skipped != 1 else 'it'}" if more else "."
    )


def hidden_info_line(trees: list) -> str:
    """What stands for the informational findings a report shows only under -v (those of a tree that holds no error or
    warning; an info that follows from an error is shown with it)."""
    named = list(dict.fromkeys(f"{term(x.id)} {term(x.slug)}" for x, _ in trees))
    n = len(trees)
    more = f", … ({len(named) - 3} more)" if len(named) > 3 else ""
    return f"{n} informational finding{'s' if n != 1 else ''} ({', '.join(named[:3])}{more}) — -v shows {'them' if n != 1 else 'it'}"


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
        for step in x.fix_steps():
            if step["kind"] == "command":
                out.extend(wrap_command(term(step["text"]), width, f"{pad}    $ ", f"{pad}        "))
            else:
                out.extend(_wrap(step["text"], width, f"{pad}    - ", f"{pad}      "))
    if x.evidence:
        out.append(f"{pad}  evidence:")
        out.extend(c("dim", w) for e in x.evidence for w in _wrap(e, width, f"{pad}    ", f"{pad}      "))
    return out


def _skipped_lines(report: Report, verbose: bool, c, width: int = 80) -> list[str]:
    """Checks that did not run: one line per reason by default (-v: each check and its reason). A check that failed
    with an internal error is always listed."""
    failed = [r for r in report.checks if r.status == "error"]
    skipped = [r for r in report.checks if r.status not in ("ran", "error")]
    out: list[str] = []
    if failed:
        out += ["", c("dim", f"failed ({len(failed)}):")]
        out += [c("dim", w) for r in failed for w in _wrap(f"{r.id} {r.slug}: {r.reason}", width, "  ", "    ")]
    if not skipped:
        return out
    out += ["", c("dim", f"not checked ({len(skipped)}):")]
    if verbose:
        return out + [
            c("dim", w)
            for r in skipped
            for w in _wrap(f"{r.id} {r.slug}: {r.status} — {r.reason}", width, "  ", "    ")
        ]
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

    common = {
        k: Counter(r.get(k) for r in rows if r.get("status") == "ok").most_common(1) for k in ("mode", "kube_proxy")
    }
    usual = {k: v[0][0] for k, v in common.items() if v}

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
    # a word (a number, a name, an address) is never cut, nor broken at its hyphens — only after a "/" or "=" (119340/
    # 131072, node/ip-route.json): no column is narrower than its longest piece, so a table whose pieces do not fit
    # side by side is wider than ``width``
    unbreakable = [
        max(len(p) for v in [heads[i]] + [r[i] for r in body] for w in (v.split() or [""]) for p in _pieces(w))
        for i in range(n)
    ]
    floor = [max(unbreakable[i], min(natural[i], (floors or {}).get(i, 6))) for i in range(n)]
    limits = list(natural)
    budget = width - 2 * (n - 1)  # two spaces between columns
    while sum(limits) > budget:
        i = max(range(n), key=lambda k: (limits[k] - floor[k], limits[k]))
        if limits[i] <= floor[i]:
            low = [max(unbreakable[k], min(f, 4)) for k, f in enumerate(floor)]
            if low == floor:
                break  # as narrow as it gets
            floor = low
            continue
        limits[i] -= 1

    def fit(text: str, limit: int) -> str:
        return text if len(text) <= limit else "\n".join(_cell_lines(text, limit))

    # Cells are wrapped here, not by tabulate's maxcolwidths: that is textwrap's wrapping, which cuts a long word and
    # breaks at hyphens, where a number, an address or a name must stay whole and break only after "/" or "=" (the
    # goldens in tests/cli/golden hold such tables); it is slow on big tables too. Only the cells that need it wrap.
    if limits != natural:
        body = [[fit(v, limits[i]) for i, v in enumerate(r)] for r in body]
        heads = [fit(h, limits[i]) for i, h in enumerate(heads)]
    # tabulate's "simple" layout, with the header and its rule laid out as rows of "plain": as headers, tabulate would
    # widen each column to its header + MIN_PADDING, a module global (the two-space column gap is enough)
    rule = [
        "-" * max(len(line) for v in [heads[i]] + [r[i] for r in body] for line in v.strip().split("\n"))
        for i in range(n)
    ]
    return tabulate_module.tabulate([heads, rule, *body], tablefmt="plain", disable_numparse=True) + "\n"


def _pieces(word: str) -> list[str]:
    """Where a word may break in a table cell: after each "/" or "=" only."""
    return re.findall(r"[^/=]*[/=]|[^/=]+", word) or [word]


def _cell_lines(text: str, limit: int) -> list[str]:
    """A cell's text in lines of at most ``limit``: broken at spaces, a word longer than that after a "/" or "=", never
    inside a number or a name, never at a hyphen."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        parts = [word] if len(word) <= limit else _pieces(word)
        for k, part in enumerate(parts):
            sep = " " if line and k == 0 else ""
            if not line or len(line) + len(sep) + len(part) <= limit:
                line += sep + part
            else:
                lines.append(line)
                line = part
    return lines + [line] if line else lines or [text]


def nodes_table(rows: list[dict], width: int | None = None) -> str:
    """The per-node summary of a cluster report."""
    cols = [
        ("node", "node"),
        ("status", "status"),
        ("mode", "mode"),
        ("kube_proxy", "version"),  # kube-proxy's
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


def report_to_table(report: Report, width: int | None = None, verbose: bool = False) -> str:
    """One row a finding; the informational ones (of a tree with no error or warning) only with ``verbose``."""
    hidden = [] if verbose else [t for sev, trees in _finding_trees(report.findings) if sev == "info" for t in trees]
    left_out = {id(x) for x, _ in hidden}
    rows = [
        [x.severity.value, x.id, x.slug, x.subject or "", x.summary] for x in report.findings if id(x) not in left_out
    ]
    head = nodes_table(report.extra["nodes"], width) + "\n" if report.extra.get("nodes") else ""
    tail = "\n".join(_wrap(hidden_info_line(hidden), output_width(width), "", "  ")) + "\n" if hidden else ""
    if not rows:
        return head + ("no errors or warnings\n" if hidden else "no findings\n") + tail
    table = fit_table(
        rows, ["severity", "id", "check", "subject", "summary"], width, floors={0: 7, 1: 5, 2: 12, 3: 10, 4: 24}
    )
    if max(len(line) for line in table.splitlines()) > output_width(width):
        table = _stacked_table(rows, output_width(width))
    return head + table + tail


def _stacked_table(rows: list[list], width: int) -> str:
    """The findings table when the words of the summaries do not fit beside the other columns (a long sysctl name, a
    check's slug): severity, id, check and subject in columns, each summary wrapped below its row across the whole
    width — no word cut, no line wider than ``width`` but for a single word longer than a line."""
    heads = ["severity", "id", "check", "subject"]
    cells = [[term("" if v is None else v) for v in r[:4]] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    widths[3] = min(widths[3], max(width - sum(widths[:3]) - 6, 10))
    pad = " " * (sum(widths[:3]) + 6)
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for c, r in zip(cells, rows):
        subject = _cell_lines(c[3], widths[3]) if len(c[3]) > widths[3] else [c[3]]
        out.append("  ".join([*(c[i].ljust(widths[i]) for i in range(3)), subject[0]]).rstrip())
        out += [pad + line for line in subject[1:]]
        out += _wrap(r[4], width, "    ", "    ")
    return "\n".join(out) + "\n"


def report_to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
