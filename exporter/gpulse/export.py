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

Several logs (a glob, or several paths) are one job, a log per node
(sources/recorded/job.py): each is replayed as its node's exporter would have served
it, its clock moved by the offset the alignment found, every series labelled with the
job's workload, all in one output.

Exit codes: 0 written, 2 bad arguments, 1 the log could not be read (one line on
stderr, never a traceback).
"""
from __future__ import annotations

import math
import os
import re
import sys
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator

from .config import FIELD_BY_KEY, ConfigError, load_config, parse_duration
from .safetext import terminal
from .sources.base import SourceError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    from .engine import Snapshot

# The exposition side (prometheus_client, the collector, the engine) is imported where
# an export runs, not here: the command line imports this module to declare the
# command, and every other command (check-config, report) would pay for it at start-up.


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


def scrapes(cfg: Any, interval: float, workload: str = "", source: Any = None) -> Iterator[tuple[float, Snapshot]]:
    """(scrape time, snapshot served then) for every scrape of a replay of cfg's log
    (or of `source`, a replay source over it), scrape times on the `interval` grid,
    until the first scrape after the last snapshot (which serves the final values, as
    a finished replay keeps doing); `workload`: see _Opened."""
    from .drive import run_offline
    from .sources.replay import ReplaySource

    if not os.path.isfile(cfg.replay.file):
        raise ExportError(f"{cfg.replay.file}: no such file")
    source = source or ReplaySource(cfg)
    source.read_ahead = True      # a long log is read on a core of its own (sources/recorded/ahead.py)
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


class Series:
    """Every sample of every family, kept per series in time order: OpenMetrics
    wants a family's lines together, and promtool a series' samples in order."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, dict[tuple, list[Sample]]]] = {}
        self.owner: dict[tuple, str] = {}    # series -> the node whose replay wrote it

    def add(self, families: Iterable[Metric], t: float, node: str = "") -> None:
        """`node`: the replay the scrape is of; a series another node's replay wrote
        (one without a node label: gpulse_build_info) is kept as that node wrote it."""
        from prometheus_client.samples import Sample
        for fam in families:
            _, _, series = self.families.setdefault(fam.name, (fam.type, fam.documentation, {}))
            for s in fam.samples:
                key = (s.name, tuple(s.labels.items()))
                if self.owner.setdefault(key, node) == node:
                    series.setdefault(key, []).append(Sample(s.name, s.labels, s.value, t))

    def metrics(self) -> list[Metric]:
        from prometheus_client.metrics_core import Metric
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
    from .collector import encode
    store = Series()
    n = _add_scrapes(store, cfg, scrapes(cfg, interval, workload))
    out.write(encode(store.metrics(), openmetrics=True))
    return n


def export_job(paths: list[str], names: list[str], fmt: str, interval: float, out: BinaryIO,
               workload: str = "") -> int:
    """The per-node logs of one job as the OpenMetrics its nodes' exporters would have
    left in one Prometheus: each log replayed as its node (sources/recorded/job.py
    names the nodes and aligns their clocks), every series labelled with the job's
    workload (default: what the node names share); returns the number of scrapes."""
    from .collector import encode
    from .sources.recorded import job
    try:
        cfg0 = replay_config(paths[0], fmt)
        aligned = job.job_logs(paths, names, fmt, cfg0.idle_threshold, cfg0.power_gate)
    except SourceError as e:
        raise ExportError(str(e)) from None
    for note in ([aligned.applied()] if aligned.applied() else []) + aligned.notes:
        print(f"gpulse export: {terminal(note)}", file=sys.stderr)
    workload = workload or job.job_name([lg.node for lg in aligned.logs])
    store = Series()
    n = 0
    for lg in aligned.logs:
        cfg = replay_config(lg.path, fmt, lg.node)
        n += _add_scrapes(store, cfg, scrapes(cfg, interval, workload, job.JobReplay(cfg, [lg], "", keyed=False)))
    out.write(encode(store.metrics(), openmetrics=True))
    return n


def _add_scrapes(store: "Series", cfg: Any, served: Iterable[tuple[float, Snapshot]]) -> int:
    pending: tuple[float, Snapshot] | None = None
    n = 0
    for t, snap in served:
        if pending is not None:
            store_scrape(store, cfg, *pending, final=False)
            n += 1
        pending = (t, snap)
    if pending is None:
        raise ExportError(f"{cfg.replay.file}: no samples to export")
    store_scrape(store, cfg, *pending, final=True)
    return n + 1


def store_scrape(store: Series, cfg: Any, t: float, snap: Snapshot, final: bool) -> None:
    """What a scrape at `t` of the exporter serving `snap` returns, into `store`
    (`final`: the replay's last snapshot, which a finished replay serves as not stale)."""
    from .collector import live_families, snapshot_families
    store.add(snapshot_families(snap), t, snap.node)
    store.add(live_families(snap.node, _health(snap, t, cfg, final)), t, snap.node)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="a recorded log as OpenMetrics for promtool backfilling",
                       description="Write the OpenMetrics text that a Prometheus scraping `gpulse serve "
                                   "--source replay` of the log at --scrape-interval would have stored, with "
                                   "the recorded timestamps; load it with `promtool tsdb create-blocks-from "
                                   "openmetrics`.")
    p.add_argument("--input", metavar="FILE", required=True, nargs="+", action="extend",
                   help="recorded log: nvidia-smi CSV, dmon, nvidia-smi -q or dcgm-exporter output; several logs or "
                        "glob patterns are one job, a log per node (their clocks aligned, as gpulse report does)")
    p.add_argument("--input-format", default="auto", choices=FIELD_BY_KEY["replay.format"].choices,
                   help="format of --input (default: auto)")
    p.add_argument("--scrape-interval", default="15s", metavar="DURATION",
                   help="Prometheus scrape interval to emulate (default: 15s)")
    p.add_argument("--node", action="append", default=[], metavar="NAME",
                   help="value of the node label, once per log in the order of the logs (default: one log: as "
                        "gpulse serve: $NODE_NAME, else the hostname; several: the log's hostname, else its file "
                        "name without the extension)")
    p.add_argument("--workload", default="", metavar="NAME",
                   help="workload label on every per-GPU and group series, as attribution would give it "
                        "(one job's per-node exports then compare across nodes in the rules; default: none for "
                        "one log, what the node names share for several)")
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
        from .sources.recorded.job import expand
        try:
            paths = expand(ns.input)
        except SourceError as e:
            raise ExportError(str(e)) from None
        if len(paths) == 1 and len(ns.node) <= 1:
            export(replay_config(paths[0], ns.input_format, ns.node[0] if ns.node else ""), interval,
                   sys.stdout.buffer, ns.workload)
        else:
            export_job(paths, ns.node, ns.input_format, interval, sys.stdout.buffer, ns.workload)
        sys.stdout.buffer.flush()
    except ExportError as e:
        print(f"gpulse export: {terminal(str(e))}", file=sys.stderr)
        return e.code
    except BrokenPipeError:
        return 1
    return 0
