"""dcgm-exporter as the tests and benchmarks meet it: the real captures under
../shared/data and texts made from them, and two stand-in dcgm-exporter servers:
`FaultyDcgmExporter`, with switches for the ways an endpoint goes wrong, and
`FakeDcgmExporter`, a real capture as a node's exporter serves it over a run."""
from __future__ import annotations

import http.server
import re
import socket
import threading
import time

from gpulse.sources.dcgm import DcgmMapper, parse_exposition
from testing.daemons import free_port, require_data


L4 = "captures/dcgm-exporter/l4-gpu-operator.prom"


H100 = "captures/dcgm-exporter/h100x8-eks-aicr-sampled.prom"


def capture(rel: str) -> str:
    return require_data(rel).read_text()


def map_text(text: str, t: float = 0.0, mapper: DcgmMapper | None = None):
    series, bad = parse_exposition(text)
    assert bad == []
    return (mapper or DcgmMapper()).map(((n, lab, v, 0) for n, lab, v, _ in series), t)


def l4_with(**replace: str) -> str:
    """The L4 capture with some fields' values replaced."""
    out = []
    for line in capture(L4).splitlines():
        for name, value in replace.items():
            if line.startswith(f"DCGM_FI_{name}{{"):
                line = line.rsplit(" ", 1)[0] + " " + value
        out.append(line)
    return "\n".join(out) + "\n"


MIG_TEXT = """\
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="node-a",container="trainer",namespace="ml",pod="job-0"} 0.870000
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",Hostname="node-a"} 0.000000
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="node-a",container="trainer",namespace="ml",pod="job-0"} 30000
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="node-a",container="trainer",namespace="ml",pod="job-0"} 9223372036854775794
"""


class FaultyDcgmExporter:
    """A stand-in dcgm-exporter on 127.0.0.1 serving whatever `body` holds, with
    switches for the ways an endpoint goes wrong."""

    def __init__(self, body: str):
        self.body = body
        self.delay = 0.0          # before answering
        self.trickle = 0.0        # between chunks of the body
        self.trickle_bytes = 512  # the size of those chunks
        self.trickle_head = False # trickle the status line and headers too
        self.close_delimited = False  # no Content-Length: the answer ends when the connection does
        self.sent = 0             # bytes of the last trickled answer written so far
        self.status = 200
        self.requests = 0
        self.connections = 0
        self._open: list[socket.socket] = []
        self.port = free_port()
        self._server = None
        self.start()

    def start(self):
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"     # keep-alive, as dcgm-exporter (Go net/http) speaks

            def setup(self):
                owner.connections += 1
                owner._open.append(self.request)
                super().setup()

            def do_GET(self):
                owner.requests += 1
                time.sleep(owner.delay)
                data = owner.body.encode()
                framing = "Connection: close\r\n" if owner.close_delimited else f"Content-Length: {len(data)}\r\n"
                head = (f"HTTP/1.1 {owner.status} OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        f"{framing}\r\n").encode()
                self.close_connection = owner.close_delimited
                if owner.trickle_head:
                    data = head + data
                else:
                    self.wfile.write(head)
                if owner.trickle:
                    step = owner.trickle_bytes
                    owner.sent = 0
                    try:
                        for i in range(0, len(data), step):
                            self.wfile.write(data[i:i + step])
                            self.wfile.flush()
                            owner.sent = i + step
                            time.sleep(owner.trickle)
                    except OSError:       # the client gave up: what a deadline is for
                        self.close_connection = True
                else:
                    self.wfile.write(data)

            def log_message(self, *a):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self):
        """Gone for real: the listener and every kept-alive connection."""
        self._server.shutdown()
        self._server.server_close()
        for sock in self._open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._open.clear()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/metrics"


# Families the L4 capture lacks, added the way dcgm-exporter writes them on an
# H100 so the node-detail panels (ECC, NVLink, XID, power limit) have data too.
EXTRA_DCGM_FIELDS = (
    "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
)


class FakeDcgmExporter:
    """Serves a real dcgm-exporter capture (plus EXTRA_DCGM_FIELDS) over HTTP.
    Two early requests get 503, so the exporter's error counter exists; after
    that it answers, so the node's series do not flap in and out."""

    FAILING = (3, 4)

    def __init__(self, capture: str):
        labels = re.search(r"^DCGM_\w+(\{[^}]*\})", capture, re.M).group(1)
        self.capture, self.labels, self.requests = capture, labels, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                if outer.requests in outer.FAILING:
                    self.send_error(503)
                    return
                body = outer.body(outer.requests).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def body(self, n: int) -> str:
        values = (72, n // 3, 0, 2.0e9 + 1e7 * (n % 5), 1.9e9, 13 if n > 2 else 0, 1)
        extra = "".join(f"{name}{self.labels} {v}\n" for name, v in zip(EXTRA_DCGM_FIELDS, values))
        return self.capture.rstrip("\n") + "\n" + extra

    def close(self):
        self.server.shutdown()
        self.server.server_close()
