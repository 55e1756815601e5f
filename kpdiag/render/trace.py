"""Render a :class:`~kpdiag.trace.model.TraceResult` as text, JSON or a Graphviz graph."""

from __future__ import annotations

import json

from ..trace.model import TraceResult
from .safe import dot_escape, term


def _pct(p: float) -> str:
    if p >= 0.9995:
        return "100%"
    return f"{p * 100:.1f}%"


def _describe(path) -> str:
    bits = [path.verdict.upper()]
    if path.verdict == "reject" and path.reject_with:
        bits[0] += f" ({path.reject_with})"
    if path.dnat:
        bits.append(f"DNAT to {path.dnat}")
    elif path.verdict == "accept":
        bits.append("no DNAT")
    if path.verdict == "accept":
        bits.append("masqueraded" if path.masquerade else ("SNAT to " + path.snat if path.snat else "source kept"))
        bits.append({"local": "delivered to the node itself", "forward": "forwarded"}.get(path.delivery or "", ""))
    return ", ".join(b for b in bits if b)


def route_text(route: dict | None) -> str | None:
    """The routing decision of a path in one line: "via GW dev DEV (PREFIX, table T)", "local (lo)", …"""
    if not route:
        return None
    if route.get("type") == "local":
        return "local delivery (the node's own address)"
    if route.get("prefix") == "(no route)":
        return "no route"
    bits = []
    if route.get("type") not in (None, "unicast"):
        bits.append(str(route["type"]))
    if route.get("gateway"):
        bits.append(f"via {route['gateway']}")
    if route.get("dev"):
        bits.append(f"dev {route['dev']}" + (" (no carrier)" if route.get("linkdown") else ""))
    where = [str(route["prefix"])] if route.get("prefix") else []
    if route.get("table") and route["table"] != "main":
        where.append(f"table {route['table']}")
    return " ".join(bits) + (f" ({', '.join(where)})" if where else "")


def trace_to_text(result: TraceResult, verbose: bool = False, width: int | None = None) -> str:
    """The trace for people, fitted to the terminal's width; rule texts, comments and names are escaped
    (:func:`~kpdiag.render.safe.term`): a rule comment is written by whoever can write rules."""
    from ..parse.addr import hostport
    from .report import _wrap, fit_table, output_width

    width = output_width(width)
    pk = result.packet
    lines = []
    src, dst = hostport(pk.src, pk.sport if pk.proto != "icmp" else None), hostport(pk.dst, pk.dport)
    lines.extend(
        _wrap(
            f"packet  {pk.proto.upper()} {src} -> {dst}  (from {pk.origin}; first packet of a new connection)",
            width,
            "",
            "        ",
        )
    )
    lines.extend(_wrap(f"mode    {result.mode}; rules from {', '.join(result.sources)}", width, "", "        "))
    n = len(result.paths)
    lines.extend(
        _wrap(
            f"result  {n} path{'s' if n != 1 else ''}; the kernel evaluates up to {result.rules_evaluated} rules on the"
            " way" + ("  [UNCERTAIN: see notes]" if result.uncertain else ""),
            width,
            "",
            "        ",
        )
    )
    lines.append("")
    rows = []
    for i, path in enumerate(result.paths, 1):
        rows.append(
            [
                i,
                _pct(path.probability),
                path.verdict,
                path.dnat or "-",
                "yes" if path.masquerade else "no",
                path.delivery or "-",
                path.rules_evaluated,
            ]
        )
    lines.append(
        fit_table(
            rows, ["path", "probability", "verdict", "DNAT", "masquerade", "delivery", "rules walked"], width
        ).rstrip("\n")
    )
    for i, path in enumerate(result.paths, 1):
        lines.extend(_path_lines(path, i, n, width, verbose))
    for note in result.notes:
        lines.extend(_wrap(note, width, "note: ", "      "))
    if result.kernel is not None:
        lines.extend(_kernel_lines(result.kernel, width, result))
    return "\n".join(lines) + "\n"


def _path_lines(path, i: int, n: int, width: int, verbose: bool) -> list[str]:
    """One path of a trace: its share and end, its route, and each step under its hook — the rule that decided in
    full, the others shortened (every rule in full with ``verbose``)."""
    from .report import _wrap

    lines = [""]
    lines.extend(
        _wrap(
            f"path {i}/{n}  {_pct(path.probability)}  {_describe(path)}{'  [uncertain]' if path.uncertain else ''}",
            width,
            "",
            "  ",
        )
    )
    shown = route_text(path.route)
    if shown:
        lines.extend(_wrap(term(shown), width, "  route: ", "         "))
    hook = None
    last = max((k for k, st in enumerate(path.steps) if st.rule is not None), default=-1)
    for k, step in enumerate(path.steps):
        if step.hook != hook:
            hook = step.hook
            lines.append(f"  {term(hook)}")
        raw_where = f"{step.table}/{step.chain}" + (f" #{step.rule}" if step.rule is not None else "")
        where, action = term(raw_where), term(step.action)
        if 4 + max(len(where), 44) + 1 + len(action) <= width:
            lines.append(f"    {where:<44} {action}")
        else:  # the action after two spaces, wrapped below the rule's name
            lines.extend(_wrap(f"{raw_where}  {step.action}", width, "    ", "        "))
        text = term(step.text)
        if verbose or step.rule is None or k == last:  # in full (wrapped): the rule that decided, or every rule with -v
            lines.extend(_wrap_rule(text, width))
        else:
            lines.append(f"      {_shorten(text, max(width - 6, 40))}")
    for note in path.notes:
        lines.extend(_wrap(note, width, "  note: ", "        "))
    return lines


def _kernel_lines(kernel: dict, width: int, result=None) -> list[str]:
    """--kernel: kpdiag's step and the kernel's rule side by side, rule by rule, then AGREE or where they part."""
    from .report import _wrap

    verdict = "AGREE" if kernel["agree"] else "DISAGREE"
    lines = ["", f"kernel  {verdict}: path {kernel.get('path') or '-'} beside nft monitor trace of the probe"]
    steps = result.paths[kernel["path"] - 1].steps if result is not None and kernel.get("path") else ()
    for i, r in enumerate(kernel["rules"], 1):
        n = r.get("step")
        ours = (
            f"step {n}: {steps[n - 1].table}/{steps[n - 1].chain} {steps[n - 1].action}"
            if n and n <= len(steps)
            else "not on the path"
        )
        lines.extend(
            _wrap(
                term(f"{r['table']}/{r['chain']}: {r['rule']} (verdict {r['verdict']})"),
                width,
                f"  {i:<3} kernel  ",
                "              ",
            )
        )
        lines.extend(_wrap(term(ours), width, "      kpdiag  ", "              "))
    lines.extend(_wrap(term(kernel["says"]), width, "  ", "  "))
    for note in kernel["notes"]:
        lines.extend(_wrap(term(note), width, "  note: ", "        "))
    return lines


def _wrap_rule(text: str, width: int) -> list[str]:
    """A rule's text in full, broken at spaces to fit (continuation lines indented further)."""
    import textwrap

    import re

    glued = re.sub(r'"[^"]*"', lambda m: m.group(0).replace(" ", "\u00a0"), text)  # a quoted comment stays on one line
    lines = textwrap.wrap(
        glued,
        max(width, 40),
        initial_indent="      ",
        subsequent_indent="          ",
        break_long_words=False,
        break_on_hyphens=False,
        replace_whitespace=False,
    ) or [""]
    return [line.replace("\u00a0", " ") for line in lines]


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def trace_to_json(result: TraceResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def _dot_id(text: str) -> str:
    """A quoted Graphviz id from parts kpdiag already escaped (:func:`_dot`); its own "\\n" line breaks stay."""
    return '"' + text + '"'


def _dot(value) -> str:
    return dot_escape(value)


def trace_to_dot(result: TraceResult) -> str:
    """Chains as nodes, jumps as edges labelled with the share of traffic taking them."""
    edges: dict[tuple[str, str], float] = {}
    labels: dict[tuple[str, str], str] = {}
    ends: dict[str, str] = {}
    for path in result.paths:
        prev = "packet"
        for step in path.steps:
            node = (
                f"{_dot(step.hook)}\\n{_dot(step.table)}/{_dot(step.chain)}"
                if step.rule is not None or step.table != "-"
                else _dot(step.hook)
            )
            if node != prev:
                key = (prev, node)
                edges[key] = edges.get(key, 0.0) + path.probability
                labels.setdefault(key, "")
                prev = node
        end = (
            _dot(path.verdict.upper())
            + (f"\\nDNAT {_dot(path.dnat)}" if path.dnat else "")
            + ("\\nmasquerade" if path.masquerade else "")
        )
        ends[end] = "box"
        key = (prev, end)
        edges[key] = edges.get(key, 0.0) + path.probability
    pk = result.packet
    out = ["digraph kpdiag_trace {", "  rankdir=LR;", '  node [shape=ellipse, fontname="Helvetica"];']
    title = _dot(f"{pk.proto} {pk.src} -> {pk.dst}" + (f":{pk.dport}" if pk.dport is not None else ""))
    out.append(f"  packet [shape=plaintext, label={_dot_id(title)}];")
    for end in ends:
        colour = "palegreen" if end.startswith("ACCEPT") else "salmon"
        out.append(f"  {_dot_id(end)} [shape=box, style=filled, fillcolor={colour}];")
    for (a, b), p in edges.items():
        out.append(f"  {_dot_id(a)} -> {_dot_id(b)} [label={_dot_id(_pct(p))}];")
    out.append("}")
    return "\n".join(out) + "\n"
