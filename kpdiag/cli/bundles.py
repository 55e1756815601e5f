"""The commands that write a bundle: `kpdiag collect` (this node, read-only) and `kpdiag redact` (a redacted copy)."""

from __future__ import annotations

import click

from kpdiag import exitcodes
from kpdiag.cli.options import _check_output, _fail, _host_root_option, _progress, _say


@click.command()
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="A new directory, or FILE.tar.gz.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing output of yours, whole, once the new one is complete (a symlink is never followed).",
)
@_host_root_option
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
    from kpdiag.collect.node import collect_node

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


@click.command("redact")
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
    from kpdiag.errors import InputError
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
