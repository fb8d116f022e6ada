"""Routes: what each path answers, independent of how requests arrive.

A route gets a Request (method, path, query, headers) and returns a Response; it
never sees the server or the connection. Routes only read the latest snapshot, so
none of them waits on the GPU library.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from ..collector import OPENMETRICS_TYPE, TEXT_TYPE, Exposition, wants_openmetrics

TEXT = "text/plain; charset=utf-8"
# Probes: answered outside the auth and request limits so a flood cannot fail them
# (with --no-web.healthz-public they are authenticated like everything else).
PUBLIC_PATHS = ("/healthz", "/readyz")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]


class Response(NamedTuple):
    code: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


Route = Callable[[Request], "Response | tuple[int, str, bytes]"]


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Accept-Encoding lists gzip with a non-zero q (RFC 9110 12.5.3)."""
    for part in (accept_encoding or "").split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        if coding.lower() not in ("gzip", "x-gzip"):
            continue
        for p in params:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                try:
                    return float(v) > 0
                except ValueError:
                    return False
        return True
    return False


class App:
    """The routes; holds references to what they may read."""

    def __init__(self, cfg: Any, sampler: Any, exposition: Exposition):
        self.cfg = cfg
        self.sampler = sampler
        self.exposition = exposition
        self.extra_routes: dict[str, Route] = {}

    def cheap(self, req: Request) -> bool:
        """Whether the answer is a cached or tiny body, so the server may build it on
        its event loop instead of a worker thread: the built-in routes, /metrics only
        while its body for this snapshot and encoding is cached."""
        if req.path in self.extra_routes:
            return False
        if req.path == "/metrics":
            return self.exposition.cached(*self._encoding(req))
        return True

    def render_key(self, req: Request) -> Any:
        """For a /metrics request whose body is not cached yet: a key naming the render
        it waits for (equal for every request that waits for the same one); else None."""
        if req.path != "/metrics" or req.path in self.extra_routes:
            return None
        return self.exposition.render_key(*self._encoding(req))

    def warm(self, req: Request) -> None:
        """Do the render render_key() names (on a worker thread), so the answer is cheap."""
        self.exposition.warm(*self._encoding(req))

    @staticmethod
    def _encoding(req: Request) -> tuple[bool, bool]:
        return wants_openmetrics(req.headers.get("Accept")), accepts_gzip(req.headers.get("Accept-Encoding"))

    def route(self, req: Request) -> Response:
        if req.path == "/metrics":
            om, gz = self._encoding(req)
            body = self.exposition.render(om, gzip=gz)
            extra = (("Content-Encoding", "gzip"),) if gz else ()
            return Response(200, OPENMETRICS_TYPE if om else TEXT_TYPE, body, extra + (("Vary", "Accept-Encoding"),))
        if req.path == "/healthz":
            if self.sampler.health()["alive"]:
                return Response(200, TEXT, b"ok\n")
            return Response(503, TEXT, b"sampler thread died\n")
        if req.path == "/readyz":
            not_ready = self.sampler.health()["not_ready"]
            if not_ready is None:
                return Response(200, TEXT, b"ready\n")
            return Response(503, TEXT, not_ready.encode() + b"\n")
        handler = self.extra_routes.get(req.path)
        if handler is not None:
            return Response(*handler(req))
        return Response(404, TEXT, b"not found\n")
