"""GPU timelines -> nvidia-smi CSV logs with the timing of the real ones.

A timeline is, per GPU, a list of contiguous segments (start, end, state). A state
says what the GPU does: no job, a job holding memory but not computing (start-up),
computing, spin-waiting in a collective (busy at idle-level power), idle inside a
job, or partly busy at a fraction. `write_log` samples it the way
`nvidia-smi --query-gpu=... -lms 100` does on the real 8xH100 traces
(../shared/data/traces/h100-8gpu, see ../shared/data/README.md):

- one poll every 100 ms (jittered a few ms), the GPUs' rows written one after
  another a few milliseconds apart; now and then the GPU 0 query stalls and the
  rows after it land up to ~1.1 s later (the next poll waits for it);
- `utilization.gpu` is the share of the driver's last sample period (1/6 s) in
  which a kernel ran, as an integer percent, so a stall that starts between polls
  shows as a partial value;
- power either as `power.draw` averaged over the last second (what the real logs
  hold: it hides short spin-waits) or as `power.draw.instant`, with noise;
- `memory.used` from the state (a job holds tens of GiB; a freed GPU 17 MiB).

Everything is drawn from a `random.Random(seed)`: the same seed writes the same file.
"""
from __future__ import annotations

import bisect
import calendar
import functools
import random
import time
from dataclasses import dataclass

from gpulse.model import UTIL_PERIOD   # NVML's utilisation sample period

POWER_AVG = 1.0              # power.draw is a 1 s average on H100 drivers
POLL = 0.1

# state -> (busy weight, power key, holds memory)
OFF, LOAD, COMPUTE, SPIN, IDLE, PART = "off", "load", "compute", "spin", "idle", "part"


@dataclass(frozen=True)
class Levels:
    """Power and memory levels, measured from the real traces (corpus.levels)."""
    compute_w: float
    spin_w: float
    idle_w: float
    job_mib: float
    free_mib: float


class Timeline:
    """Per-GPU segments. `add(gpu, a, b, state, part=0.0)` must be called in time order
    per GPU; gaps between segments are filled with `fill` (default: no job)."""

    def __init__(self, gpus: int, end: float):
        self.gpus = gpus
        self.end = end
        self.seg: list[list[tuple[float, float, str, float]]] = [[] for _ in range(gpus)]

    def add(self, gpu: int, a: float, b: float, state: str, part: float = 0.0, fill: str = OFF) -> None:
        s = self.seg[gpu]
        last = s[-1][1] if s else 0.0
        a = max(a, last)
        b = min(b, self.end)
        if b <= a:
            return
        if a > last + 1e-9:
            s.append((last, a, fill, 0.0))
        if s and s[-1][2] == state and s[-1][3] == part and abs(s[-1][1] - a) < 1e-9:
            s[-1] = (s[-1][0], b, state, part)
        else:
            s.append((a, b, state, part))

    def close(self) -> None:
        for g in range(self.gpus):
            self.add(g, self.end, self.end, OFF)
            s = self.seg[g]
            if not s or s[-1][1] < self.end:
                s.append((s[-1][1] if s else 0.0, self.end, OFF, 0.0))
        self._starts = [[x[0] for x in s] for s in self.seg]

    def mean(self, gpu: int, a: float, b: float, lv: Levels) -> tuple[float, float]:
        """(busy fraction, mean power) over [a, b]: computing and spin-waiting are busy
        at their levels' power, a partly busy GPU busy `part` of the time with its power
        between idle and computing, anything else idle. Called twice for every row of
        a log, so written out flat."""
        s = self.seg[gpu]
        if a < 0.0:
            a = 0.0
        if b < 1e-9:
            b = 1e-9
        if b <= a:
            a = b - 1e-6
        i = bisect.bisect_right(self._starts[gpu], a) - 1
        if i < 0:
            i = 0
        busy = power = 0.0
        n = len(s)
        while i < n:
            lo, hi, state, part = s[i]
            if lo >= b:
                break
            if a >= lo:
                lo = a
            if b <= hi:
                hi = b
            if hi > lo:
                d = hi - lo
                if state == COMPUTE:
                    busy += d
                    power += lv.compute_w * d
                elif state == SPIN:
                    busy += d
                    power += lv.spin_w * d
                elif state == PART:
                    busy += part * d
                    power += (lv.idle_w + part * (lv.compute_w - lv.idle_w)) * d
                else:
                    power += lv.idle_w * d
            i += 1
        d = b - a
        return busy / d, power / d

    def state(self, gpu: int, t: float) -> str:
        i = bisect.bisect_right(self._starts[gpu], t) - 1
        s = self.seg[gpu]
        return s[min(max(0, i), len(s) - 1)][2]


FORMATS = {
    # the real 8xH100 logs: no index column, 1 s-averaged power
    "avg": "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]",
    # a newer driver's query: index column, instantaneous power
    "instant": "timestamp, index, power.draw.instant [W], utilization.gpu [%], memory.used [MiB]",
}


@functools.lru_cache(maxsize=64)
def _second(whole: int) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(whole))


def _stamp(epoch: float, t: float) -> str:
    whole = int(epoch + t)
    ms = int(round((epoch + t - whole) * 1000))
    if ms == 1000:
        whole, ms = whole + 1, 0
    return _second(whole) + f".{ms:03d}"


class Extra:
    """More --query-gpu columns for a log (clocks, throttle reasons, temperature...).
    `header` lists them; `watts(gpu, t, watts)` may change a row's power (a GPU held
    at its power limit); `mib(gpu, t, mib)` its memory in use (uneven memory across
    GPUs); `cells(gpu, t, state, busy, watts)` gives the row's values.
    Its own random generator, so a log without extras is the same as before."""

    header: tuple[str, ...] = ()

    def watts(self, gpu: int, t: float, watts: float) -> float:
        return watts

    def mib(self, gpu: int, t: float, mib: float) -> float:
        return mib

    def cells(self, gpu: int, t: float, state: str, busy: float, watts: float) -> list[str]:
        return []


def write_log(path: str, tl: Timeline, lv: Levels, fmt: str, seed: int,
              epoch: str = "2026/03/02 10:00:00", query_stall_rate: float = 0.002,
              extra: Extra | None = None) -> int:
    """Sample the timeline into an nvidia-smi CSV at `path`; returns the rows written."""
    tl.close()
    rng = random.Random(seed)
    t0 = calendar.timegm(time.strptime(epoch, "%Y/%m/%d %H:%M:%S"))
    lines = [", ".join((FORMATS[fmt], *extra.header)) if extra else FORMATS[fmt]]
    # the generator's and the timeline's methods bound once: this loop runs per row
    uniform, gauss, draw, randint = rng.uniform, rng.gauss, rng.random, rng.randint
    mean, state_at = tl.mean, tl.state
    power_back = POWER_AVG if fmt == "avg" else 0.02
    t = uniform(0.0, POLL)
    n = 0
    while t < tl.end - 1.2:
        row_t = t + gauss(0.0, 0.002)
        for g in range(tl.gpus):
            row_t += uniform(0.001, 0.004)
            if g == 0 and draw() < query_stall_rate:
                row_t += uniform(0.3, 1.1)      # the GPU 0 query stalls; the rest wait
            busy, _ = mean(g, row_t - UTIL_PERIOD, row_t, lv)
            _, watts = mean(g, row_t - power_back, row_t, lv)
            watts *= 1.0 + gauss(0.0, 0.015)
            if extra:
                watts = extra.watts(g, row_t, watts)
            util = int(round(100 * min(1.0, max(0.0, busy + (gauss(0.0, 0.01) if 0 < busy < 1 else 0.0)))))
            state = state_at(g, row_t)
            held = state != OFF
            mib = (lv.job_mib + randint(-64, 64)) if held else (lv.free_mib + (91 if g == 0 else 0))
            if extra and held:
                mib = extra.mib(g, row_t, mib)
            cells = [_stamp(t0, row_t)]
            if fmt == "instant":
                cells.append(str(g))
            cells += [f"{watts:.2f} W", f"{util} %", f"{int(mib)} MiB"]
            if extra:
                cells += extra.cells(g, row_t, state, busy, watts)
            lines.append(", ".join(cells))
            n += 1
        t = max(t + POLL + gauss(0.0, 0.001), row_t + 0.002)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return n
