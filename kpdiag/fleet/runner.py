"""Run `kpdiag node` on many nodes through Kubernetes itself: one short-lived pod per node.

Bounded concurrency (``parallel`` pods at a time), one pod list per poll for the whole run (not one GET per
pod), a deadline per node, every failure a named reason, and cleanup that always happens: each worker deletes
its own pod in a ``finally``, the run deletes whatever is left on errors and Ctrl-C, every pod carries
``app.kubernetes.io/managed-by=kpdiag`` for ``kpdiag cluster --cleanup``, and ``activeDeadlineSeconds`` makes
the kubelet stop a pod whose client vanished.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ..collect.cluster import api_reason
from ..errors import Interrupted
from . import pods as P
from .aggregate import NodeResult, intern_programmed, parse_node_report

LOG_LIMIT = 64 * 1024 * 1024
API_TIMEOUT = 15.0
RETRIES = 3  # for timeouts, 429 and 5xx answers


def _transient(status) -> bool:
    return not status or status == 429 or status >= 500
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
            return False, f"node is NotReady (Ready={c.get('status')}: {c.get('reason') or ''} {c.get('message') or ''})".strip()
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
                return "fail", "pod failed", "OOMKilled: kpdiag exceeded the pod's memory limit (1Gi)"
            return "done", None, None
        reason, message = status.get("reason") or "", status.get("message") or ""
        if reason == "DeadlineExceeded":
            return "fail", "timeout", f"the kubelet stopped the pod at its deadline ({message})".strip()
        return "fail", "not admitted", f"the node did not run the pod: {reason or phase}: {message}".strip(" :")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return "fail", "unschedulable", f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or ''}".strip(" :")
    waiting = state.get("waiting") or {}
    why = waiting.get("reason")
    if why in IMAGE_FAILURES:
        image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image")
        return "fail", "image pull", f"{why}: {waiting.get('message') or image}"
    if why in CONTAINER_FAILURES:
        return "fail", "pod failed", f"{why}: {waiting.get('message') or ''}".strip(" :")
    return "wait", None, None


class FleetRunner:
    def __init__(self, api, *, namespace: str = P.DEFAULT_NAMESPACE, image: str = P.DEFAULT_IMAGE, timeout: float = 600,
                 parallel: int = 20, service: str | None = None, poll: float = 2.0, progress=None, keep_pods: bool = False, say=None):
        from kubernetes import client

        self.api = api
        # one connection per worker (the default pool is 5 per CPU: workers would queue for connections)
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(int(parallel) + 4,
                                                                          api.rest_client.pool_manager.connection_pool_kw.get("maxsize") or 1)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.image = image
        self.timeout = timeout
        self.parallel = max(1, int(parallel))
        self.service = service
        self.poll = poll
        self.progress = progress or (lambda **kw: None)
        self.say = say or (lambda msg: None)
        self.keep_pods = keep_pods
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

    # ------------------------------------------------------------ API helpers (raw JSON)
    def _why(self, exc: Exception, what: str) -> str:
        return api_reason(exc, what, self.api.configuration.host)

    def _json(self, fn, *args, **kwargs):
        resp = fn(*args, _preload_content=False, _request_timeout=API_TIMEOUT, **kwargs)
        return json.loads(resp.data)

    def _list_all(self, fn, *args, **kwargs) -> list[dict]:
        items, token = [], None
        while True:
            doc = self._json(fn, *args, limit=500, **({"_continue": token} if token else {}), **kwargs)
            items.extend(doc.get("items") or [])
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _labelled_pods(self, label: str, value: str) -> dict[str, dict]:
        """The namespace's pods with ``label=value``, by name: selected by the server and checked again here."""
        pods = self._list_all(self.core.list_namespaced_pod, self.namespace, label_selector=f"{label}={value}")
        return {p["metadata"]["name"]: p for p in pods
                if ((p.get("metadata") or {}).get("labels") or {}).get(label) == value and p["metadata"].get("name")}

    def targets(self, selector: str | None = None, names: list[str] | None = None) -> ClusterTargets:
        """The nodes to run on: all, a label selector, or names; NotReady and unknown nodes are skipped with why."""
        kwargs = {"label_selector": selector} if selector else {}
        nodes = self._list_all(self.core.list_node, **kwargs)
        if selector:
            nodes = [n for n in nodes if _labels_match(selector, (n.get("metadata") or {}).get("labels") or {})]
        by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
        out = ClusterTargets([])
        wanted = names if names else sorted(k for k in by_name if k)
        for name in wanted:
            node = by_name.get(name)
            if node is None:
                out.skipped.append(NodeResult(name, failure="no such node in the API" + (f" matching {selector!r}" if selector else ""), kind="unschedulable"))
                continue
            ok, why = _ready(node)
            if ok:
                out.nodes.append(name)
            else:
                out.skipped.append(NodeResult(name, failure=why, kind="unschedulable"))
        return out

    def api_version(self) -> str | None:
        from kubernetes import client

        try:
            return str(self._json(client.VersionApi(self.api).get_code).get("gitVersion") or "") or None
        except Exception as exc:
            self.notes.append(self._why(exc, "get /version"))
            return None

    def local_traffic_keys(self) -> set[str] | None:
        """ClusterIP:port/proto of Services with internalTrafficPolicy: Local (their endpoints differ per node by design)."""
        try:
            services = self._list_all(self.core.list_service_for_all_namespaces)
        except Exception as exc:
            self.notes.append(self._why(exc, "list services") + " — KP802/KP803 cannot leave out internalTrafficPolicy: Local Services")
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
        return P.node_pod(node, self.run_id, image=self.image, namespace=self.namespace, timeout=int(self.timeout), service=self.service)

    def run(self, nodes: list[str]) -> list[NodeResult]:
        """Run every node; on SIGINT/SIGTERM stop starting pods, let the workers finish deleting theirs, delete
        what is left and raise `Interrupted`. The signal only sets a flag: a KeyboardInterrupt raised at a random
        point of the main thread can leave a future's lock held, and the pool then never shuts down."""
        results: dict[str, NodeResult] = {}
        restore = self._trap_signals()
        executor = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="kpdiag-node")
        try:
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
                self.progress(done=len(results), total=len(nodes), failed=failed, running=len(self._created - self._deleted))
            if self._signalled is not None:
                running = len(self._created - self._deleted)
                self.say(f"{signal.Signals(self._signalled).name}: stopping; deleting {running} pod(s) "
                         "(interrupt again to quit at once and leave them to `kpdiag cluster --cleanup`)")
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
        """SIGINT and SIGTERM set a flag the run loop reads (it wakes at least every poll interval); a second one
        raises at once. Only the main thread may install handlers: elsewhere signals keep their defaults."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        saved: dict = {}

        def restore():
            for sig, old in saved.items():
                signal.signal(sig, old)
            saved.clear()

        def handler(signum, frame):
            if self._signalled is not None:
                restore()  # the user insists: the defaults again from here on (a third Ctrl-C is a plain one)
                raise Interrupted(signum, forced=True)
            self._signalled = signum

        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, handler)
        return restore

    def _refresh(self) -> None:
        """One list call for every pod of this run; the workers read the statuses."""
        try:
            self._status = self._labelled_pods(P.LABEL_RUN, self.run_id)
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
        if self._stop.is_set():
            return NodeResult(node, failure="interrupted before its pod was created", kind="interrupted")
        if self._fatal:
            return NodeResult(node, failure=f"not tried: {self._fatal}", kind="api error")
        manifest = self.manifest(node)
        name = manifest["metadata"]["name"]
        try:
            self._create(name, manifest)
        except Exception as exc:
            status = getattr(exc, "status", None)
            why = _create_reason(exc, self.namespace, self.api.configuration.host)
            if status in (401, 403, 404, 422):
                self._fatal = why  # the same for every node: do not try hundreds more
            if not status or status >= 500:  # a timeout or a server error: the pod may exist all the same
                with self._lock:
                    self._created.add(name)
            return NodeResult(node, failure=why, kind="api error", seconds=time.monotonic() - start)
        with self._lock:
            self._created.add(name)
        try:
            return self._await(node, name, start)
        finally:
            if not self.keep_pods:
                self._delete(name)

    def _create(self, name: str, manifest: dict) -> None:
        """Create the pod; a timeout, 429 or 5xx is retried (with backoff), and a 409 on a retry means the earlier
        attempt did create it (the name is this run's own)."""
        for attempt in range(RETRIES):
            try:
                self.core.create_namespaced_pod(self.namespace, manifest, _preload_content=False, _request_timeout=API_TIMEOUT)
                return
            except Exception as exc:
                status = getattr(exc, "status", None)
                if attempt and status == 409:
                    return
                if not _transient(status) or attempt == RETRIES - 1 or self._stop.is_set():
                    raise
                with self._lock:
                    self._created.add(name)  # it may exist already: make sure it is deleted in any case
                time.sleep(0.5 * 2 ** attempt)

    def _await(self, node: str, name: str, start: float) -> NodeResult:
        deadline = start + self.timeout
        while True:
            if self._stop.is_set():
                return NodeResult(node, failure="interrupted", kind="interrupted", seconds=time.monotonic() - start)
            pod = self._status.get(name)
            verdict, kind, why = classify(pod)
            if verdict == "done":
                return self._read(node, name, pod, start)
            if verdict == "fail":
                return NodeResult(node, failure=why, kind=kind, seconds=time.monotonic() - start)
            if time.monotonic() > deadline:
                phase = ((pod or {}).get("status") or {}).get("phase") or "not seen yet"
                return NodeResult(node, failure=f"timed out after {self.timeout:.0f} s (pod {phase})", kind="timeout",
                                  seconds=time.monotonic() - start)
            with self._tick:
                self._tick.wait(min(self.poll, max(0.05, deadline - time.monotonic())))

    def _read(self, node: str, name: str, pod: dict, start: float) -> NodeResult:
        try:
            for attempt in range(RETRIES):
                try:
                    resp = self.core.read_namespaced_pod_log(name, self.namespace, container=P.CONTAINER, limit_bytes=LOG_LIMIT,
                                                             _preload_content=False, _request_timeout=120)
                    break
                except Exception as exc:
                    if not _transient(getattr(exc, "status", None)) or attempt == RETRIES - 1 or self._stop.is_set():
                        raise
                    time.sleep(0.5 * 2 ** attempt)
            text = resp.data.decode("utf-8", "replace")
        except Exception as exc:
            return NodeResult(node, failure=self._why(exc, f"read log of pod {self.namespace}/{name}"),
                              kind="api error", seconds=time.monotonic() - start)
        report, why = parse_node_report(text, f"pod {self.namespace}/{name} log")
        if report is None:
            term = (((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated") or {}
            code = term.get("exitCode")
            return NodeResult(node, failure=why + (f"; container exited {code}" if code is not None else ""), kind="not json",
                              seconds=time.monotonic() - start)
        with self._lock:
            intern_programmed(report, self._programmed)
        return NodeResult(node, report=report, seconds=time.monotonic() - start)

    def _delete(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0, _preload_content=False, _request_timeout=API_TIMEOUT)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                self.cleanup_errors.append(f"pod {self.namespace}/{name}: " + self._why(exc, "delete"))
                return
        with self._lock:
            self._deleted.add(name)

    def _delete_leftovers(self) -> None:
        """Delete what this run created and has not deleted yet; then ask the API which pods of this run still
        exist (a create that timed out may have succeeded) and delete those too, retrying a slow API."""
        if self.keep_pods:
            return
        self.cleanup_errors.clear()
        for name in sorted(self._created - self._deleted):
            self._delete(name)
        for attempt in range(3):
            try:
                names = list(self._labelled_pods(P.LABEL_RUN, self.run_id))
            except Exception as exc:
                if attempt == 2:
                    self.cleanup_errors.append(f"pods of run {self.run_id}: " + self._why(exc, "list"))
                time.sleep(1 + attempt)
                continue
            if not names:
                self.cleanup_errors.clear()  # earlier failures were retried and the run left nothing
                return
            self.cleanup_errors.clear()
            for name in names:
                self._deleted.discard(name)
                self._delete(name)
            time.sleep(1 + attempt)

    def cleanup(self) -> tuple[list[str], list[str]]:
        """Delete every pod kpdiag left in the namespace (any run): (deleted names, errors)."""
        names = sorted(self._labelled_pods(P.LABEL_MANAGED, "kpdiag"))
        before = len(self.cleanup_errors)
        for name in names:
            self._delete(name)
        return [n for n in names if n in self._deleted], self.cleanup_errors[before:]


def _create_reason(exc: Exception, namespace: str, server: str | None) -> str:
    status = getattr(exc, "status", None)
    body = ""
    try:
        body = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except (ValueError, AttributeError):
        pass
    if status == 404:
        return f"create pod: namespace {namespace!r} does not exist (kubectl apply -f deploy/rbac-cluster.yaml creates it)"
    if status == 403 and "PodSecurity" in body:
        return (f"create pod: PodSecurity admission rejects a privileged pod in {namespace!r} "
                f"(kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=privileged): {body[:200]}")
    if status == 403:
        return f"create pod: 403 Forbidden — RBAC does not allow creating pods in {namespace!r} (see deploy/rbac-cluster.yaml){': ' + body[:160] if body else ''}"
    if status == 422:
        return f"create pod: 422 rejected by the API server: {body[:200]}"
    return api_reason(exc, "create pod", server)
