"""`kpdiag cluster`: credentials → nodes → one pod per node → aggregation. Returns an Outcome; prints nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .. import exitcodes
from . import pods as P


@dataclass
class Outcome:
    report: object | None = None  # the cluster Report
    text: str | None = None  # --dry-run manifests, --cleanup summary
    messages: list[str] = field(default_factory=list)  # for stderr
    error: str | None = None
    code: int = exitcodes.OK


def _node_spec(nodes: str | None) -> tuple[str | None, list[str] | None]:
    """--nodes: a label selector when it has =, !, or a label-looking key with '/'; else comma-separated names."""
    if not nodes:
        return None, None
    if any(ch in nodes for ch in "=!") or ("/" in nodes and "," not in nodes):
        return nodes, None
    # each node once, in the order given: a repeated name would be a second pod of the same name (409) counted twice
    return None, list(dict.fromkeys(n.strip() for n in nodes.split(",") if n.strip()))


def run(**kwargs) -> Outcome:
    """`kpdiag cluster`. A terminating signal before the pods (credentials, node list) or after them (aggregation)
    ends the command at once as Interrupted — nothing of the run exists in the cluster then; while pods exist the
    runner's own handlers stop the run and clean up first (kpdiag/fleet/runner.py)."""
    from .runner import raising_on_signals

    with raising_on_signals():
        return _run(**kwargs)


def _run(
    *,
    nodes=None,
    service=None,
    image=None,
    namespace=None,
    parallel=20,
    timeout=600,
    kubeconfig=None,
    context=None,
    dry_run=False,
    cleanup=False,
    keep_pods=False,
    save_dir=None,
    poll=2.0,
    select=(),
    ignore=(),
    progress=None,
    bar=None,
    force=False,
    node_api=True,
) -> Outcome:
    import time

    from ..collect.apierrors import api_reason
    from ..collect.kubeconfig import api_client
    from .aggregate import aggregate, write_report_dir
    from .runner import FleetRunner

    # --timeout bounds the whole command, wall clock: credentials, setup, every node, the deletes — from when the client
    # library is loaded (importing it takes seconds on a slow machine, and waits on nothing anyone else controls)
    if not dry_run:
        import kubernetes.client  # noqa: F401
        import kubernetes.config  # noqa: F401
        from kubernetes.client.api import core_v1_api  # noqa: F401
    deadline = time.monotonic() + float(timeout)

    say = progress or (lambda msg: None)
    namespace = namespace or P.DEFAULT_NAMESPACE
    image = image or os.environ.get("KPDIAG_IMAGE") or P.DEFAULT_IMAGE
    if service and "/" not in service:
        return Outcome(error="--service takes NAMESPACE/NAME", code=exitcodes.USAGE)
    selector, names = _node_spec(nodes)
    if save_dir and not (dry_run or cleanup):  # before any pod runs: a new directory, or --force (never a symlink)
        from kpdiag.bundle.safeio import OutputExists, check_new_output

        try:
            check_new_output(save_dir, force)
        except OutputExists as exc:
            return Outcome(error=f"--save-dir {save_dir}: {exc.strerror}", code=exitcodes.USAGE)
    if dry_run and names:  # nothing to ask the API: print the manifests for the named nodes
        return Outcome(
            text=_manifests(
                [
                    P.node_pod(
                        n,
                        "dryrun",
                        image=image,
                        namespace=namespace,
                        timeout=timeout,
                        service=service,
                        service_account=P.NODE_SERVICE_ACCOUNT if node_api else None,
                    )
                    for n in names
                ]
            )
        )
    api, why = api_client(kubeconfig, context, deadline=deadline)
    if api is None:
        return Outcome(error=why, code=exitcodes.NO_DIAGNOSIS)
    runner = FleetRunner(
        api,
        namespace=namespace,
        image=image,
        timeout=timeout,
        parallel=parallel,
        service=service,
        poll=poll,
        progress=bar,
        keep_pods=keep_pods,
        say=lambda msg: (bar and bar.close(), say(msg)),
        node_api=node_api,
        deadline=deadline,
    )
    host = api.configuration.host
    if cleanup:
        try:
            deleted, errors = runner.cleanup()
        except Exception as exc:
            return Outcome(error=api_reason(exc, f"list pods in {namespace}", host), code=exitcodes.NO_DIAGNOSIS)
        text = (
            f"deleted {len(deleted)} kpdiag pod(s) in namespace {namespace}"
            + "".join(f"\n  {n}" for n in deleted)
            + "\n"
        )
        return Outcome(text=text, messages=errors, code=exitcodes.FINDINGS if errors else exitcodes.OK)
    try:
        targets = runner.targets(selector, names)
    except Exception as exc:
        return Outcome(error=runner._why(exc, "list nodes"), code=exitcodes.NO_DIAGNOSIS)
    if dry_run:
        return Outcome(
            text=_manifests([runner.manifest(n) for n in targets.nodes]),
            messages=[f"not run on {r.node}: {r.failure}" for r in targets.skipped],
        )
    if not targets.nodes and not targets.skipped:
        return Outcome(
            error="no node matches " + (repr(nodes) if nodes else "(the cluster has no nodes)"), code=exitcodes.USAGE
        )
    # the server version and the Services only shape the aggregation: asked while the nodes run, not before them
    import threading

    side: dict = {}

    def _side():
        side["api_version"] = runner.api_version()
        side["local_itp"] = runner.local_traffic_keys()

    aside = threading.Thread(target=_side, name="kpdiag-setup", daemon=True)
    aside.start()
    say(
        f"run {runner.run_id}: {len(targets.nodes)} node(s), {parallel} at a time, image {image}, namespace {namespace}"
        + (f"; {len(targets.skipped)} skipped" if targets.skipped else "")
    )
    try:
        results = runner.run(targets.nodes)
    finally:
        if bar is not None:
            try:
                bar.close()
            except (OSError, ValueError):  # the terminal hung up (EIO): the run's own outcome goes on
                pass
    aside.join(max(0.0, runner.setup_deadline - time.monotonic()) + 1.0)
    api_version, local_itp = side.get("api_version"), side.get("local_itp")
    results += targets.skipped
    failed = sum(1 for r in results if not r.ok)
    messages = list(runner.notes)
    messages += [f"could not delete {e} — run: kpdiag cluster --cleanup" for e in runner.cleanup_errors]
    if keep_pods:
        messages.append(f"pods kept (label {P.LABEL_RUN}={runner.run_id}); remove them with: kpdiag cluster --cleanup")
    code = exitcodes.for_fleet(failed, len(runner.leftover_pods))
    if save_dir:
        try:
            write_report_dir(
                save_dir,
                results,
                {
                    "run": runner.run_id,
                    "api_version": api_version,
                    "local_itp": sorted(local_itp) if local_itp is not None else None,
                },
                force=force,
            )
            messages.append(
                f"wrote {sum(r.ok for r in results)} node report(s) to {save_dir} (kpdiag analyze {save_dir})"
            )
        except OSError as exc:
            from kpdiag.bundle.safeio import describe

            messages.append(f"{save_dir}: cannot write: {describe(exc)}")
            code = exitcodes.for_fleet(failed, len(runner.leftover_pods), not_saved=True)
    report = aggregate(results, api_version=api_version, local_itp=local_itp, select=select, ignore=ignore)
    if runner.leftover_pods:  # deletes failed: the pods are named in the report and the run fails
        import dataclasses

        report.extra["leftover_pods"] = [f"{namespace}/{n}" for n in runner.leftover_pods]
        report = dataclasses.replace(
            report,
            problems=report.problems
            + tuple(
                {
                    "source": f"pod {namespace}/{n}",
                    "error": "not deleted: it is left on its node (kpdiag cluster --cleanup removes it)",
                }
                for n in runner.leftover_pods
            ),
        )
    return Outcome(report=report, messages=messages, code=code)


def _manifests(docs: list[dict]) -> str:
    import yaml

    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
