"""A real HTTP server on loopback speaking the Kubernetes API (kmock's emulator), for tests.

In-process (a thread):   with ApiServer(objects) as api: api.kubeconfig(tmp_path) …
In a namespace:          ip netns exec NS python -m tests.apiserver OBJECTS.json URLFILE
                         (writes its URL to URLFILE and serves until killed)

Objects are plain API JSON dicts; their kind picks the resource. ``requests`` counts the
calls by method and path, so tests can assert how many calls kpdiag made.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading

RESOURCES = {
    "Service": ("", "v1", "services", True),
    "Pod": ("", "v1", "pods", True),
    "Node": ("", "v1", "nodes", False),
    "ConfigMap": ("", "v1", "configmaps", True),
    "Namespace": ("", "v1", "namespaces", False),
    "EndpointSlice": ("discovery.k8s.io", "v1", "endpointslices", True),
    "DaemonSet": ("apps", "v1", "daemonsets", True),
}


class ApiServer:
    def __init__(self, objects: list[dict] | None = None, host: str = "127.0.0.1", fail: dict | None = None):
        self.objects = objects or []
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
        return self

    def __exit__(self, *exc) -> None:
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
        requests, fail = self.requests, self.fail

        class Emulator(kmock.KubernetesEmulator):
            """kmock's emulator, counting requests and answering injected errors."""

            async def _handle(self, request):
                requests.append((request.method, request.url.path))
                for plural, status in fail.items():
                    if plural == "*" or f"/{plural}" in request.url.path:
                        return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                                          "reason": {401: "Unauthorized", 403: "Forbidden", 500: "InternalError"}.get(status, "Error"),
                                                          "message": f"injected {status}"}, status=status)
                return await super()._handle(request)

        async with Emulator() as emu, kmock.Server(emu, host=self.host) as srv:
            for kind, (group, version, plural, namespaced) in RESOURCES.items():
                emu.resources[f"{group + '/' if group else ''}{version}/{plural}"] = {"kind": kind, "namespaced": namespaced}
            for obj in self.objects:
                group, version, plural, namespaced = RESOURCES[obj["kind"]]
                md = obj["metadata"]
                key = (kmock.resource(group, version, plural), md.get("namespace"), md["name"]) if namespaced else (kmock.resource(group, version, plural), None, md["name"])
                emu.objects[key] = obj
            self.url = str(srv.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def kubeconfig(self, directory) -> str:
        path = f"{directory}/kubeconfig"
        write_kubeconfig(path, self.url)
        return path


def write_kubeconfig(path: str, url: str) -> None:
    kc = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "test", "cluster": {"server": url}}],
          "users": [{"name": "test", "user": {"token": "kpdiag-test"}}],
          "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}], "current-context": "test"}
    with open(path, "w") as fh:
        json.dump(kc, fh)


def main(argv: list[str]) -> int:
    objects_file, url_file = argv[:2]
    with open(objects_file) as fh:
        objects = json.load(fh)
    server = ApiServer(objects)
    with server:
        with open(url_file, "w") as fh:
            fh.write(server.url)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
