"""The simulated source with faults on a schedule (seconds since its first poll):
a GPU lost for a while and back, a poll that hangs, an XID storm, a source clock
that jumps. The samples themselves come from the real SimSource."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from gpulse.model import PollResult, Reading
from gpulse.sources.base import Source
from gpulse.sources.sim import SimSource


@dataclass
class Window:
    start: float
    end: float

    def __contains__(self, t: float) -> bool:
        return self.start <= t < self.end


class FaultySource(Source):
    name = "sim"

    def __init__(self, cfg, lost: dict[str, Window] | None = None, hang: Window | None = None,
                 xid_rate: float = 0.0, xid_codes: tuple[str, ...] = ("13",), clock=None):
        self.inner = SimSource(cfg)
        self.lost = lost or {}
        self.hang = hang
        self.xid_rate = xid_rate
        self.xid_codes = xid_codes
        self.clock = clock                      # rel -> offset added to Sample.t
        self.t0: float | None = None
        self.last: float | None = None
        self.xids_emitted = 0.0
        self._xid_acc = 0.0
        self._xids: dict[tuple[str], float] = {}
        self.hanging = threading.Event()        # set while a poll is stuck
        self.release = threading.Event()        # ends a hang early (test teardown)
        self._hung = False
        self._last_counters: dict[str, dict] = {}

    def open(self):
        return self.inner.open()

    def close(self) -> None:
        self.release.set()
        self.inner.close()

    def poll(self, now: float) -> PollResult:
        if self.t0 is None:
            self.t0 = now
        rel = now - self.t0
        if self.hang is not None and not self._hung and rel in self.hang:
            self._hung = True
            self.hanging.set()
            self.release.wait(self.hang.end - self.hang.start)     # the driver call that never returns
            self.hanging.clear()
        dt = 0.0 if self.last is None else now - self.last
        self.last = now
        result = self.inner.poll(now)
        readings = []
        for r in result.readings:
            if r.gpu in self.lost and rel in self.lost[r.gpu]:
                r = Reading(r.gpu, up=False, error="GPU is lost", counters=self._last_counters.get(r.gpu, {}))
            else:
                if self.clock is not None:
                    off = self.clock(rel)
                    r.samples = [s._replace(t=s.t + off) for s in r.samples]
                if r.gpu == "0" and self.xid_rate:
                    self._xid_acc += self.xid_rate * dt
                    n = int(self._xid_acc)
                    self._xid_acc -= n
                    # events i = emitted .. emitted+n-1 carry code i mod len(codes)
                    k, first = len(self.xid_codes), int(self.xids_emitted)
                    for j, c in enumerate(self.xid_codes):
                        got = n // k + (1 if (j - first) % k < n % k else 0)
                        if got:
                            self._xids[(c,)] = self._xids.get((c,), 0.0) + got
                    self.xids_emitted += n
                    r.counters["xid_errors_total"] = dict(self._xids)
                self._last_counters[r.gpu] = dict(r.counters)
            readings.append(r)
        return PollResult(readings, result.devices, result.call_errors)
