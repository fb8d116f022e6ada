"""HTTP: /metrics, /healthz, /readyz and / (landing page), hardened for a shared node.

gpulse runs on every GPU node, so this server must stay up and cheap whatever
arrives on its port:

- threads: one per connection, at most MAX_CONNECTIONS of them; a connection over
  that is closed at once (a connection flood costs file descriptors, not threads).
- requests: at most --web.max-requests are served at once; one more gets 503 with
  Retry-After at once instead of queueing. Handlers only read the latest snapshot,
  so a scrape never waits on the GPU library.
- time: the request line and headers must arrive within --web.timeout of the
  connection becoming ready for a request (slowloris: a client trickling bytes is
  cut off at the deadline, not at each byte's timeout), and each write gets the
  same timeout; an idle keep-alive connection is closed after it too.
- size: request line ≤ MAX_REQUEST_LINE (414), whole head ≤ MAX_HEAD_BYTES and
  ≤ 100 header lines (431). Bodies are never read; a request with one is answered
  and its connection closed.
- TLS (web config): the handshake runs on the connection's own thread under the
  timeout, never in the accept loop; a plain-HTTP request to the TLS port gets a
  one-line 400, as Go servers answer it.
- basic auth (web config): every path except /healthz and /readyz (those too
  with --no-web.healthz-public); 401 carries WWW-Authenticate. See basicauth.py.
- the web config is swapped atomically on reload: requests already running keep
  the one they started with, new connections and requests get the new one.

`Server.drain()` is the graceful part of shutdown: close idle keep-alive
connections, let requests in progress finish, cut what is left at the deadline.
"""
from __future__ import annotations

import html
import http.client
import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

from .. import __version__
from .basicauth import BUSY, OK, BasicAuth
from ..collector import OPENMETRICS_TYPE, TEXT_TYPE, Exposition, wants_openmetrics
from ..config import parse_listen_address
from .webconfig import NO_WEB_CONFIG, WebConfig

log = logging.getLogger("gpulse.server")

MAX_REQUEST_LINE = 8192
MAX_HEAD_BYTES = 32768
MAX_CONNECTIONS = 1024
PUBLIC_PATHS = ("/healthz", "/readyz")
TEXT = "text/plain; charset=utf-8"
TLS_HANDSHAKE = 0x16        # first byte of a TLS record carrying a ClientHello

# What Go's net/http answers a plain-HTTP request on a TLS port.
PLAIN_ON_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")


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
                return 200, TEXT, b"ok\n"
            return 503, TEXT, b"sampler thread died\n"
        if path == "/readyz":
            if self.sampler.snapshot is not None:
                return 200, TEXT, b"ready\n"
            return 503, TEXT, b"waiting for the first snapshot\n"
        if path in self.extra_routes:
            return self.extra_routes[path](handler)
        if path == "/":
            return 200, "text/html; charset=utf-8", self.landing()
        return 404, TEXT, b"not found\n"

    def landing(self) -> bytes:
        node = html.escape(self.cfg.node_name)
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>gpulse {node}</title></head>"
                f"<body><h1>gpulse {__version__}</h1><p>node {node}, source {html.escape(self.cfg.source)}</p>"
                "<ul><li><a href='metrics'>metrics</a></li><li><a href='healthz'>healthz</a></li>"
                "<li><a href='readyz'>readyz</a></li></ul></body></html>").encode()


class _HeadReader:
    """The handler's rfile: reads the request head straight from the socket under one
    deadline and one byte budget for the whole head, however the bytes trickle in.
    Bytes after the head (a pipelined request) stay buffered for the next one."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.deadline = 0.0
        self.budget = 0

    def begin(self, timeout: float, budget: int) -> None:
        self.deadline = time.monotonic() + timeout
        self.budget = budget

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        # Past the deadline, bytes already received still count: on a starved CPU this
        # thread may run late, and a request that arrived in time must not be dropped.
        self.sock.settimeout(max(left, 0.0))
        try:
            data = self.sock.recv(8192)
        except (BlockingIOError, ssl.SSLWantReadError):
            raise TimeoutError("request head deadline passed") from None
        if not data:
            return False
        self.buf += data
        return True

    def readline(self, limit: int = -1) -> bytes:
        if limit < 0:
            limit = MAX_HEAD_BYTES + 1
        while True:
            nl = self.buf.find(b"\n", 0, limit)
            if nl >= 0 or len(self.buf) >= limit:
                n = nl + 1 if nl >= 0 else limit
                break
            if not self._fill():
                n = len(self.buf)
                break
        line = bytes(self.buf[:n])
        del self.buf[:n]
        self.budget -= len(line)
        if self.budget < 0:
            # parse_request answers LineTooLong with 431
            raise http.client.LineTooLong("request head")
        return line

    def read(self, n: int = -1) -> bytes:      # bodies are never read (see Handler)
        return b""

    def close(self) -> None:
        self.buf.clear()


class Handler(BaseHTTPRequestHandler):
    server_version = "gpulse"
    sys_version = ""                # no interpreter version in the Server header
    protocol_version = "HTTP/1.1"
    # a request line without a version would otherwise be answered HTTP/0.9 style:
    # a bare body, no status line
    default_request_version = "HTTP/1.0"
    _asked_http09 = False
    _connection_sent = False
    _request_version = default_request_version
    # Headers and body go out as two writes; with Nagle on, a kept-alive client's
    # delayed ACK holds the body back ~40 ms.
    disable_nagle_algorithm = True
    app: App                        # set on the subclass made by make_server
    slots: threading.BoundedSemaphore
    server: "Server"

    # The stdlib writes no status line and no headers once request_version reads
    # "HTTP/0.9", even for its own error answers; every answer here is HTTP/1.x.
    @property
    def request_version(self) -> str:
        return self._request_version

    @request_version.setter
    def request_version(self, v: str) -> None:
        if v == "HTTP/0.9":
            self._asked_http09, v = True, "HTTP/1.0"
        self._request_version = v

    def setup(self) -> None:
        super().setup()
        self.rfile = _HeadReader(self.connection)   # type: ignore[assignment]
        self.web, self.auth = self.server.security

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def handle_one_request(self) -> None:
        """One request: head under the deadline, then dispatch (stdlib's, with limits)."""
        rfile: _HeadReader = self.rfile  # type: ignore[assignment]
        rfile.begin(self.timeout, MAX_HEAD_BYTES)
        self.server.mark(busy=False)
        try:
            line = rfile.readline(MAX_REQUEST_LINE + 1)
        except (TimeoutError, OSError, ValueError):
            self.close_connection = True
            return
        if not line:
            self.close_connection = True
            return
        self.server.mark(busy=True)      # a request that arrived is answered, even when draining
        self.connection.settimeout(self.timeout)
        self.web, self.auth = self.server.security     # one config for the whole request
        if len(line) > MAX_REQUEST_LINE:
            self.requestline = self.request_version = self.command = ""
            self.close_connection = True
            self.send_error(414)
            return
        if not line.endswith(b"\n"):           # the peer closed in the middle of the line
            self.close_connection = True
            return
        self.raw_requestline = line
        try:
            ok = self.parse_request()   # reads the headers through rfile: deadline and budget hold
        except (TimeoutError, OSError, ValueError):
            self.close_connection = True
            return
        if not ok:
            return
        if self._asked_http09 or self.request_version.startswith("HTTP/0"):
            self.close_connection = True
            self.send_error(505)
            return
        self.connection.settimeout(self.timeout)
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in self.headers:
            self.close_connection = True    # the unread body must not be taken for the next request
        if self.server.draining:
            self.close_connection = True
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501, f"Unsupported method ({self.command[:20]!r})")
            return
        method()
        self.wfile.flush()

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "connection":
            self._connection_sent = True
        super().send_header(keyword, value)

    def end_headers(self) -> None:
        for k, v in self.web.headers:
            self.send_header(k, v)
        if self.server.draining:            # shutting down: this answer is the connection's last
            self.close_connection = True
        if self.close_connection and not self._connection_sent:
            self.send_header("Connection", "close")
        self._connection_sent = False
        super().end_headers()

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

    def _authorized(self, path: str, head: bool) -> bool:
        web = self.web
        if not web.auth_required or (path in PUBLIC_PATHS and self.app.cfg.web.healthz_public):
            return True
        verdict = self.auth.check(self.headers.get("Authorization"))
        if verdict == OK:
            return True
        if verdict == BUSY:
            self._send(503, TEXT, b"authentication busy, retry\n", head, {"Retry-After": "1"})
        else:
            self._send(401, TEXT, b"unauthorized\n", head,
                       {"WWW-Authenticate": 'Basic realm="gpulse", charset="UTF-8"'})
        return False

    def _handle(self, head: bool) -> None:
        if not self.slots.acquire(blocking=False):
            self.close_connection = True
            self._send(503, TEXT, b"too many concurrent requests\n", head, {"Retry-After": "1"})
            return
        try:
            path = urlsplit(self.path).path
            if not self._authorized(path, head):
                return
            code, ctype, body = self.app.route(path, self)
            self._send(code, ctype, body, head)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception:  # a bug must cost one request, not the server
            log.exception("error serving %s", self.path[:200])
            self.close_connection = True
            try:
                self._send(500, TEXT, b"internal error\n", head)
            except OSError:
                pass
        finally:
            self.slots.release()

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle(head=True)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._send(405, TEXT, b"method not allowed\n", extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False          # drain() decides how long to wait, not server_close()
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type, family: int, web: WebConfig,
                 timeout: float, max_connections: int = MAX_CONNECTIONS):
        self.address_family = family
        # swapped as one pair, so a request never sees the users of one file and the
        # settings of another
        self.security: tuple[WebConfig, BasicAuth] = (web, BasicAuth(web.users))
        self.conn_timeout = timeout
        self.max_connections = max_connections
        self.draining = False
        self._conns: dict[int, list] = {}        # id(handler socket) -> [socket, busy]
        self._conn_lock = threading.Lock()
        self._local = threading.local()
        self._reload_lock = threading.Lock()
        self.rejected_connections = 0
        super().__init__(addr, handler)

    # ------------------------------------------------------------ web config

    def set_web_config(self, web: WebConfig) -> None:
        """Swap in a new web config. Turning TLS on or off needs a new listener; refused."""
        with self._reload_lock:
            old, old_auth = self.security
            if (web.context is None) != (old.context is None):
                raise ValueError("turning TLS on or off needs a restart")
            # unchanged users keep their authenticator and with it the cache of good logins
            self.security = (web, old_auth if web.users == old.users else BasicAuth(web.users))

    # ------------------------------------------------------------ connections

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            full = len(self._conns) >= self.max_connections or self.draining
            if not full:
                self._conns[id(request)] = [request, False]
        if full:
            self.rejected_connections += 1
            if self.rejected_connections & (self.rejected_connections - 1) == 0:   # 1, 2, 4, 8, ...
                log.warning("connection limit %d reached; %d connections refused so far",
                            self.max_connections, self.rejected_connections)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # runs on the connection's own thread: mark() finds the entry through _local
        self._local.key = id(request)
        conn = request
        try:
            web = self.security[0]
            if web.context is not None:
                tls = self._tls_accept(request, web.context, client_address)
                if tls is None:
                    return
                conn = tls
                with self._conn_lock:
                    if id(request) in self._conns:
                        self._conns[id(request)][0] = conn
            self.RequestHandlerClass(conn, client_address, self)
        except (OSError, ValueError) as e:     # the peer went away mid-write, a reset, ...
            log.debug("connection from %s: %s", client_address[0], e)
        finally:
            with self._conn_lock:
                self._conns.pop(id(request), None)
            if conn is not request:
                _close_quietly(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver would print a traceback to stderr; one log line instead
        log.exception("error on the connection from %s", client_address[0] if client_address else "?")

    def _tls_accept(self, sock: socket.socket, ctx: ssl.SSLContext, addr: Any) -> ssl.SSLSocket | None:
        sock.settimeout(self.conn_timeout)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
            if not first:
                return None
            if first[0] != TLS_HANDSHAKE:
                if first.isalpha():         # looks like "GET ...": say why, in plain text
                    sock.sendall(PLAIN_ON_TLS)
                return None
            tls = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            try:
                tls.do_handshake()
            except BaseException:
                _close_quietly(tls)
                raise
            return tls
        except (OSError, ValueError) as e:      # ssl.SSLError is an OSError
            log.debug("TLS handshake from %s failed: %s", addr[0], e)
            return None

    def mark(self, busy: bool) -> None:
        """Record whether this thread's connection is inside a request (drain() cuts
        idle connections at once and waits for busy ones)."""
        key = getattr(self._local, "key", None)
        with self._conn_lock:
            entry = self._conns.get(key)
            if entry is not None:
                entry[1] = busy

    def drain(self, timeout: float) -> int:
        """Stop taking requests, close idle connections, wait up to `timeout` for busy
        ones, then cut the rest. Returns how many were still busy at the deadline."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while True:
            with self._conn_lock:
                idle = [e[0] for e in self._conns.values() if not e[1]]
                busy = [e[0] for e in self._conns.values() if e[1]]
            for s in idle:
                _shutdown_quietly(s)
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        for s in busy:
            _shutdown_quietly(s)
        return len(busy)

    @property
    def open_connections(self) -> int:
        return len(self._conns)


def _shutdown_quietly(s: socket.socket) -> None:
    # socket.socket.shutdown on an SSLSocket too: its own shutdown() would drop the
    # TLS state under a thread still reading it
    try:
        socket.socket.shutdown(s, socket.SHUT_RDWR)
    except OSError:
        pass


def _close_quietly(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass


def make_server(cfg: Any, app: App, web: WebConfig = NO_WEB_CONFIG) -> Server:
    host, port = parse_listen_address(cfg.web.listen_address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = host or ("0.0.0.0" if family == socket.AF_INET else "::")
    handler = type("BoundHandler", (Handler,), {
        "app": app,
        "slots": threading.BoundedSemaphore(cfg.web.max_requests),
        "timeout": cfg.web.timeout,
    })
    try:
        return Server((bind_host, port), handler, family, web, cfg.web.timeout)
    except OSError as e:
        reason = e.strerror or str(e)
        raise ListenError(f"cannot listen on {cfg.web.listen_address}: {reason.lower()}") from None
