"""Run `kpdiag node` on many nodes through Kubernetes itself: one short-lived pod per node.

Bounded concurrency (``parallel`` pods at a time), one pod list per poll for the whole run (not one GET per
pod), a deadline per node, every failure a named reason, and cleanup that always happens: each worker deletes
its own pod in a ``finally``, the run deletes whatever is left on errors and Ctrl-C, every pod carries
``app.kubernetes.io/managed-by=kpdiag`` for ``kpdiag cluster --cleanup``, and ``activeDeadlineSeconds`` makes
the kubelet stop a pod whose client vanished.

``timeout`` is a hard bound: every API call of a node (create, log read) gets its connect and read timeouts from
the time the node has left, the log is read in chunks against the same deadline (a server that trickles bytes
cannot hold it), retries wait only while time is left, and a 429's Retry-After is honoured. The calls before
the pods (node list, /version, Services) share half of ``timeout``; the deletes after a node, and the final
cleanup, a quarter each. The client itself never retries (``retries = 0`` is set on the Configuration before
the ApiClient is built, see :func:`kpdiag.collect.kubeconfig.api_client`): every retry is one of these.

A node's report is checked before it is used: it must be a well-formed kpdiag node report (the JSON schema's
types, finding ids and slugs) and must not claim to be another node of the cluster.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from .. import secrets
from ..collect.apierrors import api_reason
from ..errors import Interrupted
from kpdiag.parse.decode import load_json
from kpdiag.manifests import apply_command
from . import pods as P
from .aggregate import NodeResult, intern_programmed, parse_node_report
from .apicall import (
    API_TIMEOUT,
    MIN_CALL,
    RETRIES,
    DeadlineExceeded,
    call_timeout,
    create_reason,
    discard,
    is_timeout,
    missing_service_account,
    retry_after,
    transient,
)
from .budget import ReportBudget, ReportsOverBudget, table_weight, weight
from .podstatus import ClusterTargets, classify, labels_match, node_ready
from .pool import LIMIT, MAX_WORKERS, WorkerPool, no_thread
from .reportcheck import report_problem
from .signals import INSISTING, PENDING, TERMINATING, best_effort

LOG_LIMIT = 64 * 1024 * 1024
SETUP_SHARE = 0.5  # of --timeout, for the node list, /version and the Service list before any pod
CLEANUP_SHARE = 0.25  # of --timeout, for a node's delete, and again for the final cleanup
CHUNK = 256 * 1024


class FleetRunner:
    def __init__(
        self,
        api,
        *,
        namespace: str = P.DEFAULT_NAMESPACE,
        image: str = P.DEFAULT_IMAGE,
        timeout: float = 600,
        parallel: int = 20,
        service: str | None = None,
        poll: float = 2.0,
        progress=None,
        keep_pods: bool = False,
        say=None,
        node_api: bool = True,
        deadline: float | None = None,
    ):
        from ..collect.kubeapi import RawApi

        self.api = api
        self.notes: list[str] = []
        self.parallel = min(max(1, int(parallel)), MAX_WORKERS)
        if int(parallel) > MAX_WORKERS:
            self.notes.append(
                f"--parallel {int(parallel)}: {MAX_WORKERS} nodes at a time (kpdiag's cap on its workers)"
            )
        # one connection per worker (the default pool is 5 per CPU: workers would queue for connections)
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(
            self.parallel + 4, api.rest_client.pool_manager.connection_pool_kw.get("maxsize") or 1
        )
        self.budget = ReportBudget()  # what the nodes' reports take together
        self.core = RawApi(api)  # every answer read bounded, an error's body too (the generated classes read it whole)
        self.namespace = namespace
        self.image = image
        self.timeout = timeout
        self.service = service
        self.poll = poll
        self.progress = best_effort(progress or (lambda **kw: None))
        self.say = best_effort(say or (lambda msg: None))
        self.keep_pods = keep_pods
        # the node pods read the API with kpdiag's node service account; None once it proved missing (then they run
        # without a token and say so) or with node_api=False
        self.service_account: str | None = P.NODE_SERVICE_ACCOUNT if node_api else None
        self.run_id = P.new_run_id()
        self.cleanup_errors: list[str] = []
        self._status: dict[str, dict] = {}
        self._created: set[str] = set()
        self._deleted: set[str] = set()
        self._lock = threading.Lock()
        self._tick = threading.Condition()
        self._stop = threading.Event()
        self._fatal: str | None = None
        self._signalled: int | None = None
        self._programmed: dict[str, dict] = {}
        self.owner_deleted = False
        self.owner: dict | None = None  # the run's ConfigMap the pods belong to (ownerReferences), once created
        self.known_nodes: set[str] = set()  # every node name the API listed (a report claiming one of them is checked)
        self.leftover_pods: list[str] = []  # pods this run created and could not delete
        # the whole run ends by ``deadline`` (kpdiag cluster: --timeout after the command started), the deletes included:
        # the nodes' work stops a cleanup budget before it, so that the deletes have that time
        self.cleanup_budget = max(1.0, min(API_TIMEOUT * 2, timeout * CLEANUP_SHARE))
        self.deadline = deadline if deadline is not None else time.monotonic() + timeout + self.cleanup_budget
        self.work_deadline = self.deadline - self.cleanup_budget
        self.setup_deadline = min(time.monotonic() + max(1.0, min(120.0, timeout * SETUP_SHARE)), self.work_deadline)

    # ------------------------------------------------------------ API helpers (raw JSON)
    def _why(self, exc: Exception, what: str) -> str:
        if isinstance(exc, DeadlineExceeded):
            return f"{what}: timed out: {exc}" if str(exc) else f"{what}: timed out (no time left)"
        if no_thread(exc):
            return f"{what}: not asked: kpdiag could not start a thread for it ({exc}; {LIMIT})"
        why = api_reason(exc, what, self.api.configuration.host)
        wait = retry_after(exc) if getattr(exc, "status", None) in (429, 503) else None
        if wait is not None:
            why += f" (the API server asked to retry after {wait:.0f} s, beyond the time left)"
        return why

    def _call(self, fn, *args, deadline: float, cap: float = API_TIMEOUT, retries: int = RETRIES, **kwargs):
        """One API call (raw response) within ``deadline``: timeouts, 429 (after its Retry-After) and 5xx are retried
        with backoff while time is left; anything else, or no time left, raises."""
        for attempt in range(retries):
            try:
                return fn(*args, _preload_content=False, _request_timeout=call_timeout(deadline, cap), **kwargs)
            except DeadlineExceeded:
                raise
            except Exception as exc:
                status = getattr(exc, "status", None)
                if status is None and is_timeout(exc) and time.monotonic() >= deadline - MIN_CALL:
                    raise DeadlineExceeded(
                        f"the API server {secrets.shown_url(self.api.configuration.host)} did not answer in time (no time left)"
                    ) from exc
                if not transient(status) or attempt == retries - 1 or self._stop.is_set():
                    raise
                wait = retry_after(exc) if status in (429, 503) else None
                delay = wait if wait is not None else 0.5 * 2**attempt
                if time.monotonic() + delay >= deadline - MIN_CALL:
                    raise  # waiting as asked would pass the deadline: this answer is the reason
                self._stop.wait(delay)  # a signal ends the wait at once
        raise AssertionError("unreachable")

    def _json(self, fn, *args, deadline: float | None = None, retries: int = 1, **kwargs):
        """One call for raw JSON, all of it (name resolution, headers, the body read in chunks, capped) within
        ``deadline``."""
        from ..collect.kubeapi import ApiDeadline, read_body, within

        deadline = deadline if deadline is not None else self.setup_deadline

        def go():
            resp = self._call(fn, *args, deadline=deadline, retries=retries, **kwargs)
            return load_json(read_body(resp, deadline))  # depth-bounded: anyone who may create objects wrote them

        try:
            return within(deadline, go)
        except ApiDeadline as exc:
            raise DeadlineExceeded(
                f"the API server {secrets.shown_url(self.api.configuration.host)} did not answer in time ({exc})"
            ) from None
        except RuntimeError as exc:
            if not no_thread(exc):
                raise
        # no thread to spare for the wall-clock bound (the process's limit on threads): the call is made here, and
        # its connect and read timeouts and the bounded body read still end it by the deadline
        return go()

    def _list_all(
        self, fn, *args, deadline: float | None = None, retries: int = 1, kind: str | None = None, **kwargs
    ) -> list[dict]:
        """Every object of a paged List; capped in pages and objects (a server whose continue tokens never end). With
        ``kind``, objects of another shape than kpdiag reads are left out, each named in the run's notes."""
        from ..collect.kubeapi import ApiBound, MAX_OBJECTS, MAX_PAGES
        from ..state.shapes import read_list

        items: list[dict] = []
        token: str | None = None
        pages = 0
        while True:
            pages += 1
            if pages > MAX_PAGES or len(items) > MAX_OBJECTS:
                raise ApiBound(
                    f"the list did not end after {pages - 1} pages, {len(items)} objects (kpdiag's caps on one list: "
                    f"{MAX_PAGES} pages, {MAX_OBJECTS} objects)"
                )
            doc = self._json(
                fn,
                *args,
                deadline=deadline,
                retries=retries,
                limit=500,
                **({"_continue": token} if token else {}),
                **kwargs,
            )
            good, problems = read_list(doc, kind)
            if good is None:
                raise ValueError(f"the API's answer is malformed: {problems[0]}")
            items += good
            self.notes += [f"an object the API listed was left out: {line}" for line in problems][
                : max(0, 20 - len(self.notes))
            ]
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _labelled_pods(self, label: str, value: str, deadline: float | None = None) -> dict[str, dict]:
        """The namespace's pods with ``label=value``, by name: selected by the server and checked again here."""
        if deadline is None:
            deadline = time.monotonic() + self.cleanup_budget
        pods = self._list_all(
            self.core.list_namespaced_pod,
            self.namespace,
            deadline=deadline,
            label_selector=f"{label}={value}",
            kind="Pod",
        )
        return {
            p["metadata"]["name"]: p
            for p in pods
            if isinstance(p.get("metadata"), dict)
            and (p["metadata"].get("labels") or {}).get(label) == value
            and isinstance(p["metadata"].get("name"), str)
        }

    def targets(self, selector: str | None = None, names: list[str] | None = None) -> ClusterTargets:
        """The nodes to run on: all, a label selector, or names; NotReady and unknown nodes are skipped with why."""
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        # the first call of a run: an API server that is starting or throttling gets a few tries (with backoff,
        # after its Retry-After), within the setup's share of --timeout
        nodes = self._list_all(self.core.list_node, retries=5, kind="Node", **kwargs)
        self.known_nodes |= {
            n["metadata"]["name"]
            for n in nodes
            if isinstance(n.get("metadata"), dict) and isinstance(n["metadata"].get("name"), str)
        }
        if selector:
            nodes = [n for n in nodes if labels_match(selector, (n.get("metadata") or {}).get("labels") or {})]
        by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
        out = ClusterTargets([])
        wanted = names if names else sorted(k for k in by_name if k)
        for name in wanted:
            node = by_name.get(name)
            if node is None:
                out.skipped.append(
                    NodeResult(
                        name,
                        failure="no such node in the API" + (f" matching {selector!r}" if selector else ""),
                        kind="unschedulable",
                    )
                )
                continue
            ok, why = node_ready(node)
            if ok:
                out.nodes.append(name)
            else:
                out.skipped.append(NodeResult(name, failure=why, kind="unschedulable"))
        return out

    def api_version(self) -> str | None:

        try:
            doc = self._json(self.core.get_code, retries=5)
            return (str(doc.get("gitVersion") or "") or None) if isinstance(doc, dict) else None
        except Exception as exc:
            self.notes.append(self._why(exc, "get /version"))
            return None

    def local_traffic_keys(self) -> set[str] | None:
        """ClusterIP:port/proto of Services with internalTrafficPolicy: Local (their endpoints differ per node by design)."""
        try:
            services = self._list_all(self.core.list_service_for_all_namespaces, kind="Service")
        except Exception as exc:
            self.notes.append(
                self._why(exc, "list services")
                + " — KP802/KP803 cannot leave out internalTrafficPolicy: Local Services"
            )
            return None
        keys = set()
        for s in services:
            spec = s.get("spec") or {}
            if spec.get("internalTrafficPolicy") != "Local":
                continue
            for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]:
                for port in spec.get("ports") or []:
                    if ip and ip != "None":
                        keys.add(f"{ip}:{port.get('port')}/{(port.get('protocol') or 'TCP').lower()}")
        return keys

    # ------------------------------------------------------------ the run
    def manifest(self, node: str) -> dict:
        return P.node_pod(
            node,
            self.run_id,
            image=self.image,
            namespace=self.namespace,
            timeout=int(self.timeout),
            service=self.service,
            service_account=self.service_account,
            owner=self.owner,
        )

    # ------------------------------------------------------------ the run's owner object
    def _create_owner(self) -> None:
        """The run's ConfigMap (``kpdiag-run-<id>``, labelled like the pods): every pod names it as its owner, so one
        DELETE of it — the first thing the cleanup does, on success, failure and every signal — has the API server's
        garbage collector remove every pod of the run, even those whose create timed out, and even when kpdiag is
        killed right after. Refused (an older RBAC without configmaps): the pods run without an owner, said once."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": P.owner_name(self.run_id),
                "namespace": self.namespace,
                "labels": {P.LABEL_MANAGED: "kpdiag", P.LABEL_NAME: "kpdiag", P.LABEL_RUN: self.run_id},
            },
            "data": {"run": self.run_id, "timeout": str(int(self.timeout)), "image": self.image},
        }
        try:
            doc = self._json(
                self.core.create_namespaced_config_map,
                self.namespace,
                body,
                deadline=time.monotonic() + self.cleanup_budget,
            )
        except Exception as exc:
            self.notes.append(
                self._why(exc, f"create ConfigMap {self.namespace}/{body['metadata']['name']}")
                + " — the pods run without a run owner: only this process and their activeDeadlineSeconds remove "
                f"them ({apply_command('cluster')} grants configmaps create, list and delete in its namespace)"
            )
            return
        uid = ((doc or {}).get("metadata") or {}).get("uid") if isinstance(doc, dict) else None
        if not isinstance(uid, str) or not uid:
            self.notes.append("the run's ConfigMap came back without a uid: the pods run without a run owner")
            self._delete_owner(body["metadata"]["name"])
            return
        self.owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": body["metadata"]["name"], "uid": uid}

    def _delete_owner(self, name: str | None = None, deadline: float | None = None) -> None:
        """Delete the run's ConfigMap; the garbage collector then deletes the pods it owns (propagation Background)."""
        name = name or (self.owner or {}).get("name")
        if not name:
            return
        if deadline is None:
            deadline = time.monotonic() + self.cleanup_budget
        try:
            discard(
                self._call(
                    self.core.delete_namespaced_config_map,
                    name,
                    self.namespace,
                    deadline=deadline,
                    propagation_policy="Background",
                ),
                deadline,
            )
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                self.cleanup_errors.append(f"ConfigMap {self.namespace}/{name}: " + self._why(exc, "delete"))
                return
        self.owner_deleted = True

    def run(self, nodes: list[str]) -> list[NodeResult]:
        """Run every node; on SIGINT/SIGTERM stop starting pods, let the workers finish deleting theirs, delete
        what is left and raise `Interrupted`. The signal only sets a flag: a KeyboardInterrupt raised at a random
        point of the main thread can leave a worker's lock held, and the run then never ends."""
        results: dict[str, NodeResult] = {}
        restore = self._trap_signals()
        if PENDING and self._signalled is None:  # a signal before the run that was lost on its way: stop now
            self._signalled = PENDING[0]
            self._stop.set()
        pool: WorkerPool[str, NodeResult] = WorkerPool(self._one, nodes, self.parallel)
        try:
            if self._signalled is None:
                self._create_owner()
                self._start(pool)
            self._collect(pool, nodes, results)
            if self._signalled is not None:
                running = len(self._created - self._deleted)
                self.say(
                    f"{signal.Signals(self._signalled).name}: stopping; deleting {running} pod(s) "
                    "(Ctrl-C again to quit at once and leave them to `kpdiag cluster --cleanup`)"
                )
        finally:
            self._stop.set()
            pool.stop()  # queued nodes never start; running ones delete their pod
            with self._tick:
                self._tick.notify_all()
            pool.join()
            self._delete_leftovers()
            restore()
        if self._signalled is not None:
            raise Interrupted(self._signalled)
        results.update(pool.results(0))
        why = f"not run: no worker thread could start ({pool.start_error}; {LIMIT})" if pool.start_error else "not run"
        return [results.get(n) or NodeResult(n, failure=why, kind="no thread") for n in nodes]

    def _start(self, pool: WorkerPool) -> None:
        """Start the workers; fewer than asked (the process's limit on threads) is said once, none ends the run."""
        working = pool.start()
        if pool.start_error is not None and working:
            self.notes.append(
                f"only {pool.started} of {pool.wanted} worker threads could start ({pool.start_error}; {LIMIT}): "
                f"{working} node(s) at a time"
            )

    def _collect(self, pool: WorkerPool, nodes: list[str], results: dict[str, NodeResult]) -> None:
        """The run loop: one pod list per poll interval, the results as they come, progress."""
        last = 0.0
        while len(results) < len(nodes) and self._signalled is None and pool.alive():
            if self._created - self._deleted and time.monotonic() - last >= self.poll:
                last = time.monotonic()
                self._refresh()  # at most one list per poll interval, however many nodes finish
            results.update(pool.results(self.poll))
            failed = sum(1 for r in results.values() if not r.ok)
            self.progress(
                done=len(results), total=len(nodes), failed=failed, running=len(self._created - self._deleted)
            )

    def _trap_signals(self):
        """Every terminating signal kpdiag can catch (SIGHUP, SIGINT, SIGQUIT, SIGTERM) sets a flag the run loop reads
        (it wakes at least every poll interval): the run stops and cleans up. A second Ctrl-C or Ctrl-backslash (a person
        insisting) raises at once; a second SIGHUP or SIGTERM does not (a hangup comes twice, from the kernel and
        from the shell; a service manager that wants an immediate end sends SIGKILL). Only the main thread may
        install handlers: elsewhere signals keep their dispositions."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        saved: dict = {}

        def restore():
            for sig, old in saved.items():
                signal.signal(sig, old)
            saved.clear()

        def handler(signum, frame):
            if self._signalled is None:
                # only a flag: this runs between two bytecodes of the main thread, maybe inside a lock it holds
                # (Event.set here could wait forever for the lock of the Event the main thread is setting)
                self._signalled = signum
                return
            if signum in INSISTING:
                restore()  # the user insists: the defaults again from here on (a third Ctrl-C is a plain one)
                raise Interrupted(signum, forced=True)

        for sig in TERMINATING:
            saved[sig] = signal.signal(sig, handler)
        return restore

    def _refresh(self) -> None:
        """One list call for every pod of this run; the workers read the statuses."""
        try:
            self._status = self._labelled_pods(
                P.LABEL_RUN, self.run_id, deadline=time.monotonic() + self.cleanup_budget
            )
        except Exception:
            return  # transient: the workers keep waiting until their deadline
        with self._tick:
            self._tick.notify_all()

    def _one(self, node: str) -> NodeResult:
        try:
            return self._one_node(node)
        except Exception as exc:  # a bug or an unexpected answer for one node must not end the run
            return NodeResult(node, failure=f"internal error: {exc.__class__.__name__}: {exc}", kind="api error")

    def _one_node(self, node: str) -> NodeResult:
        start = time.monotonic()
        deadline = min(start + self.timeout, self.work_deadline)  # a node that waited for a slot gets what is left
        if self._stop.is_set():
            return NodeResult(node, failure="interrupted before its pod was created", kind="interrupted")
        if self._fatal:
            return NodeResult(node, failure=f"not tried: {self._fatal}", kind="api error")
        if deadline - start < 5 * MIN_CALL:
            return NodeResult(
                node, failure="not started: the run's --timeout ran out before a slot was free", kind="timeout"
            )
        manifest = self.manifest(node)
        name = manifest["metadata"]["name"]
        try:
            try:
                self._create(name, manifest, deadline)
            except Exception as exc:
                if not missing_service_account(exc, manifest):
                    raise
                self._without_service_account(manifest["spec"]["serviceAccountName"])
                manifest = self.manifest(node)
                self._create(name, manifest, deadline)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if isinstance(exc, DeadlineExceeded):  # the pod may exist all the same
                with self._lock:
                    self._created.add(name)
                return NodeResult(
                    node,
                    failure=f"timed out after {deadline - start:.0f} s creating pod {self.namespace}/{name}",
                    kind="timeout",
                    seconds=time.monotonic() - start,
                )
            why = (
                self._why(exc, "create pod")
                if status == 429
                else create_reason(exc, self.namespace, self.api.configuration.host)
            )
            if status in (401, 403, 404, 422):
                self._fatal = why  # the same for every node: do not try hundreds more
            if not status or status >= 500:  # a timeout or a server error: the pod may exist all the same
                with self._lock:
                    self._created.add(name)
            return NodeResult(node, failure=why, kind="api error", seconds=time.monotonic() - start)
        with self._lock:
            self._created.add(name)
        try:
            return self._await(node, name, start, deadline)
        finally:
            if not self.keep_pods:
                self._delete(name)

    def _without_service_account(self, account: str) -> None:
        """The node service account does not exist: the pods run without a token (the rules alone are read), said once."""
        with self._lock:
            if self.service_account is None:
                return
            self.service_account = None
            self.notes.append(
                f"the node pods ran without API access: ServiceAccount {self.namespace}/{account} does not exist, "
                "so each node's rules were not compared with the API's Services (only what the rules alone show: "
                f"KP115, KP116) — {apply_command('cluster')} creates it"
            )

    def _create(self, name: str, manifest: dict, deadline: float) -> None:
        """Create the pod within the node's deadline; a timeout, 429 (after its Retry-After) or 5xx is retried with
        backoff, and a 409 on a retry means the earlier attempt did create it (the name is this run's own)."""
        for attempt in range(RETRIES):
            try:
                discard(
                    self.core.create_namespaced_pod(
                        self.namespace, manifest, _preload_content=False, _request_timeout=call_timeout(deadline)
                    ),
                    deadline,
                )
                return
            except DeadlineExceeded:
                raise
            except Exception as exc:
                status = getattr(exc, "status", None)
                if attempt and status == 409:
                    return
                if status is None and is_timeout(exc) and time.monotonic() >= deadline - MIN_CALL:
                    raise DeadlineExceeded(
                        f"the API server {secrets.shown_url(self.api.configuration.host)} did not answer in time (no time left)"
                    ) from exc
                if not transient(status) or attempt == RETRIES - 1 or self._stop.is_set():
                    raise
                with self._lock:
                    self._created.add(name)  # it may exist already: make sure it is deleted in any case
                wait = retry_after(exc) if status in (429, 503) else None
                delay = wait if wait is not None else 0.5 * 2**attempt
                if time.monotonic() + delay >= deadline - MIN_CALL:
                    raise
                self._stop.wait(delay)

    def _await(self, node: str, name: str, start: float, deadline: float) -> NodeResult:
        while True:
            if self._stop.is_set():
                return NodeResult(node, failure="interrupted", kind="interrupted", seconds=time.monotonic() - start)
            pod = self._status.get(name)
            verdict, kind, why = classify(pod)
            if verdict == "done" and pod is not None:
                return self._read(node, name, pod, start, deadline)
            if verdict == "fail":
                return NodeResult(node, failure=why, kind=kind, seconds=time.monotonic() - start)
            if time.monotonic() > deadline:
                phase = ((pod or {}).get("status") or {}).get("phase") or "not seen yet"
                return NodeResult(
                    node,
                    failure=f"timed out after {deadline - start:.0f} s (pod {phase})",
                    kind="timeout",
                    seconds=time.monotonic() - start,
                )
            with self._tick:
                self._tick.wait(min(self.poll, max(0.05, deadline - time.monotonic())))

    def _read(self, node: str, name: str, pod: dict, start: float, deadline: float) -> NodeResult:
        try:
            text, taken = self._read_log(name, deadline)
        except ReportsOverBudget:
            return NodeResult(
                node,
                failure=self.budget.reason(f"the report in the log of pod {self.namespace}/{name}"),
                kind="not read",
                seconds=time.monotonic() - start,
            )
        except DeadlineExceeded as exc:
            return NodeResult(
                node,
                failure=f"timed out after {deadline - start:.0f} s reading the log of pod {self.namespace}/{name}"
                + (f" ({exc})" if str(exc) else ""),
                kind="timeout",
                seconds=time.monotonic() - start,
            )
        except Exception as exc:
            return NodeResult(
                node,
                failure=self._why(exc, f"read log of pod {self.namespace}/{name}"),
                kind="api error",
                seconds=time.monotonic() - start,
            )
        result = self._judge(node, name, text, pod, start)
        if result.report is None:
            self.budget.give(taken)  # not kept
        else:
            with self._lock:
                shared = intern_programmed(result.report, self._programmed)
            if shared:
                self.budget.give(min(taken, table_weight(result.report)))
        return result

    def _judge(self, node: str, name: str, text: str, pod: dict, start: float) -> NodeResult:
        """The node's result from its pod's log: its report, or why the log holds none that can be used."""
        source = f"pod {self.namespace}/{name} log"
        report, why = parse_node_report(text, source)
        if report is None:
            term = (((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}).get(
                "terminated"
            ) or {}
            code = term.get("exitCode")
            return NodeResult(
                node,
                failure=(why or source) + (f"; container exited {code}" if code is not None else ""),
                kind="not json",
                seconds=time.monotonic() - start,
            )
        bad = report_problem(report)
        if bad is not None:
            return NodeResult(
                node,
                failure=f"{source}: malformed node report: {bad}",
                kind="bad report",
                seconds=time.monotonic() - start,
            )
        claimed = report["facts"].get("node")
        if isinstance(claimed, str) and claimed != node and claimed in self.known_nodes:
            return NodeResult(
                node,
                failure=f"{source}: the report claims to be from node {claimed!r}, another node of the cluster, "
                f"but comes from the pod pinned to {node!r}: rejected",
                kind="bad report",
                seconds=time.monotonic() - start,
            )
        return NodeResult(node, report=report, seconds=time.monotonic() - start)

    def _read_log(self, name: str, deadline: float) -> tuple[str, int]:
        """The pod's log, read in chunks against the deadline: neither a server that never answers nor one that
        trickles bytes holds the node past its time. Each chunk is counted against the run's budget for reports
        (ReportsOverBudget, nothing left counted, when it would pass it); returns the text and what it counted."""
        resp = self._call(
            self.core.read_namespaced_pod_log,
            name,
            self.namespace,
            deadline=deadline,
            container=P.CONTAINER,
            limit_bytes=LOG_LIMIT,
        )
        chunks: list[bytes] = []
        size, eof, taken = 0, False, 0
        read = getattr(resp, "read1", None) or resp.read
        try:
            while size <= LOG_LIMIT:
                left = deadline - time.monotonic()
                if left < MIN_CALL:
                    raise DeadlineExceeded(f"{size} bytes read")
                sock = getattr(getattr(resp, "connection", None), "sock", None)
                if sock is not None:  # each wait for bytes ends at the deadline at the latest
                    sock.settimeout(min(API_TIMEOUT, left))
                try:
                    chunk = read(CHUNK)
                except Exception as exc:
                    if "timed out" in str(exc).lower() or isinstance(exc, TimeoutError):
                        raise DeadlineExceeded(f"{size} bytes read") from None
                    raise
                if not chunk:
                    eof = True
                    break
                self.budget.take(weight(chunk))
                taken += weight(chunk)
                chunks.append(chunk)
                size += len(chunk)
        except BaseException:
            self.budget.give(taken)
            raise
        finally:
            try:
                resp.release_conn() if eof else resp.close()  # a half-read connection is not reused
            except Exception:
                pass
        return b"".join(chunks)[:LOG_LIMIT].decode("utf-8", "replace"), taken

    def _delete(self, name: str, deadline: float | None = None) -> None:
        """Delete one pod (retrying a slow or throttling API within the cleanup's share of --timeout)."""
        if deadline is None:
            deadline = min(time.monotonic() + self.cleanup_budget, max(self.deadline, time.monotonic() + MIN_CALL * 4))
        try:
            discard(
                self._call(
                    self.core.delete_namespaced_pod, name, self.namespace, deadline=deadline, grace_period_seconds=0
                ),
                deadline,
            )
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                self.cleanup_errors.append(f"pod {self.namespace}/{name}: " + self._why(exc, "delete"))
                return
        with self._lock:
            self._deleted.add(name)

    def _delete_leftovers(self) -> None:
        """Delete what this run created and has not deleted yet; then ask the API which pods of this run still
        exist (a create that timed out may have succeeded) and delete those too — all within the cleanup's share
        of --timeout. What could not be deleted is listed in ``leftover_pods``."""
        if self.keep_pods:
            return
        deadline = min(time.monotonic() + self.cleanup_budget, max(self.deadline, time.monotonic() + 1.0))
        self.cleanup_errors.clear()
        self._delete_owner(deadline=deadline)  # first: the garbage collector removes the pods even if kpdiag dies now
        owner_errors = list(self.cleanup_errors)
        for name in sorted(self._created - self._deleted):
            self._delete(name, deadline)
        listed: set[str] = set()
        list_ok = False  # once the API listed the run's pods, that list (not what was created) says what is left
        for attempt in range(3):
            try:
                listed = set(self._labelled_pods(P.LABEL_RUN, self.run_id, deadline=deadline))
                list_ok = True
            except Exception as exc:
                if attempt == 2 or time.monotonic() + 1 >= deadline:
                    self.cleanup_errors.append(f"pods of run {self.run_id}: " + self._why(exc, "list"))
                    break
                self._stop.wait(1 + attempt)
                continue
            if not listed:
                self.cleanup_errors[:] = owner_errors  # earlier pod failures were retried and the run left none
                break
            self.cleanup_errors[:] = owner_errors
            for name in sorted(listed):
                self._deleted.discard(name)
                self._delete(name, deadline)
            if time.monotonic() + 1 + attempt >= deadline:
                break
            time.sleep(1 + attempt)
        # the garbage collector may have removed pods whose own delete failed (their owner was deleted first)
        self.leftover_pods = sorted((listed if list_ok else self._created | listed) - self._deleted)

    def cleanup(self) -> tuple[list[str], list[str]]:
        """Delete every pod kpdiag left in the namespace (any run), and the runs' ConfigMaps: (deleted pod names,
        errors). A ConfigMap that cannot be listed (an RBAC from before run owners) is only named."""
        names = sorted(self._labelled_pods(P.LABEL_MANAGED, "kpdiag", deadline=self.setup_deadline))
        before = len(self.cleanup_errors)
        for name in names:
            self._delete(name)
        try:
            owners = self._list_all(
                self.core.list_namespaced_config_map,
                self.namespace,
                deadline=time.monotonic() + self.cleanup_budget,
                label_selector=f"{P.LABEL_MANAGED}=kpdiag",
            )
        except Exception as exc:
            self.cleanup_errors.append(self._why(exc, f"list ConfigMaps in {self.namespace}") + " (run owners)")
            owners = []
        for cm in owners:
            md = cm.get("metadata")
            md = md if isinstance(md, dict) else {}
            owner = md.get("name")
            if (
                isinstance(owner, str)
                and owner.startswith(P.OWNER_PREFIX)
                and (md.get("labels") or {}).get(P.LABEL_MANAGED) == "kpdiag"
            ):
                self._delete_owner(owner)
        return [n for n in names if n in self._deleted], self.cleanup_errors[before:]
