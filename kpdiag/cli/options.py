"""What the commands share: one-line errors and messages, -o yaml, the check options (--select, --ignore, their
completion and typo hints), the report options and printing a report with the exit code exitcodes decides, and the
checks of a bundle output path or a Kubernetes name made before anything is collected."""

from __future__ import annotations

import sys

import click

from kpdiag import exitcodes


OUTPUTS = ("text", "json", "yaml", "dot")


COMPLETE_VAR = "_KPDIAG_COMPLETE"


# -v means one thing on every command: show what the text is otherwise short about (-o json/yaml always hold it all)
VERBOSE_HELP = "More detail: everything the text otherwise sums up (-o json/yaml always hold it all)."


def _fail(message: str, code: int) -> "click.exceptions.Exit":
    from kpdiag.render.safe import term

    click.echo(f"kpdiag: error: {term(message)}", err=True)
    return click.exceptions.Exit(code)


def _yaml(json_text: str) -> str:
    """-o yaml: the document -o json prints, as YAML (PyYAML imported only now)."""
    from kpdiag.render.yamlout import json_to_yaml

    return json_to_yaml(json_text)


def _say(message: str) -> None:
    """A line for stderr that may carry names from the bundle, the API or a node: escaped (render.safe.term)."""
    from kpdiag.render.safe import term

    click.echo(f"kpdiag: {term(message)}", err=True)


def _complete_checks(ctx, param, incomplete: str):
    """Shell completion of check ids and slugs (--select, --ignore, kpdiag explain)."""
    from click.shell_completion import CompletionItem

    from kpdiag.checkapi import load_registry

    items = []
    for c in load_registry().checks:
        if c.id.upper().startswith(incomplete.upper()):
            items.append(CompletionItem(c.id, help=c.title))
        elif incomplete and c.slug.startswith(incomplete.lower()):
            items.append(CompletionItem(c.slug, help=c.title))
    return items


def _nearest(pattern: str, checks) -> list[str]:
    """The check ids nearest to a mistyped id or slug, best first ("KP50l" → KP501: l, I and O read as 1 and 0)."""
    import difflib

    named = {c.id: f"{c.id} ({c.slug})" for c in checks}
    p = pattern.strip()
    as_id = p.upper().translate(str.maketrans("LIO", "110"))
    scored = [(difflib.SequenceMatcher(None, as_id, c.id).ratio(), c.id) for c in checks]
    scored += [(difflib.SequenceMatcher(None, p.lower(), c.slug).ratio(), c.id) for c in checks]
    best: dict[str, float] = {}
    for score, cid in scored:
        best[cid] = max(best.get(cid, 0.0), score)
    ranked = sorted((cid for cid, score in best.items() if score >= 0.6), key=lambda cid: (-best[cid], cid))
    return [named[cid] for cid in ranked[:3]]


def _check_patterns(ctx, param, value):
    """--select/--ignore: every entry must name a check (id, id prefix or slug) — a typo must not run nothing."""
    if not value:
        return value
    from kpdiag.checkapi import load_registry
    from kpdiag.render.safe import term

    checks = load_registry().checks
    for pattern in value:
        p = pattern.strip()
        if any(c.id.upper().startswith(p.upper()) or c.slug == p.lower() for c in checks) and p:
            continue
        near = _nearest(p, checks)
        hint = f"; nearest: {', '.join(near)}" if near else ""
        raise click.BadParameter(
            f"no check matches {term(pattern)!r}{hint} (see 'kpdiag checks')", ctx=ctx, param=param
        )
    return value


# `kpdiag node` and `kpdiag collect` read the live node alike
_host_root_option = click.option(
    "--host-root",
    type=click.Path(),
    default=None,
    help="Where the host's root is mounted (default: /host when present, else /).",
)


def _report_options(fn):
    fn = click.option(
        "--ignore",
        multiple=True,
        callback=_check_patterns,
        shell_complete=_complete_checks,
        help="Skip checks by id, id prefix or slug (repeatable).",
    )(fn)
    fn = click.option(
        "--select",
        multiple=True,
        callback=_check_patterns,
        shell_complete=_complete_checks,
        help="Run only these checks: id (KP501), prefix (KP5) or slug (repeatable).",
    )(fn)
    fn = click.option(
        "--fail-on",
        type=click.Choice(["error", "warning", "info", "never"]),
        default="error",
        show_default=True,
        help="Exit 1 when a finding is at or above this severity.",
    )(fn)
    fn = click.option(
        "-o", "--output", type=click.Choice(["text", "table", "json", "yaml"]), default="text", show_default=True
    )(fn)
    fn = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help=VERBOSE_HELP + " Here: the informational findings, each check that did not run and why, every node, "
        "every source that could not be read.",
    )(fn)
    return fn


def _emit_report(report, output: str, fail_on: str, verbose: bool = False) -> None:
    """Print a report and leave with the exit code exitcodes decides."""
    from kpdiag.render.report import report_to_json, report_to_table, report_to_text, use_colour

    code = exitcodes.for_findings(report.severities(), fail_on, report.readable)
    if output in ("json", "yaml"):  # a machine reading it gets the problems too
        text = report_to_json(report)
        click.echo(_yaml(text) if output == "yaml" else text, nl=False)
    elif code != exitcodes.NO_DIAGNOSIS:
        text = (
            report_to_table(report, verbose=verbose)
            if output == "table"
            else report_to_text(report, colour=use_colour(sys.stdout), verbose=verbose)
        )
        click.echo(text, nl=False)
    if code == exitcodes.NO_DIAGNOSIS:  # one line that says why, not an empty report
        raise _fail(_unreadable(report), code)
    raise click.exceptions.Exit(code)


def _unreadable(report) -> str:
    headline = (report.extra or {}).get("headline")
    if headline:  # the library said why in plain words (kpdiag svc: API unreachable, 401/403, no kubeconfig …)
        return str(headline).removeprefix("kpdiag ")
    problems = list(report.problems)
    if not problems:
        return f"{report.subject}: nothing kpdiag can read there (no bundle files: an empty or wrong directory?)"
    first = problems[0]
    more = f" (and {len(problems) - 1} more; -o json lists them)" if len(problems) > 1 else ""
    return f"{report.subject}: nothing readable: {first.get('source')}: {first.get('error')}{more}"


def _progress(message: str) -> None:
    _say(message)


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


_NOT_A_BUNDLE = (
    ".zip",
    ".tar",
    ".gz",
    ".bz2",
    ".xz",
    ".zst",
    ".7z",
    ".tbz",
    ".tbz2",
    ".txz",
    ".json",
    ".yaml",
    ".yml",
    ".txt",
)


def _check_output(out: str, force: bool, option: str) -> None:
    """A bundle output is a new directory or FILE.tar.gz; an existing path only with --force, a symlink never."""
    from kpdiag.bundle.safeio import OutputExists, check_new_output

    if not out.endswith(ARCHIVE_SUFFIXES) and out.lower().endswith(_NOT_A_BUNDLE):
        raise _fail(
            f"{option} {out}: a bundle is written as a directory or a FILE.tar.gz (not {out.rsplit('.', 1)[-1]})",
            exitcodes.USAGE,
        )
    try:
        check_new_output(out, force)
    except OutputExists as exc:
        raise _fail(f"{out}: {exc.strerror}", exitcodes.USAGE) from None
    import os

    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):  # found now, not after minutes of collection
        raise _fail(f"{option} {out}: the directory {parent} does not exist", exitcodes.USAGE)


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


def _check_name(value: str, what: str, subdomain: bool = False) -> None:
    """A Kubernetes object name as the API accepts it (a DNS label; a pod name may have dots), else a usage error —
    before the API is asked or a packet sent."""
    import re

    pattern = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*" if subdomain else _DNS_LABEL
    if not re.fullmatch(pattern, value or "") or len(value) > 253:
        raise _fail(
            f"{what} {value!r} is not a Kubernetes name (lower-case letters, digits and '-'"
            + (", '.'" if subdomain else "")
            + ")",
            exitcodes.USAGE,
        )
