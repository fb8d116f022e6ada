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

import bisect
import functools
import itertools
import logging
import os
import stat
import statistics
from typing import Any, Iterator

from ..model import DeviceInfo, PollResult, Reading, Sample
from .base import CountOn, Source
from .recorded import COMPRESSED_TEXT, LogFormatError, LogStream, Record, Rows, compression_of
from .recorded import ahead

log = logging.getLogger("gpulse.replay")

# what a GPU's latest record says of it when that was a row of Rows: up, no error, no attribution
_PLAIN = Record(Reading("", [Sample(0.0)]), 0)


def _plain(rows: Rows) -> Record:
    """What a GPU's latest record says of it when that was a row of `rows`: up, no
    error, the rows' attribution (a job's workload) or none."""
    a = rows.attribution
    return _PLAIN if a is None else Record(Reading("", [Sample(0.0)], attribution=a), 0)

# Problems in a log shown one per line; the rest are summed up in one line.
SHOW_ERRORS = 10
assert SHOW_ERRORS <= ahead.ERRORS_AS_READ     # a log read ahead passes on that many as they come
# Records read ahead by open(), to name the GPUs before the first poll.
LOOKAHEAD = 8192
# Steps of the first GPU measured for the loop period.
PERIOD_STEPS = 1000


def file_size(path: str) -> int:
    """About how many bytes of text a log holds, what reading it costs: a regular file's
    size, a compressed one's times COMPRESSED_TEXT; 0 for anything else (a pipe, a file
    that is not there)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return 0
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return 0
    return st.st_size * (COMPRESSED_TEXT if compression_of(head) else 1)


class ReplaySource(Source):
    name = "replay"
    CHUNK = 2048
    # a batch command (report, export) sets it: a long log is then read in a process of
    # its own while the analysis runs (recorded.ahead); a live replay reads in process
    read_ahead = False

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
        self._recs: Iterator[Record | Rows] | None = None
        # read, not yet handed out (oldest first): Records, and Rows (recorded.records)
        # handed on whole, up to CHUNK rows a poll, so a run of plain rows never
        # becomes a Record per row
        self._ahead: list[Record | Rows] = []
        self._ahead_i = 0
        self._ahead_n = 0                      # records in _ahead
        self._row_i = 0                        # rows of _ahead[_ahead_i] handed out already
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
        self._recs = run.items()
        while self._ahead_n < LOOKAHEAD and self._read_one():
            pass
        if not run.facts.timed:
            log.info("%s has no clock; instants are replayed %gs apart", run.path, self.untimed_interval)
        if self._recs is not None:
            self._report_problems()
        self._devices = {d.gpu: d for d in run.devices}
        self.has_sm_active = run.facts.has_sm_active
        self.power_averaged = run.facts.power_averaged
        return list(self._devices.values())

    def _open_stream(self) -> Any:
        """The first pass over the log (a job's many logs: recorded.job.JobReplay)."""
        return self._stream_of(functools.partial(LogStream, self.path, self.fmt, self.untimed_interval), [self.path])

    def _stream_of(self, make: Any, paths: list[str]) -> Any:
        """make(): in a process of its own where read_ahead is set and the logs are long
        enough to be worth it (recorded.ahead.worth)."""
        if self.read_ahead and ahead.worth(sum(file_size(p) for p in paths)):
            try:
                return ahead.ReadAhead(make)
            except ahead.NoProcess as e:
                log.warning("%s; reading the log in this process", e)
        return make()

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
        """Read one record, or one Rows, into the look-ahead; False at the end of the pass."""
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
        if type(rec) is Rows:
            if self._stream is self.run:
                self._measure_rows(rec)
            elif self._offset:
                moved = [r.moved(self._offset) for r in rec.records()]
                self._ahead += moved
                self._ahead_n += len(moved)
                return True
            self._ahead_n += len(rec)
        else:
            if self._stream is self.run:
                self._measure(rec)
            elif self._offset:
                rec = rec.moved(self._offset)
            self._ahead_n += 1
        self._ahead.append(rec)
        return True

    def _peek(self) -> Record | Rows | None:
        """The next item not handed out whole (a Rows from row _row_i on)."""
        if self._ahead_i >= len(self._ahead):
            self._ahead.clear()
            self._ahead_i = 0
            self._ahead_n = 0
            if not self._read_one():
                return None
        return self._ahead[self._ahead_i]

    def _take(self, rows: int = 0) -> Record | tuple[Rows, int, int]:
        """The next item; of a Rows, at most `rows` of its rows as (rows, i, j) (0: all left)."""
        item = self._ahead[self._ahead_i]
        if type(item) is not Rows:
            self._ahead_i += 1
            return item
        i = self._row_i
        j = len(item) if not rows else min(len(item), i + rows)
        self._stream.consumed_through(item.line[j - 1])    # the share of the file handed out
        if j == len(item):
            self._ahead_i += 1
            self._row_i = 0
        else:
            self._row_i = j
        return item, i, j

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
        taken: list[Record | tuple[Rows, int, int]] = []
        if self.speed == 0:
            count = 0
            while count < self.CHUNK and not self._finished:
                nxt = self._peek()
                if nxt is None:
                    if not self._wrap():
                        break
                    continue
                got = self._take(self.CHUNK - count)
                count += 1 if type(got) is not tuple else got[2] - got[1]
                taken.append(got)
        else:
            position = (self.run.start or 0.0) + (now - self._anchor) * self.speed
            while not self._finished:
                nxt = self._peek()
                if nxt is None:
                    if not self._wrap():
                        break
                    continue
                if type(nxt) is Rows:
                    # its rows recorded up to `position`
                    k = bisect.bisect_right(nxt.t, position, self._row_i) - self._row_i
                    if k <= 0:
                        break
                    taken.append(self._take(k))
                    if self._row_i:
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

    def _readings(self, taken: list[Record | tuple[Rows, int, int]]) -> list[Reading]:
        samples: dict[str, list] = {}
        # each record's gauges and counters as of its own instant: a chunk covers ~26 s
        # of an 8-GPU log at 100 ms, and its last values are no reading of the rest
        instants: dict[str, list] = {}
        latest, all_gauges, all_counters = self._latest, self._gauges, self._counters
        for rec in taken:
            if type(rec) is tuple:
                self._rows_readings(*rec, samples, instants)
                continue
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

    def _rows_readings(self, rows: Rows, i: int, j: int, samples: dict[str, list], instants: dict[str, list]) -> None:
        """Rows i..j into the poll's samples and instants, as their Records would go: a
        GPU at a time where the rows' gauges have one set of fields (an nvidia-smi
        log's). Where every row of a GPU has the counter families its merged counters
        have, each row's counted dict is its instant's counters: no copy a row."""
        if not rows.uniform:
            self._rows_each(rows, i, j, samples, instants)
            return
        latest, all_gauges, all_counters = self._latest, self._gauges, self._counters
        ts, smp, gs, cs = rows.t, rows.samples, rows.gauges, rows.counters
        plain = _plain(rows)
        by: dict[str, list[int]] = {}
        for k, gpu in enumerate(rows.gpu[i:j], i):
            at = by.get(gpu)
            if at is None:
                by[gpu] = [k]
            else:
                at.append(k)
        for gpu, at in by.items():
            gauges = all_gauges.get(gpu)
            if gauges is None:
                gauges = all_gauges[gpu] = {}
                all_counters[gpu] = {}
            first = gs[at[0]]
            if first:
                gauges.update(first)
            if len(gauges) == len(first) and list(gauges) == list(first):
                # the merged gauges are each row's own, fields and order: no copies
                each = [gs[k] for k in at]
                gauges.update(gs[at[-1]])
            else:
                each = []
                for k in at:
                    if gs[k]:
                        gauges.update(gs[k])
                    each.append(dict(gauges))
            got = samples.get(gpu)
            if got is None:
                got = samples[gpu] = []
                instants[gpu] = []
            got += [smp[k] for k in at]
            held = all_counters[gpu]
            if cs is None:
                counted: Any = itertools.repeat(dict(held))
            else:
                counted = self._count_on.counters_each(gpu, [cs[k] for k in at])
                fields = counted[-1].keys()
                if held.keys() <= fields and all(c.keys() == fields for c in counted):
                    held.update(counted[-1])
                else:
                    for n, c in enumerate(counted):
                        held.update(c)
                        counted[n] = dict(held)
            instants[gpu] += zip([ts[k] for k in at], each, counted)
            latest[gpu] = plain

    def _rows_each(self, rows: Rows, i: int, j: int, samples: dict[str, list], instants: dict[str, list]) -> None:
        """Rows i..j into the poll's samples and instants, as their Records would go.
        Where a row's gauges have the fields of its GPU's merged gauges (smi rows give
        a set of fields always in one order), the row's dict is its instant's gauges and
        the merge is done once, with the GPU's last row here; likewise counters that no
        row here changes are one copy."""
        latest, all_gauges, all_counters, count_on = self._latest, self._gauges, self._counters, self._count_on
        ts, gpus, smp, gs, cs = rows.t, rows.gpu, rows.samples, rows.gauges, rows.counters
        plain = _plain(rows)
        same: dict[str, Any] = {}       # GPU -> the fields its merged gauges have (those of `newest`)
        newest: dict[str, dict] = {}    # GPU -> its latest row's gauges while `same`
        fixed: dict[str, dict] = {}     # GPU -> its counters' copy, when no row here has counters
        for k in range(i, j):
            gpu = gpus[k]
            row_gauges = gs[k]
            fields = same.get(gpu)
            if fields is not None and row_gauges.keys() == fields:
                newest[gpu] = row_gauges
                merged = row_gauges
            else:
                gauges = all_gauges.get(gpu)
                if gauges is None:
                    gauges = all_gauges[gpu] = {}
                    all_counters[gpu] = {}
                if fields is not None:
                    gauges.update(newest.pop(gpu))
                    del same[gpu]
                if row_gauges:
                    gauges.update(row_gauges)
                if len(gauges) == len(row_gauges) and list(gauges) == list(row_gauges):
                    same[gpu] = row_gauges.keys()
                    newest[gpu] = row_gauges
                    merged = row_gauges
                else:
                    merged = dict(gauges)
            if cs is None:
                counted = fixed.get(gpu)
                if counted is None:
                    counted = fixed[gpu] = dict(all_counters[gpu])
            else:
                counters = all_counters[gpu]
                if cs[k]:
                    counters.update(count_on.counters(gpu, cs[k]))
                counted = dict(counters)
            got = samples.get(gpu)
            if got is None:
                got = samples[gpu] = []
                instants[gpu] = []
            got.append(smp[k])
            instants[gpu].append((ts[k], merged, counted))
            latest[gpu] = plain
        for gpu, row_gauges in newest.items():
            all_gauges[gpu].update(row_gauges)

    # -- the loop period

    def _measure(self, r: Record) -> None:
        self._measure_at(r.gpu, r.t)

    def _measure_rows(self, rows: Rows) -> None:
        """_measure of each row; once the first GPU's steps are counted and every GPU
        here has been seen, only each GPU's last time matters."""
        if len(self._steps) >= PERIOD_STEPS and self._first.keys() >= set(rows.gpu):
            self._last.update(zip(rows.gpu, rows.t))
            return
        for gpu, t in zip(rows.gpu, rows.t):
            self._measure_at(gpu, t)

    def _measure_at(self, gpu: str, t: float) -> None:
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
