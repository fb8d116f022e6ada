"""A loopback HTTP server whose GETs a function answers: for tests that need a server
of their own (a scripted or hostile Prometheus) and nothing of a real one."""
from __future__ import annotations

import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# (URL path, query parameters) -> (HTTP status, JSON body)
Answer = Callable[[str, dict[str, str]], tuple[int, bytes]]


class StubServer:
    """Serves `answer` on a free loopback port from a thread of its own, at `url`,
    until closed (or the `with` block ends)."""

    def __init__(self, answer: Answer):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server naming)
                url = urllib.parse.urlsplit(self.path)
                status, body = answer(url.path, dict(urllib.parse.parse_qsl(url.query)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep pytest output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "StubServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
