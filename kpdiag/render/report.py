"""Render a Report as text (for people), a table, or JSON (kpdiag.report/v1)."""

from __future__ import annotations

import json
import os
import textwrap

from ..model import Report

_COLOURS = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m", "bold": "\033[1m", "dim": "\033[2m", "reset": "\033[0m"}


def use_colour(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def report_to_text(report: Report, colour: bool = False, verbose: bool = False) -> str:
    def c(name: str, text: str) -> str:
        return f"{_COLOURS[name]}{text}{_COLOURS['reset']}" if colour else text

    out = []
    counts = report.counts()
    f = report.facts
    head = f"kpdiag: {report.subject}"
    bits = []
    if f.get("proxy_mode"):
        bits.append(f"mode {f['proxy_mode']} ({f.get('proxy_mode_source')})")
    if f.get("kernel"):
        bits.append(f"kernel {f['kernel']}")
    if f.get("iptables_rules") is not None:
        bits.append(f"{f['iptables_rules']} iptables rules, {f.get('service_ports_programmed', 0)} service ports")
    if f.get("nodes") is not None:
        modes = ", ".join(f"{m} {n}" for m, n in (f.get("proxy_modes") or {}).items())
        bits.append(f"{f['nodes_diagnosed']} of {f['nodes']} nodes diagnosed" + (f"; modes: {modes}" if modes else "")
                    + (f"; API server {f['api_server_version']}" if f.get("api_server_version") else ""))
    out.append(c("bold", head))
    if bits:
        out.append("  " + "; ".join(bits))
    if report.extra.get("nodes"):
        out.append("")
        rows, hidden = notable_rows(report.extra["nodes"], verbose)
        out.extend("  " + line for line in nodes_table(rows).splitlines())
        if hidden:
            out.append(f"  … and {hidden} more node(s) like the majority: ok, no error or warning (-v lists every node)")
    verdict = report.extra.get("verdict") or []
    if verdict:
        out.append("")
        out.extend(c("bold", f"  » {line}") for line in verdict)
        out.append("")
    for t in report.extra.get("traces") or []:
        pk = t["packet"]
        ends = ", ".join(f"{p['probability'] * 100:.0f}% {p['verdict']}" + (f" → {p['dnat']}" if p["dnat"] else "") for p in t["paths"][:6])
        out.append(f"  trace {t['target']} from {pk['from']} {pk['src']}: {ends}" + (" …" if len(t["paths"]) > 6 else ""))
    for note in report.extra.get("notes") or []:
        out.append(f"  note: {note}")
    out.append(f"  {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    for severity in ("error", "warning", "info"):
        group = [x for x in report.findings if x.severity.value == severity]
        if not group:
            continue
        out.append("")
        out.append(c(severity, f"{severity.upper()}S" if severity != "info" else "INFO"))
        for x in group:
            out.append("")
            out.append(c(severity, f"{x.id} {x.slug}") + f"  {x.summary}")
            out.extend(textwrap.wrap(x.explanation, 100, initial_indent="  why: ", subsequent_indent="       "))
            if x.fix:
                out.append("  fix:")
                out.extend(f"    $ {step}" if _looks_like_command(step) else f"    - {step}" for step in x.fix)
            if x.evidence:
                out.append("  evidence:")
                out.extend(c("dim", f"    {e}") for e in x.evidence)
    skipped = [r for r in report.checks if r.status != "ran"]
    if skipped:
        out.append("")
        out.append(c("dim", f"not checked ({len(skipped)}):"))
        for r in skipped if verbose else skipped[:40]:
            out.append(c("dim", f"  {r.id} {r.slug}: {r.status} — {r.reason}"))
    if report.problems:
        out.append("")
        out.append(c("dim", f"could not read ({len(report.problems)}):"))
        for p in report.problems:
            out.append(c("dim", f"  {p['source']}: {p['error']}"))
    if not report.findings:
        out.append("")
        out.append("No problems found by the checks that ran.")
    return "\n".join(out) + "\n"


def _looks_like_command(step: str) -> bool:
    first = step.split(" ", 1)[0]
    return first in ("sysctl", "modprobe", "echo", "printf", "kubectl", "iptables", "ip", "grep", "conntrack", "watch", "curl",
                     "apt-get", "update-alternatives", "for", "kpdiag", "nc", "iptables-save", "find", "fuser", "nft", "ipvsadm")


TABLE_ALL_UP_TO = 40


def notable_rows(rows: list[dict], verbose: bool = False) -> tuple[list[dict], int]:
    """On a big cluster the text report lists the nodes that stand out (failed, errors or warnings, another mode
    or kube-proxy version than most); -v lists all. Returns (rows to show, how many were left out)."""
    if verbose or len(rows) <= TABLE_ALL_UP_TO:
        return rows, 0
    from collections import Counter

    usual = {k: Counter(r.get(k) for r in rows if r.get("status") == "ok").most_common(1) for k in ("mode", "kube_proxy")}
    usual = {k: v[0][0] for k, v in usual.items() if v}

    def notable(r: dict) -> bool:
        return (r.get("status") != "ok" or r.get("error") or r.get("warning")
                or any(r.get(k) != v for k, v in usual.items()))

    shown = [r for r in rows if notable(r)]
    return shown, len(rows) - len(shown)


def nodes_table(rows: list[dict]) -> str:
    """The per-node summary of a cluster report."""
    from tabulate import tabulate

    cols = [("node", "node"), ("status", "status"), ("mode", "mode"), ("kube_proxy", "kube-proxy"), ("kernel", "kernel"),
            ("iptables_rules", "ipt rules"), ("service_ports", "svc ports"), ("conntrack", "conntrack"), ("error", "E"),
            ("warning", "W"), ("info", "I")]
    if any(r.get("service") for r in rows):
        cols.append(("service", "service trace"))
    body = [[("" if r.get(k) is None else r.get(k)) for k, _ in cols] for r in rows]
    return tabulate(body, headers=[h for _, h in cols], tablefmt="simple", maxcolwidths=[40, 60] + [None] * (len(cols) - 2),
                    disable_numparse=True) + "\n"


def report_to_table(report: Report) -> str:
    from tabulate import tabulate

    rows = [[x.severity.value, x.id, x.slug, x.subject or "", x.summary] for x in report.findings]
    head = nodes_table(report.extra["nodes"]) + "\n" if report.extra.get("nodes") else ""
    if not rows:
        return head + "no findings\n"
    return head + tabulate(rows, headers=["severity", "id", "check", "subject", "summary"], tablefmt="simple", maxcolwidths=[None, None, None, 20, 80]) + "\n"


def report_to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
