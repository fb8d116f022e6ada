"""Replays a recorded log (gpulse.sources.logs) as if it were live.

The first poll's `now` anchors the recorded start; later polls return the records
whose recorded time falls up to start + (now - anchor) × --replay.speed. Speed 0
hands out everything as fast as it is asked for, CHUNK records a poll. Samples keep
their recorded timestamps (each row its own), so the analysis sees the run's real
rhythm at any speed; with --replay.loop every pass is shifted forward by the length
of the log, so time never runs backwards.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
from typing import Any

from ..model import DeviceInfo, PollResult, Reading
from .base import Source
from .logs import Record, RecordedRun, read_log

log = logging.getLogger("gpulse.replay")

# Problems in a log shown one per line at start-up; the rest are summed up in one line.
SHOW_ERRORS = 10


class ReplaySource(Source):
    name = "replay"
    CHUNK = 2048

    def __init__(self, cfg: Any):
        self.path = cfg.replay.file
        self.fmt = cfg.replay.format
        self.speed = float(cfg.replay.speed)
        self.loop = bool(cfg.replay.loop)
        # a log without a clock (dmon without -o T, scrapes without times) is spaced this far
        self.untimed_interval = float(cfg.dcgm.interval) if self.fmt == "dcgm" else 1.0
        self.run: RecordedRun | None = None
        self.has_sm_active = False
        self._i = 0
        self._anchor: float | None = None
        self._offset = 0.0
        self._period = 0.0
        self._finished = False
        self._errors_pending: dict[str, int] = {}
        self._latest: dict[str, Record] = {}
        self._gauges: dict[str, dict[str, Any]] = {}
        self._counters: dict[str, dict[str, Any]] = {}

    def open(self) -> list[DeviceInfo]:
        run = read_log(self.path, self.fmt, self.untimed_interval)   # LogFormatError: one line, no traceback
        for e in run.errors[:SHOW_ERRORS]:
            log.warning("%s", e)
        if run.error_count > SHOW_ERRORS:
            log.warning("%s: %d more problems like these; those lines or values were skipped",
                        run.path, run.error_count - SHOW_ERRORS)
        if not run.timed:
            log.info("%s has no clock; instants are replayed %gs apart", run.path, self.untimed_interval)
        if run.error_count:
            self._errors_pending["replay_parse"] = run.error_count
        self.run = run
        self.has_sm_active = run.has_sm_active
        self._period = _loop_period(run)
        return list(run.devices)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def progress(self) -> float | None:
        """How far through the current pass (0..1), for the sampler's progress log."""
        n = len(self.run.records) if self.run is not None else 0
        return self._i / n if n else None

    def poll(self, now: float) -> PollResult:
        run = self.run
        if run is None:
            raise RuntimeError("ReplaySource.poll before open")
        if self._anchor is None:
            self._anchor = now
        taken: list[Record] = []
        if self.speed == 0:
            budget = self.CHUNK
            while budget > 0 and not self._finished:
                n = min(budget, len(run.records) - self._i)
                taken.extend(self._shifted(run.records[self._i:self._i + n]))
                self._i += n
                budget -= n
                self._wrap()
        else:
            position = run.records[0].t + (now - self._anchor) * self.speed
            while not self._finished:
                recs = run.records
                j = self._i
                while j < len(recs) and recs[j].t + self._offset <= position:
                    j += 1
                taken.extend(self._shifted(recs[self._i:j]))
                self._i = j
                if j < len(recs):
                    break
                self._wrap()
        errors, self._errors_pending = self._errors_pending, {}
        return PollResult(self._readings(taken), None, errors)

    def _shifted(self, recs: list[Record]) -> list[Record]:
        if not self._offset:
            return recs
        off = self._offset
        return [dataclasses.replace(r, t=r.t + off, sample=dataclasses.replace(r.sample, t=r.sample.t + off))
                for r in recs]

    def _wrap(self) -> None:
        """At the end of the log: start the next pass, or finish."""
        if self._i < len(self.run.records):
            return
        if self.loop:
            self._i = 0
            self._offset += self._period
        else:
            self._finished = True

    def _readings(self, taken: list[Record]) -> list[Reading]:
        samples: dict[str, list] = {}
        for r in taken:
            self._latest[r.gpu] = r
            if r.gauges:
                self._gauges.setdefault(r.gpu, {}).update(r.gauges)
            if r.counters:
                self._counters.setdefault(r.gpu, {}).update(r.counters)
            if r.error is None:
                samples.setdefault(r.gpu, []).append(r.sample)
        out = []
        for d in self.run.devices:
            last = self._latest.get(d.gpu)
            if last is not None and last.error is not None:
                out.append(Reading(d.gpu, [], {}, dict(self._counters.get(d.gpu, {})), False,
                                   f"recorded as {last.error!r} (line {last.line})", last.attribution))
                continue
            out.append(Reading(d.gpu, samples.get(d.gpu, []), dict(self._gauges.get(d.gpu, {})),
                               dict(self._counters.get(d.gpu, {})), True, None,
                               last.attribution if last else None, last.holds_workload if last else None))
        return out


def _loop_period(run: RecordedRun) -> float:
    """Length of one pass: the longest per-GPU span plus one typical step, so each GPU's
    first sample of the next pass follows its last one as its own samples follow each
    other (the log's overall span would also add the spread of rows within a poll)."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in run.records:
        first.setdefault(r.gpu, r.t)
        last[r.gpu] = r.t
    ts = sorted({r.t for r in run.records if r.gpu == run.records[0].gpu})
    steps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
    step = statistics.median(steps) if steps else 1.0
    return max(last[g] - first[g] for g in first) + step


__all__ = ["ReplaySource"]
