"""`gpulse export`: a recorded run as the OpenMetrics a Prometheus would have stored.

    gpulse export --input ckpt50.csv --scrape-interval 15s --node h100-a > run.om
    promtool tsdb create-blocks-from openmetrics run.om data/

The log is replayed through the same engine `gpulse serve --source replay` runs
(drive.run_offline in virtual time, at replay speed 1 and with the engine's wall
clock anchored at the recorded start, so every timestamp is the recorded one) and
each snapshot is rendered by the collector that serves /metrics. A scrape at time T
returns the snapshot of the latest analysis tick at or before T, so the output holds,
for every T on a grid of the scrape interval (aligned to the Unix clock), exactly that
snapshot's series stamped T, plus the two staleness gauges computed at T. The
export starts at the first analysis tick (a live exporter also serves a partial
snapshot from its very first poll, up to a second before that). The exporting
process's own process_* series and poll-duration histogram are left out: they
would describe this command, not the run.

Exit codes: 0 written, 2 bad arguments, 1 the log could not be read (one line on
stderr, never a traceback).
"""
from __future__ import annotations

import math
import os
import re
import sys
from typing import Any, BinaryIO, Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from .collector import encode, live_families, snapshot_families
from .config import FIELD_BY_KEY, ConfigError, load_config, parse_duration
from .drive import run_offline
from .engine import Snapshot
from .safetext import terminal
from .sources.base import SourceError


# A label value a user types: printable, no line breaks (any UTF-8 is a valid value,
# but a control character in a workload name is a mistake, not a name).
_LABEL_VALUE = re.compile(r"[^\x00-\x1f\x7f]{1,253}")


class ExportError(Exception):
    """One line for stderr; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class _Opened:
    """A source that has been opened already (to learn the recorded start), handed to
    run_offline, which opens its source again: the log is parsed once. `workload`,
    when given, is every reading's workload, as attribution would give it: the GPUs
    form that workload's peer group and every per-GPU and group series carries it,
    so the per-node exports of one job compare across nodes in the rules."""

    def __init__(self, source: Any, devices: list, workload: str = ""):
        self._source, self._devices, self._workload = source, devices, workload

    def open(self) -> list:
        return self._devices

    def poll(self, now: float) -> Any:
        res = self._source.poll(now)
        if self._workload:
            for r in res.readings:
                r.attribution = {**(r.attribution or {}), "workload": self._workload}
        return res

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def replay_config(path: str, fmt: str = "auto", node: str = "") -> Any:
    """The Config `gpulse serve --source replay --replay.file PATH` runs with."""
    try:
        return load_config(overrides={"source": "replay", "replay.file": path, "replay.format": fmt,
                                      "replay.speed": 1, "node_name": node or None}, environ={})
    except ConfigError as e:
        raise ExportError(str(e), 2) from None


def scrapes(cfg: Any, interval: float, workload: str = "") -> Iterator[tuple[float, Snapshot]]:
    """(scrape time, snapshot served then) for every scrape of a replay of cfg's log,
    scrape times on the `interval` grid, until the first scrape after the last
    snapshot (which serves the final values, as a finished replay keeps doing);
    `workload`: see _Opened."""
    from .sources.replay import ReplaySource

    if not os.path.isfile(cfg.replay.file):
        raise ExportError(f"{cfg.replay.file}: no such file")
    source = ReplaySource(cfg)
    try:
        devices = source.open()
        start = source.run.start
        if start is None:
            raise ExportError(f"{cfg.replay.file}: no samples to export")
        served: Snapshot | None = None
        t = None
        for _engine, snap in run_offline(_Opened(source, devices, workload), cfg, wall0=start):
            if t is None:
                t = math.ceil(snap.wall / interval) * interval
            while served is not None and t < snap.wall:
                yield t, served
                t += interval
            served = snap
        if served is not None:
            while t < served.wall:
                t += interval
            yield t, served
    except SourceError as e:
        raise ExportError(str(e)) from None


def _health(snap: Snapshot, t: float, cfg: Any, final: bool) -> dict[str, Any]:
    since = t - (snap.last_success_wall if snap.last_success_wall is not None else snap.wall)
    return {"stale": (not final) and since > cfg.stale_after, "seconds_since_success": since}


class _Series:
    """Every sample of every family, kept per series in time order: OpenMetrics
    wants a family's lines together, and promtool a series' samples in order."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, dict[tuple, list[Sample]]]] = {}

    def add(self, families: Iterable[Metric], t: float) -> None:
        for fam in families:
            _, _, series = self.families.setdefault(fam.name, (fam.type, fam.documentation, {}))
            for s in fam.samples:
                key = (s.name, tuple(s.labels.items()))
                series.setdefault(key, []).append(Sample(s.name, s.labels, s.value, t))

    def metrics(self) -> list[Metric]:
        out = []
        for name, (kind, doc, series) in self.families.items():
            m = Metric(name, doc, kind)
            for samples in series.values():
                m.samples.extend(samples)
            out.append(m)
        return out


def export(cfg: Any, interval: float, out: BinaryIO, workload: str = "") -> int:
    """Write the OpenMetrics text of a replay of cfg's log scraped every `interval`
    seconds (every per-GPU and group series labelled `workload` when given);
    returns the number of scrapes."""
    store = _Series()
    pending: tuple[float, Snapshot] | None = None
    n = 0
    for t, snap in scrapes(cfg, interval, workload):
        if pending is not None:
            _scrape(store, cfg, *pending, final=False)
            n += 1
        pending = (t, snap)
    if pending is None:
        raise ExportError(f"{cfg.replay.file}: no samples to export")
    _scrape(store, cfg, *pending, final=True)
    out.write(encode(store.metrics(), openmetrics=True))
    return n + 1


def _scrape(store: _Series, cfg: Any, t: float, snap: Snapshot, final: bool) -> None:
    store.add(snapshot_families(snap), t)
    store.add(live_families(snap.node, _health(snap, t, cfg, final)), t)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="a recorded log as OpenMetrics for promtool backfilling",
                       description="Write the OpenMetrics text that a Prometheus scraping `gpulse serve "
                                   "--source replay` of the log at --scrape-interval would have stored, with "
                                   "the recorded timestamps; load it with `promtool tsdb create-blocks-from "
                                   "openmetrics`.")
    p.add_argument("--input", metavar="FILE", required=True,
                   help="recorded log: nvidia-smi CSV, dmon, nvidia-smi -q or dcgm-exporter output")
    p.add_argument("--input-format", default="auto", choices=FIELD_BY_KEY["replay.format"].choices,
                   help="format of --input (default: auto)")
    p.add_argument("--scrape-interval", default="15s", metavar="DURATION",
                   help="Prometheus scrape interval to emulate (default: 15s)")
    p.add_argument("--node", default="", metavar="NAME",
                   help="value of the node label (default: as gpulse serve: $NODE_NAME, else the hostname)")
    p.add_argument("--workload", default="", metavar="NAME",
                   help="workload label on every per-GPU and group series, as attribution would give it "
                        "(one job's per-node exports then compare across nodes in the rules; default: none)")
    p.set_defaults(run=run)


def run(ns: Any) -> int:
    try:
        try:
            interval = parse_duration(ns.scrape_interval)
        except ValueError as e:
            raise ExportError(f"--scrape-interval: {e}", 2) from None
        if not interval > 0:
            raise ExportError("--scrape-interval: must be positive", 2)
        if ns.workload and not _LABEL_VALUE.fullmatch(ns.workload):
            raise ExportError(f"--workload: {ns.workload!r} is not a printable label value", 2)
        cfg = replay_config(ns.input, ns.input_format, ns.node)
        export(cfg, interval, sys.stdout.buffer, ns.workload)
        sys.stdout.buffer.flush()
    except ExportError as e:
        print(f"gpulse export: {terminal(str(e))}", file=sys.stderr)
        return e.code
    except BrokenPipeError:
        return 1
    return 0
