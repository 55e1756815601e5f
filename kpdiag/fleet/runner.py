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
the ApiClient is built, see :func:`kpdiag.collect.cluster.api_client`): every retry is one of these.

A node's report is checked before it is used: it must be a well-formed kpdiag node report (the JSON schema's
types, finding ids and slugs) and must not claim to be another node of the cluster.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import re
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from kpdiag.bundle.store import json_type

from .. import secrets
from ..collect.apierrors import api_reason
from ..errors import Interrupted
from kpdiag.parse.decode import load_json
from kpdiag.manifests import apply_command
from . import pods as P
from .aggregate import NodeResult, intern_programmed, parse_node_report

LOG_LIMIT = 64 * 1024 * 1024
API_TIMEOUT = 15.0  # the longest any one API call may take (less when the deadline is nearer)
RETRIES = 3  # for timeouts, 429 and 5xx answers
SETUP_SHARE = 0.5  # of --timeout, for the node list, /version and the Service list before any pod
CLEANUP_SHARE = 0.25  # of --timeout, for a node's delete, and again for the final cleanup
MIN_CALL = 0.05  # seconds: a call is not started with less time than this left
CHUNK = 256 * 1024


# every terminating signal a process can catch; a repeated Ctrl-C or Ctrl-backslash quits at once
TERMINATING = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
INSISTING = (signal.SIGINT, signal.SIGQUIT)


# signals raised as Interrupted while no pod existed: kept, so that one swallowed on its way (raised inside a finalizer
# or a library's catch-all) still stops the run at its start (FleetRunner.run reads it)
_PENDING: list[int] = []


@contextlib.contextmanager
def raising_on_signals():
    """SIGHUP, SIGINT, SIGQUIT and SIGTERM raise Interrupted at once while no pod exists: the command ends with
    128 + signal and its one line instead of dying silently (SIGHUP) or dumping core (SIGQUIT). Each is also noted in
    _PENDING: FleetRunner.run stops before its first pod when one was noted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _PENDING.append(signum)
        raise Interrupted(signum)

    _PENDING.clear()
    saved = {sig: signal.signal(sig, handler) for sig in TERMINATING}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        _PENDING.clear()


def _best_effort(fn):
    """Progress and messages after a hangup: the terminal is gone (EIO), and that must not stop the cleanup."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (OSError, ValueError):
            return None

    return call


class DeadlineExceeded(Exception):
    """The time given to this step ran out (before or during an API call)."""


def _transient(status) -> bool:
    return not status or status == 429 or status >= 500


def retry_after(exc: Exception) -> float | None:
    """Seconds a 429/503 answer asks the client to wait (Retry-After: seconds or an HTTP date), or None."""
    headers = getattr(exc, "headers", None)
    try:
        value = headers.get("Retry-After") if headers is not None else None
    except AttributeError:
        value = None
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return None if when is None else max(0.0, when.timestamp() - time.time())


def _is_timeout(exc: BaseException) -> bool:
    """A connect or read timeout (urllib3 wraps it in MaxRetryError; the client may wrap that again)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, TimeoutError) or exc.__class__.__name__ in (
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "TimeoutError",
        ):
            return True
        exc = (
            getattr(exc, "reason", None)
            if isinstance(getattr(exc, "reason", None), BaseException)
            else (exc.__cause__ or exc.__context__)
        )
        seen += 1
    return False


def call_timeout(deadline: float, cap: float = API_TIMEOUT) -> tuple[float, float]:
    """(connect, read) timeouts for one API call from the time left before ``deadline``."""
    left = deadline - time.monotonic()
    if left < MIN_CALL:
        raise DeadlineExceeded()
    t = min(cap, left)
    return (t, t)


IMAGE_FAILURES = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONTAINER_FAILURES = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


@dataclass
class ClusterTargets:
    nodes: list[str]
    skipped: list[NodeResult] = field(default_factory=list)  # NotReady or unknown nodes, with the reason


def _labels_match(selector: str, labels: dict) -> bool:
    """Equality/existence label selectors (``a=b,c!=d,e,!f``), re-checked locally."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _ready(node: dict) -> tuple[bool, str]:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return True, ""
            return (
                False,
                f"node is NotReady (Ready={c.get('status')}: {c.get('reason') or ''} {c.get('message') or ''})".strip(),
            )
    return True, ""  # no conditions reported: try anyway


def classify(pod: dict | None) -> tuple[str, str | None, str | None]:
    """("wait"|"done"|"fail", kind, reason) for a pod as the API shows it."""
    if pod is None:
        return "wait", None, None
    status = pod.get("status") or {}
    phase = status.get("phase")
    cstats = status.get("containerStatuses") or []
    state = (cstats[0].get("state") or {}) if cstats else {}
    if phase in ("Succeeded", "Failed"):
        term = state.get("terminated")
        if term is not None:
            if term.get("reason") == "OOMKilled":
                return "fail", "pod failed", f"OOMKilled: kpdiag exceeded the pod's memory limit ({P.MEMORY_LIMIT})"
            return "done", None, None
        reason, message = status.get("reason") or "", status.get("message") or ""
        if reason == "DeadlineExceeded":
            return "fail", "timeout", f"the kubelet stopped the pod at its deadline ({message})".strip()
        return "fail", "not admitted", f"the node did not run the pod: {reason or phase}: {message}".strip(" :")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return (
                "fail",
                "unschedulable",
                f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or ''}".strip(" :"),
            )
    waiting = state.get("waiting") or {}
    why = waiting.get("reason")
    if why in IMAGE_FAILURES:
        image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image")
        return "fail", "image pull", f"{why}: {waiting.get('message') or image}"
    if why in CONTAINER_FAILURES:
        return "fail", "pod failed", f"{why}: {waiting.get('message') or ''}".strip(" :")
    return "wait", None, None


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
        # one connection per worker (the default pool is 5 per CPU: workers would queue for connections)
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(
            int(parallel) + 4, api.rest_client.pool_manager.connection_pool_kw.get("maxsize") or 1
        )
        self.core = RawApi(api)  # every answer read bounded, an error's body too (the generated classes read it whole)
        self.namespace = namespace
        self.image = image
        self.timeout = timeout
        self.parallel = max(1, int(parallel))
        self.service = service
        self.poll = poll
        self.progress = _best_effort(progress or (lambda **kw: None))
        self.say = _best_effort(say or (lambda msg: None))
        self.keep_pods = keep_pods
        # the node pods read the API with kpdiag's node service account; None once it proved missing (then they run
        # without a token and say so) or with node_api=False
        self.service_account: str | None = P.NODE_SERVICE_ACCOUNT if node_api else None
        self.run_id = P.new_run_id()
        self.cleanup_errors: list[str] = []
        self.notes: list[str] = []
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
                if status is None and _is_timeout(exc) and time.monotonic() >= deadline - MIN_CALL:
                    raise DeadlineExceeded(
                        f"the API server {secrets.shown_url(self.api.configuration.host)} did not answer in time (no time left)"
                    ) from exc
                if not _transient(status) or attempt == retries - 1 or self._stop.is_set():
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

    def _list_all(
        self, fn, *args, deadline: float | None = None, retries: int = 1, kind: str | None = None, **kwargs
    ) -> list[dict]:
        """Every object of a paged List; capped in pages and objects (a server whose continue tokens never end). With
        ``kind``, objects of another shape than kpdiag reads are left out, each named in the run's notes."""
        from ..collect.kubeapi import ApiBound, MAX_OBJECTS, MAX_PAGES
        from ..state.shapes import read_list

        items, token, pages = [], None, 0
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
        kwargs = {"label_selector": selector} if selector else {}
        # the first call of a run: an API server that is starting or throttling gets a few tries (with backoff,
        # after its Retry-After), within the setup's share of --timeout
        nodes = self._list_all(self.core.list_node, retries=5, kind="Node", **kwargs)
        self.known_nodes |= {
            n["metadata"]["name"]
            for n in nodes
            if isinstance(n.get("metadata"), dict) and isinstance(n["metadata"].get("name"), str)
        }
        if selector:
            nodes = [n for n in nodes if _labels_match(selector, (n.get("metadata") or {}).get("labels") or {})]
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
            ok, why = _ready(node)
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
        body = {
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
            _discard(
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
        point of the main thread can leave a future's lock held, and the pool then never shuts down."""
        results: dict[str, NodeResult] = {}
        restore = self._trap_signals()
        if _PENDING and self._signalled is None:  # a signal before the run that was lost on its way: stop now
            self._signalled = _PENDING[0]
            self._stop.set()
        executor = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="kpdiag-node")
        try:
            if self._signalled is None:
                self._create_owner()
            futures = {executor.submit(self._one, node): node for node in nodes}
            pending = set(futures)
            last = 0.0
            while pending and self._signalled is None:
                if self._created - self._deleted and time.monotonic() - last >= self.poll:
                    last = time.monotonic()
                    self._refresh()  # at most one list per poll interval, however many nodes finish
                done_now, pending = wait(pending, timeout=self.poll, return_when=FIRST_COMPLETED)
                for fut in done_now:
                    results[futures[fut]] = fut.result()
                failed = sum(1 for r in results.values() if not r.ok)
                self.progress(
                    done=len(results), total=len(nodes), failed=failed, running=len(self._created - self._deleted)
                )
            if self._signalled is not None:
                running = len(self._created - self._deleted)
                self.say(
                    f"{signal.Signals(self._signalled).name}: stopping; deleting {running} pod(s) "
                    "(Ctrl-C again to quit at once and leave them to `kpdiag cluster --cleanup`)"
                )
        finally:
            self._stop.set()
            with self._tick:
                self._tick.notify_all()
            executor.shutdown(wait=True, cancel_futures=True)  # queued nodes never start; running ones delete their pod
            self._delete_leftovers()
            restore()
        if self._signalled is not None:
            raise Interrupted(self._signalled)
        return [results[n] for n in nodes]

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
                if not _missing_service_account(exc, manifest):
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
                else _create_reason(exc, self.namespace, self.api.configuration.host)
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
                _discard(
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
                if status is None and _is_timeout(exc) and time.monotonic() >= deadline - MIN_CALL:
                    raise DeadlineExceeded(
                        f"the API server {secrets.shown_url(self.api.configuration.host)} did not answer in time (no time left)"
                    ) from exc
                if not _transient(status) or attempt == RETRIES - 1 or self._stop.is_set():
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
            if verdict == "done":
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
            text = self._read_log(name, deadline)
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
        source = f"pod {self.namespace}/{name} log"
        report, why = parse_node_report(text, source)
        if report is None:
            term = (((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}).get(
                "terminated"
            ) or {}
            code = term.get("exitCode")
            return NodeResult(
                node,
                failure=why + (f"; container exited {code}" if code is not None else ""),
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
        with self._lock:
            intern_programmed(report, self._programmed)
        return NodeResult(node, report=report, seconds=time.monotonic() - start)

    def _read_log(self, name: str, deadline: float) -> str:
        """The pod's log, read in chunks against the deadline: neither a server that never answers nor one that
        trickles bytes holds the node past its time."""
        resp = self._call(
            self.core.read_namespaced_pod_log,
            name,
            self.namespace,
            deadline=deadline,
            container=P.CONTAINER,
            limit_bytes=LOG_LIMIT,
        )
        chunks: list[bytes] = []
        size, eof = 0, False
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
                chunks.append(chunk)
                size += len(chunk)
        finally:
            try:
                resp.release_conn() if eof else resp.close()  # a half-read connection is not reused
            except Exception:
                pass
        return b"".join(chunks)[:LOG_LIMIT].decode("utf-8", "replace")

    def _delete(self, name: str, deadline: float | None = None) -> None:
        """Delete one pod (retrying a slow or throttling API within the cleanup's share of --timeout)."""
        if deadline is None:
            deadline = min(time.monotonic() + self.cleanup_budget, max(self.deadline, time.monotonic() + MIN_CALL * 4))
        try:
            _discard(
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
            md = cm.get("metadata") if isinstance(cm.get("metadata"), dict) else {}
            name = md.get("name")
            if (
                isinstance(name, str)
                and name.startswith(P.OWNER_PREFIX)
                and (md.get("labels") or {}).get(P.LABEL_MANAGED) == "kpdiag"
            ):
                self._delete_owner(name)
        return [n for n in names if n in self._deleted], self.cleanup_errors[before:]


def _discard(resp, deadline: float) -> None:
    """Read a write's answer (the object written: a few KB) bounded and let the connection go back to the pool."""
    from ..collect.kubeapi import read_body

    try:
        read_body(resp, max(deadline, time.monotonic() + MIN_CALL), limit=1 << 20, truncate=True)
    except Exception:
        pass  # the write was accepted (2xx): what its answer holds is not needed


def _missing_service_account(exc: Exception, manifest: dict) -> bool:
    """Did the ServiceAccount admission refuse the pod because its service account does not exist? (403, "error looking
    up service account NS/NAME: serviceaccount \"NAME\" not found")"""
    account = (manifest.get("spec") or {}).get("serviceAccountName")
    if not account or getattr(exc, "status", None) != 403:
        return False
    try:
        body = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except (ValueError, AttributeError):
        return False
    return "service account" in body and f'serviceaccount "{account}" not found' in body


def _create_reason(exc: Exception, namespace: str, server: str | None) -> str:
    status = getattr(exc, "status", None)
    body = ""
    try:
        body = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except (ValueError, AttributeError):
        pass
    if status == 404:
        return f"create pod: namespace {namespace!r} does not exist ({apply_command('cluster')} creates it)"
    if status == 403 and "PodSecurity" in body:
        return (
            f"create pod: PodSecurity admission rejects a privileged pod in {namespace!r} "
            f"(kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=privileged): {body[:200]}"
        )
    if status == 403:
        return f"create pod: 403 Forbidden — RBAC does not allow creating pods in {namespace!r} (kpdiag's grants: {apply_command('cluster')}){': ' + body[:160] if body else ''}"
    if status == 422:
        return f"create pod: 422 rejected by the API server: {body[:200]}"
    return api_reason(exc, "create pod", server)


_ID = re.compile(r"KP[0-9]{3}")
_SLUG = re.compile(r"[a-z0-9-]+")
_TYPES = {
    "schema": str,
    "kpdiag_version": str,
    "subject": str,
    "readable": bool,
    "summary": dict,
    "facts": dict,
    "findings": list,
    "checks": list,
    "problems": list,
    "extra": dict,
}


def report_problem(doc: dict) -> str | None:
    """Why a node report is not a well-formed kpdiag.report/v1 document (the schema's types and patterns for what the
    cluster report copies from it), in a few words; None when it is."""
    for key, kind in _TYPES.items():
        if key not in doc:
            if key == "extra":
                continue
            return f'"{key}" is missing'
        if not isinstance(doc[key], kind) or (kind is not bool and isinstance(doc[key], bool)):
            return f'"{key}" is {json_type(doc[key])}, not {json_type(kind())}'
    for key in ("error", "warning", "info"):
        value = doc["summary"].get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f'"summary.{key}" is {json_type(value)}, not a count'
    for i, f in enumerate(doc["findings"]):
        where = f"findings[{i}]"
        if not isinstance(f, dict):
            return f"{where} is {json_type(f)}, not an object"
        if not isinstance(f.get("id"), str) or not _ID.fullmatch(f["id"]):
            return f"{where}.id is not a check id (KPnnn)"
        if not isinstance(f.get("slug"), str) or not _SLUG.fullmatch(f["slug"]):
            return f"{where}.slug is not a check slug"
        if f.get("severity") not in ("error", "warning", "info"):
            return f"{where}.severity is not error, warning or info"
        for key in ("title", "summary", "explanation"):
            if not isinstance(f.get(key), str):
                return f"{where}.{key} is {json_type(f.get(key))}, not a string"
        if not f["summary"] or not f["explanation"]:
            return f"{where} has an empty summary or explanation"
        if f.get("subject") is not None and not isinstance(f.get("subject"), str):
            return f"{where}.subject is {json_type(f.get('subject'))}, not a string"
        for key in ("fix", "references"):
            if not isinstance(f.get(key), list) or not all(isinstance(x, str) for x in f[key]):
                return f"{where}.{key} is not a list of strings"
        if not f["fix"]:
            return f"{where}.fix is empty"
        evidence = f.get("evidence")
        if not isinstance(evidence, list):
            return f"{where}.evidence is {json_type(evidence)}, not a list"
        for j, e in enumerate(evidence):
            if not isinstance(e, dict) or not isinstance(e.get("source"), str) or not isinstance(e.get("text"), str):
                return f"{where}.evidence[{j}] is not a source and a text"
            line = e.get("line")
            if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
                return f"{where}.evidence[{j}].line is not a line number"
    for i, p in enumerate(doc["problems"]):
        if not isinstance(p, dict) or not isinstance(p.get("source"), str) or not isinstance(p.get("error"), str):
            return f"problems[{i}] is not a source and an error"
    for i, c in enumerate(doc["checks"]):
        if (
            not isinstance(c, dict)
            or not isinstance(c.get("id"), str)
            or c.get("status") not in ("ran", "skipped", "error")
        ):
            return f"checks[{i}] is not a check run"
    return None
