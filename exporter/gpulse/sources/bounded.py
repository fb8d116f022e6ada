"""One HTTP GET from a server gpulse does not trust (dcgm-exporter, Prometheus):
a deadline on the whole exchange and a cap on the body.

Socket timeouts bound each read, and a server that trickles a byte at a time passes
every one of them; so a timer (`Deadline`) shuts the connection's socket when the
whole exchange (connect, head, body) is late, which ends any read in progress. The
body is read as it arrives and dropped past the cap, so an endless answer costs the
cap, not the memory of the machine.
"""
from __future__ import annotations

import socket
import threading
from typing import Any, Mapping, NamedTuple


class Late(Exception):
    """The deadline passed; `answered`: the status line and head had arrived."""

    def __init__(self, answered: bool):
        super().__init__("late")
        self.answered = answered


class TooLarge(Exception):
    """The body passed the cap."""


class Answer(NamedTuple):
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


def get(session: Any, watch: "Deadline", url: str, timeout: float, max_bytes: int, **kw: Any) -> Answer:
    """GET `url` on a session whose adapter is `deadline_adapter(watch)`: the whole
    answer within `timeout` seconds and at most `max_bytes` of body, else Late or
    TooLarge; a failure of the exchange itself is the requests/urllib3 error. `kw`
    goes to session.get (params, allow_redirects)."""
    import requests
    watch.arm(timeout)
    try:
        r = session.get(url, timeout=(timeout, timeout), stream=True, **kw)
        try:
            parts = []
            size = 0
            while True:
                # read1: what has arrived, so the size cap applies as bytes come in
                chunk = r.raw.read1(65536, decode_content=True)
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge()
            if watch.expired:
                raise Late(watch.answered)
            return Answer(r.status_code, r.reason or "", r.headers, b"".join(parts))
        finally:
            r.close()
    except (requests.RequestException, OSError, *http_errors()):
        if watch.expired:
            raise Late(watch.answered) from None
        raise
    finally:
        watch.disarm()


class Deadline:
    """A clock on one whole HTTP exchange: when it runs out, the socket of the
    connection in use is shut down, so whatever read is blocked on it returns."""

    def __init__(self) -> None:
        # the socket of the exchange, held here because http.client hands it to the
        # response and forgets it (conn.sock = None) when the answer ends with the
        # connection (no Content-Length): the deadline must still reach it
        self.sock: Any = None
        self.expired = False
        self.answered = False          # the status line and head arrived
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self, seconds: float) -> None:
        self.expired = self.answered = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _expire(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            self.expired = True
            sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def deadline_adapter(watch: Deadline) -> Any:
    """requests' HTTPAdapter whose connections report themselves to `watch`."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        def connect(self) -> None:
            super().connect()  # type: ignore[misc]
            watch.sock = self.sock

        def getresponse(self, *a: Any, **kw: Any) -> Any:
            watch.sock = self.sock
            resp = super().getresponse(*a, **kw)  # type: ignore[misc]
            # a head cut short by the deadline parses as a (broken) answer: not one
            watch.answered = not watch.expired
            return resp

    class Conn(Watched, HTTPConnection):
        pass

    class SConn(Watched, HTTPSConnection):
        pass

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class SPool(HTTPSConnectionPool):
        ConnectionCls = SConn

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *a: Any, **kw: Any) -> None:
            super().init_poolmanager(*a, **kw)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": SPool}

    return Adapter(pool_connections=1, pool_maxsize=1, max_retries=0)


def http_errors() -> tuple[type[BaseException], ...]:
    import http.client
    from urllib3.exceptions import HTTPError
    return (HTTPError, http.client.HTTPException)
