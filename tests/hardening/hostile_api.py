"""A hostile Kubernetes API server on loopback, for the tests of kpdiag's bounds on what it reads.

A real HTTP/1.1 server (a thread per connection) in front of the emulated API server of tests/apiserver.py: requests
whose path matches one of ``attacks`` get that attack, every other request is relayed to the emulator, so kpdiag's
real kubernetes client meets a real API with one endpoint gone bad. Attacks (each a function of the request):

- ``endless(items)``: a 200 List whose body never ends (chunked, items repeated until the client hangs up);
- ``trickle(doc, interval)``: a complete, valid answer sent one byte per ``interval`` seconds;
- ``trickle_headers(interval)``: the status line and headers one byte per ``interval``;
- ``silent()``: the request is read and nothing is ever sent;
- ``pages(items, same_token)``: every page of a List says there is more (a new continue token each time, or the
  same one again);
- ``answer(doc, status)``: this JSON (any type: a list where an object belongs, a string for items …);
- ``endless_error(status)``: an error answer (403, 500 …) whose body never ends;
- ``trickle_error(status, interval)``: an error answer whose 64 KiB body comes one byte per ``interval``.

A GET is matched by its path, any other request by ``METHOD PATH`` (``^POST /api/v1/namespaces/kpdiag/pods$``).

Every loop stops when the server stops: the tests end in seconds, nothing keeps running.
"""

from __future__ import annotations

import http.server
import json
import re
import socketserver
import threading
import time
import urllib.error
import urllib.request


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class HostileApi:
    def __init__(self, upstream: str | None, attacks: dict):
        self.upstream = upstream
        self.attacks = [(re.compile(k), v) for k, v in attacks.items()]
        self.stop = threading.Event()
        self.hits: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                self._serve(self.path)

            def do_POST(self):
                self._serve(f"POST {self.path}")

            def do_DELETE(self):
                self._serve(f"DELETE {self.path}")

            def _serve(self, key: str) -> None:
                outer.hits.append(key)
                body = None
                if self.command != "GET":
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                for rx, attack in outer.attacks:
                    if rx.search(key):
                        try:
                            attack(self, outer)
                        except (ConnectionError, OSError):
                            pass  # the client hung up: what it should do
                        self.close_connection = True
                        return
                outer._relay(self, body)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _relay(self, h, body: bytes | None = None) -> None:
        if not self.upstream:
            return _send(h, 404, {"kind": "Status", "code": 404, "message": "not found"})
        headers = {"Accept": "application/json"}
        if body:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.upstream + h.path, data=body, headers=headers, method=h.command)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(body)

    def __enter__(self) -> "HostileApi":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, directory) -> str:
        from tests.apiserver import write_kubeconfig

        path = f"{directory}/kubeconfig"
        write_kubeconfig(path, self.url)
        return path


def _send(h, status: int, doc) -> None:
    body = json.dumps(doc).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.send_header("Connection", "close")
    h.end_headers()
    h.wfile.write(body)


def answer(doc, status: int = 200):
    return lambda h, srv: _send(h, status, doc)


def endless(item: dict | None = None, chunk_items: int = 2000):
    """A List that never ends: 200, chunked, the same item again and again until the client hangs up."""
    item = item or {"metadata": {"name": "x" * 40, "namespace": "shop"}}

    def attack(h, srv):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        piece = (json.dumps(item) + ",").encode() * chunk_items
        first = b'{"kind":"List","apiVersion":"v1","metadata":{},"items":['
        h.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
        deadline = time.monotonic() + 60  # a test's worth: the server stops on its own
        while not srv.stop.is_set() and time.monotonic() < deadline:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))

    return attack


def endless_error(status: int = 403):
    """An error answer whose body never ends (chunked Status text until the client hangs up): a client that reads an
    error's body whole holds gigabytes."""

    def attack(h, srv):
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        first = (
            b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"reason":"Forbidden","message":"' % status
        )
        h.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
        piece = b"no " * 100_000
        deadline = time.monotonic() + 60  # a test's worth: the server stops on its own
        while not srv.stop.is_set() and time.monotonic() < deadline:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))

    return attack


def trickle_error(status: int = 500, interval: float = 0.5, length: int = 65536):
    """An error answer that announces ``length`` bytes of body and sends one byte per ``interval``."""

    def attack(h, srv):
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(length))
        h.end_headers()
        for _ in range(length):
            if srv.stop.wait(interval):
                return
            h.wfile.write(b" ")
            h.wfile.flush()

    return attack


def trickle(doc, interval: float = 1.0):
    """A valid answer, one byte per ``interval``."""
    body = json.dumps(doc).encode()

    def attack(h, srv):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.flush()
        for b in body:
            if srv.stop.wait(interval):
                return
            h.wfile.write(bytes([b]))
            h.wfile.flush()

    return attack


def trickle_headers(interval: float = 1.0):
    """The status line and headers, one byte per ``interval`` (each byte well within any read timeout)."""

    def attack(h, srv):
        head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"y" * 60) for i in range(90))
        for b in head:
            if srv.stop.wait(interval):
                return
            h.wfile.write(bytes([b]))
            h.wfile.flush()

    return attack


def silent():
    """Read the request, never answer."""
    return lambda h, srv: srv.stop.wait(120)


def pages(items: list, same_token: bool = False):
    """Every page of the List says there is more."""
    count = [0]

    def attack(h, srv):
        count[0] += 1
        token = "again" if same_token else f"page-{count[0]}"
        _send(h, 200, {"kind": "List", "apiVersion": "v1", "metadata": {"continue": token}, "items": items})

    return attack
