"""The background thread that runs the drive loop (drive.py) live and publishes snapshots.

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

import logging
import threading
from typing import Any

from .clock import VirtualClock, WallClock
from .drive import Driver
from .engine import Engine, Snapshot
from .sources.base import Source

log = logging.getLogger("gpulse.sampler")

# A source that knows how far it is (a replay) is logged at every PROGRESS_STEP of
# the way, and at least every PROGRESS_EVERY_S seconds while it moves; never more
# often than PROGRESS_MIN_S (a short log looped fast would pass a step per poll).
PROGRESS_STEP = 0.10
PROGRESS_EVERY_S = 60.0
PROGRESS_MIN_S = 1.0

class Sampler:
    def __init__(self, cfg: Any, source: Source, attributor: Any = None,
                 clock: WallClock | VirtualClock | None = None):
        self.cfg = cfg
        self.source = source
        self.attributor = attributor
        self.clock = clock or WallClock()
        self.engine: Engine | None = None
        self.driver: Driver | None = None
        self.snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False   # a virtual clock ran out: the last snapshot is served as it is
        self.started = self.clock.now()
        self._progress_logged = (0.0, self.started)   # (fraction, time) of the last line

    def start(self) -> None:
        """Open the source (SourceError propagates: fatal) and start polling."""
        self.source.loop_clock = self.clock
        devices = self.source.open()
        self.engine = Engine(self.cfg, devices, self.source.name, self.attributor, self.source.sample_spacing,
                             util_window=self.source.util_window, power_kind=self.source.power_averaged)
        # a source that buffers samples itself (NVML) is not woken more often than it needs
        interval = max(self.cfg.sample_interval, self.source.poll_interval or 0.0)
        self.driver = Driver(self.source, self.engine, self.clock, interval, keep_going=True,
                             health=self._snapshot_health)
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
        now = self.clock.now()
        last = self.driver.last_success if self.driver else None
        since = now - (last if last is not None else self.started)
        stale = since > self.cfg.stale_after
        if self.held:
            not_ready = "the virtual clock is spent (GPULSE_VIRTUAL_CLOCK); serving its last snapshot"
        elif self.snapshot is None:
            not_ready = "waiting for the first snapshot"
        elif stale:
            ended = " (the source has finished)" if self.source.finished else ""
            not_ready = f"stale: no successful poll for {since:.0f}s{ended}"
        else:
            not_ready = None
        return {
            "stale": stale,
            "seconds_since_success": since,
            "alive": self.alive or self.source.finished or self.held,
            "not_ready": not_ready,
        }

    def _run(self) -> None:
        assert self.driver is not None
        # the engine is this thread's alone: readers get the published Snapshot
        for snap in self.driver.run(self._stop):
            self.snapshot = snap
            self._log_progress()
        if self.source.finished:
            log.info("source %s finished after %d polls; serving the final values, stale after %gs "
                     "(/readyz then answers 503)", self.source.name, self.driver.polls_total, self.cfg.stale_after)
        elif self.clock.spent:
            # a virtual clock ran out (clock.py): one snapshot of all that was polled,
            # then /readyz says so, as it does for a finished replay; the time of the
            # clock stands still, so it never turns stale
            self.snapshot = self.driver.analyze()
            self.held = True
            log.info("virtual clock spent after %d polls; serving the last snapshot", self.driver.polls_total)

    def _log_progress(self) -> None:
        """One line per PROGRESS_STEP of a source that reports `progress` (0..1 of
        the way through one pass), or per PROGRESS_EVERY_S while it advances."""
        fraction = getattr(self.source, "progress", None)
        if fraction is None or self.source.finished:
            return
        last, at = self._progress_logged
        now = self.clock.now()
        if fraction < last:                      # a looping replay started a new pass
            last = 0.0
        crossed = int(fraction / PROGRESS_STEP) > int(last / PROGRESS_STEP)
        if now - at < PROGRESS_MIN_S:
            return
        if crossed or (fraction > last and now - at >= PROGRESS_EVERY_S):
            log.info("source %s: %.0f%% done", self.source.name, 100 * fraction)
            self._progress_logged = (fraction, now)

    def _snapshot_health(self) -> dict[str, Any]:
        d = self.driver
        return dict(durations=d.durations.copy(), polls_total=d.polls_total,
                    poll_failures_total=d.poll_failures_total)
