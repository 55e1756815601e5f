"""kpdiag's command line: thin. Parse options, call the library, print what a renderer returns.

The group and the console entry are here; the commands live in this package's modules, by what they do. Heavy modules
(scapy, kubernetes, the parsers) are imported inside the commands, so that ``kpdiag --help`` stays instant. Exit codes
come from :mod:`kpdiag.exitcodes` only.
"""

from __future__ import annotations

import sys

import click

from kpdiag import __version__, exitcodes
from kpdiag.cli.bundles import collect, redact_cmd
from kpdiag.cli.catalogue import checks_cmd, completion, explain, rbac_cmd
from kpdiag.cli.diagnosis import analyze, cluster, node, policy, svc
from kpdiag.cli.options import COMPLETE_VAR
from kpdiag.cli.tracing import trace


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


for _command in (
    trace,
    analyze,
    node,
    svc,
    policy,
    collect,
    cluster,
    redact_cmd,
    rbac_cmd,
    checks_cmd,
    explain,
    completion,
):
    cli.add_command(_command)


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
    from kpdiag import secrets

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
        from kpdiag.render.safe import term

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
        from kpdiag.errors import KpdiagError

        signalled = _signal_behind(exc)
        if signalled is not None:  # click's own newline after Ctrl-C failed: a hung-up terminal (EIO)
            return _interrupted(signalled)

        if isinstance(exc, KpdiagError):
            click.echo(f"kpdiag: error: {exc}", err=True)
            return exitcodes.for_error(exc)
        click.echo(f"kpdiag: internal error: {exc.__class__.__name__}: {exc} (please report this)", err=True)
        return exitcodes.NO_DIAGNOSIS
    return exitcodes.OK
