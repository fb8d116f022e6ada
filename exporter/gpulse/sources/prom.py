"""Range data from a Prometheus server that scraped gpulse, as a Source.

gpulse exports integrals (`gpulse_gpu_busy_seconds_total`, `..._active_...`,
`..._sampled_...`), so the mean utilisation between two instants is exact:

    util(t_{k-1}, t_k]   = Δbusy / Δsampled
    active(t_{k-1}, t_k] = Δactive / Δsampled

The raw counter values are fetched with /api/v1/query_range at the chosen step and
differenced here (a counter reset — an exporter restart — counts the new value, as
Prometheus' increase() does). A step with no new scrape carries nothing; its time is
folded into the next step that has one. The result is replayed through the same
Engine as a live node, with `active` as the real-work measure.

Long ranges are split so no request asks for more than --max-points points per
series (Prometheus refuses more than 11,000).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..model import DeviceInfo, PollResult, Reading, Sample
from .base import Source
from ..report.errors import ReportError

# counter / gauge families read per GPU (key in the sample -> metric name)
GPU_SERIES = {
    "busy": "gpulse_gpu_busy_seconds_total",
    "active": "gpulse_gpu_active_seconds_total",
    "sampled": "gpulse_gpu_sampled_seconds_total",
    "memory": "gpulse_gpu_memory_used_bytes",
    "memory_total": "gpulse_gpu_memory_total_bytes",
}
PROM_MAX_POINTS = 11_000


@dataclass(frozen=True)
class Auth:
    bearer_token_file: str = ""
    username: str = ""
    password_file: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure_skip_verify: bool = False


class PromClient:
    """Just enough of the HTTP API, with one-line errors."""

    def __init__(self, url: str, auth: Auth = Auth(), timeout: float = 30.0):
        import requests
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "gpulse-report"
        if auth.bearer_token_file:
            self.session.headers["Authorization"] = "Bearer " + _read_secret(auth.bearer_token_file, "bearer token")
        if auth.username:
            password = _read_secret(auth.password_file, "password") if auth.password_file else ""
            self.session.auth = (auth.username, password)
        if auth.insecure_skip_verify:
            self.session.verify = False
        elif auth.ca_file:
            self.session.verify = auth.ca_file
        if auth.cert_file:
            self.session.cert = (auth.cert_file, auth.key_file) if auth.key_file else auth.cert_file

    def get(self, path: str, params: dict[str, Any]) -> Any:
        import requests
        try:
            r = self.session.get(self.url + path, params=params, timeout=self.timeout)
        except requests.exceptions.SSLError as e:
            raise ReportError(f"TLS error talking to Prometheus at {self.url}: {_reason(e)}") from None
        except requests.exceptions.Timeout:
            raise ReportError(f"Prometheus at {self.url} did not answer within {self.timeout:g}s") from None
        except requests.exceptions.InvalidURL:
            raise ReportError(f"not a valid Prometheus URL: {self.url!r}") from None
        except requests.exceptions.MissingSchema:
            raise ReportError(f"not a valid Prometheus URL: {self.url!r} (expected http://HOST:PORT)") from None
        except requests.RequestException as e:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {_reason(e)}") from None
        if r.status_code in (401, 403):
            raise ReportError(f"Prometheus at {self.url} answered {r.status_code} {r.reason}: "
                              "check --prometheus.username/--prometheus.password-file or --prometheus.bearer-token-file")
        try:
            doc = r.json()
        except (ValueError, RecursionError):      # RecursionError: JSON nested thousands deep
            doc = None
        if not isinstance(doc, dict):
            raise ReportError(f"{self.url}{path} answered {r.status_code} {r.reason} and no Prometheus API JSON: "
                              "is --prometheus the server's base URL?") from None
        if doc.get("status") != "success":
            err = str(doc.get("error", f"HTTP {r.status_code}")).splitlines()[0]
            raise ReportError(f"Prometheus rejected the query ({doc.get('errorType', 'error')}): {err}")
        return doc.get("data", {})

    def query(self, q: str, at: float) -> list[dict[str, Any]]:
        return self.get("/api/v1/query", {"query": q, "time": f"{at:.3f}"}).get("result", [])

    def query_range(self, q: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return self.get("/api/v1/query_range", {"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                "step": f"{step:g}"}).get("result", [])


def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError as e:
        raise ReportError(f"cannot read the {what} file {path}: {e.strerror}") from None


def _reason(e: Exception) -> str:
    """The innermost readable cause of a requests error, in a few words."""
    text = str(e)
    for marker in ("Connection refused", "Name or service not known", "No route to host",
                   "certificate verify failed", "Temporary failure in name resolution", "timed out"):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:200] if text else type(e).__name__


def selector(node: str = "", workload: str = "", extra: str = "") -> str:
    """PromQL label matchers for the chosen GPUs: regexes on node and workload, plus
    raw matchers as given."""
    parts = []
    if node:
        parts.append(f"node=~{json.dumps(node)}")
    if workload:
        parts.append(f"workload=~{json.dumps(workload)}")
    if extra.strip():
        parts.append(extra.strip().strip("{}"))
    return "{" + ",".join(parts) + "}"


def choose_step(start: float, end: float, scrape_interval: float | None, columns: int = 4000) -> float:
    """Whole seconds, at least the scrape interval (a finer step only repeats values)
    and fine enough for about `columns` heatmap columns; at most 60 s (longer ranges
    are split rather than coarsened further)."""
    step = max(1.0, math.ceil((end - start) / columns))
    if scrape_interval:
        step = max(step, math.ceil(scrape_interval))
    return float(min(step, 60.0))


def scrape_interval(client: PromClient, sel: str, start: float, end: float) -> float | None:
    """The median spacing of the raw samples of the sampled-seconds counter in the last
    two minutes of the range (None when there are none)."""
    window = int(max(10.0, min(end - start, 120.0)))
    res = client.query(f"{GPU_SERIES['sampled']}{sel}[{window}s]", end)
    steps = []
    for series in res:
        ts = [float(t) for t, _ in series.get("values", [])]
        steps += [b - a for a, b in zip(ts, ts[1:]) if b > a]
    if not steps:
        return None
    steps.sort()
    return steps[len(steps) // 2]


def chunks(start: float, end: float, step: float, max_points: int) -> list[tuple[float, float]]:
    span = step * (max_points - 1)
    out = []
    a = start
    while a <= end:
        b = min(end, a + span)
        out.append((a, b))
        a = b + step
    return out


def fetch(client: PromClient, sel: str, start: float, end: float, step: float, max_points: int = PROM_MAX_POINTS,
          progress: Callable[[str], None] | None = None) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """{name: {(node, gpu): {"points": {t: v}, "workload": str}}} for every GPU_SERIES name."""
    parts = chunks(start, end, step, max(2, min(max_points, PROM_MAX_POINTS)))
    total = len(parts) * len(GPU_SERIES)
    done = 0
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for name, metric in GPU_SERIES.items():
        per: dict[tuple[str, str], dict[str, Any]] = {}
        for a, b in parts:
            for series in client.query_range(metric + sel, a, b, step):
                labels = series.get("metric", {})
                key = (labels.get("node", ""), labels.get("gpu", ""))
                slot = per.setdefault(key, {"points": {}, "workload": ""})
                slot["workload"] = labels.get("workload", slot["workload"])
                for t, v in series.get("values", []):
                    slot["points"][round(float(t), 3)] = float(v)
            done += 1
            if progress is not None:
                progress(f"fetched {done}/{total} ranges ({name}, {_iso(a)} .. {_iso(b)})")
        out[name] = per
    return out


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class PromRangeSource(Source):
    """Fetched range data replayed as samples: one sample per step per GPU."""

    name = "prometheus"
    has_sm_active = True          # `active` from the exporter is the real-work measure
    STEPS_PER_POLL = 64

    def __init__(self, data: dict[str, dict[tuple[str, str], dict[str, Any]]], start: float, end: float, step: float):
        self.step = step
        self.times = [start + k * step for k in range(int(math.floor((end - start) / step + 1e-9)) + 1)]
        nodes = sorted({n for n, _ in data.get("sampled", {})})
        self.first_node = nodes[0] if nodes else ""
        self.keys: dict[tuple[str, str], str] = {}
        for node, gpu in sorted(data.get("sampled", {}), key=lambda k: (k[0] != self.first_node, k[0], _num(k[1]))):
            self.keys[(node, gpu)] = gpu if node == self.first_node else f"{node}:{gpu}"
        self.samples = {self.keys[k]: self._samples(data, k) for k in self.keys}
        self.workloads = {self.keys[k]: data["sampled"][k]["workload"] for k in self.keys}
        mt = data.get("memory_total", {})
        self.mem_total = {self.keys[k]: max(mt[k]["points"].values()) for k in self.keys if k in mt and mt[k]["points"]}
        self._pos = {k: 0 for k in self.samples}
        self._k = 0
        self._done = False

    def node_and_gpu(self, key: str) -> tuple[str, str]:
        if ":" in key:
            node, _, gpu = key.rpartition(":")
            return node, gpu
        return self.first_node, key

    def _samples(self, data: dict[str, Any], k: tuple[str, str]) -> list[Sample]:
        def pts(name: str) -> dict[float, float]:
            return data.get(name, {}).get(k, {}).get("points", {})
        busy, active, sampled, mem = pts("busy"), pts("active"), pts("sampled"), pts("memory")
        out: list[Sample] = []
        prev: tuple[float, float, float] | None = None
        for t in self.times:
            key = round(t, 3)
            cur = (busy.get(key), active.get(key), sampled.get(key))
            if None in cur:
                continue
            if prev is not None:
                d = [c - p if c >= p else c for c, p in zip(cur, prev)]   # reset: the new value is the increase
                if d[2] <= 0:
                    continue                      # no scrape in between: fold into the next step
                out.append(Sample(t=t, util=_clamp(d[0] / d[2]), sm_active=_clamp(d[1] / d[2]),
                                  memory_used_bytes=mem.get(key)))
            else:
                out.append(Sample(t=t, util=None, memory_used_bytes=mem.get(key)))   # anchor
            prev = cur
        return out

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(gpu=k) for k in self.samples]

    @property
    def finished(self) -> bool:
        return self._done

    def poll(self, now: float) -> PollResult:
        k_end = self._k + self.STEPS_PER_POLL
        limit = self.times[min(k_end, len(self.times)) - 1] if self.times else 0.0
        readings = []
        for key, samples in self.samples.items():
            i = self._pos[key]
            j = i
            while j < len(samples) and samples[j].t <= limit:
                j += 1
            self._pos[key] = j
            attr = {"workload": self.workloads[key]} if self.workloads.get(key) else None
            gauges = {"memory_total_bytes": self.mem_total[key]} if key in self.mem_total else {}
            readings.append(Reading(key, samples[i:j], gauges, {}, True, None, attr))
        self._k = k_end
        if self._k >= len(self.times):
            self._done = True
        return PollResult(readings)


def _num(s: str) -> tuple:
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def _clamp(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x
