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
series (Prometheus refuses more than 11,000). A job of a thousand GPUs over hours is
millions of points: each series is kept as one array of floats on the step grid
(`Grid`, 8 bytes a step), each answer is dropped once copied in, and samples are
made only for the steps the engine is about to ingest, so memory follows the grid,
not the JSON or the number of samples. The queries are asked one ahead
(`PromClient.ranges_ahead`): the server works on the next while this process reads
the last.

Besides the integrals, the series a straggler's cause is judged on (analysis/cause.py:
clocks, temperature, power and its limit, throttle time by reason, PCIe replays, ECC
and XID errors) are fetched as the exporter exported them and handed to the engine as
the gauges and counters of each step's Reading, the values the live engine read from
its source; so the report names the cause the exporter named. A family Prometheus does
not hold stays absent, and the cause says it is missing.
"""
from __future__ import annotations

import json
import math
import queue
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..analysis.cause import JUDGED_REASONS
from ..catalog import COUNTERS, GAUGES
from ..model import DeviceInfo, PollResult, Reading, Sample
from .. import safetext
from . import bounded
from .base import Source, SourceError

# counter / gauge families read per GPU (key in the sample -> metric name)
GPU_SERIES = {
    "busy": "gpulse_gpu_busy_seconds_total",
    "active": "gpulse_gpu_active_seconds_total",
    "sampled": "gpulse_gpu_sampled_seconds_total",
    "memory": "gpulse_gpu_memory_used_bytes",
    "memory_total": "gpulse_gpu_memory_total_bytes",
}
# what analysis/cause.py reads of a GPU besides the integrals: catalog gauges (their
# mean over a span) and counters (their increase), each gpulse_gpu_<key> with the
# catalog's extra label, if any
CAUSE_GAUGES = ("sm_clock_hertz", "temperature_celsius", "power_watts", "power_limit_watts", "remapping_pending")
CAUSE_COUNTERS = ("throttle_seconds_total", "pcie_replays_total", "ecc_errors_total", "xid_errors_total")
CAUSE_SERIES = {key: ("gpulse_gpu_" + key, ((GAUGES | COUNTERS)[key].labels or ("",))[0])
                for key in CAUSE_GAUGES + CAUSE_COUNTERS}
# only the throttle reasons a verdict reads: 5 series a GPU instead of 9. A source may
# export only some reasons (the simulator only gpu_idle), so whether a GPU has throttle
# reasons at all is one more series, their count: with it, a reason not fetched counts
# as 0 s, as one the exporter exported at 0; without it the reasons are unknown
CAUSE_MATCHERS = {"throttle_seconds_total": f'reason=~"{"|".join(JUDGED_REASONS)}"'}
THROTTLE_KNOWN = "throttle_known"
PROM_MAX_POINTS = 11_000
# One answer's body: a range of ~4,000 steps for 1,000 GPUs is ~110 MiB of JSON; more is
# split by --max-points (or is no Prometheus), never read into memory without end.
MAX_ANSWER = 256 << 20
# GPUs one report may hold, as for a recorded log (sources/recorded/stream.MAX_GPUS):
# per-GPU grids, the engine and the picture stay bounded whatever the server answers.
MAX_GPUS = 4096
NAN = float("nan")


class Grid:
    """One series on the query's step grid: value k at start + k * step, NaN where
    Prometheus returned none. Reads like the {t: v} mapping it replaces (`get`,
    `values`), keyed by the rounded timestamps query_range returns."""

    __slots__ = ("start", "step", "a")

    def __init__(self, start: float, step: float, n: int):
        self.start, self.step = start, step
        self.a = array("d", [NAN]) * n

    def index(self, t: float) -> int:
        return int(round((t - self.start) / self.step))

    def put_all(self, values: Any) -> None:
        """query_range's [[t, "v"], ...], in one loop (a million points at fleet size).
        NaN and ±Inf (a Prometheus value, but no counter reading) are no value; a
        point that is no [time, "number"] pair raises SourceError."""
        a, start, step, n = self.a, self.start, self.step, len(self.a)
        if not isinstance(values, list):
            raise SourceError(f"values is {type(values).__name__}, not a list of [time, value] points")
        for p in values:
            try:
                t, v = p
                k = int(round((float(t) - start) / step))
                x = float(v)
            except (TypeError, ValueError, OverflowError):
                raise SourceError(f"a point {str(p)[:60]!r} is no [time, \"number\"] pair") from None
            if 0 <= k < n and math.isfinite(x):
                a[k] = x

    def get(self, t: float, default: float | None = None) -> float | None:
        k = self.index(t)
        v = self.a[k] if 0 <= k < len(self.a) else NAN
        return default if v != v else v

    def values(self) -> list[float]:
        return [v for v in self.a if v == v]


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
        self._deadline = bounded.Deadline()
        adapter = bounded.deadline_adapter(self._deadline)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
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
        """The `data` of one API answer, as a dict. The whole exchange within the
        timeout and MAX_ANSWER bytes (sources/bounded.py); a redirect is not followed
        but named (it could lead to another host, with the credentials); every answer
        that is not Prometheus API JSON is one line."""
        return self._data(path, self._exchange(path, params))

    def _exchange(self, path: str, params: dict[str, Any]) -> bounded.Answer:
        """One GET, its answer as bytes; a failed exchange is a one-line SourceError."""
        import requests
        where = self.url + path
        try:
            r = bounded.get(self.session, self._deadline, where, self.timeout, MAX_ANSWER, params=params,
                            allow_redirects=False)
        except bounded.Late as e:
            got = "did not finish its answer" if e.answered else "did not answer"
            raise SourceError(f"Prometheus at {self.url} {got} within {self.timeout:g}s "
                              "(--prometheus.timeout bounds each request as a whole)") from None
        except bounded.TooLarge:
            raise SourceError(f"{where} answered more than {MAX_ANSWER >> 20} MiB: lower --max-points (points per "
                              "series per request) or narrow the GPUs with --node/--workload/--selector") from None
        except requests.exceptions.SSLError as e:
            raise SourceError(f"TLS error talking to Prometheus at {self.url}: {_reason(e)}") from None
        except requests.exceptions.Timeout:
            raise SourceError(f"Prometheus at {self.url} did not answer within {self.timeout:g}s") from None
        except requests.exceptions.InvalidURL:
            raise SourceError(f"not a valid Prometheus URL: {self.url!r}") from None
        except requests.exceptions.MissingSchema:
            raise SourceError(f"not a valid Prometheus URL: {self.url!r} (expected http://HOST:PORT)") from None
        except (requests.RequestException, OSError, *bounded.http_errors()) as e:
            raise SourceError(f"cannot reach Prometheus at {self.url}: {_reason(e)}") from None
        return r

    def _data(self, path: str, r: bounded.Answer) -> Any:
        """The `data` of an answer to a GET of `path` (see get)."""
        where = self.url + path
        if 300 <= r.status < 400 and r.headers.get("Location"):
            to = r.headers["Location"][:200]
            raise SourceError(f"{where} redirects to {to!r} ({r.status} {r.reason}): not followed; "
                              "give --prometheus the URL it should be") from None
        if r.status in (401, 403):
            raise SourceError(f"Prometheus at {self.url} answered {r.status} {r.reason}: "
                              "check --prometheus.username/--prometheus.password-file or --prometheus.bearer-token-file")
        try:
            doc = safetext.loads(r.body)    # strings as valid Unicode: names flow into every output
        except (ValueError, RecursionError):      # RecursionError: JSON nested thousands deep
            doc = None
        if not isinstance(doc, dict):
            raise SourceError(f"{where} answered {r.status} {r.reason} and no Prometheus API JSON: "
                              "is --prometheus the server's base URL?") from None
        if doc.get("status") != "success":
            err = (str(doc.get("error", f"HTTP {r.status}")).splitlines() or [""])[0][:300]
            kind = str(doc.get("errorType", "error"))[:40]
            raise SourceError(f"Prometheus rejected the query ({kind}): {err}")
        data = doc.get("data", {})
        if not isinstance(data, dict):
            raise SourceError(f"{where} answered success without a data object: not the Prometheus API")
        return data

    def _result(self, data: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """The answer's series, each a dict with a label dict of strings."""
        result = data.get("result", [])
        if not isinstance(result, list) or not all(
                isinstance(x, dict) and isinstance(x.get("metric", {}), dict) for x in result):
            raise SourceError(f"Prometheus answered {what} with a result that is not a list of series")
        return result

    @staticmethod
    def _next(answers: "queue.Queue[Any]", worker: threading.Thread) -> Any:
        """The next answer of ranges_ahead's thread (it hands on every exchange, its
        error included, so a thread that is gone without one is a defect, said)."""
        while True:
            try:
                return answers.get(timeout=1.0)
            except queue.Empty:
                if not worker.is_alive():
                    try:
                        return answers.get_nowait()
                    except queue.Empty:
                        raise SourceError("the thread asking Prometheus ended without an answer") from None

    def query(self, q: str, at: float) -> list[dict[str, Any]]:
        return self._result(self.get("/api/v1/query", {"query": q, "time": f"{at:.3f}"}), q)

    def ranges_ahead(self, asks: list[tuple[str, float, float]], step: float) -> Iterator[list[dict[str, Any]]]:
        """/api/v1/query_range's answer to each (query, start, end) of `asks`, in order, the
        next one asked while the one before is read: the server computes an answer and
        encodes its JSON (about 40 % of a report's fetch, measured) on another core
        meanwhile. At most one answer is held ahead, as bytes; it is decoded here, in
        order, so an error is raised where asking one at a time would raise it. Nothing is
        asked past a failed exchange or an HTTP status other than success; past an
        answer that is a success but not one (malformed), one query may have been. The
        thread that asks stops when this generator is closed or dropped."""
        answers: queue.Queue[tuple[bounded.Answer | None, BaseException | None]] = queue.Queue(maxsize=1)
        stop = threading.Event()

        def ask() -> None:
            for q, a, b in asks:
                try:
                    item: tuple[bounded.Answer | None, BaseException | None] = (
                        self._exchange(RANGE_PATH, _range_params(q, a, b, step)), None)
                except BaseException as e:  # noqa: BLE001 (handed to the reader, raised there)
                    item = (None, e)
                while not stop.is_set():
                    try:
                        answers.put(item, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                # nothing is asked past a failed exchange or an answer that is not a
                # success (a refused query, an overloaded server): the reader raises there
                answer, error = item
                if stop.is_set() or error is not None or not 200 <= answer.status < 300:
                    return

        worker = threading.Thread(target=ask, name="gpulse-prometheus-ahead", daemon=True)
        worker.start()
        try:
            for q, _a, _b in asks:
                answer, error = self._next(answers, worker)
                if error is not None:
                    raise error
                yield self._result(self._data(RANGE_PATH, answer), q)
                del answer
        finally:
            stop.set()


RANGE_PATH = "/api/v1/query_range"


def _range_params(q: str, start: float, end: float, step: float) -> dict[str, str]:
    return {"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}


def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError as e:
        raise SourceError(f"cannot read the {what} file {path}: {e.strerror}") from None


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
        values = series.get("values", [])
        try:
            Grid(0.0, 1.0, 0).put_all(values)      # only checks the points: their spacing is all that is read
        except SourceError as e:
            raise SourceError(f"{client.url}: {GPU_SERIES['sampled']}{sel}: {e}") from None
        ts = [float(t) for t, _ in values]
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


def _grids(client: PromClient, answers: Iterator[list[dict[str, Any]]], query: str, parts: list[tuple[float, float]],
           start: float, end: float, step: float, key_of: Callable[[dict[str, Any]], tuple[str, ...]], limit: int,
           what: str, seen: Callable[[tuple[str, ...], dict[str, Any]], None] | None = None,
           chunk_done: Callable[[float, float], None] | None = None) -> dict[tuple[str, ...], Grid]:
    """{key_of(labels): Grid on the step grid} of one query over the range's chunks,
    taken from `answers` (client.ranges_ahead's, one per part). At most `limit` keys
    (`what` names them in the error); `seen` hears every series' key and labels,
    `chunk_done` every chunk fetched."""
    n = steps(start, end, step)
    grids: dict[tuple[str, ...], Grid] = {}
    for a, b in parts:
        result = next(answers)
        while result:              # consumed as copied: one answer's objects at a time
            series = result.pop()
            labels = series.get("metric", {})
            key = key_of(labels)
            grid = grids.get(key)
            if grid is None:
                if len(grids) >= limit:
                    raise SourceError(f"{client.url}: {query} matches more than {limit} {what}: narrow "
                                      "the report with --node, --workload or --selector")
                grid = grids[key] = Grid(start, step, n)
            if seen is not None:
                seen(key, labels)
            try:
                grid.put_all(series.get("values", []))
            except SourceError as e:
                where = ", ".join(f"{k}={str(labels[k])[:60]!r}" for k in ("node", "gpu", "workload") if k in labels)
                raise SourceError(f"{client.url}: {query}{{{where}}}: {e}") from None
        del result
        if chunk_done is not None:
            chunk_done(a, b)
    return grids


def fetch(client: PromClient, sel: str, start: float, end: float, step: float, max_points: int = PROM_MAX_POINTS,
          progress: Callable[[str], None] | None = None) -> dict[str, dict[tuple[str, ...], dict[str, Any]]]:
    """{name: {(node, gpu): {"points": Grid, "workload": str}}} for every GPU_SERIES name,
    and for every CAUSE_SERIES key the same, keyed (node, gpu, label value) where the
    family has an extra label."""
    parts = chunks(start, end, step, max(2, min(max_points, PROM_MAX_POINTS)))
    families = [(name, metric + sel, "") for name, metric in GPU_SERIES.items()]
    families += [(key, metric + _with(sel, CAUSE_MATCHERS.get(key, "")), label)
                 for key, (metric, label) in CAUSE_SERIES.items()]
    families.append((THROTTLE_KNOWN, f"count by (node, gpu) ({CAUSE_SERIES['throttle_seconds_total'][0]}{sel})", ""))
    total = len(parts) * len(families)
    done = 0
    out: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
    answers = client.ranges_ahead([(query, a, b) for _, query, _ in families for a, b in parts], step)
    for name, query, label in families:
        workloads: dict[tuple[str, ...], str] = {}

        def seen(key: tuple[str, ...], labels: dict[str, Any]) -> None:
            workloads[key] = str(labels.get("workload", workloads.get(key, "")))

        def chunk_done(a: float, b: float) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(f"fetched {done}/{total} ranges ({name}, {_iso(a)} .. {_iso(b)})")

        def key_of(labels: dict[str, Any]) -> tuple[str, ...]:
            return ((str(labels.get("node", "")), str(labels.get("gpu", "")))
                    + ((str(labels.get(label, "")),) if label else ()))

        grids = _grids(client, answers, query, parts, start, end, step, key_of, MAX_GPUS, "GPUs", seen, chunk_done)
        out[name] = {key: {"points": grid, "workload": workloads[key]} for key, grid in grids.items()}
    return out


# The exporter's own counters of its peer groups, integrated at its sampling rate: a
# sync stall shorter than a step (most all-reduce waits, a 16 s checkpoint across two
# 15 s steps) is in these and in no step's mean, so the report takes the run's stall
# time and its lost time from them (report/inputs.py), the figures the dashboards and
# the gpulse.lost records show. The lost time is split by reason and cause.
GROUP_SERIES = {
    "stall_seconds": "gpulse_group_sync_stall_seconds_total",
    "stalls": "gpulse_group_sync_stalls_total",
    "held_seconds": "gpulse_group_sampled_seconds_total",
    "lost": "gpulse_group_lost_seconds_total",
    "gpus": "gpulse_group_gpus",
}
_GROUP_KEY = ("node", "workload")
_LOST_KEY = ("node", "workload", "reason", "cause")


def group_totals(client: PromClient, sel: str, start: float, end: float, step: float,
                 max_points: int = PROM_MAX_POINTS) -> dict[tuple[str, str], dict[Any, float]]:
    """{(node, workload): {GROUP_SERIES key: its increase over the range}} for the peer
    groups the selector matches; "gpus" is the most GPUs the group had, and the lost
    time is keyed ("lost", reason, cause). Increases are of the raw values on the step
    grid, a reset counting the new value, as the GPU counters' are. One series per
    group and key: two jobs scraping one exporter are not twice its stalls."""
    parts = chunks(start, end, step, max(2, min(max_points, PROM_MAX_POINTS)))
    out: dict[tuple[str, str], dict[Any, float]] = {}
    answers = client.ranges_ahead([(metric + sel, a, b) for metric in GROUP_SERIES.values() for a, b in parts], step)
    for name, metric in GROUP_SERIES.items():
        names = _LOST_KEY if name == "lost" else _GROUP_KEY
        grids = _grids(client, answers, metric + sel, parts, start, end, step,
                       lambda labels: tuple(str(labels.get(k, "")) for k in names), 8 * MAX_GPUS, "series")
        for key, grid in grids.items():
            vals = grid.values()
            slot = out.setdefault(key[:2], {})
            if name == "gpus":
                slot[name] = max(vals, default=0.0)
            else:
                slot[(name, *key[2:]) if name == "lost" else name] = increase(vals)
    return out


def increase(values: list[float]) -> float:
    """A counter's increase over its successive values; a drop is a reset (an exporter
    restart), after which the new value counts whole."""
    total = 0.0
    for a, b in zip(values, values[1:]):
        total += b - a if b >= a else b
    return total


def _with(sel: str, matcher: str) -> str:
    """The selector `{...}` with one more matcher."""
    if not matcher:
        return sel
    return sel[:-1] + ("," if sel != "{}" else "") + matcher + "}"


def steps(start: float, end: float, step: float) -> int:
    """Steps of the grid start, start + step, .. up to end."""
    return int(math.floor((end - start) / step + 1e-9)) + 1


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class PromRangeSource(Source):
    """Fetched range data replayed as samples: one sample per step per GPU, made
    when the engine asks for the steps they fall in."""

    name = "prometheus"
    has_sm_active = True          # `active` from the exporter is the real-work measure
    # One step a poll: run_offline splits a poll at every analysis tick (one a step
    # here), copying the rest of each GPU's samples each time, quadratic in the poll.
    STEPS_PER_POLL = 1

    def __init__(self, data: dict[str, dict[tuple[str, ...], dict[str, Any]]], start: float, end: float, step: float):
        self.step = step
        self.times = [start + k * step for k in range(steps(start, end, step))]
        nodes = sorted({n for n, _ in data.get("sampled", {})})
        self.first_node = nodes[0] if nodes else ""
        self.keys: dict[tuple[str, str], str] = {}
        for node, gpu in sorted(data.get("sampled", {}), key=lambda k: (k[0] != self.first_node, k[0], _num(k[1]))):
            self.keys[(node, gpu)] = gpu if node == self.first_node else f"{node}:{gpu}"
        self.grids = {self.keys[k]: tuple(self._aligned(data.get(name, {}).get(k, {}).get("points"), start, step)
                                          for name in ("busy", "active", "sampled", "memory"))
                      for k in self.keys}
        self.workloads = {self.keys[k]: data["sampled"][k]["workload"] for k in self.keys}
        mt = data.get("memory_total", {})
        self.mem_total = {self.keys[k]: max(mt[k]["points"].values()) for k in self.keys
                          if k in mt and mt[k]["points"].values()}
        # the cause families of each GPU: (catalog key, label value or None, values on the grid)
        self.cause: dict[str, list[tuple[str, str | None, array]]] = {k: [] for k in self.grids}
        for name, (_, label) in (*CAUSE_SERIES.items(), (THROTTLE_KNOWN, ("", ""))):
            for skey, slot in sorted(data.get(name, {}).items()):
                gk = self.keys.get(skey[:2])
                if gk is not None:
                    self.cause[gk].append((name, skey[2] if label else None,
                                           self._aligned(slot["points"], start, step)))
        # counters as last seen: a step without a scrape keeps them, as a live source's do
        self._counters: dict[str, dict[str, Any]] = {k: {} for k in self.grids}
        self._prev: dict[str, tuple[float, float, float] | None] = {k: None for k in self.grids}
        # what every reading of a GPU carries besides samples, built once
        self._fixed = {k: ({"workload": self.workloads[k]} if self.workloads.get(k) else None,
                           {"memory_total_bytes": self.mem_total[k]} if k in self.mem_total else {})
                       for k in self.grids}
        self._k = 0
        self._done = False

    def _aligned(self, points: Any, start: float, step: float) -> array:
        """The series as an array on this source's step grid (NaN: no value)."""
        if isinstance(points, Grid) and points.start == start and points.step == step \
                and len(points.a) == len(self.times):
            return points.a
        if not points:
            return array("d", [NAN]) * len(self.times)
        return array("d", (NAN if (v := points.get(round(t, 3))) is None else v for t in self.times))

    def node_and_gpu(self, key: str) -> tuple[str, str]:
        if ":" in key:
            node, _, gpu = key.rpartition(":")
            return node, gpu
        return self.first_node, key

    def _samples(self, key: str, k0: int, k1: int) -> list[Sample]:
        """Samples of steps k0..k1-1: each step's counter increases over the sampled
        time since the previous step that had a scrape."""
        busy, active, sampled, mem = self.grids[key]
        prev = self._prev[key]
        times = self.times
        out: list[Sample] = []
        for k in range(k0, k1):
            b, a, s = busy[k], active[k], sampled[k]
            if b != b or a != a or s != s:
                continue
            m = mem[k]
            m = None if m != m else m
            if prev is not None:
                pb, pa, ps = prev
                # reset: the new value is the increase
                db, da, ds = (b - pb if b >= pb else b), (a - pa if a >= pa else a), (s - ps if s >= ps else s)
                if ds <= 0:
                    continue                      # no scrape in between: fold into the next step
                out.append(Sample(t=times[k], util=_clamp(db / ds), sm_active=_clamp(da / ds),
                                  memory_used_bytes=m))
            else:
                out.append(Sample(t=times[k], util=None, memory_used_bytes=m))   # anchor
            prev = (b, a, s)
        self._prev[key] = prev
        return out

    def _cause_values(self, key: str, k0: int, k1: int, gauges: dict[str, Any]) -> dict[str, Any]:
        """The latest value of each cause family in steps k0..k1-1: gauges into `gauges`
        (absent without a value, as an unread gauge), counters into the GPU's last-seen
        counters; returns a copy of those."""
        counters = self._counters[key]
        for name, lv, a in self.cause[key]:
            v = NAN
            for k in range(k1 - 1, k0 - 1, -1):
                if a[k] == a[k]:
                    v = a[k]
                    break
            if v != v:
                continue
            if name == THROTTLE_KNOWN:
                counters.setdefault("throttle_seconds_total", {})
            elif name in CAUSE_GAUGES:
                gauges[name] = v
            elif lv is None:
                counters[name] = v
            else:
                counters.setdefault(name, {})[(lv,)] = v
        return {n: dict(v) if isinstance(v, dict) else v for n, v in counters.items()}

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(gpu=k) for k in self.grids]

    @property
    def finished(self) -> bool:
        return self._done

    def poll(self, now: float) -> PollResult:
        k0, k1 = self._k, min(self._k + self.STEPS_PER_POLL, len(self.times))
        readings = []
        for key, (attr, fixed) in self._fixed.items():
            gauges = dict(fixed)
            counters = self._cause_values(key, k0, k1, gauges) if self.cause[key] else {}
            readings.append(Reading(key, self._samples(key, k0, k1), gauges, counters, True, None, attr))
        self._k = k1
        if self._k >= len(self.times):
            self._done = True
        return PollResult(readings)


def _num(s: str) -> tuple:
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def _clamp(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x
