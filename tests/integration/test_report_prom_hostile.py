"""`gpulse report --prometheus` against a server that answers with something hostile."""
from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading

import pytest

from conftest import ROOT


class _Server:
    def __init__(self, body: bytes):
        owner = self
        self.body = body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("body", [b"[" * 3000 + b"]" * 3000, b'{"data": ' * 3000 + b"1" + b"}" * 3000,
                                  b"[1, 2, 3]", b'"success"'], ids=["list-3000", "dict-3000", "list", "string"])
def test_hostile_prometheus_answer_is_one_line(tmp_path, body):
    srv = _Server(body)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
        p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", srv.url, "--last", "1h",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    finally:
        srv.stop()
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"gpulse: {srv.url}/api/v1/") and "no Prometheus API JSON" in line
