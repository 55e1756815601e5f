"""kpdiag's command line: thin. Parse options, call the library, print what a renderer returns.

Heavy modules (scapy, kubernetes, the parsers) are imported inside the commands, so that
``kpdiag --help`` stays instant. Exit codes come from :mod:`kpdiag.exitcodes` only.
"""

from __future__ import annotations

import sys

import click

from . import __version__, exitcodes
from kpdiag.bundle import sources
from kpdiag.dataplane import kube_proxy_modes
from kpdiag.manifests import MANIFESTS

OUTPUTS = ("text", "json", "yaml", "dot")


COMPLETE_VAR = "_KPDIAG_COMPLETE"
# -v means one thing on every command: show what the text is otherwise short about (-o json/yaml always hold it all)
VERBOSE_HELP = "More detail: everything the text otherwise sums up (-o json/yaml always hold it all)."


def _fail(message: str, code: int) -> "click.exceptions.Exit":
    from .render.safe import term

    click.echo(f"kpdiag: error: {term(message)}", err=True)
    return click.exceptions.Exit(code)


def _yaml(json_text: str) -> str:
    """-o yaml: the document -o json prints, as YAML (PyYAML imported only now)."""
    from .render.yamlout import json_to_yaml

    return json_to_yaml(json_text)


def _say(message: str) -> None:
    """A line for stderr that may carry names from the bundle, the API or a node: escaped (render.safe.term)."""
    from .render.safe import term

    click.echo(f"kpdiag: {term(message)}", err=True)


def _complete_checks(ctx, param, incomplete: str):
    """Shell completion of check ids and slugs (--select, --ignore, kpdiag explain)."""
    from click.shell_completion import CompletionItem

    from .checkapi import load_registry

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
    from .checkapi import load_registry
    from .render.safe import term

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


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=True,
    subcommand_metavar="COMMAND [ARGS]...",
)
@click.version_option(__version__, "--version", prog_name="kpdiag")
@click.pass_context
def cli(ctx):
    """kpdiag tells you why traffic to a Kubernetes Service does not arrive.

    It traces packets through the node's real kube-proxy rules and explains what is wrong.
    """
    if ctx.invoked_subcommand is None:  # plain `kpdiag`: its help, and success (as kubectl does)
        click.echo(ctx.get_help())
        raise click.exceptions.Exit(exitcodes.OK)


@cli.command()
@click.option("--rules", "rules", type=click.Path(dir_okay=False), help="iptables-save output to trace through.")
@click.option("--bundle", "bundle", type=click.Path(), help="A kpdiag bundle (directory or .tar.gz).")
@click.option(
    "--nft",
    "nft_file",
    type=click.Path(dir_okay=False),
    help="'nft -j list ruleset' output to trace through (nftables mode).",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", *(d.name for d in kube_proxy_modes() if d.has_own_tracer)]),
    default="auto",
    show_default=True,
    help="With --bundle or live: which rules to trace (auto: the mode kube-proxy runs in).",
)
@click.option("--ipsets", "ipset_file", type=click.Path(dir_okay=False), help="'ipset save' output (with --rules).")
@click.option("--src", help="Source IP (default: a node address with --from node).")
@click.option(
    "--dst", required=True, help="Destination: IP, IP:PORT or [IPv6]:PORT (a ClusterIP, node IP, external or LB IP)."
)
@click.option("--proto", type=click.Choice(["tcp", "udp", "sctp", "icmp"]), default="tcp", show_default=True)
@click.option("--dport", type=int, help="Destination port (not for icmp; or give it in --dst IP:PORT).")
@click.option("--sport", type=int, default=40000, show_default=True, help="Source port.")
@click.option(
    "--from",
    "origin",
    type=click.Choice(["external", "pod", "node"]),
    default="external",
    show_default=True,
    help="Where the packet comes from: another host / a pod (PREROUTING) or the node itself (OUTPUT).",
)
@click.option(
    "--local-ip", "local_ips", multiple=True, help="The node's own addresses (repeatable) when no bundle gives them."
)
@click.option("--iif", help="Input interface of the packet (for rules with -i).")
@click.option(
    "--host-root",
    type=click.Path(),
    default=None,
    help="Live (no --rules/--nft/--bundle): where the host's root is mounted.",
)
@click.option(
    "--all-rules",
    is_flag=True,
    help="Live: read the whole ruleset (iptables-save, nft list ruleset) instead of only what this packet can meet.",
)
@click.option(
    "--kernel",
    is_flag=True,
    help="Live, --from node, TCP/UDP: also send the packet as a probe and show the kernel's own trace of it beside "
    "the simulated path (AGREE or the first rule where they part). Changes the node for about a second: a table of "
    "kpdiag's (deleted by the kernel when kpdiag exits, even on SIGKILL), a listener, the probe's connection.",
)
@click.option("-o", "--output", type=click.Choice(OUTPUTS), default="text", show_default=True)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help=VERBOSE_HELP + " Here: every rule's text in full, not only the one that decided.",
)
def trace(
    rules,
    bundle,
    nft_file,
    mode,
    ipset_file,
    src,
    dst,
    proto,
    dport,
    sport,
    origin,
    local_ips,
    iif,
    host_root,
    all_rules,
    kernel,
    output,
    verbose,
):
    """Trace one packet through the node's rules: every rule it hits, each endpoint with its probability.

    Without --rules, --nft or --bundle it reads this node's rules, addresses, routes and sysctls (read-only): in
    iptables and nftables mode only the chains (and nftables map elements) a packet to --dst can meet, unless
    --all-rules (the whole dump when that is not possible, saying why).
    Exit code: 0 delivered on every path, 4 dropped on some path, 5 rejected (none dropped); 2 usage, 3 unreadable
    or not traced to the end (the trace's work budget; the notes say why). --kernel is the one option of kpdiag
    that changes the node (docs/privileges.md).
    """
    from .errors import InputError
    from .render.trace import trace_to_dot, trace_to_json, trace_to_text
    from .trace.model import Packet
    from dataclasses import replace

    from .commands.trace import explain_unmatched, label_live, read_summary, setup_trace, split_dst

    if sum(bool(x) for x in (rules, bundle, nft_file)) > 1:
        raise _fail(
            "give at most one of --rules FILE, --nft FILE or --bundle DIR (none: trace live on this node)",
            exitcodes.USAGE,
        )
    try:
        dst, dst_port = split_dst(dst)
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    if dst_port is not None:
        if dport is not None and dport != dst_port:
            raise _fail(f"--dst gives port {dst_port} and --dport {dport}: give one", exitcodes.USAGE)
        dport = dst_port
    if proto == "icmp" and dport is not None:
        raise _fail("an ICMP packet has no port: leave out --dport and the :PORT of --dst", exitcodes.USAGE)
    family = 6 if ":" in dst else 4
    live = not (rules or bundle or nft_file)
    if kernel and (not live or origin != "node" or proto not in ("tcp", "udp")):
        raise _fail(
            "--kernel is for a live trace of a TCP or UDP packet --from node (the probe kpdiag sends)", exitcodes.USAGE
        )
    if all_rules and not live:
        raise _fail("--all-rules is for a live trace (--rules, --nft and --bundle are read whole)", exitcodes.USAGE)
    # every argument is judged before anything is read: a typo costs no collection of the live node
    if src is None and origin != "node":
        raise _fail("--src is needed unless --from node", exitcodes.USAGE)
    try:  # the packet as given (a stand-in source of its family when --from node picks it later)
        Packet(
            src=src or ("::1" if family == 6 else "127.0.0.1"),
            dst=dst,
            proto=proto,
            dport=dport,
            sport=sport,
            origin=origin,
            iif=iif,
        )
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    try:
        setup = setup_trace(
            rules=rules,
            bundle=bundle,
            local_ips=local_ips,
            ipset_file=ipset_file,
            nft=nft_file,
            mode=mode,
            family=family,
            live=live,
            host_root=host_root,
            progress=_progress,
            dest=_trace_focus(dst, dport, proto, mode) if live and not all_rules else None,
        )
    except InputError as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    if setup.read:
        _say(read_summary(setup.read))
    if src is None:
        if origin != "node":
            raise _fail("--src is needed unless --from node", exitcodes.USAGE)
        src = _first_local(setup, local_ips, family, dst)
        if src is None:
            raise _fail(
                f"--from node: no IPv{family} address of the node is known; give --src or --local-ip", exitcodes.USAGE
            )
    try:
        packet = Packet(src=src, dst=dst, proto=proto, dport=dport, sport=sport, origin=origin, iif=iif)
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    for problem in setup.problems:
        _say(f"warning: {problem}")
    result = label_live(explain_unmatched(setup.tracer.trace(packet), setup), setup)
    if setup.read:
        result = replace(result, read=setup.read)
    if kernel:
        from .trace.kernel import CHANGES, kernel_check

        _say(CHANGES)
        try:
            result = replace(result, kernel=kernel_check(result, setup))
        except InputError as exc:
            raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    render = {
        "text": lambda r: trace_to_text(r, verbose),
        "json": trace_to_json,
        "yaml": lambda r: _yaml(trace_to_json(r)),
        "dot": trace_to_dot,
    }[output]
    click.echo(render(result), nl=False)
    raise click.exceptions.Exit(exitcodes.for_trace(result.verdicts(), result.complete))


def _trace_focus(dst: str, dport: int | None, proto: str, mode: str):
    """The destination a live trace reads the rules of (kpdiag/collect/dest_rules.py), or None: --mode names a mode
    whose rules are read whole."""
    from .collect.dest_rules import Destination, reads_destination

    if mode != "auto" and not reads_destination(mode):
        return None
    return Destination(dst, dport, proto)


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
    from .render.report import report_to_json, report_to_table, report_to_text, use_colour

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


@cli.command()
@click.argument("bundle", type=click.Path())
@_report_options
def analyze(bundle, output, fail_on, select, ignore, verbose):
    """Run every check on a bundle (directory or .tar.gz), offline — or aggregate node reports: a directory of them
    (kpdiag cluster --save-dir, or kpdiag node -o json outputs) or one such file."""
    from kpdiag.commands.pipeline import analyze_bundle
    from .errors import InputError
    from .fleet.aggregate import aggregate_dir, aggregate_files, looks_like_report_dir, looks_like_report_file

    try:
        if looks_like_report_dir(bundle):
            report = aggregate_dir(bundle, select, ignore)
        elif looks_like_report_file(bundle):
            report = aggregate_files([bundle], select, ignore)
        else:
            report = analyze_bundle(bundle, select, ignore)
    except InputError as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    _emit_report(report, output, fail_on, verbose)


def _progress(message: str) -> None:
    _say(message)


@cli.command()
@click.option(
    "--host-root",
    type=click.Path(),
    default=None,
    help="Where the host's root is mounted (default: /host when present, else /).",
)
@click.option(
    "--service",
    "service",
    help="Focus on one Service (NS/NAME): read only the rules its packets can meet, judge it, trace each of its ports.",
)
@click.option(
    "--all-rules",
    is_flag=True,
    help="With --service: read every rule as without it (the whole dump; slow on a big nf_tables node).",
)
@click.option("--trace", "trace_to", help="Also trace a packet to DST:PORT[/PROTO] from a pod and an external client.")
@click.option(
    "--preflight",
    type=click.Choice([d.name for d in kube_proxy_modes() if d.preflight]),
    help="Can this node run that proxy mode? (its prerequisite checks only)",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress messages on stderr (what was not collected is in the report)."
)
@click.option(
    "--kubeconfig",
    type=click.Path(),
    help="Compare the rules with the API: kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's service account).",
)
@click.option("--context", help="kubeconfig context.")
@click.option("--no-api", is_flag=True, help="Do not ask the Kubernetes API: judge the rules alone.")
@_report_options
def node(
    host_root,
    service,
    all_rules,
    trace_to,
    preflight,
    quiet,
    kubeconfig,
    context,
    no_api,
    output,
    fail_on,
    select,
    ignore,
    verbose,
):
    """Collect this node (read-only) and diagnose it — against the Services and EndpointSlices of the API when it can."""
    from kpdiag.commands.focus import check_focus
    from kpdiag.commands.pipeline import diagnose_node

    try:
        check_focus(service, trace_to)  # before minutes of collection
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    if all_rules and not service:
        raise _fail("--all-rules goes with --service NS/NAME (without it every rule is read anyway)", exitcodes.USAGE)
    report = diagnose_node(
        host_root,
        service=service,
        trace_to=trace_to,
        preflight=preflight,
        use_api=not no_api,
        kubeconfig=kubeconfig,
        context=context,
        select=select,
        ignore=ignore,
        progress=None if quiet else _progress,
        all_rules=all_rules,
    )
    _emit_report(report, output, fail_on, verbose)


@cli.command()
@click.argument("name")
@click.option(
    "-n", "--namespace", default=None, help="The Service's namespace (default: the kubeconfig context's, else default)."
)
@click.option(
    "--kubeconfig", type=click.Path(), help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)."
)
@click.option("--context", help="kubeconfig context.")
@click.option("--no-probe", is_flag=True, help="API and rules only: send no packets.")
@click.option("--node", "node_name", help="The node this runs on (default: $NODE_NAME), for traffic-policy checks.")
@click.option("--host-root", type=click.Path(), default=None, help="Host root mount, when run on a node.")
@click.option(
    "--save",
    "save_to",
    type=click.Path(),
    help="Also write what was collected as a bundle (new DIR or FILE.tar.gz) for 'kpdiag analyze'.",
)
@click.option(
    "--force", is_flag=True, help="With --save: replace an existing output of yours, whole (never through a symlink)."
)
@click.option("--from", "client", help="The client pod NS/POD for NetworkPolicy (default: the pod kpdiag runs in).")
@_report_options
def svc(
    name,
    namespace,
    kubeconfig,
    context,
    no_probe,
    node_name,
    host_root,
    save_to,
    force,
    client,
    output,
    fail_on,
    select,
    ignore,
    verbose,
):
    """Why does Service NAME not answer? API view, DNS, probes, node rules when visible."""
    from kpdiag.commands.svc import diagnose_service

    _check_name(name, "Service")
    if namespace is not None:
        _check_name(namespace, "namespace")
    if client is not None:
        ns, _, pod = client.partition("/")
        _check_name(ns, "--from namespace")
        _check_name(pod, "--from pod", subdomain=True)
    if save_to:
        _check_output(save_to, force, "--save")
    report = diagnose_service(
        namespace,
        name,
        kubeconfig=kubeconfig,
        context=context,
        probe=not no_probe,
        node=node_name,
        host_root=host_root,
        select=select,
        ignore=ignore,
        progress=_progress,
        save_to=save_to,
        save_force=force,
        client=client,
    )
    _emit_report(report, output, fail_on, verbose)


@cli.command()
@click.option("--from", "from_", required=True, help="The client: NS/POD or an IP address.")
@click.option(
    "--to",
    "to",
    required=True,
    help="NS/POD, NS/SERVICE (each endpoint at its targetPort), NS/svc/NAME or NS/pod/NAME, or an IP.",
)
@click.option(
    "--port", "port", required=True, help="PORT[/PROTO]: a number or a port name; tcp (default), udp or sctp."
)
@click.option(
    "--bundle",
    "bundle",
    type=click.Path(),
    help=f"Read {sources.NETWORKPOLICIES}, pods.json, namespaces.json … from a bundle.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(),
    help="Read from the API: kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).",
)
@click.option("--context", help="kubeconfig context.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
def policy(from_, to, port, bundle, kubeconfig, context, output):
    """Is FROM → TO:PORT allowed by NetworkPolicy, and by which policy? Exit 0 allowed, 1 denied, 3 cannot tell."""
    from kpdiag.bundle.store import Bundle
    from .errors import InputError, UsageError
    from kpdiag.commands.policy import CannotEvaluate, collect_live, evaluate, parse_from, parse_port, parse_to
    from .render.policy import policy_to_json, policy_to_text

    if bundle and (kubeconfig or context):
        raise _fail("give --bundle DIR or --kubeconfig/--context, not both", exitcodes.USAGE)
    try:
        parse_from(from_), parse_to(to), parse_port(port)
        if bundle:
            source = Bundle.open(bundle)
        else:
            files, errors = collect_live(from_, to, kubeconfig, context)
            source = Bundle.from_files("api", files)
            for err in errors:
                source.problem(err["source"], f"not collected: {err['error']}")
        doc = evaluate(source, from_, to, port)
    except UsageError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    except (InputError, CannotEvaluate) as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    text = policy_to_text(doc) if output == "text" else policy_to_json(doc)
    click.echo(_yaml(text) if output == "yaml" else text, nl=False)
    raise click.exceptions.Exit(exitcodes.for_policy(doc["allowed"]))


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


@cli.command()
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="A new directory, or FILE.tar.gz.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing output of yours, whole, once the new one is complete (a symlink is never followed).",
)
@click.option(
    "--host-root",
    type=click.Path(),
    default=None,
    help="Where the host's root is mounted (default: /host when present, else /).",
)
@click.option(
    "--redact",
    is_flag=True,
    help="Replace names, label values, host names, MACs and every IP address by pseudonyms (the same in every file; IPs keep their prefixes). Tokens are removed with or without it.",
)
@click.option(
    "--redact-salt", help="Salt for --redact (the same salt gives the same hashes across bundles; default: random)."
)
def collect(out, host_root, redact, redact_salt, force):
    """Write a bundle of this node's state (plain command outputs) for 'kpdiag analyze' anywhere."""

    from kpdiag.bundle.store import write_bundle
    from .collect.node import collect_node

    _check_output(out, force, "-o")
    files, manifest = collect_node(host_root=host_root, progress=_progress)
    if redact:
        import json as _json

        from kpdiag.bundle.redact import redact_files

        files["kpdiag.json"] = _json.dumps(manifest).encode()
        files, redactor = redact_files(files, redact_salt)
        manifest = _json.loads(files.pop("kpdiag.json"))
        manifest["redacted"] = {"names": len(redactor.names), "addresses": len(redactor.ips)}
    try:
        write_bundle(files, out, manifest, force=force)
    except OSError as exc:
        from kpdiag.bundle.safeio import describe

        where = exc.filename if isinstance(exc.filename, str) and exc.filename not in (str(out), "") else None
        at = f" {where}" if where else ""  # the part that failed (a folder in it that is a link, say)
        raise _fail(f"{out}: cannot write{at}: {describe(exc)}", exitcodes.NO_DIAGNOSIS) from None
    _say(f"wrote {out}: {len(files)} files, {len(manifest['errors'])} sources not collected")
    for err in manifest["errors"]:
        _say(f"  {err['source']}: {err['error']}")


@cli.command()
@click.option(
    "--nodes",
    "nodes",
    help="A label selector (node-role.kubernetes.io/worker, zone=a) or node names (node-a,node-b). Default: every node.",
)
@click.option("--service", "service", help="Also trace this Service (NS/NAME) on every node.")
@click.option(
    "--image",
    default=None,
    help="The kpdiag image the node pods run: NAME@sha256:… may be pulled; a tag, and the default kpdiag:VERSION, are used only as loaded on the nodes, never pulled.",
)
@click.option(
    "-n",
    "--namespace",
    "pod_namespace",
    default=None,
    help="Where the node pods are created (default: kpdiag, which kpdiag rbac cluster creates).",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 500),
    default=20,
    show_default=True,
    help="Node pods at a time: at most 64 (kpdiag's cap on its worker threads; fewer when the process cannot start them).",
)
@click.option(
    "--timeout",
    type=click.IntRange(1, 7200),
    default=600,
    show_default=True,
    help="Seconds for the whole run, wall clock: credentials, every node, the cleanup (a 10,000-Service node needs minutes).",
)
@click.option(
    "--kubeconfig", type=click.Path(), help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)."
)
@click.option("--context", help="kubeconfig context.")
@click.option("--dry-run", is_flag=True, help="Print the pod manifests and create nothing.")
@click.option("--cleanup", is_flag=True, help="Delete every pod kpdiag left behind in the namespace, and stop.")
@click.option(
    "--keep-pods", is_flag=True, help="Leave the node pods for inspection (remove them later with --cleanup)."
)
@click.option(
    "--save-dir",
    type=click.Path(file_okay=False),
    help="Also write each node's report (a new DIR: nodes/NODE.json and cluster.json) for 'kpdiag analyze DIR'.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --save-dir: replace an existing directory of yours, whole, once the new one is complete.",
)
@click.option(
    "--node-api/--no-node-api",
    default=True,
    show_default=True,
    help="Give the node pods kpdiag's read-only service account (kpdiag-node: list Services and EndpointSlices, get Nodes) "
    "so each node's rules are compared with every Service; --no-node-api: no token in the pods, the rules alone are read.",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.05, 60),
    default=2.0,
    show_default=True,
    hidden=True,
    help="Seconds between pod status lists.",
)
@_report_options
def cluster(
    nodes,
    service,
    image,
    pod_namespace,
    parallel,
    timeout,
    kubeconfig,
    context,
    dry_run,
    cleanup,
    keep_pods,
    save_dir,
    force,
    node_api,
    poll,
    output,
    fail_on,
    select,
    ignore,
    verbose,
):
    """Run 'kpdiag node' on every node through Kubernetes (one short-lived pod per node) and compare the nodes."""
    from .fleet import cluster_cmd
    from .render.progress import ProgressBar

    if image is not None and (not image or any(ch.isspace() for ch in image)):
        raise _fail(f"--image {image!r} is not an image reference (NAME[:TAG][@sha256:…])", exitcodes.USAGE)
    if service is not None and ("/" not in service or not all(service.split("/", 1))):
        raise _fail(f"--service wants NS/NAME, not {service!r}", exitcodes.USAGE)
    if save_dir:
        _check_output(save_dir, force, "--save-dir")

    outcome = cluster_cmd.run(
        bar=ProgressBar(sys.stderr),
        nodes=nodes,
        service=service,
        image=image,
        namespace=pod_namespace,
        parallel=parallel,
        timeout=timeout,
        kubeconfig=kubeconfig,
        context=context,
        dry_run=dry_run,
        cleanup=cleanup,
        keep_pods=keep_pods,
        save_dir=save_dir,
        force=force,
        poll=poll,
        select=select,
        ignore=ignore,
        progress=_progress,
        node_api=node_api,
    )
    if outcome.text is not None:
        from .render.safe import term_lines

        click.echo(term_lines(outcome.text), nl=False)
    for line in outcome.messages:
        _say(line)
    if outcome.error is not None:
        raise _fail(outcome.error, outcome.code)
    if outcome.report is None:
        raise click.exceptions.Exit(outcome.code)
    try:
        _emit_report(outcome.report, output, fail_on, verbose)
    except click.exceptions.Exit as exc:  # pods left behind fail the run, whatever --fail-on says
        raise click.exceptions.Exit(max(exc.exit_code, outcome.code)) from None


@cli.command("redact")
@click.argument("bundle", type=click.Path())
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(),
    help="A new directory, or FILE.tar.gz (an existing path is refused).",
)
@click.option("--salt", help="Salt (the same salt gives the same pseudonyms across bundles; default: random).")
def redact_cmd(bundle, out, salt):
    """Write a redacted copy of a bundle collected without --redact (names, addresses, host names, tokens replaced)."""
    import json as _json
    import os

    from kpdiag.bundle.store import FORMAT, Bundle, write_bundle
    from .errors import InputError
    from kpdiag.bundle.redact import redact_files

    if os.path.lexists(out):
        raise _fail(
            f"{out} exists: give a new directory or FILE.tar.gz (a redacted copy is always written fresh)",
            exitcodes.USAGE,
        )
    try:
        source = Bundle.open(bundle)
    except InputError as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    files = {rel: data for rel in source.list("") if (data := source.read_bytes(rel)) is not None}
    for problem in source.problems:  # what is there and could not be copied (not what was never collected)
        if not problem.error.startswith("not collected:") and problem.source.split(":")[0] not in files:
            _say(f"warning: not copied: {problem}")
    if not files:
        raise _fail(f"{bundle}: nothing readable to redact", exitcodes.NO_DIAGNOSIS)
    red, redactor = redact_files(files, salt)
    for problem in redactor.not_copied:
        _say(f"warning: not copied: {problem}")
    try:
        manifest = _json.loads(red.pop("kpdiag.json", b"") or b"null")
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        manifest = {"format": FORMAT, "errors": []}
    manifest["redacted"] = {"names": len(redactor.names), "addresses": len(redactor.ips)}
    try:
        write_bundle(red, out, manifest)
    except OSError as exc:
        raise _fail(f"{out}: cannot write: {exc.strerror or exc}", exitcodes.NO_DIAGNOSIS) from None
    n_files, n_names, n_ips = len(red) + 1, len(redactor.names), len(redactor.ips)
    _say(
        f"wrote {out}: {n_files} file{'' if n_files == 1 else 's'}; {n_names} name{'' if n_names == 1 else 's'} and "
        f"{n_ips} address{'' if n_ips == 1 else 'es'} replaced"
    )


@cli.command("rbac")
@click.argument("names", nargs=-1, type=click.Choice(list(MANIFESTS)))
def rbac_cmd(names):
    """Print kpdiag's RBAC manifests (shipped in the package) to apply them.

    \b
    kpdiag rbac svc | kubectl apply -f -       svc and policy (read-only)
    kpdiag rbac cluster | kubectl apply -f -   cluster and its node pods
    kpdiag rbac                                the list

    Read them first: each says what it grants and why (docs/privileges.md in the repository too).
    """
    from .manifests import manifest_text

    if not names:
        for name, (filename, what) in MANIFESTS.items():
            click.echo(f"{name:<12} {what} ({filename})")
        return
    texts = [manifest_text(name).rstrip("\n") + "\n" for name in dict.fromkeys(names)]
    click.echo("---\n".join(texts), nl=False)


@cli.command("checks")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json", "yaml", "markdown"]), default="table", show_default=True
)
def checks_cmd(output):
    """The catalogue of checks."""
    from .checkapi import load_registry
    from .render.catalogue import catalogue_json, catalogue_markdown, catalogue_table

    registry = load_registry()
    for name, why in registry.load_errors:
        _say(f"warning: plugin {name} not loaded: {why}")
    render = {
        "table": catalogue_table,
        "json": catalogue_json,
        "yaml": lambda checks: _yaml(catalogue_json(checks)),
        "markdown": catalogue_markdown,
    }[output]
    click.echo(render(registry.checks), nl=False)


@cli.command()
@click.argument("check_id", shell_complete=_complete_checks)
def explain(check_id):
    """One check's documentation: symptom, why, fix."""
    from .checkapi import load_registry
    from .render.catalogue import explain_text

    registry = load_registry()
    spec = registry.get(check_id)
    if spec is None:
        near = _nearest(check_id, registry.checks)
        raise _fail(
            f"no check {check_id!r}" + (f"; nearest: {', '.join(near)}" if near else "") + " (see 'kpdiag checks')",
            exitcodes.USAGE,
        )
    click.echo(explain_text(spec), nl=False)


COMPLETION_SHELLS = ("bash", "zsh", "fish")


@cli.command()
@click.argument("shell", type=click.Choice([*COMPLETION_SHELLS, "install"]))
@click.option(
    "--shell",
    "for_shell",
    type=click.Choice(COMPLETION_SHELLS),
    default=None,
    help="With install: the shell (default: $SHELL's, else bash).",
)
def completion(shell, for_shell):
    """Print the completion script of SHELL, or install it for this user.

    \b
    kpdiag completion install          bash: writes it where bash-completion
                                       looks (~/.local/share/...), says where
    . <(kpdiag completion bash)        this shell only
    kpdiag completion zsh > "${fpath[1]}/_kpdiag"
    kpdiag completion fish > ~/.config/fish/completions/kpdiag.fish
    """
    from click.shell_completion import get_completion_class

    if shell != "install":
        click.echo(get_completion_class(shell)(cli, {}, "kpdiag", COMPLETE_VAR).source())
        return
    import os

    from .commands.completion import install_completion

    chosen = for_shell or os.path.basename(os.environ.get("SHELL", "")) or "bash"
    if chosen not in COMPLETION_SHELLS:
        chosen = "bash"
    script = get_completion_class(chosen)(cli, {}, "kpdiag", COMPLETE_VAR).source()
    try:
        path, hint = install_completion(chosen, script + "\n")
    except OSError as exc:
        raise _fail(
            f"cannot write the {chosen} completion: {exc.strerror or exc}: {exc.filename}", exitcodes.NO_DIAGNOSIS
        ) from None
    click.echo(f"kpdiag: wrote {path}", err=True)
    if hint:
        click.echo(f"kpdiag: {hint}", err=True)


def _first_local(setup, local_ips, family: int = 4, dst: str | None = None) -> str | None:
    """The node's first own address of the packet's family (not loopback, not link-local), or None when none is known:
    a packet the node sends to another host leaves with one of its real addresses, never 127.0.0.1."""
    for ip in local_ips:
        if (":" in ip) == (family == 6):
            return ip
    from .parse.addr import int_to_ip

    routing = setup.tracer.routing
    if dst is not None:  # as the kernel picks it: an address of the interface the route to dst leaves by
        from .parse.addr import parse_ip

        route = routing.lookup(*parse_ip(dst))
        if route is not None and route.dev and route.dev != "lo":
            mine = sorted(
                v
                for (v, ver), dev in routing.addr_dev.items()
                if dev == route.dev and ver == family and not (family == 6 and v >> 118 == 0x3FA)
            )
            if mine:
                return int_to_ip(mine[0], family)
    candidates = []
    for value, version in routing.local_ips:
        if version != family or (
            value >> 24 == 127 if family == 4 else value == 1 or value >> 118 == 0x3FA
        ):  # fe80::/10
            continue
        dev = routing.addr_dev.get((value, version)) or ""
        # an address of a physical-looking interface before those of bridges, kube-ipvs0, docker0 …
        rank = 1 if dev.startswith(("kube-", "docker", "cni", "cali", "flannel", "cilium", "veth", "lo")) else 0
        candidates.append((rank, value))
    return int_to_ip(min(candidates)[1], family) if candidates else None


def _interrupted(exc: KeyboardInterrupt) -> int:
    """A run stopped by a signal: the code is exitcodes.for_signal's (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM …). After a
    hangup the terminal is gone: the last words are best effort."""
    signum = getattr(exc, "signum", 2)
    try:
        if getattr(exc, "forced", False):
            click.echo(
                "kpdiag: interrupted before cleanup finished: pods may be left; remove them with: kpdiag cluster --cleanup",
                err=True,
            )
        else:
            click.echo("kpdiag: interrupted", err=True)
    except (OSError, ValueError):  # EIO on a hung-up terminal, a closed pipe
        pass
    _INTERRUPTED.append(signum)
    return exitcodes.for_signal(signum)


_INTERRUPTED: list[int] = []


def _signal_behind(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (a signal) an exception was raised while handling, if any."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def run() -> None:
    """The console entry point (kpdiag, kubectl-kpdiag, python -m kpdiag): main()'s exit code. After Ctrl-C the process
    leaves at once (os._exit once the output is flushed): a probe or DNS thread still waiting for its timeout, or a
    library's worker thread, must not keep it alive."""
    code = main()
    from . import secrets

    secrets.remove_private_dirs()  # a credential load a signal cut short (its worker thread may still have written)
    if _INTERRUPTED:
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe: nothing more to say
                pass
        os._exit(code)
    sys.exit(code)


def prog_name(argv0: str | None = None) -> str:
    """ "kubectl kpdiag" when run as kubectl's plugin (the kubectl-kpdiag executable), else "kpdiag"."""
    import os

    base = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return "kubectl kpdiag" if base.startswith("kubectl-") else "kpdiag"


def quiet_libraries() -> None:
    """Library warnings never reach the user's stderr: kpdiag says what matters in its own words (a probe that got no
    answer is in the report). scapy logs "MAC address to reach destination not found. Using broadcast." for each
    packet to a neighbour that does not answer ARP, and keeps a level set before it is imported; Python warnings of
    the libraries (urllib3, the kubernetes client) are dropped too."""
    import logging
    import warnings

    logging.getLogger("scapy").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")


def main(argv=None) -> int:
    """Console entry point: the one place that turns outcomes into exit codes."""
    quiet_libraries()
    try:
        rv = cli.main(args=argv, prog_name=prog_name(), complete_var=COMPLETE_VAR, standalone_mode=False)
        if isinstance(rv, int):
            return rv
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            return _interrupted(cause)
        click.echo("kpdiag: aborted", err=True)
        return exitcodes.USAGE
    except click.UsageError as exc:  # one line: what is wrong, and the command's usage
        from .render.safe import term

        usage = exc.ctx.get_usage().replace("\n", " ").strip() if exc.ctx is not None else ""
        click.echo(f"kpdiag: error: {term(exc.format_message())}" + (f" ({usage})" if usage else ""), err=True)
        return exitcodes.USAGE
    except click.ClickException as exc:
        exc.show()
        return exitcodes.USAGE
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        return exitcodes.OK
    except Exception as exc:  # never a traceback for the user
        from .errors import KpdiagError

        signalled = _signal_behind(exc)
        if signalled is not None:  # click's own newline after Ctrl-C failed: a hung-up terminal (EIO)
            return _interrupted(signalled)

        if isinstance(exc, KpdiagError):
            click.echo(f"kpdiag: error: {exc}", err=True)
            return exitcodes.for_error(exc)
        click.echo(f"kpdiag: internal error: {exc.__class__.__name__}: {exc} (please report this)", err=True)
        return exitcodes.NO_DIAGNOSIS
    return exitcodes.OK


if __name__ == "__main__":  # pragma: no cover
    run()
