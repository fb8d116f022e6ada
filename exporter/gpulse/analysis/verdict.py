"""The detection model's verdicts: what the live exporter, the live page and the
report call a straggler, work, and a time span of either.

Everything here is pure and clock-free (per-tick values in, verdicts out); the
numbers come from analysis/thresholds.py only.

Straggler, at one analysis window (live, and per tick in the report)
    deviating(z, gap) = |z| ≥ straggler_z  ∧  |gap| ≥ straggler_gap_ratio
    z: the robust peer deviation (analysis.balance, MAD floor z_mad_floor) of the GPU's
    active or busy fraction over the window; gap: its distance from the group median.
    Groups under straggler_min_gpus GPUs have none. With straggler_z · z_mad_floor ≥
    straggler_gap_ratio (3.5 · 0.05 = 0.175 ≥ 0.1, pinned by a test) the gap condition
    follows from z, so a stored z alone decides.

Straggler, over a run (the report)
    a GPU deviating the same way for ≥ straggler_persistence_ratio of the work time is
    a straggler of the whole run; one deviating for ≥ straggler_min_span_seconds, with
    no break of straggler_break_seconds or more, is a straggler for that span (a
    transient straggler: a slow node for a few minutes of an hour). Both carry their
    spans.

Straggler, live
    Persistence follows one GPU window by window with the same rule the report
    applies afterwards: it is a straggler once it has deviated the same way for
    straggler_min_span_seconds with no break of straggler_break_seconds, and stays one
    until such a break. So the page and the exporter name a GPU when the report will
    give it a span of at least that length (the report's span starts when the
    deviation began; a whole-run straggler that only ever deviates in short bursts is
    the report's alone, as it takes the whole run to see).

Imbalance explained by stragglers (the report and the live gauge)
    the spread of a group's active fractions is the stragglers' when every GPU on one
    side of the midpoint between the busiest and the least busy is one: one slow GPU
    under the rest, or a few hot ones above it. The straggler verdict then says it,
    and the spread is not called imbalance: the report gives no imbalance finding
    over its stragglers, the exporter holds gpulse_group_imbalance_ratio back while
    the GPUs of a deviating run explain the window's spread. Live the run counts
    from its first deviating window, not from confirmation, because the report's
    straggler span starts there too: the spread of those first
    straggler_min_span_seconds belongs to the straggler the report will name.

Work (phases)
    a tick is *working* when some GPU of the group was non-idle (utilisation ≥
    --idle-threshold) for ≥ work_busy_ratio of it; work runs from the first to the last
    stretch of ≥ work_sustain_seconds working ticks. Non-idle time, not mean
    utilisation: 0.6 s stalls every 2.5 s leave every tick ~75 % non-idle even when
    the steps between them run at partial utilisation, and start-up blips stay short.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from .thresholds import value

# read once: the live engine asks for every GPU at every tick
STRAGGLER_Z = value("straggler_z")
STRAGGLER_GAP = value("straggler_gap_ratio")
MIN_SPAN = value("straggler_min_span_seconds")
BREAK = value("straggler_break_seconds")


def deviating(z: float | None, gap: float | None = None) -> bool:
    """The one straggler test at one window (see module doc)."""
    if z is None or not abs(z) >= STRAGGLER_Z:     # NaN is never deviating
        return False
    return gap is None or abs(gap) >= STRAGGLER_GAP


def straggler_signal(dev_active: float | None, dev_busy: float | None,
                     gap_active: float | None = None, gap_busy: float | None = None) -> tuple[str, float] | None:
    """(signal, z) of the first signal (active, then busy) on which a GPU deviates."""
    for signal, z, gap in (("active", dev_active, gap_active), ("busy", dev_busy, gap_busy)):
        if deviating(z, gap):
            return signal, z   # type: ignore[return-value]
    return None


def imbalance_explained(active: Mapping[str, float], stragglers: Collection[str]) -> bool:
    """Whether `stragglers` explain the spread of `active` (active fraction by GPU):
    every GPU on one side of the midpoint between the busiest and the least busy
    is one of them (see module doc)."""
    if not stragglers or not active:
        return False
    hi_v, lo_v = max(active.values()), min(active.values())
    if not hi_v > lo_v:
        return False          # no spread to explain
    mid = (hi_v + lo_v) / 2
    flagged = set(stragglers)
    lo = {k for k, v in active.items() if v < mid}
    return lo <= flagged or set(active) - lo <= flagged


def runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal (first, last) index ranges where flags hold."""
    out: list[tuple[int, int]] = []
    start = None
    for i, f in enumerate(flags):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(flags) - 1))
    return out


def work_runs(working: Sequence[bool], interval: float) -> list[tuple[int, int]]:
    """Stretches of working ticks long enough to be work (see module doc)."""
    need = max(1, math.ceil(value("work_sustain_seconds") / interval - 1e-9))
    return [(a, b) for a, b in runs(working) if b - a + 1 >= need]


def is_working(nonidle_share: float) -> bool:
    return nonidle_share >= value("work_busy_ratio")


def straggler_spans(flags: Sequence[bool], ticks: Sequence[int],
                    interval: float) -> tuple[float, list[tuple[int, int]]]:
    """(persistence, spans) of one GPU over its work ticks; flags[j] says whether it
    deviated (the same way) at tick ticks[j].

    persistence is the share of work ticks deviating; spans are the runs of
    consecutive work ticks (as tick index ranges) deviating, breaks shorter than
    straggler_break_seconds bridged. The run is a straggler
    of the whole run when persistence ≥ straggler_persistence_ratio (then every
    deviating run of ≥ straggler_min_span_seconds, or the whole work, is its span),
    else of each run ≥ straggler_min_span_seconds."""
    if not ticks:
        return 0.0, []
    persistence = sum(flags) / len(flags)
    need = MIN_SPAN / interval
    brk = BREAK / interval
    merged: list[tuple[int, int]] = []
    for a, b in runs(flags):
        if merged and a - merged[-1][1] - 1 <= brk:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    long_runs = [(ticks[a], ticks[b]) for a, b in merged if b - a + 1 >= need - 1e-9]
    if persistence >= value("straggler_persistence_ratio") and not long_runs:
        long_runs = [(ticks[0], ticks[-1])]
    elif persistence < value("straggler_persistence_ratio") and not long_runs:
        return persistence, []
    return persistence, long_runs


@dataclass(slots=True)
class Persistence:
    """Live straggler confirmation of one GPU (see module doc). Feed every window."""
    since: float | None = None      # start of the current deviating run (breaks bridged)
    last: float | None = None       # last window that deviated
    sign: float = 0.0
    latest: tuple[str, float] | None = None

    def update(self, t: float, interval: float, signal: tuple[str, float] | None) -> tuple[str, float] | None:
        """The confirmed (signal, z) at window end t, or None."""
        brk = BREAK
        if signal is not None:
            sign = math.copysign(1.0, signal[1])
            if self.since is None or self.last is None or sign != self.sign or t - self.last > brk:
                self.since, self.sign = t, sign
            self.last, self.latest = t, signal
        if self.since is None or self.last is None:
            return None
        if t - self.last > brk:
            self.since = self.last = self.latest = None
            return None
        confirmed = self.last - self.since + interval >= MIN_SPAN - 1e-9
        return self.latest if confirmed else None
