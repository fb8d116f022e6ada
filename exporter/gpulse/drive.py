"""The one loop that drives a source into the engine, on an injected clock.

    every poll interval:  source.poll(now) → engine.ingest()
    every analysis tick:  engine.analyze() → Snapshot (yielded)

The live exporter (`sampler.Sampler`, on the wall clock, or on a virtual clock under
test: clock.py), replay, the report, the export and the benchmarks (`run_offline`, on
a virtual clock) all run this loop; they differ in three choices:

- the clock: the wall clock sleeps between polls; a virtual one jumps;
- the ticks: live, analysis ticks follow the clock, so a source that returns nothing
  (every GPU lost, a hung driver) still gets snapshots that say so; offline they
  follow the source's own timeline, splitting a poll that spans several ticks (a
  replay returns big chunks), so windows mean the same as live;
- a poll that raises: live it is logged and counted and the loop goes on; offline it
  ends the run (the report turns a SourceError into its one-line error).
"""
from __future__ import annotations

import bisect
import dataclasses
import logging
import operator
import threading
from typing import Any, Callable, Iterator

from .clock import VirtualClock, WallClock
from .engine import Engine, Snapshot
from .model import PollResult, Reading
from .sources.base import Source

log = logging.getLogger("gpulse.sampler")

# Buckets for the poll+ingest duration histogram (seconds).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative histogram state owned by the loop; copied into snapshots."""

    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * len(DURATION_BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(DURATION_BUCKETS):
            if v <= b:
                self.counts[i] += 1
        self.sum += v
        self.count += 1

    def copy(self) -> dict[str, Any]:
        return {"buckets": list(zip(DURATION_BUCKETS, self.counts)), "sum": self.sum, "count": self.count}


class Driver:
    """One source, one engine, one clock. `interval`: seconds between polls;
    `source_ticks`: ticks on the source timeline (offline) rather than the clock;
    `keep_going`: log and count a poll that raises instead of ending the run;
    `health`: the dict passed to each analyze (the sampler's), or None."""

    def __init__(self, source: Source, engine: Engine, clock: WallClock | VirtualClock, interval: float,
                 source_ticks: bool = False, keep_going: bool = False,
                 health: Callable[[], dict[str, Any]] | None = None):
        self.source = source
        self.engine = engine
        self.clock = clock
        self.interval = interval
        self.analysis_interval = engine.cfg.analysis_interval
        self.source_ticks = source_ticks
        self.keep_going = keep_going
        self.health = health
        self.durations = Histogram()
        self.polls_total = 0
        self.poll_failures_total = 0
        self.last_success: float | None = None   # clock.now() of the last poll with a GPU up
        self._next_tick: float | None = None      # when the next analysis tick is due

    def run(self, stop: threading.Event | None = None) -> Iterator[Snapshot]:
        """Poll until the source finishes, the clock is spent or `stop` is set,
        yielding the snapshot of every analysis tick (and a last one when the source
        finishes)."""
        clock, source, engine = self.clock, self.source, self.engine
        stop = stop or threading.Event()
        next_poll = clock.now()
        # live the first poll is analysed at once (a snapshot to serve); offline the
        # first tick is one interval after the first sample
        self._next_tick = None if self.source_ticks else next_poll + self.analysis_interval
        first = True
        while not stop.is_set() and not clock.spent:
            t0 = clock.now()
            result = self._poll(t0)
            if result is not None:
                if self.source_ticks:
                    yield from self._ingest_ticks(result)
                else:
                    engine.ingest(result, wall=clock.wall())
                if any(r.up for r in result.readings):
                    self.last_success = clock.now()
            self.polls_total += 1
            now = clock.now()
            self.durations.observe(now - t0)
            if self.source_ticks:
                if engine.t is not None and self._next_tick is not None and engine.t >= self._next_tick:
                    yield self.analyze()
                    self._next_tick += self.analysis_interval
            elif first or now >= self._next_tick:
                yield self.analyze()
                self._next_tick = max(self._next_tick + self.analysis_interval, now)
            first = False
            if source.finished:
                yield self.analyze()
                return
            next_poll += self.interval
            if next_poll < clock.now():      # fell behind (slow poll): skip, don't burst
                next_poll = clock.now()
            clock.sleep_until(next_poll, stop)

    def _poll(self, now: float) -> PollResult | None:
        if not self.keep_going:
            return self.source.poll(now)
        try:
            return self.source.poll(now)
        except Exception as e:  # a source must not raise; if it does, keep going
            self.poll_failures_total += 1
            log.error("source poll failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
            return None

    def _ingest_ticks(self, pending: PollResult | None) -> Iterator[Snapshot]:
        """Ingest a poll split at the source-time ticks it spans, with the snapshot of
        each tick it closes."""
        wall = self.clock.wall()
        if self._next_tick is None:
            ts = [smp.t for r in pending.readings for smp in r.samples]
            if not ts:
                self.engine.ingest(pending, wall=wall)
                return
            self._next_tick = min(ts) + self.analysis_interval
        if _before(pending, self._next_tick):   # the common case live-like: no tick inside the poll
            self.engine.ingest(pending, wall=wall)
            return
        cuts = _Cuts.of(pending)
        while True:
            if cuts is not None:
                part, more = cuts.cut(self._next_tick)
            else:
                part, pending = _split(pending, self._next_tick)
                more = pending is not None
            self.engine.ingest(part, wall=wall)
            if not more:
                return
            yield self.analyze()
            self._next_tick += self.analysis_interval

    def analyze(self) -> Snapshot:
        """The snapshot of now: analysis tick closed at the clock's time."""
        snap = self.engine.analyze(wall=self.clock.wall())
        # the sampler's own health goes beside the engine's snapshot, not through the engine
        return dataclasses.replace(snap, health=self.health()) if self.health else snap


def _split(result: PollResult, boundary: float) -> tuple[PollResult, PollResult | None]:
    """Split a poll at a source-time boundary: samples (and recorded instants) with
    t <= boundary, and the rest. Each side carries the gauges and counters of its own
    last instant, so no value read after the boundary is charged before it."""
    if _before(result, boundary):
        return result, None      # the common case offline: the whole poll is before the boundary
    cuts = [None if not r.samples or max(map(_T, r.samples)) <= boundary
            else _first_after(list(map(_T, r.samples)), boundary) for r in result.readings]
    later = []
    early_readings = []
    for r, cut in zip(result.readings, cuts):
        if cut is None:
            early_readings.append(r)
            continue
        if r.instants is None:
            early_readings.append(Reading(r.gpu, r.samples[:cut], r.gauges, r.counters, r.up, r.error,
                                          r.attribution, r.holds_workload))
            later.append(Reading(r.gpu, r.samples[cut:], {}, {}, r.up, r.error, r.attribution,
                                 r.holds_workload))
            continue
        ic = _first_after(list(map(_T0, r.instants)), boundary)
        if ic is None:
            ic = len(r.instants)
        before, after = r.instants[:ic], r.instants[ic:]
        early_readings.append(Reading(r.gpu, r.samples[:cut], before[-1][1] if before else {},
                                      before[-1][2] if before else {}, r.up, r.error, r.attribution,
                                      r.holds_workload, before))
        later.append(Reading(r.gpu, r.samples[cut:], r.gauges, r.counters, r.up, r.error, r.attribution,
                             r.holds_workload, after))
    early = PollResult(early_readings, result.devices, result.call_errors, result.events)
    return early, (PollResult(later) if later else None)


def _before(result: PollResult, boundary: float) -> bool:
    """Whether no sample of the poll is past `boundary`."""
    # plain loops: offline this runs once per poll and reading, most with one sample,
    # where a max() per reading cost more than the comparisons
    for r in result.readings:
        for smp in r.samples:
            if smp.t > boundary:
                return False
    return True


class _Cuts:
    """One poll cut at tick after tick as repeated _split calls cut it, into the same
    Readings, where every reading's samples and instants are in time order (a
    replay's are): each reading's times are read once, and each cut is a bisection
    from the previous one instead of a pass over what is left."""

    __slots__ = ("result", "left", "first")

    def __init__(self, result: PollResult, left: list[list[Any]]):
        self.result = result
        # per reading still to hand out: [reading, sample times, instant times (None
        # without instants), first sample left, first instant left, gauges, counters];
        # the last two are what the rest of the reading carries (_split's `later`)
        self.left = left
        self.first = True

    @classmethod
    def of(cls, result: PollResult) -> "_Cuts | None":
        """The cutter of `result`, or None where some reading's times are out of order."""
        left = []
        for r in result.readings:
            ts = list(map(_T, r.samples))
            its = None if r.instants is None else list(map(_T0, r.instants))
            if (len(ts) > 1 and ts != sorted(ts)) or (its is not None and len(its) > 1 and its != sorted(its)):
                return None
            left.append([r, ts, its, 0, 0, r.gauges, r.counters])
        return cls(result, left)

    def _rest(self, e: list[Any]) -> Reading:
        r, _, its, i, k, gauges, counters = e
        if self.first:
            return r
        return Reading(r.gpu, r.samples[i:], gauges, counters, r.up, r.error, r.attribution, r.holds_workload,
                       None if its is None else r.instants[k:])

    def cut(self, boundary: float) -> tuple[PollResult, bool]:
        """What is left up to `boundary` (as _split's first part), and whether a part
        after it is left."""
        early: list[Reading] = []
        later: list[list[Any]] = []
        for e in self.left:
            r, ts, its, i, k, gauges, counters = e
            if i >= len(ts) or ts[-1] <= boundary:
                early.append(self._rest(e))
                continue
            c = bisect.bisect_right(ts, boundary, i)
            if its is None:
                early.append(Reading(r.gpu, r.samples[i:c], gauges, counters, r.up, r.error, r.attribution,
                                     r.holds_workload))
                e[5], e[6] = {}, {}
            else:
                ic = bisect.bisect_right(its, boundary, k)
                before = r.instants[k:ic]
                early.append(Reading(r.gpu, r.samples[i:c], before[-1][1] if before else {},
                                     before[-1][2] if before else {}, r.up, r.error, r.attribution,
                                     r.holds_workload, before))
                e[4] = ic
            e[3] = c
            later.append(e)
        if not later and self.first:
            return self.result, False
        res = self.result if self.first else PollResult([])
        self.first = False
        self.left = later
        return PollResult(early, res.devices, res.call_errors, res.events), bool(later)


_T = operator.attrgetter("t")
_T0 = operator.itemgetter(0)


def _first_after(ts: list[float], boundary: float) -> int | None:
    """The index of the first time past `boundary`, or None: by bisection where the
    times are in order (a replay's always are: a poll splits at every tick it spans)."""
    if ts == sorted(ts):
        i = bisect.bisect_right(ts, boundary)
        return i if i < len(ts) else None
    return next((i for i, t in enumerate(ts) if t > boundary), None)


def run_offline(source: Any, cfg: Any, until: float | None = None,
                attributor: Any = None, poll_step: float | None = None,
                wall0: float = 0.0, history: bool = False) -> Iterator[tuple[Engine, Snapshot]]:
    """Drive a source in virtual time as fast as the CPU allows.

    Polls with `now` advancing by `poll_step` (default cfg.sample_interval) from 0 and
    yields (engine, snapshot) at every analysis tick of the *source* timeline (see the
    module doc). Stops at `until` (virtual seconds) or when a finite source finishes.
    The engine sees wall time wall0 + virtual time (a replay at speed 1 anchored at
    its recorded start then stamps snapshots as a live exporter would have).
    `history` keeps the per-GPU tick history the live page draws (tests that compare
    the page's data with the other views); nothing else offline reads it.
    """
    devices = source.open()
    engine = Engine(cfg, devices, source.name, attributor, source.sample_spacing, history=history,
                    util_window=source.util_window, power_kind=source.power_averaged)
    driver = Driver(source, engine, VirtualClock(wall0=wall0, until=until), poll_step or cfg.sample_interval,
                    source_ticks=True)
    try:
        for snap in driver.run():
            yield engine, snap
    finally:
        source.close()
