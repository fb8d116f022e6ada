"""Replays a recorded log (gpulse.sources.logs) as if it were live.

The first poll's `now` anchors the recorded start; later polls return the records
whose recorded time falls up to start + (now - anchor) × --replay.speed. Speed 0
hands out everything as fast as it is asked for, CHUNK records a poll. Samples keep
their recorded timestamps (each row its own), so the analysis sees the run's real
rhythm at any speed; with --replay.loop every pass is shifted forward by the length
of the log, so time never runs backwards.

The log is streamed (gpulse.sources.logs.LogStream): open() reads only enough to name
the GPUs, so a large log is served from the first second, and memory stays that of
the analysis window whatever the file's size. GPUs first seen later arrive as a new
device list.
"""
from __future__ import annotations

import logging
import statistics
from typing import Any, Iterator

from ..model import DeviceInfo, PollResult, Reading
from .base import CountOn, Source
from .recorded import LogFormatError, LogStream, Record

log = logging.getLogger("gpulse.replay")

# Problems in a log shown one per line; the rest are summed up in one line.
SHOW_ERRORS = 10
# Records read ahead by open(), to name the GPUs before the first poll.
LOOKAHEAD = 8192
# Steps of the first GPU measured for the loop period.
PERIOD_STEPS = 1000


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
        self.run: LogStream | None = None      # the first pass: what the log is
        self.has_sm_active = False
        self._stream: LogStream | None = None
        self._recs: Iterator[Record] | None = None
        self._ahead: list[Record] = []         # read, not yet handed out (oldest first)
        self._ahead_i = 0
        self._anchor: float | None = None
        self._offset = 0.0
        self._period = 0.0
        self._finished = False
        self._errors_pending: dict[str, int] = {}
        self._errors_seen = 0      # problems of the first pass counted so far
        self._shown = 0            # ... and logged one per line
        self._devices: dict[str, DeviceInfo] | None = None     # None until open() returns
        self._latest: dict[str, Record] = {}
        self._gauges: dict[str, dict[str, Any]] = {}
        self._counters: dict[str, dict[str, Any]] = {}
        # counters as logged may restart (a driver reload mid-log, the next pass of a loop)
        self._count_on = CountOn()
        # the loop period, measured on the first pass
        self._first: dict[str, float] = {}
        self._first_gpu: str | None = None
        self._last: dict[str, float] = {}
        self._steps: list[float] = []

    def open(self) -> list[DeviceInfo]:
        run = self._stream = self.run = self._open_stream()  # LogFormatError: one line
        self._recs = run.records()
        while len(self._ahead) < LOOKAHEAD and self._read_one():
            pass
        if not run.facts.timed:
            log.info("%s has no clock; instants are replayed %gs apart", run.path, self.untimed_interval)
        if self._recs is not None:
            self._report_problems()
        self._devices = {d.gpu: d for d in run.devices}
        self.has_sm_active = run.facts.has_sm_active
        self.power_averaged = run.facts.power_averaged
        return list(self._devices.values())

    def _open_stream(self) -> LogStream:
        """The first pass over the log (a job's many logs: recorded.job.JobReplay)."""
        return LogStream(self.path, self.fmt, self.untimed_interval)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def progress(self) -> float | None:
        """How far through the current pass (0..1), for the sampler's progress log: the
        share of the file handed out as records (the log is streamed, not counted ahead;
        a reader's read-ahead batch does not count)."""
        stream = self._stream
        if stream is None or not getattr(stream, "size", 0):
            return None
        return stream.fraction

    # -- reading the stream

    def _read_one(self) -> bool:
        """Read one record into the look-ahead; False at the end of the pass."""
        if self._recs is None:
            return False
        try:
            rec = next(self._recs)
        except LogFormatError as e:
            if self._devices is None:
                raise                    # at start: the one-line fatal error
            # later (a cap hit deep in the file): the replay ends there, the server stays up
            log.error("%s; the replay stops here", e)
            self._errors_pending["replay_parse"] = self._errors_pending.get("replay_parse", 0) + 1
            self._recs = None
            self.loop = False
            return False
        except StopIteration:
            self._recs = None
            if self._stream is self.run:
                self._period = self._loop_period()
                self._report_problems(final=True)
                for w in self.run.warnings():
                    log.warning("%s", w)
            return False
        if self._stream is self.run:
            self._measure(rec)
        elif self._offset:
            rec = rec.moved(self._offset)
        self._ahead.append(rec)
        return True

    def _peek(self) -> Record | None:
        if self._ahead_i >= len(self._ahead):
            self._ahead.clear()
            self._ahead_i = 0
            if not self._read_one():
                return None
        return self._ahead[self._ahead_i]

    def _take(self) -> Record:
        rec = self._ahead[self._ahead_i]
        self._ahead_i += 1
        return rec

    def _wrap(self) -> bool:
        """At the end of the log: start the next pass (True), or finish."""
        if self.loop:
            try:
                self._stream = LogStream(self.path, self.fmt, self.untimed_interval)
            except LogFormatError as e:       # the file went away or changed under us
                log.error("%s; the replay stops here", e)
            else:
                self._offset += self._period
                self._recs = self._stream.records()
                return True
        self._finished = True
        return False

    def _report_problems(self, final: bool = False) -> None:
        """Count new problems of the first pass; log the first SHOW_ERRORS one per line
        and, when the pass ends, the rest in one line."""
        run = self.run
        new = run.error_count - self._errors_seen
        if new > 0:
            self._errors_pending["replay_parse"] = self._errors_pending.get("replay_parse", 0) + new
            self._errors_seen = run.error_count
        items = run.err.items
        while self._shown < min(SHOW_ERRORS, len(items)):
            log.warning("%s", items[self._shown])
            self._shown += 1
        if final and run.error_count > self._shown:
            log.warning("%s: %d more problems like these; those lines or values were skipped",
                        run.path, run.error_count - self._shown)

    # -- polling

    def poll(self, now: float) -> PollResult:
        if self.run is None:
            raise RuntimeError("ReplaySource.poll before open")
        if self._anchor is None:
            self._anchor = now
        taken: list[Record] = []
        if self.speed == 0:
            while len(taken) < self.CHUNK and not self._finished:
                ahead, i = self._ahead, self._ahead_i
                if i < len(ahead):      # what open() read ahead: in one slice
                    k = min(len(ahead), i + self.CHUNK - len(taken))
                    taken += ahead[i:k]
                    self._ahead_i = k
                    continue
                if self._peek() is None:
                    if not self._wrap():
                        break
                    continue
                taken.append(self._take())
        else:
            position = (self.run.start or 0.0) + (now - self._anchor) * self.speed
            while not self._finished:
                nxt = self._peek()
                if nxt is None:
                    if not self._wrap():
                        break
                    continue
                if nxt.t > position:
                    break
                taken.append(self._take())
        if self._stream is self.run:
            self._report_problems()
        errors, self._errors_pending = self._errors_pending, {}
        devices = None
        if len(self.run.facts.found) != len(self._devices):
            self._devices = {d.gpu: d for d in self.run.devices}
            devices = list(self._devices.values())
        self.has_sm_active = self.has_sm_active or self.run.facts.has_sm_active
        readings = self._readings(taken)
        events = {("resets_total", fam): n for fam, n in self._count_on.take_resets().items()}
        return PollResult(readings, devices, errors, events)

    def _readings(self, taken: list[Record]) -> list[Reading]:
        samples: dict[str, list] = {}
        # each record's gauges and counters as of its own instant: a chunk covers ~26 s
        # of an 8-GPU log at 100 ms, and its last values are no reading of the rest
        instants: dict[str, list] = {}
        latest, all_gauges, all_counters = self._latest, self._gauges, self._counters
        for rec in taken:
            r = rec.reading
            gpu = r.gpu
            latest[gpu] = rec
            gauges = all_gauges.get(gpu)
            if gauges is None:
                gauges = all_gauges[gpu] = {}
                all_counters[gpu] = {}
            counters = all_counters[gpu]
            if r.gauges:
                gauges.update(r.gauges)
            if r.counters:
                counters.update(self._count_on.counters(gpu, r.counters))
            if r.error is None:
                got = samples.get(gpu)
                if got is None:
                    got = samples[gpu] = []
                    instants[gpu] = []
                got += r.samples
                instants[gpu].append((rec.t, dict(gauges), dict(counters)))
        out = []
        for gpu in self._devices:
            last = self._latest.get(gpu)
            r = last.reading if last is not None else None
            if r is not None and r.error is not None:
                out.append(Reading(gpu, [], {}, dict(self._counters.get(gpu, {})), False,
                                   f"recorded as {r.error!r} (line {last.line})", r.attribution))
                continue
            out.append(Reading(gpu, samples.get(gpu, []), dict(self._gauges.get(gpu, {})),
                               dict(self._counters.get(gpu, {})), True, None,
                               r.attribution if r else None, r.holds_workload if r else None,
                               instants.get(gpu, [])))
        return out

    # -- the loop period

    def _measure(self, r: Record) -> None:
        gpu, t = r.gpu, r.t
        if gpu not in self._first:
            self._first[gpu] = t
            if self._first_gpu is None:
                self._first_gpu = gpu
        last = self._last
        prev = last.get(gpu)
        last[gpu] = t
        if prev is not None and gpu == self._first_gpu and t > prev and len(self._steps) < PERIOD_STEPS:
            self._steps.append(t - prev)

    def _loop_period(self) -> float:
        """Length of one pass: the longest per-GPU span plus one typical step, so each GPU's
        first sample of the next pass follows its last one as its own samples follow each
        other (the log's overall span would also add the spread of rows within a poll)."""
        step = statistics.median(self._steps) if self._steps else 1.0
        return max((self._last[g] - self._first[g] for g in self._first), default=0.0) + step


__all__ = ["ReplaySource"]
