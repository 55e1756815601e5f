"""A real HTTP server on loopback speaking the Kubernetes API (kmock's emulator), for tests.

In-process (a thread):   with ApiServer(objects) as api: api.kubeconfig(tmp_path) …
In a namespace:          ip netns exec NS python -m tests.apiserver OBJECTS.json URLFILE
                         (writes its URL to URLFILE and serves until killed)

Objects are plain API JSON dicts; their kind picks the resource. ``requests`` counts the
calls by method and path, so tests can assert how many calls kpdiag made.

``kubelet`` (node name → behaviour) makes pods created on those nodes run like a kubelet would run
them: the pod's status moves on and ``pods/NAME/log`` serves what the container printed. Behaviours:
``{"log": TEXT, "exit": 0}`` (Succeeded, or Failed for a non-zero exit), ``{"hang": True}`` (Running
forever), ``{"waiting": "ImagePullBackOff", "message": …}``, ``{"oom": True}``,
``{"rejected": "OutOfpods", "message": …}``. Lists honour ``labelSelector`` (kmock's emulator does not).
``pod_logs`` ("ns/pod", or "ns/pod#previous" → text) serves the logs of pods that exist, honouring tailLines and limitBytes.

A slow or hostile server: ``hang`` ({KEY: seconds}) answers matching requests only after that long; ``throttle``
({KEY: (count, retry_after)}) answers the first ``count`` matching requests 429 with that Retry-After; ``fail``
({KEY: status}) answers them with an error. KEY is ``"*"``, a resource (``"pods"``), or a method and a resource or
path prefix (``"DELETE pods"``, ``"GET /api/v1/nodes"``). Kubelet behaviours for the log: ``{"log": TEXT,
"log_hang": seconds}`` (the log read does not answer for that long), ``{"log": TEXT, "log_trickle": seconds}`` (the
answer starts at once, then one byte per interval). ``times`` records (monotonic time, method, path) per request. Created objects get a ``metadata.uid``; deleting an
object deletes the objects whose ``ownerReferences`` name its uid (``collected``), as the garbage collector does.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
import urllib.request
import uuid

RESOURCES = {
    "Service": ("", "v1", "services", True),
    "Pod": ("", "v1", "pods", True),
    "Node": ("", "v1", "nodes", False),
    "ConfigMap": ("", "v1", "configmaps", True),
    "Namespace": ("", "v1", "namespaces", False),
    "EndpointSlice": ("discovery.k8s.io", "v1", "endpointslices", True),
    "DaemonSet": ("apps", "v1", "daemonsets", True),
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies", True),
}


class ApiServer:
    def __init__(
        self,
        objects: list[dict] | None = None,
        host: str = "127.0.0.1",
        fail: dict | None = None,
        kubelet: dict | None = None,
        kubelet_delay: float = 0.05,
        version: str = "v1.31.4",
        pod_logs: dict | None = None,
        hang: dict | None = None,
        throttle: dict | None = None,
        service_accounts: set | None = None,
        tls: tuple[str, str] | None = None,
    ):
        self.tls = tls  # (certificate file, key file): served over HTTPS (a TLS front relaying to kmock's HTTP)
        self._front = None
        self.objects = objects or []
        # ServiceAccount admission: a pod naming a serviceAccountName not in this set ("ns/name") is refused with the
        # API server's 403; None: not enforced (the tests that do not care)
        self.service_accounts = service_accounts
        self.hang = hang or {}
        self.throttle = throttle or {}
        self._throttled: dict[str, int] = {}
        self.times: list[tuple[float, str, str]] = []
        self.pod_logs = pod_logs or {}  # "ns/pod" (or "ns/pod#previous") → the log text served at pods/NAME/log
        self.kubelet = kubelet
        self.kubelet_delay = kubelet_delay
        self.version = version
        self.created: list[dict] = []  # pod bodies as POSTed
        self.posted: list[dict] = []  # every object body POSTed (with the uid given to it)
        self._owned: set[str] = set()  # uids named as an owner by some object
        self.collected: list[str] = []  # names of objects the garbage collector deleted with their owner
        self._tasks: set = set()
        self.host = host
        self.fail = fail or {}  # {"pods": 403, "*": 500}: answer these resources with an error
        self.url: str | None = None
        self.requests: list[tuple[str, str]] = []
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> "ApiServer":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the API server did not start: {self._error}")
        if self._error:
            raise self._error
        if self.tls:
            self.http_url = self.url
            self._front = TlsFront(self.url, *self.tls)
            self.url = self._front.url
        return self

    def __exit__(self, *exc) -> None:
        if self._front is not None:
            self._front.close()
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced to __enter__
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        import aiohttp.web
        import kmock

        self._stop = asyncio.Event()
        requests, fail, server = self.requests, self.fail, self
        logs: dict[tuple, str] = {}
        hows: dict[tuple, dict] = {}

        class Emulator(kmock.KubernetesEmulator):
            """kmock's emulator, counting requests, answering injected errors, filtering by label, running pods."""

            async def __call__(self, raw_request):
                # kmock cannot parse /api/v1/namespaces[/NAME] (it takes "namespaces" for a namespaced path):
                # the namespaces given to the server are answered here, list (with labelSelector) and get
                m = re.fullmatch(r"/api/v1/namespaces(?:/([^/]+))?/?", raw_request.path)
                if m and raw_request.method == "GET" and not server.fail:
                    requests.append(("GET", raw_request.path))
                    nss = [o for o in server.objects if o.get("kind") == "Namespace"]
                    if m.group(1):
                        hit = next((o for o in nss if o["metadata"]["name"] == m.group(1)), None)
                        if hit is None:
                            return aiohttp.web.json_response(
                                {
                                    "kind": "Status",
                                    "apiVersion": "v1",
                                    "status": "Failure",
                                    "code": 404,
                                    "reason": "NotFound",
                                    "message": f'namespaces "{m.group(1)}" not found',
                                },
                                status=404,
                            )
                        return aiohttp.web.json_response(hit)
                    selector = raw_request.query.get("labelSelector")
                    items = [o for o in nss if not selector or _selects(selector, o["metadata"].get("labels") or {})]
                    return aiohttp.web.json_response(
                        {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": items}
                    )
                return await super().__call__(raw_request)

            async def _handle(self, request):
                path = request.url.path
                method = str(getattr(request.method, "value", request.method)).upper()
                requests.append((method, path))
                server.times.append((time.monotonic(), method, path))
                if method == "POST" and isinstance(request.data, dict):  # the API server gives each object a uid
                    md = request.data.setdefault("metadata", {})
                    if isinstance(md, dict):
                        md.setdefault("uid", str(uuid.uuid4()))
                    server.posted.append(json.loads(json.dumps(request.data)))
                    for ref in (md.get("ownerReferences") or []) if isinstance(md, dict) else []:
                        if isinstance(ref, dict) and ref.get("uid"):
                            server._owned.add(ref["uid"])
                for key, seconds in server.hang.items():  # a server that does not answer in time
                    if _hits(key, method, path):
                        await server._pause(seconds)
                        break
                for key, (count, after) in server.throttle.items():
                    if _hits(key, method, path) and server._throttled.get(key, 0) < count:
                        server._throttled[key] = server._throttled.get(key, 0) + 1
                        return aiohttp.web.json_response(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": 429,
                                "reason": "TooManyRequests",
                                "message": "injected 429",
                            },
                            status=429,
                            headers={"Retry-After": str(after)},
                        )
                for plural, status in fail.items():
                    if _hits(plural, method, path):
                        return aiohttp.web.json_response(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": status,
                                "reason": {401: "Unauthorized", 403: "Forbidden", 500: "InternalError"}.get(
                                    status, "Error"
                                ),
                                "message": f"injected {status}",
                            },
                            status=status,
                        )
                if path.rstrip("/") == "/version":  # a real API server always answers it
                    return aiohttp.web.json_response(
                        {"major": "1", "minor": "31", "gitVersion": server.version, "platform": "linux/amd64"}
                    )
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
                params = request.params or {}
                key = m and f"{m.group(1)}/{m.group(2)}" + (
                    "#previous" if str(params.get("previous", "")).lower() == "true" else ""
                )
                if (
                    m and server.pod_logs and (key in server.pod_logs or server.kubelet is None)
                ):  # as a kubelet serves them
                    text = server.pod_logs.get(key)
                    if text is None:
                        return aiohttp.web.json_response(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": 400,
                                "message": f'previous terminated container not found for pod "{m.group(2)}"',
                            },
                            status=400,
                        )
                    if params.get("tailLines"):
                        text = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]) :])
                    data = text.encode()[: int(params["limitBytes"])] if params.get("limitBytes") else text.encode()
                    return aiohttp.web.Response(body=data, content_type="text/plain")
                if m and server.kubelet is not None:
                    text = logs.get((m.group(1), m.group(2)))
                    if text is None:
                        return aiohttp.web.json_response(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": 400,
                                "message": f'container "kpdiag" in pod "{m.group(2)}" is waiting to start',
                            },
                            status=400,
                        )
                    how = hows.get((m.group(1), m.group(2))) or {}
                    if how.get("log_hang"):
                        await server._pause(how["log_hang"])
                    if how.get("log_trickle"):
                        raw = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
                        try:
                            await raw.prepare(request._raw_request)
                            for ch in text.encode():
                                if server._stop.is_set():
                                    break
                                await raw.write(bytes([ch]))
                                await server._pause(how["log_trickle"])
                            await raw.write_eof()
                        except (ConnectionError, RuntimeError):
                            pass  # the client gave up
                        return raw
                    return aiohttp.web.Response(text=text, content_type="text/plain")
                if method == "POST" and path.endswith("/pods") and server.service_accounts is not None:
                    body = request.data or {}
                    sa = (body.get("spec") or {}).get("serviceAccountName")
                    ns = request.namespace or (body.get("metadata") or {}).get("namespace")
                    if sa and f"{ns}/{sa}" not in server.service_accounts:
                        name = (body.get("metadata") or {}).get("name")
                        return aiohttp.web.json_response(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": 403,
                                "reason": "Forbidden",
                                "message": f'pods "{name}" is forbidden: error looking up service account {ns}/{sa}: '
                                f'serviceaccount "{sa}" not found',
                            },
                            status=403,
                        )
                if method == "POST" and path.endswith("/pods") and server.kubelet is not None:
                    body = request.data or {}
                    server.created.append(json.loads(json.dumps(body)))
                    resp = await super()._handle(request)
                    node = (body.get("spec") or {}).get("nodeName")
                    if resp.status < 300 and node in server.kubelet:
                        key = (
                            kmock.resource("", "v1", "pods"),
                            request.namespace or body["metadata"].get("namespace"),
                            body["metadata"]["name"],
                        )
                        server._tasks.add(
                            asyncio.get_running_loop().create_task(self._run_pod(key, server.kubelet[node]))
                        )
                    return resp
                selector = request.params.get("labelSelector") if request.params else None
                resp = await super()._handle(request)
                if (
                    method == "DELETE" and resp.status < 300 and server._owned
                ):  # the garbage collector: dependents go with their owner
                    try:
                        uid = (json.loads(resp.body).get("metadata") or {}).get("uid")
                    except (ValueError, AttributeError, TypeError):
                        uid = None
                    if uid in server._owned:
                        server._owned.discard(uid)
                        await self._collect_garbage(uid)
                if selector and method == "GET" and "watch" not in request.params and resp.status == 200:
                    doc = json.loads(resp.body)
                    doc["items"] = [
                        o
                        for o in doc.get("items", [])
                        if _selects(selector, (o.get("metadata") or {}).get("labels") or {})
                    ]
                    return aiohttp.web.json_response(doc)
                return resp

            async def _collect_garbage(self, uid):
                async with self._lock:
                    for key, obj in list(self._objects.items()):
                        refs = (obj.get("metadata") or {}).get("ownerReferences") or [] if not obj.deleted else []
                        if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                            obj.delete()
                            server.collected.append(key[2])

            async def _run_pod(self, key, how):
                await asyncio.sleep(server.kubelet_delay)
                cname = "kpdiag"
                if how.get("hang"):
                    status = {
                        "phase": "Running",
                        "containerStatuses": [
                            {"name": cname, "state": {"running": {"startedAt": "2026-12-03T00:00:00Z"}}}
                        ],
                    }
                elif how.get("waiting"):
                    status = {
                        "phase": "Pending",
                        "containerStatuses": [
                            {
                                "name": cname,
                                "state": {"waiting": {"reason": how["waiting"], "message": how.get("message", "")}},
                            }
                        ],
                    }
                elif how.get("rejected"):
                    status = {"phase": "Failed", "reason": how["rejected"], "message": how.get("message", "")}
                elif how.get("oom"):
                    status = {
                        "phase": "Failed",
                        "containerStatuses": [
                            {"name": cname, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
                        ],
                    }
                else:
                    code = int(how.get("exit", 0))
                    logs[(key[1], key[2])] = how.get("log", "")
                    hows[(key[1], key[2])] = how
                    status = {
                        "phase": "Succeeded" if code == 0 else "Failed",
                        "containerStatuses": [
                            {
                                "name": cname,
                                "state": {
                                    "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
                                },
                            }
                        ],
                    }
                async with self._lock:
                    if key in self._objects and not self._objects[key].deleted:
                        self._objects[key].patch({"status": status})

        async with Emulator() as emu, kmock.Server(emu, host=self.host) as srv:
            for kind, (group, version, plural, namespaced) in RESOURCES.items():
                emu.resources[f"{group + '/' if group else ''}{version}/{plural}"] = {
                    "kind": kind,
                    "namespaced": namespaced,
                }
            for obj in self.objects:
                group, version, plural, namespaced = RESOURCES[obj["kind"]]
                md = obj["metadata"]
                key = (
                    (kmock.resource(group, version, plural), md.get("namespace"), md["name"])
                    if namespaced
                    else (kmock.resource(group, version, plural), None, md["name"])
                )
                emu.objects[key] = obj
            self.url = self.http_url = str(srv.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()
            for task in self._tasks:  # pods still "running" when the test ends
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _pause(self, seconds: float) -> None:
        """Sleep (in the server's loop) for ``seconds``, or until the server stops."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def live_pods(self, namespace: str) -> list[str]:
        """The pods that exist now, as the API lists them."""
        with urllib.request.urlopen(f"{self.http_url}/api/v1/namespaces/{namespace}/pods", timeout=10) as resp:
            return sorted(p["metadata"]["name"] for p in json.load(resp).get("items", []))

    def count(self, method: str | None = None, contains: str = "") -> int:
        return sum(
            1 for m, p in list(self.requests) if (method is None or m.upper() == method.upper()) and contains in p
        )

    def kubeconfig(self, directory) -> str:
        path = f"{directory}/kubeconfig"
        write_kubeconfig(path, self.url)
        return path


class TlsFront:
    """HTTPS on loopback in front of an HTTP server: each TLS connection is relayed, byte for byte, to ``backend``."""

    def __init__(self, backend: str, cert: str, key: str):
        import socket
        import ssl
        from urllib.parse import urlsplit

        u = urlsplit(backend)
        self._backend = (u.hostname, u.port)
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import ssl

        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            try:
                conn.settimeout(10)
                tls = self._ctx.wrap_socket(conn, server_side=True)
                tls.settimeout(None)
                back = socket.create_connection(self._backend, timeout=10)
                back.settimeout(None)
            except (ssl.SSLError, OSError):
                conn.close()
                continue
            for a, b in ((tls, back), (back, tls)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def _pump(src, dst) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.close()
            except OSError:
                pass


def self_signed(directory, name: str = "apiserver") -> tuple[str, str]:
    """(certificate file, key file) of a new self-signed certificate for 127.0.0.1 (openssl)."""
    import subprocess

    key, crt = f"{directory}/{name}.key", f"{directory}/{name}.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", crt],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return crt, key


def _hits(key: str, method: str, path: str) -> bool:
    """Does KEY ("*", "pods", "DELETE pods", "GET /api/v1/nodes", "GET /api/v1/nodes$" = that path only) pick this request?"""
    if key == "*":
        return True
    verb, _, rest = key.partition(" ") if " " in key else ("", "", key)
    if verb and verb.upper() != method:
        return False
    if rest.startswith("/") and rest.endswith("$"):
        return path.rstrip("/") == rest[:-1]
    return path.startswith(rest) if rest.startswith("/") else f"/{rest}" in path


def _selects(selector: str, labels: dict) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.rstrip("=")) != v.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def write_kubeconfig(path: str, url: str) -> None:
    kc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": "kpdiag-test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    with open(path, "w") as fh:
        json.dump(kc, fh)


def main(argv: list[str]) -> int:
    objects_file, url_file = argv[:2]
    with open(objects_file) as fh:
        objects = json.load(fh)
    server = ApiServer(objects, fail=json.loads(argv[2]) if len(argv) > 2 else None)  # {"GET /api/v1/pods": 403}
    with server:
        with open(url_file, "w") as fh:
            fh.write(server.url)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
