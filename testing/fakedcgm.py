"""dcgm-exporter as the tests and benchmarks meet it: the real captures under
../shared/data and texts made from them, and the one stand-in dcgm-exporter server,
`DcgmExporter`: a text, or a real capture as a node's exporter serves it over a run
(`node_exporter`), with switches for the ways an endpoint goes wrong."""
from __future__ import annotations

import http.server
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus

from gpulse.sources.dcgm import DcgmMapper, parse_exposition
from testing.daemons import require_data


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


class DcgmExporter:
    """A stand-in dcgm-exporter on 127.0.0.1, keep-alive HTTP/1.1 as dcgm-exporter
    (Go net/http) speaks. `body` is what it serves: a text, the same every time, or
    a function of the request's number (from 1) for an exposition that moves over a
    run (`NodeCapture`); the requests numbered in `failing` are answered 503. The
    other switches are the ways an endpoint goes wrong."""

    def __init__(self, body: str | Callable[[int], str], failing: Iterable[int] = ()):
        self.body = body
        self.failing = frozenset(failing)
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
        self.port = 0             # the kernel picks it at the first start; restarts keep it
        self._server = None
        self.start()

    def answer(self, n: int) -> tuple[int, str]:
        """The status and body of the n-th request."""
        if n in self.failing:
            return 503, ""
        return self.status, self.body(n) if callable(self.body) else self.body

    def start(self):
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                owner.connections += 1
                owner._open.append(self.request)
                super().setup()

            def do_GET(self):
                owner.requests += 1
                time.sleep(owner.delay)
                status, text = owner.answer(owner.requests)
                data = text.encode()
                framing = "Connection: close\r\n" if owner.close_delimited else f"Content-Length: {len(data)}\r\n"
                head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                        f"Content-Type: text/plain; version=0.0.4\r\n{framing}\r\n").encode()
                self.close_connection = owner.close_delimited
                try:
                    if owner.trickle_head:
                        data = head + data
                    else:
                        self.wfile.write(head)
                    if owner.trickle:
                        step = owner.trickle_bytes
                        owner.sent = 0
                        for i in range(0, len(data), step):
                            self.wfile.write(data[i:i + step])
                            self.wfile.flush()
                            owner.sent = i + step
                            time.sleep(owner.trickle)
                    else:
                        self.wfile.write(data)
                except OSError:
                    # the client gave up (its deadline passed during `delay` or a
                    # trickle): what a deadline is for, not the stand-in's error
                    self.close_connection = True

            def log_message(self, *a):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
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


class NodeCapture:
    """A real dcgm-exporter capture as a node's exporter serves it over a run, the
    body of a `DcgmExporter` (`node_exporter`): the capture plus EXTRA_DCGM_FIELDS,
    some of them moving with the request's number. Two early requests (`FAILING`)
    get 503, so the exporter's error counter exists; after that it answers, so the
    node's series do not flap in and out."""

    FAILING = (3, 4)

    def __init__(self, capture: str):
        self.capture = capture
        self.labels = re.search(r"^DCGM_\w+(\{[^}]*\})", capture, re.M).group(1)

    def __call__(self, n: int) -> str:
        values = (72, n // 3, 0, 2.0e9 + 1e7 * (n % 5), 1.9e9, 13 if n > 2 else 0, 1)
        extra = "".join(f"{name}{self.labels} {v}\n" for name, v in zip(EXTRA_DCGM_FIELDS, values))
        return self.capture.rstrip("\n") + "\n" + extra


def node_exporter(body: NodeCapture | str) -> DcgmExporter:
    """A node's dcgm-exporter serving a capture (or a `NodeCapture` of it) over a run."""
    body = NodeCapture(body) if isinstance(body, str) else body
    return DcgmExporter(body, failing=body.FAILING)
