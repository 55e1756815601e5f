"""What kpdiag ships, printed: the checks (`kpdiag checks`, `explain`), the RBAC manifests (`rbac`), the shell
completion (`completion`)."""

from __future__ import annotations

import click

from kpdiag import exitcodes
from kpdiag.cli.options import COMPLETE_VAR, _complete_checks, _fail, _nearest, _say, _yaml
from kpdiag.manifests import MANIFESTS


@click.command("rbac")
@click.argument("names", nargs=-1, type=click.Choice(list(MANIFESTS)), metavar="[MANIFEST]...")
def rbac_cmd(names):
    """Print kpdiag's RBAC manifests (shipped in the package) to apply them.

    \b
    kpdiag rbac svc | kubectl apply -f -       svc and policy (read-only)
    kpdiag rbac cluster | kubectl apply -f -   cluster and its node pods
    kpdiag rbac                                the list

    Read them first: each says what it grants and why (docs/privileges.md in the repository too).
    """
    from kpdiag.manifests import manifest_text

    if not names:
        for name, (filename, what) in MANIFESTS.items():
            click.echo(f"{name:<16} {what} ({filename})")
        return
    texts = [manifest_text(name).rstrip("\n") + "\n" for name in dict.fromkeys(names)]
    click.echo("---\n".join(texts), nl=False)


@click.command("checks")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json", "yaml", "markdown"]), default="table", show_default=True
)
def checks_cmd(output):
    """The catalogue of checks."""
    from kpdiag.checkapi import load_registry
    from kpdiag.render.catalogue import catalogue_json, catalogue_markdown, catalogue_table

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


@click.command()
@click.argument("check_id", shell_complete=_complete_checks)
def explain(check_id):
    """One check's documentation: symptom, why, fix."""
    from kpdiag.checkapi import load_registry
    from kpdiag.render.catalogue import explain_text

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


@click.command()
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

    cli = click.get_current_context().find_root().command  # the kpdiag group, every command of it
    if shell != "install":
        click.echo(get_completion_class(shell)(cli, {}, "kpdiag", COMPLETE_VAR).source())
        return
    import os

    from kpdiag.commands.completion import install_completion

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
