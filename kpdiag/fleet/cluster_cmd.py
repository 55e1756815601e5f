"""`kpdiag cluster`: credentials → nodes → one pod per node → aggregation. Returns an Outcome; prints nothing."""

from __future__ import annotations

import os
import threading
import time
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
    from .signals import raising_on_signals

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
    from .runner import FleetRunner

    # --timeout bounds the whole command, wall clock: credentials, setup, every node, the deletes — from when the client
    # library is loaded (importing it takes seconds on a slow machine, and waits on nothing anyone else controls)
    if not dry_run:
        _load_client()
    deadline = time.monotonic() + float(timeout)

    say = progress or (lambda msg: None)
    namespace = namespace or P.DEFAULT_NAMESPACE
    image = image or os.environ.get("KPDIAG_IMAGE") or P.DEFAULT_IMAGE
    refused = _refused(service, save_dir, dry_run or cleanup, force)
    if refused is not None:
        return refused
    selector, names = _node_spec(nodes)
    if dry_run and names:  # nothing to ask the API: print the manifests for the named nodes
        account = P.NODE_SERVICE_ACCOUNT if node_api else None
        pod = dict(image=image, namespace=namespace, timeout=timeout, service=service, service_account=account)
        return Outcome(text=_manifests([P.node_pod(n, "dryrun", **pod) for n in names]))
    api, why = _client(kubeconfig, context, deadline)
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
    if cleanup:
        return _cleanup(runner, namespace, api.configuration.host)
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
    say(
        f"run {runner.run_id}: {len(targets.nodes)} node(s), {runner.parallel} at a time, image {image}, "
        f"namespace {namespace}" + (f"; {len(targets.skipped)} skipped" if targets.skipped else "")
    )
    return _diagnose(runner, targets, bar, save_dir=save_dir, force=force, select=select, ignore=ignore)


def _client(kubeconfig, context, deadline: float):
    """The API client from the kubeconfig (or the service account): (client, None) or (None, why)."""
    from ..collect.kubeconfig import api_client
    from .pool import LIMIT, no_thread

    try:
        return api_client(kubeconfig, context, deadline=deadline)
    except RuntimeError as exc:  # its reads run in a thread of their own, bounded in time (kubeapi.within)
        if not no_thread(exc):
            raise
        return None, f"credentials: not read: kpdiag could not start a thread ({exc}; {LIMIT})"


def _load_client() -> None:
    import kubernetes.client  # noqa: F401
    import kubernetes.config  # noqa: F401
    from kubernetes.client.api import core_v1_api  # noqa: F401


def _refused(service, save_dir, no_pods: bool, force: bool) -> Outcome | None:
    """The usage errors found before anything is asked of the API."""
    if service and "/" not in service:
        return Outcome(error="--service takes NAMESPACE/NAME", code=exitcodes.USAGE)
    if save_dir and not no_pods:  # before any pod runs: a new directory, or --force (never a symlink)
        from kpdiag.bundle.safeio import OutputExists, check_new_output

        try:
            check_new_output(save_dir, force)
        except OutputExists as exc:
            return Outcome(error=f"--save-dir {save_dir}: {exc.strerror}", code=exitcodes.USAGE)
    return None


def _cleanup(runner, namespace: str, host: str) -> Outcome:
    """`kpdiag cluster --cleanup`: every pod (and run ConfigMap) kpdiag left in the namespace, deleted."""
    from ..collect.apierrors import api_reason

    try:
        deleted, errors = runner.cleanup()
    except Exception as exc:
        return Outcome(error=api_reason(exc, f"list pods in {namespace}", host), code=exitcodes.NO_DIAGNOSIS)
    text = (
        f"deleted {len(deleted)} kpdiag pod(s) in namespace {namespace}" + "".join(f"\n  {n}" for n in deleted) + "\n"
    )
    return Outcome(text=text, messages=errors, code=exitcodes.FINDINGS if errors else exitcodes.OK)


def _diagnose(runner, targets, bar, *, save_dir, force, select, ignore) -> Outcome:
    """Run the nodes (the server version and the Services asked meanwhile: they only shape the aggregation), save
    the reports when asked, and make the cluster report."""
    from .aggregate import aggregate

    side: dict = {}

    def ask():
        side["api_version"] = runner.api_version()
        side["local_itp"] = runner.local_traffic_keys()

    aside = threading.Thread(target=ask, name="kpdiag-setup", daemon=True)
    try:
        aside.start()
    except RuntimeError:  # no thread to spare (the process's limit on threads): asked after the nodes instead
        pass
    try:
        results = runner.run(targets.nodes)
    finally:
        if bar is not None:
            try:
                bar.close()
            except (OSError, ValueError):  # the terminal hung up (EIO): the run's own outcome goes on
                pass
    if aside.ident is None:  # it never started
        ask()
    else:
        aside.join(max(0.0, runner.setup_deadline - time.monotonic()) + 1.0)
    api_version, local_itp = side.get("api_version"), side.get("local_itp")
    results += targets.skipped
    failed = sum(1 for r in results if not r.ok)
    messages = list(runner.notes)
    messages += [f"could not delete {e} — run: kpdiag cluster --cleanup" for e in runner.cleanup_errors]
    if runner.keep_pods:
        messages.append(f"pods kept (label {P.LABEL_RUN}={runner.run_id}); remove them with: kpdiag cluster --cleanup")
    saved = True
    if save_dir:
        saved = _save(save_dir, results, runner.run_id, api_version, local_itp, force, messages)
    code = exitcodes.for_fleet(failed, len(runner.leftover_pods), not_saved=not saved)
    report = aggregate(results, api_version=api_version, local_itp=local_itp, select=select, ignore=ignore)
    return Outcome(report=_with_leftovers(report, runner), messages=messages, code=code)


def _save(save_dir, results, run_id, api_version, local_itp, force, messages: list[str]) -> bool:
    """--save-dir: the node reports and the run's summary written (a line in ``messages`` either way)."""
    from .aggregate import write_report_dir

    meta = {
        "run": run_id,
        "api_version": api_version,
        "local_itp": sorted(local_itp) if local_itp is not None else None,
    }
    try:
        write_report_dir(save_dir, results, meta, force=force)
    except OSError as exc:
        from kpdiag.bundle.safeio import describe

        messages.append(f"{save_dir}: cannot write: {describe(exc)}")
        return False
    messages.append(f"wrote {sum(r.ok for r in results)} node report(s) to {save_dir} (kpdiag analyze {save_dir})")
    return True


def _with_leftovers(report, runner):
    """Pods whose deletes failed are named in the report (and the run fails: exitcodes.for_fleet)."""
    if not runner.leftover_pods:
        return report
    import dataclasses

    namespace = runner.namespace
    report.extra["leftover_pods"] = [f"{namespace}/{n}" for n in runner.leftover_pods]
    left = tuple(
        {
            "source": f"pod {namespace}/{n}",
            "error": "not deleted: it is left on its node (kpdiag cluster --cleanup removes it)",
        }
        for n in runner.leftover_pods
    )
    return dataclasses.replace(report, problems=report.problems + left)


def _manifests(docs: list[dict]) -> str:
    import yaml

    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
