"""`gpulse report --prometheus` against a server that answers with something hostile."""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse

import pytest

from conftest import ROOT, limited
from hostilelogs import smi_csv

from gpulse.sources import prom
from testing.httpstub import StubServer


@pytest.mark.parametrize("body", [b"[" * 3000 + b"]" * 3000, b'{"data": ' * 3000 + b"1" + b"}" * 3000,
                                  b"[1, 2, 3]", b'"success"'], ids=["list-3000", "dict-3000", "list", "string"])
def test_hostile_prometheus_answer_is_one_line(tmp_path, body):
    with StubServer(lambda path, params: (200, body)) as srv:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
        p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", srv.url, "--last", "1h",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"gpulse: {srv.url}/api/v1/") and "no Prometheus API JSON" in line


# ---------------------------------------------------------------- a Prometheus that lies in other ways

MEMORY_CAP = 1536 << 20          # a regression fails fast with MemoryError instead of taking the machine
T_END = 1_785_003_600.0


class _Prometheus:
    """A Prometheus API server whose answers a test chooses: `answer(path, params)`
    returns (status, headers, body), body bytes or an iterator of chunks written as
    they come (the connection closes after them)."""

    def __init__(self, answer):
        owner = self
        self.answer = answer
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                owner.requests.append(url.path)
                status, headers, body = owner.answer(url.path, dict(urllib.parse.parse_qsl(url.query)))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    body = [body]
                self.end_headers()
                try:
                    for chunk in body:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _ok(result) -> tuple[int, dict, bytes]:
    return 200, {"Content-Type": "application/json"}, json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _counters(params: dict, odd=lambda gpu, k, v: v, nodes=("n1", "n1")) -> list:
    """Two GPUs' gpulse series on the asked grid: GPU 0 working, GPU 1 at 10 %, on
    `nodes`; odd(gpu, k, value) may replace a value's text."""
    name = params["query"].split("{")[0]
    known = ("gpulse_gpu_sampled_seconds_total", "gpulse_gpu_busy_seconds_total", "gpulse_gpu_active_seconds_total",
             "gpulse_gpu_memory_used_bytes", "gpulse_gpu_memory_total_bytes")
    if name not in known:
        return []        # the cause series (clocks, throttling, ...): this Prometheus holds none
    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
    n = int((end - start) / step) + 1
    out = []
    for node, gpu, share in ((nodes[0], "0", 0.99), (nodes[1], "1", 0.10)):
        def value(k):
            s = k * step
            return {"gpulse_gpu_sampled_seconds_total": s, "gpulse_gpu_busy_seconds_total": share * s,
                    "gpulse_gpu_active_seconds_total": share * s, "gpulse_gpu_memory_used_bytes": 4e10,
                    "gpulse_gpu_memory_total_bytes": 8e10}[name]
        out.append({"metric": {"__name__": name, "node": node, "gpu": gpu, "workload": "train"},
                    "values": [[start + k * step, odd(gpu, k, f"{value(k):.6f}")] for k in range(n)]})
    return out


def _range_answer(odd=lambda gpu, k, v: v, nodes=("n1", "n1")):
    def answer(path, params):
        return _ok(_counters(params, odd, nodes) if path.endswith("query_range") else [])
    return answer


def _report(srv, tmp_path, *extra, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    return subprocess.run(limited([sys.executable, "-m", "gpulse", "report", "--prometheus", srv.url, "--start",
                                   str(T_END - 600), "--end", str(T_END), "--out", str(tmp_path / "out"), *extra],
                                  address_space=MEMORY_CAP),
                          capture_output=True, text=True, timeout=timeout, env=env)


def _against(answer, tmp_path, *extra, stop=lambda: None):
    """The report against a _Prometheus answering with `answer`; stop() before the server stops."""
    srv = _Prometheus(answer)
    try:
        return _report(srv, tmp_path, *extra)
    finally:
        stop()
        srv.stop()


def _one_line(p, *needles) -> str:
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    [line] = p.stderr.strip().splitlines()
    assert line.startswith("gpulse: "), line
    for n in needles:
        assert n in line, line
    return line


def test_an_endless_answer_stops_at_the_size_cap(tmp_path):
    def endless(path, params):
        def body():
            yield b'{"status": "success", "data": {"resultType": "matrix", "result": ['
            filler = b'{"metric": {}, "values": []}, ' * 2000
            while True:
                yield filler
        return 200, {"Content-Type": "application/json"}, body()
    p = _against(endless, tmp_path)
    _one_line(p, f"answered more than {prom.MAX_ANSWER >> 20} MiB", "--max-points")


def test_a_trickled_answer_ends_at_the_timeout_for_the_whole_request(tmp_path):
    gate = threading.Event()

    def trickle(path, params):
        def body():
            yield b'{"status": "success", '
            while not gate.wait(0.2):          # a byte at a time: every single read is quick
                yield b" "
        return 200, {"Content-Type": "application/json"}, body()
    p = _against(trickle, tmp_path, "--prometheus.timeout", "2s", stop=gate.set)
    _one_line(p, "did not finish its answer within 2s")


def test_more_gpus_than_the_cap_is_one_line(tmp_path):
    def many(path, params):
        if not path.endswith("query_range"):
            return _ok([])
        start = float(params["start"])
        return _ok([{"metric": {"node": f"n{i // 8}", "gpu": str(i % 8)}, "values": [[start, "1"], [start + 15, "2"]]}
                    for i in range(prom.MAX_GPUS + 1000)])
    p = _against(many, tmp_path)
    _one_line(p, f"matches more than {prom.MAX_GPUS} GPUs", "--node")



def test_a_query_refused_part_way_through_the_fetch_is_one_line_and_nothing_after_it_is_asked(tmp_path):
    """The range queries are asked one ahead of the report (PromClient.ranges_ahead):
    the fourth refused, the report ends with that one line once it has read the three
    before it, asks no fifth, and its process ends (its asking thread does not hold it)."""
    ranges: list[str] = []

    def fourth_refused(path, params):
        if not path.endswith("query_range"):
            return _ok([])
        ranges.append(params["query"])
        if len(ranges) == 4:
            return 400, {"Content-Type": "application/json"}, json.dumps(
                {"status": "error", "errorType": "bad_data", "error": "the fourth query is refused"}).encode()
        return _ok(_counters(params))
    p = _against(fourth_refused, tmp_path)
    _one_line(p, "Prometheus rejected the query (bad_data): the fourth query is refused")
    assert len(ranges) == 4, ranges

@pytest.mark.parametrize("result, needle", [
    ("not a list", "not a list of series"),
    ([{"metric": "node", "values": []}], "not a list of series"),
    ([{"metric": {"node": "n1", "gpu": "0"}, "values": [["x", "y"]]}], "no [time, \"number\"] pair"),
    ([{"metric": {"node": "n1", "gpu": "0"}, "values": [[1, "busy"]]}], "no [time, \"number\"] pair"),
    ([{"metric": {"node": "n1", "gpu": "0"}, "values": [[1]]}], "no [time, \"number\"] pair"),
    ([{"metric": {"node": "n1", "gpu": "0"}, "values": {"a": 1}}], "not a list of [time, value] points"),
    ([{"metric": {"node": 7, "gpu": None}, "values": [[1e400, "1"]]}], "no [time, \"number\"] pair"),
], ids=["string", "metric-string", "strings", "word", "short", "dict", "types-inf"])
def test_malformed_answers_are_one_line(tmp_path, result, needle):
    p = _against(lambda path, params: _ok(result) if path.endswith("query_range") else _ok([]), tmp_path)
    _one_line(p, needle)


def test_success_without_a_data_object_is_one_line(tmp_path):
    p = _against(lambda path, params: (200, {}, b'{"status": "success", "data": [1, 2]}'), tmp_path)
    _one_line(p, "without a data object")


def test_a_redirect_is_named_not_followed(tmp_path):
    other = _Prometheus(_range_answer())
    p = _against(lambda path, params: (302, {"Location": other.url + path}, b""), tmp_path, stop=other.stop)
    _one_line(p, f"redirects to '{other.url}/api/v1/", "not followed")
    assert other.requests == []


def _strict(text: str):
    def refuse(word):
        raise ValueError(f"{word} is no JSON")
    return json.loads(text, parse_constant=refuse)


def test_nan_and_inf_values_are_no_value_and_the_findings_are_strict_json(tmp_path):
    odd = {3: "NaN", 4: "+Inf", 5: "+Inf", 6: "-Inf", 9: "NaN", 12: "+Inf", 13: "+Inf"}
    p = _against(_range_answer(lambda gpu, k, v: odd.get(k, v) if gpu == "1" else v), tmp_path, "--quiet")
    assert p.returncode == 0, p.stderr
    doc = _strict((tmp_path / "out" / "findings.json").read_text())
    assert {g["gpu"] for g in doc["gpus"]} == {"0", "1"}
    one = next(g for g in doc["gpus"] if g["gpu"] == "1")
    assert one["busy_fraction"] == pytest.approx(0.10, abs=0.02)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "nan" not in page.lower().replace("nanoseconds", "") and "nan %" not in p.stdout.lower()


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[8m"     # retitle the window, clear the screen, hide text


def test_control_sequences_in_names_never_reach_the_terminal(tmp_path):
    p = _against(_range_answer(nodes=("n" + ESCAPES, "n2")), tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert "\x1b" not in out and "\x07" not in out, out
    assert "n\\x1b]0;owned\\x07" in p.stdout          # the node is still named, its escapes shown
    missing = tmp_path / f"run{ESCAPES}.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    for cmd in (["report", "--input", str(missing), "--out", str(tmp_path / "o2")], ["export", "--input", str(missing)]):
        q = subprocess.run([sys.executable, "-m", "gpulse", *cmd], capture_output=True, text=True, timeout=60, env=env)
        assert q.returncode == 1 and "\x1b" not in q.stderr and "run\\x1b]0;owned" in q.stderr, q.stderr
    # a log under such a name whose clock jumps: the warnings quoting its name are logged
    log = tmp_path / f"log{ESCAPES}.csv"
    log.write_text(smi_csv(400, stamp=lambda k, t: t + 40 * 86400 if k == 200 else t))
    q = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(tmp_path / "o3")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert q.returncode == 0 and "\x1b" not in q.stdout + q.stderr, q.stderr
    assert "log\\x1b]0;owned\\x07\\x1b[2J\\x1b[8m.csv: 1 time(s) the clock jumps ahead" in q.stderr, q.stderr
