"""HTTP: /metrics, /healthz, /readyz and / (landing page).

A threaded stdlib server: every connection gets a thread with a socket timeout
(--web.timeout), and a semaphore caps requests in flight (--web.max-requests); one
over the cap gets 503 at once instead of queueing. Handlers only read the latest
snapshot, so a scrape never waits on the GPU library.
"""
from __future__ import annotations

import html
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

from . import __version__
from .collector import OPENMETRICS_TYPE, TEXT_TYPE, Exposition, wants_openmetrics
from .config import parse_listen_address

log = logging.getLogger("gpulse.server")



class ListenError(Exception):
    """Cannot listen on the configured address (one line for the user)."""


class App:
    """Routes; holds references to what the handlers may read."""

    def __init__(self, cfg: Any, sampler: Any, exposition: Exposition):
        self.cfg = cfg
        self.sampler = sampler
        self.exposition = exposition
        self.extra_routes: dict[str, Callable[[Any], tuple[int, str, bytes]]] = {}

    def route(self, path: str, handler: "Handler") -> tuple[int, str, bytes]:
        if path == "/metrics":
            om = wants_openmetrics(handler.headers.get("Accept"))
            body = self.exposition.render(om)
            return 200, OPENMETRICS_TYPE if om else TEXT_TYPE, body
        if path == "/healthz":
            if self.sampler.health()["alive"]:
                return 200, "text/plain; charset=utf-8", b"ok\n"
            return 503, "text/plain; charset=utf-8", b"sampler thread died\n"
        if path == "/readyz":
            if self.sampler.snapshot is not None:
                return 200, "text/plain; charset=utf-8", b"ready\n"
            return 503, "text/plain; charset=utf-8", b"waiting for the first snapshot\n"
        if path in self.extra_routes:
            return self.extra_routes[path](handler)
        if path == "/":
            return 200, "text/html; charset=utf-8", self.landing()
        return 404, "text/plain; charset=utf-8", b"not found\n"

    def landing(self) -> bytes:
        node = html.escape(self.cfg.node_name)
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>gpulse {node}</title></head>"
                f"<body><h1>gpulse {__version__}</h1><p>node {node}, source {html.escape(self.cfg.source)}</p>"
                "<ul><li><a href='metrics'>metrics</a></li><li><a href='healthz'>healthz</a></li>"
                "<li><a href='readyz'>readyz</a></li></ul></body></html>").encode()


class Handler(BaseHTTPRequestHandler):
    server_version = f"gpulse/{__version__}"
    protocol_version = "HTTP/1.1"
    app: App            # set on the subclass made by make_server
    slots: threading.BoundedSemaphore

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, ctype: str, body: bytes, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _handle(self, head: bool) -> None:
        if not self.slots.acquire(blocking=False):
            self._send(503, "text/plain; charset=utf-8", b"too many concurrent requests\n", head,
                       {"Retry-After": "1", "Connection": "close"})
            self.close_connection = True
            return
        try:
            path = urlsplit(self.path).path
            code, ctype, body = self.app.route(path, self)
            self._send(code, ctype, body, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug must cost one request, not the server
            log.exception("error serving %s", self.path)
            self._send(500, "text/plain; charset=utf-8", b"internal error\n", head)
        finally:
            self.slots.release()

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle(head=True)

    def _not_allowed(self) -> None:
        self._send(405, "text/plain; charset=utf-8", b"method not allowed\n", extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type, family: int):
        self.address_family = family
        super().__init__(addr, handler)


def make_server(cfg: Any, app: App) -> Server:
    host, port = parse_listen_address(cfg.web.listen_address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = host or ("0.0.0.0" if family == socket.AF_INET else "::")
    handler = type("BoundHandler", (Handler,), {
        "app": app,
        "slots": threading.BoundedSemaphore(cfg.web.max_requests),
        "timeout": cfg.web.timeout,
    })
    try:
        return Server((bind_host, port), handler, family)
    except OSError as e:
        reason = e.strerror or str(e)
        raise ListenError(f"cannot listen on {cfg.web.listen_address}: {reason.lower()}") from None
