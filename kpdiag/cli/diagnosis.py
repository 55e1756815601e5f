"""The commands that diagnose and print a report: `kpdiag analyze`, `node`, `svc`, `cluster` — and `policy`, which
answers one NetworkPolicy question."""

from __future__ import annotations

import sys

import click

from kpdiag import exitcodes
from kpdiag.bundle import sources
from kpdiag.cli.options import (
    _check_name,
    _check_output,
    _emit_report,
    _fail,
    _host_root_option,
    _progress,
    _report_options,
    _say,
    _yaml,
)
from kpdiag.dataplane import kube_proxy_modes


@click.command()
@click.argument("bundle", type=click.Path())
@_report_options
def analyze(bundle, output, fail_on, select, ignore, verbose):
    """Run every check on a bundle (directory or .tar.gz), offline — or aggregate node reports: a directory of them
    (kpdiag cluster --save-dir, or kpdiag node -o json outputs) or one such file."""
    from kpdiag.commands.pipeline import analyze_bundle
    from kpdiag.errors import InputError
    from kpdiag.fleet.aggregate import aggregate_dir, aggregate_files, looks_like_report_dir, looks_like_report_file

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


@click.command()
@_host_root_option
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


@click.command()
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


@click.command()
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
    from kpdiag.errors import InputError, UsageError
    from kpdiag.commands.policy import CannotEvaluate, collect_live, evaluate, parse_from, parse_port, parse_to
    from kpdiag.render.policy import policy_to_json, policy_to_text

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


@click.command()
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
    from kpdiag.fleet import cluster_cmd
    from kpdiag.render.progress import ProgressBar

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
        from kpdiag.render.safe import term_lines

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
