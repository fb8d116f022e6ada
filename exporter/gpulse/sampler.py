"""The background thread that polls the source and publishes snapshots.

    every sample_interval:    source.poll() → engine.ingest()
    every analysis_interval:  engine.analyze() → publish Snapshot (one reference swap)

Scrapes only read `sampler.snapshot` and `sampler.health()`; they never wait on the
source. A poll that hangs holds up this thread alone: `health()` reports the
sampler stale once no poll has succeeded for --stale-after, computed from the last
success time, so it stays right while the thread is stuck inside the driver. A
source that has finished (a replay at its end) is no different: its last sample
ages, it turns stale and the exporter stops reading as ready, while its final
values stay on /metrics.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from .engine import Engine, Snapshot
from .sources.base import Source

log = logging.getLogger("gpulse.sampler")

# A source that knows how far it is (a replay) is logged at every PROGRESS_STEP of
# the way, and at least every PROGRESS_EVERY_S seconds while it moves; never more
# often than PROGRESS_MIN_S (a short log looped fast would pass a step per poll).
PROGRESS_STEP = 0.10
PROGRESS_EVERY_S = 60.0
PROGRESS_MIN_S = 1.0

# Buckets for the poll+ingest duration histogram (seconds).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative histogram state owned by the sampler thread; copied into snapshots."""

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


class Sampler:
    def __init__(self, cfg: Any, source: Source, attributor: Any = None):
        self.cfg = cfg
        self.source = source
        self.attributor = attributor
        self.engine: Engine | None = None
        self.snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.durations = Histogram()
        self.started_mono = time.monotonic()
        self.last_success_mono: float | None = None
        self.polls_total = 0
        self.poll_failures_total = 0
        self._progress_logged = (0.0, self.started_mono)   # (fraction, time) of the last line

    def start(self) -> None:
        """Open the source (SourceError propagates: fatal) and start polling."""
        devices = self.source.open()
        self.engine = Engine(self.cfg, devices, self.source.name, self.attributor, self.source.sample_spacing,
                             util_window=self.source.util_window, power_kind=self.source.power_averaged)
        log.info("source %s: %d GPU entities", self.source.name, len(devices))
        self._thread = threading.Thread(target=self._run, name="gpulse-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 0.5) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.source.close()
        except Exception:  # closing a broken library must not block shutdown
            log.debug("source close failed", exc_info=True)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def health(self) -> dict[str, Any]:
        """Live sampler health for the scrape path: plain attribute reads, no locks.
        `not_ready` is why /readyz answers 503, or None."""
        now = time.monotonic()
        ref = self.last_success_mono if self.last_success_mono is not None else self.started_mono
        since = now - ref
        stale = since > self.cfg.stale_after
        if self.snapshot is None:
            not_ready = "waiting for the first snapshot"
        elif stale:
            ended = " (the source has finished)" if self.source.finished else ""
            not_ready = f"stale: no successful poll for {since:.0f}s{ended}"
        else:
            not_ready = None
        return {
            "stale": stale,
            "seconds_since_success": since,
            "alive": self.alive or self.source.finished,
            "not_ready": not_ready,
        }

    def _run(self) -> None:
        cfg = self.cfg
        assert self.engine is not None
        # a source that buffers samples itself (NVML) is not woken more often than it needs
        interval = max(cfg.sample_interval, self.source.poll_interval or 0.0)
        next_poll = time.monotonic()
        next_analysis = next_poll + cfg.analysis_interval
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                result = self.source.poll(t0)
            except Exception as e:  # a source must not raise; if it does, keep going
                self.poll_failures_total += 1
                log.error("source poll failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
                result = None
            # the engine is this thread's alone: readers get the published Snapshot
            if result is not None:
                self.engine.ingest(result, wall=time.time())
                if any(r.up for r in result.readings):
                    self.last_success_mono = time.monotonic()
            self.polls_total += 1
            self.durations.observe(time.monotonic() - t0)
            now = time.monotonic()
            if now >= next_analysis or self.snapshot is None:
                self._publish()
                next_analysis = max(next_analysis + cfg.analysis_interval, now)
            self._log_progress()
            if self.source.finished:
                self._publish()
                log.info("source %s finished after %d polls; serving the final values, stale after %gs "
                         "(/readyz then answers 503)", self.source.name, self.polls_total, cfg.stale_after)
                return
            next_poll += interval
            delay = next_poll - time.monotonic()
            if delay < 0:            # fell behind (slow poll): skip, don't burst
                next_poll = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def _log_progress(self) -> None:
        """One line per PROGRESS_STEP of a source that reports `progress` (0..1 of
        the way through one pass), or per PROGRESS_EVERY_S while it advances."""
        fraction = getattr(self.source, "progress", None)
        if fraction is None or self.source.finished:
            return
        last, at = self._progress_logged
        now = time.monotonic()
        if fraction < last:                      # a looping replay started a new pass
            last = 0.0
        crossed = int(fraction / PROGRESS_STEP) > int(last / PROGRESS_STEP)
        if now - at < PROGRESS_MIN_S:
            return
        if crossed or (fraction > last and now - at >= PROGRESS_EVERY_S):
            log.info("source %s: %.0f%% done", self.source.name, 100 * fraction)
            self._progress_logged = (fraction, now)

    def _publish(self) -> None:
        # the sampler's own health goes beside the engine's snapshot, not through the engine
        health = dict(durations=self.durations.copy(), polls_total=self.polls_total,
                      poll_failures_total=self.poll_failures_total)
        self.snapshot = dataclasses.replace(self.engine.analyze(wall=time.time()), health=health)
