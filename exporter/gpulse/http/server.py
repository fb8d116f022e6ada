"""HTTP: the server in front of the routes of app.py, hardened for a shared node.

Built on Tornado's HTTP/1.1 implementation (tornado.http1connection) on an event
loop of its own thread; docs/architecture.md says why that one. No other module
imports Tornado. gpulse runs on every GPU node, so whatever arrives on its port
the server must stay up, cheap, and answer the probes:

- connections: an event loop holds them, not threads, at most MAX_CONNECTIONS.
  When full, a new connection evicts the one idle the longest (waiting for a
  request head: a kept-alive scraper between scrapes, or a slowloris); only when
  every connection is inside a request is the new one closed at once.
- head: the request line must arrive whole within --web.timeout of the connection
  becoming ready for a request, and the whole head too (slowloris: cut at the
  deadline, not per byte). Before Tornado parses it, the head is measured and its
  first line checked: a line that is not `METHOD TARGET HTTP/1.x` gets 400 or 505
  at once (HTTP/0.9 sends no headers, so waiting for them would hang), a line over
  MAX_REQUEST_LINE 414, a head over MAX_HEAD_BYTES or MAX_HEADER_LINES 431.
  Tornado's parser is strict where request smuggling lives: unequal duplicate
  Content-Lengths, a header line without a colon, whitespace before the colon and
  folded lines are a 400 and a closed connection.
- bodies: framed and discarded (at most MAX_BODY_BYTES, within --web.timeout), so a
  body is never read as a request; a request that had one gets its answer and a
  closed connection.
- order of checks: probes (/healthz, /readyz) are answered first, on the loop,
  outside every limit; then basic auth, a remembered login at once, a bcrypt check
  on BCRYPT_SLOTS threads with BCRYPT_QUEUE waiting (more: 503 at once); only then
  a request slot: at most --web.max-requests routes run at once, on worker threads,
  one more gets 503 with Retry-After at once instead of queueing. An answer that is
  already cached (the exposition of this snapshot, the probes) is written from the
  loop without a thread hop; a render or compression never blocks the loop.
- writes: a response not taken by the client within --web.timeout closes the
  connection.
- TLS (web config): the first byte is peeked before the handshake; plain HTTP on
  the TLS port gets a one-line 400, as Go servers answer it. The handshake runs on
  the loop under the timeout, never blocking other connections.
- the web config is swapped atomically on reload: requests already running keep
  the one they started with, new connections and requests get the new one.
- the probe port (--web.probe-listen-address, off unless set): plain HTTP that
  answers /healthz and /readyz and nothing else (404), without auth, under the same
  connection and head limits. It exists for the kubelet, whose HTTPS probes cannot
  present a client certificate: with client_auth_type RequireAndVerifyClientCert on
  the main port they would fail the handshake and the pod would never be ready.

`drain()` is the graceful part of shutdown: close idle connections, let requests in
progress finish (their answer says Connection: close), cut what is left at the
deadline.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import re
import socket
import ssl
import threading
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from tornado import gen, httputil, iostream, netutil
from tornado.http1connection import HTTP1Connection, HTTP1ConnectionParameters
from tornado.ioloop import IOLoop
from tornado.tcpserver import TCPServer

from ..config import parse_listen_address
from ..fdlimit import raise_open_files
from .app import PUBLIC_PATHS, TEXT, App, Request, Response
from .basicauth import BCRYPT_QUEUE, BCRYPT_SLOTS, BUSY, OK, BasicAuth
from .webconfig import NO_WEB_CONFIG, WebConfig

log = logging.getLogger("gpulse.http")
# Tornado logs each malformed request and failed handshake at INFO/WARNING: a
# hostile client must not be able to fill the log. Its errors still show.
logging.getLogger("tornado.general").setLevel(logging.ERROR)

MAX_REQUEST_LINE = 8192
MAX_HEAD_BYTES = 32768
MAX_HEADER_LINES = 100
MAX_BODY_BYTES = 65536
MAX_CONNECTIONS = 1024
RENDER_WAITS = 3            # renders of newer snapshots a scrape waits for before rendering on its own
FD_RESERVE = 64             # descriptors kept for the source, logs, /proc reads, the listener
TLS_HANDSHAKE = 0x16        # first byte of a TLS record carrying a ClientHello
SERVER = "gpulse"            # no library or interpreter version in the Server header
# Every answer says nosniff: /metrics is text/plain that carries label values others
# wrote (pod and workload names), and a browser that sniffed it as HTML would run
# their script on the origin of the live page. A web config may set it too (once).
NOSNIFF = ("X-Content-Type-Options", "nosniff")
METHODS = ("GET", "HEAD")
NOT_ALLOWED = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS")
VERSION = re.compile(rb"HTTP/1\.[01]")
HEAD_END = re.compile(rb"\A\r?\n|\r?\n\r?\n")     # the blank line, right after the request line or later
# Tornado closes a stream whose read exceeds max_bytes, before an answer can be
# written; these reads stop at the limit instead (anchored: no quadratic search).
LINE_READ = re.compile(rb"\n|\A[^\n]{%d}" % (MAX_REQUEST_LINE + 2))
HEAD_READ = re.compile(HEAD_END.pattern + rb"|\A[\s\S]{%d}" % MAX_HEAD_BYTES)

# What Go's net/http answers a plain-HTTP request on a TLS port.
PLAIN_ON_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
REASONS = {400: "Bad Request", 414: "URI Too Long", 431: "Request Header Fields Too Large",
           505: "HTTP Version Not Supported"}


class ListenError(Exception):
    """Cannot listen on the configured address (one line for the user)."""


class _Workers:
    """At most n daemon threads running blocking calls for the event loop, started
    as needed (a node that never opens the live page never starts one). Daemon
    threads, unlike concurrent.futures', do not hold the process at exit behind a
    route or a bcrypt check that outlives the drain."""

    def __init__(self, n: int, name: str):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._n, self._name = n, name
        self._threads = self._idle = self._waiting = 0     # idle: threads in get(); waiting: jobs not taken
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            loop, fut, fn, arg = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            try:
                result, error = fn(arg), None
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting request
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:        # the loop is closed: nobody waits any more
                pass

    def run(self, fn: Callable[[Any], Any], arg: Any) -> "asyncio.Future[Any]":
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            self._waiting += 1
            start = self._waiting > self._idle and self._threads < self._n
            if start:
                self._threads += 1
        if start:
            threading.Thread(target=self._run, name=f"{self._name}-{self._threads}", daemon=True).start()
        self._jobs.put((loop, fut, fn, arg))
        return fut


def _settle(fut: "asyncio.Future[Any]", result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class _Conn:
    __slots__ = ("stream", "busy", "last")

    def __init__(self, stream: iostream.IOStream):
        self.stream = stream
        self.busy = False           # inside a request: not evicted, waited for by drain()
        self.last = time.monotonic()


class _Listener(TCPServer):
    def __init__(self, owner: "Server", probe: bool = False):
        super().__init__(max_buffer_size=MAX_HEAD_BYTES + MAX_BODY_BYTES + 65536)
        self.owner = owner
        self.probe = probe

    async def handle_stream(self, stream: iostream.IOStream, address: Any) -> None:
        await self.owner._connection(stream, address, self.probe)


class _Exchange(httputil.HTTPMessageDelegate):
    """One request on one connection: Tornado parses it, this answers it."""

    def __init__(self, server: "Server", http: HTTP1Connection, conn: _Conn, probe: bool = False):
        self.server, self.http, self.conn, self.probe = server, http, conn, probe
        self.web, self.auth = server.security        # one config for the whole request
        self.start: httputil.RequestStartLine | None = None
        self.headers: httputil.HTTPHeaders | None = None
        self.close = False
        self.req: Request
        self.verdict: str | None = None      # basic auth: None until known
        self.slot = False                     # holds one of --web.max-requests

    def headers_received(self, start_line: Any, headers: httputil.HTTPHeaders) -> None:
        self.start, self.headers = start_line, headers
        cl = headers.get("Content-Length", "0").strip()
        if cl not in ("", "0") or "Transfer-Encoding" in headers:
            self.close = True       # answer, then close: nothing after a body is trusted

    def data_received(self, chunk: bytes) -> None:
        pass                        # bodies are framed (Tornado) and dropped

    def finish(self) -> None:
        assert self.start is not None
        head = self.start.method == "HEAD"
        try:
            resp = self._answer_now()
        except Exception:  # a bug must cost one request, not the server
            resp = self._crashed()
        if resp is None:
            asyncio.ensure_future(self._answer_later(head))
        else:
            self._send(resp, head)

    def on_connection_close(self) -> None:
        self.close = True

    def _crashed(self) -> Response:
        assert self.start is not None
        log.exception("error serving %s", self.start.path[:200])
        self.close = True
        return Response(500, TEXT, b"internal error\n")

    def _answer_now(self) -> Response | None:
        """The answer when nothing has to wait (the common case: a probe, a scrape
        without auth or with a remembered login), without a task; None when a bcrypt
        check or a worker route has to run first (_answer_later)."""
        start, server = self.start, self.server
        assert start is not None and self.headers is not None
        if start.method not in METHODS:
            self.close = True
            if start.method in NOT_ALLOWED:
                return Response(405, TEXT, b"method not allowed\n", (("Allow", "GET, HEAD"),))
            return Response(501, TEXT, b"unsupported method\n")
        target = urlsplit(start.path)
        self.req = Request(start.method, target.path, target.query, self.headers)
        if target.path in PUBLIC_PATHS and (server.healthz_public or self.probe):
            return server.app.route(self.req)    # outside every limit: probes must not fail under a flood
        if self.probe:
            return Response(404, TEXT, b"this port answers /healthz and /readyz only\n")
        if self.web.auth_required:
            self.verdict = self.auth.cached(self.headers.get("Authorization"))
            if self.verdict is None:
                return None
            if self.verdict != OK:
                return _denied(self.verdict)
        return self._routed()

    def _routed(self) -> Response | None:
        """503 when every request slot is taken; the answer of a cheap route; None
        with a slot taken for a route that runs on a worker thread."""
        server = self.server
        if server.in_flight >= server.max_requests:
            self.close = True
            return Response(503, TEXT, b"too many concurrent requests\n", (("Retry-After", "1"),))
        if server.app.cheap(self.req):
            return server.app.route(self.req)     # a thread hop would cost more than the route
        server.in_flight += 1
        self.slot = True
        return None

    async def _answer_later(self, head: bool) -> None:
        server = self.server
        try:
            resp = None
            if self.verdict is None and self.web.auth_required:
                verdict = BUSY
                if server.bcrypt_waiting < BCRYPT_SLOTS + BCRYPT_QUEUE:
                    server.bcrypt_waiting += 1
                    try:
                        verdict = await server.bcrypt.run(self.auth.verify, self.req.headers.get("Authorization"))
                    finally:
                        server.bcrypt_waiting -= 1
                resp = _denied(verdict) if verdict != OK else self._routed()
            if resp is None:
                resp = await self._on_worker()
        except Exception:  # a bug must cost one request, not the server
            resp = self._crashed()
        finally:
            if self.slot:
                server.in_flight -= 1
                self.slot = False
        self._send(resp, head)

    async def _on_worker(self) -> Response:
        """Run the route on a worker thread. Scrapes of a new snapshot share one render:
        the first starts it, the others wait for it on the loop, holding their request
        slot but no thread, and then each answers from the cache."""
        server, req = self.server, self.req
        # the render may have finished since the request was routed here, and a newer
        # snapshot may arrive while they wait: they wait for its render too, rather
        # than all going to worker threads at once
        for _ in range(RENDER_WAITS):
            if server.app.cheap(req):
                return server.app.route(req)
            key = server.app.render_key(req)
            if key is None:
                break
            job = server.renders.get(key)
            if job is None:
                job = server.renders[key] = server.workers.run(server.app.warm, req)
                job.add_done_callback(lambda _f, k=key: server.renders.pop(k, None))
            await asyncio.shield(job)        # a waiter that goes away does not cancel the render
        if server.app.cheap(req):
            return server.app.route(req)
        return await server.workers.run(server.app.route, req)   # a route of its own (the live page)

    def _send(self, resp: Response, head: bool) -> None:
        if self.conn.stream.closed():
            return
        if self.server.draining:        # shutting down: this answer is the connection's last
            self.close = True
        headers = httputil.HTTPHeaders()
        headers["Server"] = SERVER
        headers["Date"] = _date()
        headers["Content-Type"] = resp.content_type
        headers["Content-Length"] = str(len(resp.body))
        for k, v in _with_nosniff(resp.headers + self.web.headers):
            headers.add(k, v)
        if self.close:
            headers["Connection"] = "close"
        start = httputil.ResponseStartLine("HTTP/1.1", resp.code, httputil.responses.get(resp.code, "Unknown"))
        try:
            done = self.http.write_headers(start, headers, b"" if head else resp.body)
            self.http.finish()
        except (iostream.StreamClosedError, httputil.HTTPOutputError):
            self.close = True
            return
        stream = self.conn.stream
        if not stream.writing():        # the kernel took it all (the usual case): nothing to wait for
            return
        # a client that does not take its answer must not hold the connection forever
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.server.timeout, stream.close)
        done.add_done_callback(lambda f: (timer.cancel(), f.cancelled() or f.exception()))


def _denied(verdict: str) -> Response:
    if verdict == BUSY:
        return Response(503, TEXT, b"authentication busy, retry\n", (("Retry-After", "1"),))
    return Response(401, TEXT, b"unauthorized\n", (("WWW-Authenticate", 'Basic realm="gpulse", charset="UTF-8"'),))


class Server:
    def __init__(self, sock: socket.socket, app: App, web: WebConfig, timeout: float, max_requests: int,
                 healthz_public: bool, max_connections: int = MAX_CONNECTIONS,
                 probe_sock: socket.socket | None = None):
        self._socket = sock
        self.app = app
        # swapped as one pair, so a request never sees the users of one file and the
        # settings of another
        self.security: tuple[WebConfig, BasicAuth] = (web, BasicAuth(web.users))
        self.timeout = timeout
        self.max_requests = max_requests
        self.healthz_public = healthz_public
        self.max_connections = max_connections
        self.server_address = sock.getsockname()
        self._probe_socket = probe_sock
        self.probe_address = probe_sock.getsockname() if probe_sock is not None else None
        self.workers = _Workers(max_requests, "gpulse-http")
        self.bcrypt = _Workers(BCRYPT_SLOTS, "gpulse-bcrypt")
        self.renders: dict[Any, "asyncio.Future[None]"] = {}   # render key -> the one render in progress
        self.in_flight = 0                    # these counters are touched on the loop thread only
        self.bcrypt_waiting = 0
        self.draining = False
        self.rejected_connections = 0
        self.evicted_connections = 0
        self._conns: dict[_Conn, None] = {}   # insertion-ordered set
        self._params = HTTP1ConnectionParameters(
            # no header_timeout: _head() has the whole head buffered under its deadline
            chunk_size=65536, max_header_size=MAX_HEAD_BYTES, header_timeout=None,
            max_body_size=MAX_BODY_BYTES, body_timeout=timeout, decompress=False)
        self._reload_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[_Listener] = []
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._stop_asked = False

    # ------------------------------------------------------------ web config

    def set_web_config(self, web: WebConfig) -> None:
        """Swap in a new web config. Turning TLS on or off needs a new listener;
        refused. So is a reload that would open the door: one that removes every
        user (/metrics would answer anyone) or stops requiring client certificates.
        Such a file is more likely a bad edit than an intent, and a silent SIGHUP
        must not undo access control; a restart applies it on purpose."""
        with self._reload_lock:
            old, old_auth = self.security
            if (web.context is None) != (old.context is None):
                raise ValueError("turning TLS on or off needs a restart")
            if old.auth_required and not web.auth_required:
                raise ValueError("the new file has no basic_auth_users: /metrics would answer without "
                                 "credentials; removing every user needs a restart")
            if _requires_client_cert(old) and not _requires_client_cert(web):
                raise ValueError("the new file no longer requires client certificates "
                                 "(client_auth_type RequireAndVerifyClientCert); that needs a restart")
            # unchanged users keep their authenticator and with it the cache of good logins
            self.security = (web, old_auth if web.users == old.users else BasicAuth(web.users))

    # ------------------------------------------------------------ lifecycle

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Serve on this thread until shutdown(); drain() then finishes the job."""
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._listeners = [_Listener(self)]
        self._listeners[0].add_sockets([self._socket])
        if self._probe_socket is not None:
            self._listeners.append(_Listener(self, probe=True))
            self._listeners[1].add_sockets([self._probe_socket])
        self._started.set()
        if self._stop_asked:
            self._stop.set()
        await self._stop.wait()

    def shutdown(self) -> None:
        """Stop serve_forever (any thread)."""
        self._stop_asked = True
        if self._started.is_set() and self._loop is not None and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:        # the loop is already closed
                pass

    def server_close(self) -> None:
        """Stop listening: new connections are refused by the kernel."""
        if self._listeners:
            for listener in self._listeners:
                listener.stop()
        else:
            for sock in (self._socket, self._probe_socket):
                if sock is not None:
                    sock.close()

    def drain(self, timeout: float) -> int:
        """Stop taking requests, close idle connections, wait up to `timeout` for busy
        ones, then cut the rest. Returns how many were still busy at the deadline.
        Runs on the serve_forever thread, after it returned."""
        if self._loop is None:
            return 0
        try:
            return self._loop.run_until_complete(self._drain(timeout))
        finally:
            self._loop.close()

    async def _drain(self, timeout: float) -> int:
        self.draining = True
        deadline = time.monotonic() + timeout
        while True:
            for c in [c for c in self._conns if not c.busy]:
                c.stream.close()
            busy = [c for c in self._conns if c.busy]
            if not busy or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        for c in busy:
            c.stream.close()
        await asyncio.sleep(0)      # let the closes run
        return len(busy)

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # ------------------------------------------------------------ connections

    def _admit(self, conn: _Conn) -> bool:
        if self.draining:
            return False
        if len(self._conns) >= self.max_connections:
            idle = [c for c in self._conns if not c.busy]
            if not idle:
                self.rejected_connections += 1
                if self.rejected_connections & (self.rejected_connections - 1) == 0:   # 1, 2, 4, 8, ...
                    log.warning("connection limit %d reached, all in a request; %d connections refused so far",
                                self.max_connections, self.rejected_connections)
                return False
            victim = min(idle, key=lambda c: c.last)
            victim.stream.close()
            del self._conns[victim]
            self.evicted_connections += 1
        self._conns[conn] = None
        return True

    async def _connection(self, stream: iostream.IOStream, address: Any, probe: bool = False) -> None:
        conn = _Conn(stream)
        if not self._admit(conn):
            stream.close()
            return
        try:
            web = self.security[0]
            if web.context is not None and not probe:
                tls = await self._tls(stream, web.context)
                if tls is None:
                    return
                conn.stream = stream = tls
            stream.set_nodelay(True)
            while not stream.closed() and not self.draining:
                conn.busy, conn.last = False, time.monotonic()
                if not await self._head(stream, web.headers):
                    return
                conn.busy = True     # a request that arrived is answered, even when draining
                http = HTTP1Connection(stream, False, self._params, address)
                exchange = _Exchange(self, http, conn, probe)
                if not await http.read_response(exchange) or exchange.close:
                    return
        except (iostream.StreamClosedError, iostream.UnsatisfiableReadError, OSError):
            pass
        finally:
            self._conns.pop(conn, None)
            conn.stream.close()

    async def _head(self, stream: iostream.IOStream, extra: tuple[tuple[str, str], ...]) -> bool:
        """Wait for one whole request head under one deadline, check its first line and
        size, and put it back for Tornado to parse. False: the connection is done."""
        # one timer for the whole head: cheaper than a timeout per read, and a
        # trickling client is cut at the deadline however its bytes arrive
        timer = asyncio.get_running_loop().call_later(self.timeout, stream.close)
        try:
            line = b"\r\n"
            while line in (b"\r\n", b"\n"):          # blank lines between requests are allowed
                line = await stream.read_until_regex(LINE_READ)
            if not line.endswith(b"\n"):
                return await self._refuse(stream, 414, b"request line too long\n", extra)
            parts = line.split()
            if len(parts) != 3:
                return await self._refuse(stream, 400, b"malformed request line\n", extra)
            if not VERSION.fullmatch(parts[2]):
                if parts[2].startswith(b"HTTP/"):
                    return await self._refuse(stream, 505, b"HTTP/1.0 and HTTP/1.1 only\n", extra)
                return await self._refuse(stream, 400, b"malformed request line\n", extra)
            rest = await stream.read_until_regex(HEAD_READ)
        finally:
            timer.cancel()
        end = HEAD_END.search(rest)
        if end is None or len(line) + end.end() > MAX_HEAD_BYTES:
            return await self._refuse(stream, 431, b"request head too large\n", extra)
        if rest.count(b"\n", 0, end.end()) - 1 > MAX_HEADER_LINES:
            return await self._refuse(stream, 431, b"too many header lines\n", extra)
        _unread(stream, line + rest)
        return True

    async def _refuse(self, stream: iostream.IOStream, code: int, body: bytes,
                      extra: tuple[tuple[str, str], ...]) -> bool:
        """Answer a head Tornado is not shown, and close. Always False."""
        head = [f"HTTP/1.1 {code} {REASONS[code]}", "Server: " + SERVER, "Content-Type: " + TEXT, f"Content-Length: {len(body)}",
                "Connection: close", *(f"{k}: {v}" for k, v in _with_nosniff(extra))]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        await self._last_words(stream, data)
        return False

    async def _last_words(self, stream: iostream.IOStream, data: bytes) -> None:
        """Write a final answer, half-close, and read what the client still sends
        until it closes (or the timeout): closing with unread bytes would reset the
        connection and could destroy the answer before the client reads it."""
        deadline = IOLoop.current().time() + self.timeout
        try:
            await gen.with_timeout(deadline, stream.write(data), quiet_exceptions=iostream.StreamClosedError)
            # socket.socket's shutdown on a TLS socket too: SSLSocket.shutdown drops the
            # TLS state, and the reads below would fail at once
            socket.socket.shutdown(stream.socket, socket.SHUT_WR)
            while True:
                await gen.with_timeout(deadline, stream.read_bytes(65536, partial=True),
                                       quiet_exceptions=iostream.StreamClosedError)
        except (gen.TimeoutError, iostream.StreamClosedError, OSError, AttributeError):
            pass

    async def _tls(self, stream: iostream.IOStream, ctx: ssl.SSLContext) -> iostream.SSLIOStream | None:
        sock = stream.socket
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(sock.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            await asyncio.wait_for(readable, self.timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(sock.fileno())
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            return None
        if not first:
            return None
        if first[0] != TLS_HANDSHAKE:
            if first.isalpha():         # looks like "GET ...": say why, in plain text
                await self._last_words(stream, PLAIN_ON_TLS)
            return None
        tls = iostream.SSLIOStream(netutil.ssl_wrap_socket(sock, ctx, server_side=True,
                                                           do_handshake_on_connect=False),
                                   max_buffer_size=MAX_HEAD_BYTES + MAX_BODY_BYTES + 65536)
        try:
            await gen.with_timeout(IOLoop.current().time() + self.timeout, tls.wait_for_handshake(),
                                   quiet_exceptions=(iostream.StreamClosedError, ssl.SSLError, OSError))
        except (gen.TimeoutError, iostream.StreamClosedError, ssl.SSLError, OSError):
            tls.close()
            return None
        return tls


_date_cache = (0, "")


def _with_nosniff(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    if any(k.lower() == NOSNIFF[0].lower() for k, _ in headers):
        return headers
    return (*headers, NOSNIFF)


def _requires_client_cert(web: WebConfig) -> bool:
    return web.tls is not None and web.tls.client_auth_type == "RequireAndVerifyClientCert"


def _date() -> str:
    """The Date header, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, httputil.format_timestamp(now))
    return _date_cache[1]


def _unread(stream: iostream.IOStream, data: bytes) -> None:
    """Put bytes back in front of the stream's read buffer. Tornado has no public
    unread; this is the one place gpulse touches its internals (pinned minor
    version, and tests/integration/http/test_http_server.py fails if it stops working)."""
    stream._read_buffer[:0] = data          # noqa: SLF001
    stream._read_buffer_size += len(data)   # noqa: SLF001


def make_server(cfg: Any, app: App, web: WebConfig = NO_WEB_CONFIG) -> Server:
    sock = _bind(cfg.web.listen_address)
    probe = None
    if cfg.web.probe_listen_address:
        try:
            probe = _bind(cfg.web.probe_listen_address)
        except ListenError:
            sock.close()
            raise
    return Server(sock, app, web, cfg.web.timeout, cfg.web.max_requests, cfg.web.healthz_public,
                  _connection_budget(), probe_sock=probe)


def _bind(address: str) -> socket.socket:
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = host or ("0.0.0.0" if family == socket.AF_INET else "::")
    try:
        return netutil.bind_sockets(port, bind_host, family=family, backlog=128)[0]
    except OSError as e:
        reason = e.strerror or str(e)
        raise ListenError(f"cannot listen on {address}: {reason.lower()}") from None


def _connection_budget() -> int:
    """MAX_CONNECTIONS, within what the file descriptor limit allows, the soft limit
    raised first (fdlimit): an accept() that fails for want of a descriptor cannot
    evict."""
    soft = raise_open_files(MAX_CONNECTIONS + FD_RESERVE)
    if soft is None:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft - FD_RESERVE))
