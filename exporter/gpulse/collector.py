"""Snapshot → Prometheus exposition.

The snapshot part is rendered once per snapshot and format and then served from
cache, so a scrape costs a dictionary lookup plus the two live staleness series no
matter how many GPUs the node has; the process_* series are read from /proc at most
once per PROCESS_MAX_AGE. Nothing here calls a source.
"""
from __future__ import annotations

import platform
import threading
import time
import zlib
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client import exposition as text_exposition
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om_exposition
from prometheus_client.utils import floatToGoString

from . import __version__
from .catalog import COUNTERS, GAUGES
from .engine import GpuView, Snapshot
from .sources.base import EVENTS as SOURCE_EVENTS

OPENMETRICS_TYPE = om_exposition.CONTENT_TYPE_LATEST
# 0.0.4 is what every Prometheus version and most scrapers understand
TEXT_TYPE = text_exposition.CONTENT_TYPE_PLAIN_0_0_4
# How old the process_* series (CPU, memory, descriptors, start time) may be when
# served. Reading them opens and parses three /proc files and lists the descriptors:
# about a third of what a cached scrape costs. A scraper asking more often than once
# a second sees the same values for that second; one at a Prometheus pace never does.
PROCESS_MAX_AGE = 1.0
_EOF = b"# EOF\n"


def _gpu_labels(node: str, v: GpuView) -> dict[str, str]:
    labels = {"node": node, "gpu": v.info.gpu}
    labels.update(v.attribution)
    return labels


def _group_labels(node: str, workload: str) -> dict[str, str]:
    return {"node": node, "workload": workload} if workload else {"node": node}


class _Families:
    """Ordered metric families built in one pass."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def add(self, name: str, kind: str, doc: str, labels: dict[str, str], value: float,
            sample_name: str | None = None) -> None:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = Metric(name, doc, kind)
        if sample_name is None:
            sample_name = name + "_total" if kind == "counter" else name
        fam.add_sample(sample_name, labels, value)

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        # OpenMetrics names the family without _total and the sample with it
        self.add(name[:-6] if name.endswith("_total") else name, "counter", doc, labels, value)

    def gauge(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.add(name, "gauge", doc, labels, value)


def snapshot_families(snap: Snapshot, attribution_health: tuple[bool, dict[str, int], int] | None = None) -> list[Metric]:
    f = _Families()
    node = snap.node
    f.gauge("gpulse_build_info", "gpulse version and source; value 1.",
            {"version": __version__, "source": snap.source, "python_version": platform.python_version()}, 1)
    for v in snap.gpus:
        lab = _gpu_labels(node, v)
        f.gauge("gpulse_gpu_up", "1 when the GPU answered its last poll, 0 when it is lost or unreadable.", lab, 1 if v.up else 0)
        i = v.info
        f.gauge("gpulse_gpu_info", "GPU identity; value 1. Join on (node, gpu).",
                {"node": node, "gpu": i.gpu, "uuid": i.uuid, "model": i.model, "pci_bus_id": i.pci_bus_id,
                 "driver": i.driver, "cuda_version": i.cuda_version, "mig_profile": i.mig_profile,
                 "gpu_instance": i.gpu_instance, "parent_uuid": i.parent_uuid}, 1)
        tot = v.totals
        f.counter("gpulse_gpu_busy_seconds_total", "Integral of utilisation over time; rate() is the mean utilisation.", lab, tot.busy)
        f.counter("gpulse_gpu_active_seconds_total", "Integral of real work (see --activity) over time.", lab, tot.active)
        f.counter("gpulse_gpu_spin_wait_seconds_total", "Time reported busy but not active: waiting inside a collective.", lab, tot.spin_wait)
        f.counter("gpulse_gpu_idle_seconds_total", "Time with utilisation below --idle-threshold.", lab, tot.idle)
        f.counter("gpulse_gpu_sampled_seconds_total", "Time covered by samples; rate() below 1 means gaps.", lab, tot.sampled)
        if v.util_ratio is not None:
            f.gauge("gpulse_gpu_utilization_ratio", "Mean utilisation over the analysis window.", lab, v.util_ratio)
        if v.active_ratio is not None:
            f.gauge("gpulse_gpu_active_ratio", "Mean activity (real work) over the analysis window.", lab, v.active_ratio)
        if v.deviation_active is not None:
            doc = "Robust z-score of this GPU's fraction against its peer group's median (MAD with a floor)."
            f.gauge("gpulse_gpu_peer_deviation", doc, {**lab, "signal": "busy"}, v.deviation_busy or 0.0)
            f.gauge("gpulse_gpu_peer_deviation", doc, {**lab, "signal": "active"}, v.deviation_active)
            f.gauge("gpulse_gpu_straggler", "1 while the detection model confirms this GPU as a straggler "
                    "(costing its peers at least straggler_cost_ratio of their time, beyond the group's "
                    "measured noise, for straggler_min_span_seconds), else 0.", lab,
                    1.0 if v.straggler is not None else 0.0)
        if v.peer_wait is not None:
            f.gauge("gpulse_gpu_peer_wait_ratio", "Share of its peers' time over the analysis window spent waiting "
                    "for this GPU (it computes while they wait, or its rank is off the GPU while they spin-wait); "
                    "a measurement, 0 when nobody waits for it.", lab, v.peer_wait)
            if v.cause is not None:
                f.gauge("gpulse_gpu_straggler_cause", "1 for the cause the detection model gives a confirmed "
                        "straggler (label cause: throttling, degraded_hardware, more_work, off_gpu, unknown); "
                        "absent for other GPUs.", {**lab, "cause": v.cause.cause}, 1)
        if v.last_sample_wall is not None:
            f.gauge("gpulse_gpu_last_sample_timestamp_seconds", "Unix time of this GPU's latest sample.", lab, v.last_sample_wall)
        for kind, values, catalog in (("gauge", v.gauges, GAUGES), ("counter", v.counters, COUNTERS)):
            for key, val in values.items():
                fam = catalog.get(key)
                if fam is not None:
                    _add_family(f, kind, fam.key, fam.help, fam.labels, lab, val)
    for g in snap.groups:
        lab = _group_labels(node, g.workload)
        f.gauge("gpulse_group_gpus", "GPUs in the peer group.", lab, len(g.gpus))
        f.gauge("gpulse_group_active", "1 while the peer group holds a workload (memory allocated or a process attached).", lab, 1 if g.holding else 0)
        f.counter("gpulse_group_sync_stall_seconds_total", "Time every GPU of the group was not active at once while it held a workload.", lab, g.stall_seconds)
        f.counter("gpulse_group_sync_stalls_total", "Sync-stall episodes at least --min-stall long.", lab, g.stalls_total)
        f.counter("gpulse_group_sampled_seconds_total", "Time the group was observed holding a workload; denominator of the stall fraction.", lab, g.holding_seconds)
        if g.imbalance is not None:
            f.gauge("gpulse_group_imbalance_ratio", "(max - min) / max of per-GPU active fractions over the analysis window (a measurement: present while the group is).", lab, g.imbalance)
            f.gauge("gpulse_group_imbalance_explained", "1 while stragglers explain the group's spread (a verdict: "
                    "then it is not imbalance), else 0.", lab, 1 if g.imbalance_explained else 0)
        for (reason, why), seconds in g.lost:
            f.counter("gpulse_group_lost_seconds_total", "GPU-seconds the group lost, by reason (sync_stall, "
                      "straggler: its peers waiting for it, imbalance) and, for a straggler, its cause.",
                      {**lab, "reason": reason, "cause": why}, seconds)
        if g.load_balance is not None:
            f.gauge("gpulse_group_load_balance_ratio", "mean / max of per-GPU active fractions over the analysis window (1 = even).", lab, g.load_balance)
        if g.stall_period is not None:
            f.gauge("gpulse_group_stall_period_seconds", "Dominant period of recurring sync stalls.", lab, g.stall_period)
    n_lab = {"node": node}
    if snap.last_success_wall is not None:
        f.gauge("gpulse_exporter_last_sample_timestamp_seconds", "Unix time of the last successful poll of the source.", n_lab, snap.last_success_wall)
    f.gauge("gpulse_exporter_snapshot_timestamp_seconds", "Unix time the served values were computed.", n_lab, snap.wall)
    for call, n in sorted(snap.call_errors.items()):
        f.counter("gpulse_source_errors_total", "Failed source calls, by call.", {**n_lab, "call": call}, n)
    for (family, value), n in sorted(snap.source_events.items()):
        help_text, label = SOURCE_EVENTS[family]
        f.counter(f"gpulse_source_{family}", help_text, {**n_lab, label: value} if label else n_lab, n)
    d = snap.health.get("durations")
    if d:
        hist = Metric("gpulse_exporter_sample_duration_seconds", "Time of one poll of the source plus ingest.", "histogram")
        for le, c in d["buckets"]:
            hist.add_sample("gpulse_exporter_sample_duration_seconds_bucket", {**n_lab, "le": _fmt_le(le)}, c)
        hist.add_sample("gpulse_exporter_sample_duration_seconds_bucket", {**n_lab, "le": "+Inf"}, d["count"])
        hist.add_sample("gpulse_exporter_sample_duration_seconds_count", n_lab, d["count"])
        hist.add_sample("gpulse_exporter_sample_duration_seconds_sum", n_lab, d["sum"])
        f.families[hist.name] = hist
    if attribution_health is not None:
        up, errors, rewritten = attribution_health
        f.gauge("gpulse_attribution_up", "1 when GPU-to-workload attribution works.", n_lab, 1 if up else 0)
        f.gauge("gpulse_attribution_rewritten_label_values",
                "Attribution label values cut to 253 characters plus a hash, or with invalid text replaced.",
                n_lab, rewritten)
        for reason, n in sorted(errors.items()):
            f.counter("gpulse_attribution_errors_total", "Attribution failures, by reason.", {**n_lab, "reason": reason}, n)
    return list(f.families.values())


def _fmt_le(v: float) -> str:
    return repr(float(v))


def _add_family(f: _Families, kind: str, key: str, doc: str, extra: tuple[str, ...],
                lab: dict[str, str], val: Any) -> None:
    name = "gpulse_gpu_" + key
    if extra:
        if not isinstance(val, dict):
            return
        for lv, x in sorted(val.items()):
            (f.counter if kind == "counter" else f.gauge)(name, doc, {**lab, **dict(zip(extra, lv))}, x)
    elif not isinstance(val, dict):
        (f.counter if kind == "counter" else f.gauge)(name, doc, lab, val)


class _Static:
    def __init__(self, families: Iterable[Metric]):
        self._families = list(families)

    def collect(self):
        return self._families


# The series computed at scrape time, from plain attribute reads (never the source):
# (name, help, value from the sampler's health()).
LIVE: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("gpulse_exporter_stale", "1 when no poll of the source has succeeded for --stale-after.",
     lambda h: 1 if h["stale"] else 0),
    ("gpulse_exporter_seconds_since_last_sample", "Seconds since the last successful poll of the source.",
     lambda h: h["seconds_since_success"]),
)


def live_families(node: str, h: dict[str, Any]) -> list[Metric]:
    out = []
    for name, doc, value in LIVE:
        m = Metric(name, doc, "gauge")
        m.add_sample(name, {"node": node}, value(h))
        out.append(m)
    return out


class _Live:
    """The LIVE series of every scrape, as the encoder writes live_families(): each
    family is rendered once per format with a placeholder value, and a scrape puts
    the values in with the encoder's own number format. Running the encoder itself
    on every scrape cost more than the rest of a cached answer."""

    _VALUE = b"0.0\n"       # how the encoder writes the placeholder 0, at the end of its line

    def __init__(self, node: str, health: Callable[[], dict[str, Any]]):
        self.node = node
        self.health = health
        zero = {"stale": False, "seconds_since_success": 0}
        self._heads: dict[bool, list[bytes]] = {}
        for om in (False, True):
            heads = []
            for fam in live_families(node, zero):
                text = _render(_Static([fam]), om)
                if om:
                    text = text[: -len(_EOF)]
                assert text.endswith(b" " + self._VALUE), text
                heads.append(text[: -len(self._VALUE)])
            self._heads[om] = heads

    def render(self, openmetrics: bool) -> bytes:
        h = self.health()
        return b"".join(head + floatToGoString(value(h)).encode() + b"\n"
                        for head, (_, _, value) in zip(self._heads[openmetrics], LIVE))


class Exposition:
    """Renders /metrics bodies: cached snapshot part + live part."""

    def __init__(self, node: str, get_snapshot: Callable[[], Snapshot | None],
                 health: Callable[[], dict[str, Any]],
                 attribution_health: Callable[[], tuple[bool, dict[str, int], int]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.get_snapshot = get_snapshot
        self.attribution_health = attribution_health
        self.live = _Live(node, health)
        self.process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.process)
        self.clock = clock
        # keyed by the snapshot object itself, held: an id() alone could be reused by a
        # newer snapshot once the old one is freed, and the stale body served again
        self._cache: dict[tuple[bool, bool], tuple[Snapshot, bytes]] = {}
        # openmetrics -> (clock when read, process_* rendered); replaced whole, so a
        # scrape on another thread reads either the old pair or the new one
        self._process: dict[bool, tuple[float, bytes]] = {}
        self._lock = threading.Lock()

    def _snapshot_body(self, snap: Snapshot, openmetrics: bool, gzip: bool) -> bytes:
        hit = self._cache.get((openmetrics, gzip))
        if hit is not None and hit[0] is snap:
            return hit[1]
        if gzip:
            body = _gzip(self._snapshot_body(snap, openmetrics, False))
            self._cache[(openmetrics, True)] = (snap, body)
            return body
        with self._lock:   # one render per snapshot even under concurrent scrapes
            hit = self._cache.get((openmetrics, False))
            if hit is not None and hit[0] is snap:
                return hit[1]
            ah = self.attribution_health() if self.attribution_health else None
            reg = _Static(snapshot_families(snap, ah))
            body = _render(reg, openmetrics)
            if openmetrics:
                body = body[: -len(_EOF)]
            self._cache[(openmetrics, False)] = (snap, body)
            return body

    def cached(self, openmetrics: bool, gzip: bool = False) -> bool:
        """Whether render() would serve the snapshot part from cache (no render, no
        compression): the server then answers on its event loop, else on a worker."""
        snap = self.get_snapshot()
        hit = self._cache.get((openmetrics, gzip))
        return snap is None or (hit is not None and hit[0] is snap)

    def render_key(self, openmetrics: bool, gzip: bool = False) -> tuple[int, bool, bool] | None:
        """What render() would have to build first (the current snapshot in this format
        and encoding), or None when it is cached: concurrent scrapes of one new
        snapshot wait for one render instead of each taking a thread to wait for it."""
        snap = self.get_snapshot()
        if snap is None or self.cached(openmetrics, gzip):
            return None
        return id(snap), openmetrics, gzip

    def warm(self, openmetrics: bool, gzip: bool = False) -> None:
        """Build the snapshot part of render() into the cache."""
        snap = self.get_snapshot()
        if snap is not None:
            self._snapshot_body(snap, openmetrics, gzip)

    def render(self, openmetrics: bool, gzip: bool = False) -> bytes:
        """The body; gzip: as one gzip stream of two members (RFC 1952 2.2), the
        snapshot part compressed once per snapshot, the small live part per scrape."""
        snap = self.get_snapshot()
        live = self._live_body(openmetrics)
        if gzip:
            live = _gzip(live)
        if snap is None:
            return live
        return self._snapshot_body(snap, openmetrics, gzip) + live


    def _live_body(self, openmetrics: bool) -> bytes:
        """The staleness series, read now, then process_*, at most PROCESS_MAX_AGE old
        (the OpenMetrics "# EOF" once, at the end)."""
        live = self.live.render(openmetrics)
        now = self.clock()
        hit = self._process.get(openmetrics)
        if hit is None or not 0 <= now - hit[0] < PROCESS_MAX_AGE:
            hit = self._process[openmetrics] = (now, _render(self.process, openmetrics))
        return live + hit[1]


def _gzip(data: bytes) -> bytes:
    # level 1: the exposition is repetitive text, the fastest level already takes
    # it to ~10 %; higher levels cost CPU on every new snapshot for a few % more
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _render(registry: Any, openmetrics: bool) -> bytes:
    if openmetrics:
        return om_exposition.generate_latest(registry)
    return text_exposition.generate_latest(registry)


def encode(families: Iterable[Metric], openmetrics: bool) -> bytes:
    """Families as exposition bytes, in the text format or OpenMetrics (`gpulse export`)."""
    return _render(_Static(families), openmetrics)


def wants_openmetrics(accept: str | None) -> bool:
    """Content negotiation: OpenMetrics only when the scraper asks for it."""
    if not accept:
        return False
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        if media == "application/openmetrics-text":
            q = 1.0
            for param in part.split(";")[1:]:
                k, _, val = param.strip().partition("=")
                if k == "q":
                    try:
                        q = float(val)
                    except ValueError:
                        q = 0.0
            return q > 0
    return False

