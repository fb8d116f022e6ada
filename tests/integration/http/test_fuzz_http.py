"""Hostile clients against the real HTTP server: limits, deadlines, caps, and a
property-based fuzzer over raw request bytes (plain and TLS).

The server runs in this process (tests/liveserver.py) with a short --web.timeout so
deadlines show up in seconds. After every hostile exchange the server must still
answer /healthz, and nothing may have been logged at ERROR (a handler crash is
logged as one).
"""
from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulse.http.server import MAX_HEAD_BYTES, MAX_REQUEST_LINE
from gpulse.http.webconfig import load_web_config
from liveserver import Live
from tlsutil import CA, write_web_config
from fuzzing import exchange

TIMEOUT = 1.0          # --web.timeout of the server under test
OK_CODES = {200, 400, 404, 405, 414, 431, 501, 505}


@pytest.fixture(scope="module")
def live():
    with Live(web__timeout=f"{TIMEOUT}s", web__max_requests=4) as lv:
        yield lv
        assert lv.log.messages() == []      # no handler crashed, nothing unexpected


def status(resp: bytes) -> int:
    line = resp.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1.") and len(line.split()) >= 2, resp[:200]
    return int(line.split()[1])


def healthy(live) -> None:
    assert requests.get(live.url + "/healthz", timeout=5).status_code == 200


# ---------------------------------------------------------------- limits


def test_size_limits(live):
    assert status(exchange(live.port, b"GET /" + b"a" * MAX_REQUEST_LINE + b" HTTP/1.1\r\n\r\n")) == 414
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
    assert status(exchange(live.port, b"GET /metrics HTTP/1.1\r\n" + many + b"\r\n")) == 431
    big = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(MAX_HEAD_BYTES // 1000 + 2))
    assert status(exchange(live.port, b"GET /metrics HTTP/1.1\r\n" + big + b"\r\n")) == 431
    assert status(exchange(live.port, b"GET /metrics HTTP/1.1\r\nX-Long: " + b"v" * 70000 + b"\r\n\r\n")) == 431
    healthy(live)


def test_malformed_requests(live):
    assert status(exchange(live.port, b"\x16\x03\x01 hello\r\n\r\n")) == 400
    assert status(exchange(live.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")) in (400, 505)
    assert status(exchange(live.port, b"FOO /metrics HTTP/1.1\r\n\r\n")) == 501
    assert status(exchange(live.port, b"GET /metrics HTTP/9.9\r\n\r\n")) == 505
    assert status(exchange(live.port, b"GET /metrics HTTP/0.9\r\n\r\n")) == 505
    assert status(exchange(live.port, b"GET /metrics\r\n\r\n")) == 400      # HTTP/0.9: an error, not a bare body
    assert exchange(live.port, b"GET /metr") == b""           # cut off mid-line: closed, no answer
    r = exchange(live.port, b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    assert status(r) == 405 and b"Connection: close" in r
    healthy(live)


def test_pipelining_and_no_request_in_a_body(live):
    r = exchange(live.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert r.count(b"HTTP/1.1 200 OK") == 2 and b"ok\n" in r and b"ready\n" in r
    # a GET with a body is answered and the connection closed, or refused with 400
    # (a body that is not valid chunking): the "body" is never read as a second
    # request (request smuggling through a lenient parser)
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    for framing in (b"Content-Length: %d\r\n" % len(smuggled), b"Transfer-Encoding: chunked\r\n",
                    b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(smuggled)):
        r = exchange(live.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + smuggled)
        assert r.count(b"HTTP/1.1 ") == 1 and (status(r) == 400 or b"Connection: close" in r), r[:300]


def test_slowloris_is_cut_at_the_head_deadline_while_scrapes_continue(live):
    """A client trickling a header byte every 0.2 s would take 12 s; the head
    deadline (--web.timeout) cuts it, not a per-byte timeout."""
    trickle = b"X-Slow: " + b"a" * 60 + b"\r\n"
    results = []

    def slow_client() -> None:
        with socket.create_connection(("127.0.0.1", live.port), timeout=20) as s:
            t0 = time.monotonic()
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            sent = 0
            try:
                for b in trickle:
                    s.sendall(bytes([b]))
                    sent += 1
                    time.sleep(0.2)
                s.recv(1)
            except OSError:
                pass
            results.append((time.monotonic() - t0, sent))

    clients = [threading.Thread(target=slow_client) for _ in range(20)]
    for c in clients:
        c.start()
    scrapes = []
    while any(c.is_alive() for c in clients):
        scrapes.append(requests.get(live.url + "/metrics", timeout=5).status_code)
        time.sleep(0.05)
    for c in clients:
        c.join()
    assert len(results) == 20
    for elapsed, sent in results:
        assert sent < len(trickle), "the trickle was allowed to finish"
    assert scrapes and all(s == 200 for s in scrapes)


def test_idle_connection_is_closed(live):
    with socket.create_connection(("127.0.0.1", live.port), timeout=20) as s:
        assert s.recv(1) == b""       # closed by the server (recv would block for 20 s otherwise)


class Holder:
    """A route that keeps requests in flight until released."""

    def __init__(self, live, n: int):
        self.live, self.n = live, n
        self.held, self.release = threading.Semaphore(0), threading.Event()
        self.codes: list[int] = []
        live.rt.app.extra_routes["/test-hold"] = self.hold
        self.threads = [threading.Thread(target=self.get) for _ in range(n)]
        for t in self.threads:
            t.start()
        for _ in range(n):
            assert self.held.acquire(timeout=10)

    def hold(self, handler):
        self.held.release()
        self.release.wait(10)
        return 200, "text/plain", b"held\n"

    def get(self) -> None:
        self.codes.append(requests.get(self.live.url + "/test-hold", timeout=15).status_code)

    def done(self) -> list[int]:
        self.release.set()
        for t in self.threads:
            t.join(10)
        del self.live.rt.app.extra_routes["/test-hold"]
        return self.codes


def test_request_cap_answers_503_at_once(live):
    h = Holder(live, 4)            # --web.max-requests 4, all in flight
    try:
        r = requests.get(live.url + "/metrics", timeout=5)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        healthy(live)              # probes are answered outside the request limit
    finally:
        assert h.done() == [200] * 4
    assert requests.get(live.url + "/metrics", timeout=5).status_code == 200


def cap_connections(srv, n: int) -> int:
    """Set the server's connection cap to n once earlier tests' connections are
    gone; returns the cap to restore."""
    saved = srv.max_connections
    deadline = time.monotonic() + 5
    while srv.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.max_connections = n
    return saved


def test_connection_cap_closes_extra_connections(live):
    srv = live.server
    rejected = srv.rejected_connections
    saved = cap_connections(srv, 3)
    h = Holder(live, 3)            # three connections busy in a request: not cut by timeouts
    try:
        with socket.create_connection(("127.0.0.1", live.port), timeout=20) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            try:
                assert extra.recv(100) == b""    # refused at once, not served, not queued
            except ConnectionResetError:         # closed with the request unread: a reset
                pass
        assert srv.rejected_connections == rejected + 1
    finally:
        srv.max_connections = saved
        assert h.done() == [200] * 3
    healthy(live)


def test_full_connection_table_evicts_the_longest_idle(live):
    srv = live.server
    evicted = srv.evicted_connections
    saved = cap_connections(srv, 3)
    idle = [socket.create_connection(("127.0.0.1", live.port), timeout=20) for _ in range(3)]
    try:
        deadline = time.monotonic() + 10
        while srv.open_connections < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        healthy(live)                            # a fourth connection: served, the oldest idle one closed
        try:
            assert idle[0].recv(1) == b""
        except ConnectionResetError:
            pass
        assert srv.evicted_connections >= evicted + 1
    finally:
        srv.max_connections = saved
        for s in idle:
            s.close()


# ---------------------------------------------------------------- fuzzing

crlf = st.sampled_from([b"\r\n", b"\n", b"\r"])
token = st.one_of(st.sampled_from([b"", b" ", b"\x00", b"\xff", b"%00", b"..", b"\t", b":", b"\xc3\xa9", b"\r"]),
                  st.binary(max_size=8))
methods = st.one_of(st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"CONNECT",
                                     b"PRI", b"get", b""]), st.binary(max_size=6))
targets = st.one_of(st.sampled_from([b"/metrics", b"/", b"/healthz", b"/readyz", b"*", b"http://x/metrics",
                                     b"//metrics", b"/metrics?x=%ff", b"/%2e%2e/", b"/metrics#f", b""]),
                    st.binary(max_size=30))
versions = st.one_of(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.1 x", b"", b"http/1.1",
                                      b"HTTP/1.10", b"HTTP/01.1"]), st.binary(max_size=10))
header_names = st.one_of(st.sampled_from([b"Host", b"Accept", b"Content-Length", b"Transfer-Encoding", b"Connection",
                                          b"Expect", b"Authorization", b"Upgrade", b" Host", b"Host ", b""]),
                         st.binary(max_size=12))
header_values = st.one_of(st.sampled_from([b"application/openmetrics-text; version=1.0.0", b"chunked", b"close",
                                           b"keep-alive", b"100-continue", b"-1", b"99999999999999999999", b"0",
                                           b"Basic Og==", b"h2c", b"text/plain;q=nan"]), token)


@st.composite
def requests_bytes(draw) -> bytes:
    if draw(st.integers(0, 7)) == 0:
        return draw(st.binary(max_size=3000))
    eol = draw(crlf)
    out = draw(methods) + b" " + draw(targets) + b" " + draw(versions) + eol
    for _ in range(draw(st.integers(0, 12))):
        out += draw(header_names) + b":" + draw(st.sampled_from([b" ", b""])) + draw(header_values) + draw(crlf)
    out += eol
    if draw(st.booleans()):
        out += draw(st.binary(max_size=200))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=requests_bytes(), half_close=st.sampled_from([True, True, True, False]))
def test_fuzz_http_requests(live, data, half_close):
    resp = exchange(live.port, data, wait=TIMEOUT + 3, half_close=half_close)
    if resp:
        code = status(resp)
        assert code in OK_CODES, resp[:300]
        if b"\r\n\r\n" in resp:
            head = resp.split(b"\r\n\r\n", 1)[0]
            assert b"Traceback" not in resp and b"Python/" not in head
    healthy(live)


@pytest.fixture(scope="module")
def live_tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("tlsfuzz")
    ca = CA(d)
    srv = ca.issue("server", server=True)
    web = write_web_config(d / "web.yml", {"tls_server_config": {"cert_file": srv.cert.name, "key_file": srv.key.name}})
    with Live(web__timeout=f"{TIMEOUT}s", web__config_file=str(web)) as lv:
        lv.ctx = ssl.create_default_context(cafile=str(ca.path))
        yield lv
        assert lv.log.messages() == []
    assert load_web_config(str(web)).context is not None


def tls_healthy(live) -> None:
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as s:
        with live.ctx.wrap_socket(s, server_hostname="localhost") as t:
            t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert t.recv(100).startswith(b"HTTP/1.1 200 OK")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=600).map(lambda b: b"\x16\x03\x01" + b),
                      st.binary(min_size=1, max_size=600), requests_bytes()))
def test_fuzz_tls_handshakes(live_tls, data):
    """Broken ClientHellos, random bytes and plain HTTP on the TLS port."""
    resp = exchange(live_tls.port, data, wait=TIMEOUT + 3)
    assert resp == b"" or resp.startswith(b"HTTP/1.0 400 Bad Request") or resp[:1] == b"\x15", resp[:100]
    tls_healthy(live_tls)
