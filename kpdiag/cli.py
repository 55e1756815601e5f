"""kpdiag's command line: thin. Parse options, call the library, print what a renderer returns.

Heavy modules (scapy, kubernetes, the parsers) are imported inside the commands, so that
``kpdiag --help`` stays instant. Exit codes come from :mod:`kpdiag.exitcodes` only.
"""

from __future__ import annotations

import sys

import click

from . import __version__, exitcodes

OUTPUTS = ("text", "json", "dot")


def _fail(message: str, code: int) -> "click.exceptions.Exit":
    click.echo(f"kpdiag: error: {message}", err=True)
    return click.exceptions.Exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="kpdiag")
def cli():
    """kpdiag tells you why traffic to a Kubernetes Service does not arrive.

    It traces packets through the node's real kube-proxy rules and explains what is wrong.
    """


@cli.command()
@click.option("--rules", "rules", type=click.Path(dir_okay=False), help="iptables-save output to trace through.")
@click.option("--bundle", "bundle", type=click.Path(), help="A kpdiag bundle (directory or .tar.gz).")
@click.option("--ipsets", "ipset_file", type=click.Path(dir_okay=False), help="'ipset save' output (with --rules).")
@click.option("--src", help="Source IP (default: a node address with --from node).")
@click.option("--dst", required=True, help="Destination IP (a ClusterIP, node IP, external or LB IP).")
@click.option("--proto", type=click.Choice(["tcp", "udp", "sctp", "icmp"]), default="tcp", show_default=True)
@click.option("--dport", type=int, help="Destination port (not for icmp).")
@click.option("--sport", type=int, default=40000, show_default=True, help="Source port.")
@click.option("--from", "origin", type=click.Choice(["external", "pod", "node"]), default="external", show_default=True,
              help="Where the packet comes from: another host / a pod (PREROUTING) or the node itself (OUTPUT).")
@click.option("--local-ip", "local_ips", multiple=True, help="The node's own addresses (repeatable) when no bundle gives them.")
@click.option("--iif", help="Input interface of the packet (for rules with -i).")
@click.option("-o", "--output", type=click.Choice(OUTPUTS), default="text", show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="Show full rule texts.")
def trace(rules, bundle, ipset_file, src, dst, proto, dport, sport, origin, local_ips, iif, output, verbose):
    """Trace one packet through the node's rules: every rule it hits, each endpoint with its probability."""
    from .errors import InputError
    from .render.trace import trace_to_dot, trace_to_json, trace_to_text
    from .trace.model import Packet
    from .tracing import setup_trace

    if bool(rules) == bool(bundle):
        raise _fail("give exactly one of --rules FILE or --bundle DIR", exitcodes.USAGE)
    try:
        setup = setup_trace(rules=rules, bundle=bundle, local_ips=local_ips, ipset_file=ipset_file)
    except InputError as exc:
        raise _fail(str(exc), exitcodes.NO_DIAGNOSIS) from None
    if src is None:
        if origin != "node":
            raise _fail("--src is needed unless --from node", exitcodes.USAGE)
        src = _first_local(setup, local_ips)
    try:
        packet = Packet(src=src, dst=dst, proto=proto, dport=dport, sport=sport, origin=origin, iif=iif)
    except ValueError as exc:
        raise _fail(str(exc), exitcodes.USAGE) from None
    for problem in setup.problems:
        click.echo(f"kpdiag: warning: {problem}", err=True)
    result = setup.tracer.trace(packet)
    render = {"text": lambda r: trace_to_text(r, verbose), "json": trace_to_json, "dot": trace_to_dot}[output]
    click.echo(render(result), nl=False)


def _first_local(setup, local_ips) -> str:
    if local_ips:
        return local_ips[0]
    from .parse.addr import int_to_ip

    for value, version in sorted(setup.tracer.routing.local_ips):
        if version == 4 and value >> 24 != 127:
            return int_to_ip(value)
    return "127.0.0.1"


def main(argv=None) -> int:
    """Console entry point: the one place that turns outcomes into exit codes."""
    try:
        rv = cli.main(args=argv, prog_name="kpdiag", standalone_mode=False)
        if isinstance(rv, int):
            return rv
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("kpdiag: aborted", err=True)
        return exitcodes.USAGE
    except click.ClickException as exc:
        exc.show()
        return exitcodes.USAGE
    except KeyboardInterrupt:
        click.echo("kpdiag: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return exitcodes.OK
    except Exception as exc:  # never a traceback for the user
        from .errors import KpdiagError

        if isinstance(exc, KpdiagError):
            click.echo(f"kpdiag: error: {exc}", err=True)
            return exitcodes.for_error(exc)
        click.echo(f"kpdiag: internal error: {exc.__class__.__name__}: {exc} (please report this)", err=True)
        return exitcodes.NO_DIAGNOSIS
    return exitcodes.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
