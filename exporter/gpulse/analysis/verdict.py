"""The detection model's verdicts: what the live exporter, the live page and the
report call a straggler, work, and a time span of either.

Everything here is pure and clock-free (per-tick values in, verdicts out); the
numbers come from analysis/thresholds.py only.

Straggler, at one analysis window (live, and per tick in the report): by what it costs
    In synchronous training every rank waits at each synchronisation point for the
    slowest. A GPU's cost is the share of its peers' time spent waiting for it:
        hot  (signal "active"): it computes while they wait
             cost = a_k − median(a)              a: active fraction over the window
        cold (signal "busy"): its rank is off the GPU while they spin-wait
             cost = min(median(b) − b_k, median(s))   b: busy, s: spin-wait fraction
    (a rank that is off the GPU only costs what its peers spend spin-waiting; one that
    just gets less work costs nobody anything, its own waiting is imbalance).
    deviating(z, cost) = cost ≥ straggler_cost_ratio  ∧  z ≥ straggler_z
    z: the gap to the group median in units of the group's measured spread (robust z,
    analysis.balance, 1.4826 MAD floored at z_mad_floor, the measurement's resolution),
    signed so that waiting peers make it positive. Peers that all wait for the same
    rank agree to a point or two, so a 5 % cost is a 5σ event; ranks whose step
    times jitter independently (the slowest rank changes from step to step) spread as
    wide as their gaps and are no straggler. The structural guard is persistence
    (below): the same rank must cost its peers window after window for
    straggler_min_span_seconds. Groups under straggler_min_gpus GPUs have none.

Straggler, over a run (the report)
    a GPU deviating the same way for ≥ straggler_persistence_ratio of the work time is
    a straggler of the whole run; one deviating for ≥ straggler_min_span_seconds, with
    no break of straggler_break_seconds or more, is a straggler for that span (a
    transient straggler: a slow node for a few minutes of an hour). Both carry their
    spans.
    A GPU off the GPU (cold) in deviating runs that are shorter but recur is a
    straggler too: runs less than straggler_recur_seconds apart, whose costs summed over
    the last straggler_recur_seconds reach straggler_cost_ratio of it (the peers
    wait that share of 5 minutes for it: a rank that checkpoints for 16 s every
    ~250 s while they spin-wait costs them 5-6 %), make it one from that run on; its
    span runs from the first of them to the last. One run alone is a pause of the
    job, which the stall model reports with that rank named, not a straggler. A hot
    straggler computes longer at every step, so its cost is continuous and the span
    rule names it; its window flickering around the cost threshold is no recurring
    event (Alibaba PAI job 1 at 12 s a recorded row: workers 1 and 2 would read
    spans of 13-15 minutes at a robust z of 1.7-2.6 over them).

Straggler, live
    Persistence follows one GPU window by window with the same rule the report
    applies afterwards: it is a straggler once it has deviated the same way for
    straggler_min_span_seconds with no break of straggler_break_seconds, and stays one
    until such a break. So the page and the exporter name a GPU when the report will
    give it a span of at least that length (the report's span starts when the
    deviation began; a whole-run straggler that only ever deviates in short bursts is
    the report's alone, as it takes the whole run to see). A recurring one is confirmed
    at the window whose run makes it recur, and stays one until straggler_recur_seconds
    pass without a deviating window.

Imbalance explained by stragglers (the report and the live gauge)
    the spread of a group's active fractions is the stragglers' when every GPU on one
    side of the midpoint between the busiest and the least busy is one: one slow GPU
    under the rest, or a few hot ones above it. The straggler verdict then says it,
    and the spread is not called imbalance: the report gives no imbalance finding
    over its stragglers, and the exporter keeps measuring gpulse_group_imbalance_ratio
    while it sets the verdict gpulse_group_imbalance_explained to 1 (a measurement
    never disappears because of a verdict). Live the run counts from its first
    deviating window, not from confirmation, because the report's straggler span
    starts there too: the spread of those first straggler_min_span_seconds belongs
    to the straggler the report will name.

Lost GPU-seconds (live counter, the report's headline, the rules)
    sync_stall  every GPU of the group, for every stalled second;
    straggler   its peers' waiting: cost × tick × the GPUs that do not straggle, shared
                among the GPUs that do (a slow node's GPUs in one workload wait for
                nobody but cost the rest once), booked from the first deviating
                window of a run once the run is confirmed (Persistence), under the
                straggler's cause; a cold straggler's peers spin-wait, which is a
                sync stall where spin-waiting reads inactive, so its charge is its
                cost less the window's stall share (no second count);
    imbalance   while the group is imbalanced (spread ≥ imbalance_alert_ratio, the
                busiest ≥ imbalance_min_active_ratio) and no straggler explains it,
                each GPU's distance to the busiest: Σ (max(a) − a_k) × tick.

Work (phases)
    a tick is *working* when some GPU of the group was non-idle (utilisation ≥
    --idle-threshold) for ≥ work_busy_ratio of it; work runs from the first to the last
    stretch of ≥ work_sustain_seconds working ticks. Non-idle time, not mean
    utilisation: 0.6 s stalls every 2.5 s leave every tick ~75 % non-idle even when
    the steps between them run at partial utilisation, and start-up blips stay short.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

from .cause import CAUSES
from .thresholds import value

# read once: the live engine asks for every GPU at every tick
STRAGGLER_Z = value("straggler_z")
COST = value("straggler_cost_ratio")
MIN_SPAN = value("straggler_min_span_seconds")
BREAK = value("straggler_break_seconds")
RECUR = value("straggler_recur_seconds")
# What lost GPU-seconds are counted under (see module doc): (reason, cause). Every
# pair exists from the start, so a counter that first moves by a whole confirmed
# span is not lost to a rate() that needs two points of it.
LOSS_KEYS = (("sync_stall", ""), ("imbalance", "")) + tuple(("straggler", c) for c in CAUSES)


def deviating(z: float | None, cost: float | None) -> bool:
    """The one straggler test at one window (see module doc); z and cost signed so that
    waiting peers make both positive."""
    if z is None or cost is None or not z >= STRAGGLER_Z:     # NaN is never deviating
        return False
    return cost >= COST


def peer_wait(active: float, busy: float, median_active: float, median_busy: float,
              median_spin: float) -> tuple[float, float]:
    """(hot, cold) cost of one GPU: the share of its peers' time spent waiting for it
    while it computes, and while it is off the GPU (see module doc)."""
    return active - median_active, min(median_busy - busy, median_spin)


def straggler_signal(z_active: float | None, z_busy: float | None,
                     cost_active: float | None, cost_busy: float | None) -> tuple[str, float] | None:
    """(signal, z) of the first signal (active, then busy) on which a GPU deviates; the
    z of the busy signal is returned negative (the GPU is idler than its peers)."""
    if deviating(z_active, cost_active):
        return "active", z_active          # type: ignore[return-value]
    if z_busy is not None and deviating(-z_busy, cost_busy):
        return "busy", z_busy
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


def straggler_spans(flags: Sequence[bool], ticks: Sequence[int], interval: float,
                    cold_costs: Sequence[float] | None = None) -> tuple[float, list[tuple[int, int]]]:
    """(persistence, spans) of one GPU over its work ticks; flags[j] says whether it
    deviated (the same way) at tick ticks[j]; cold_costs[j], for the flags of a cold
    straggler (off the GPU), what it cost its peers then (None for a hot one).

    persistence is the share of work ticks deviating; spans are the runs of
    consecutive work ticks (as tick index ranges) deviating, breaks shorter than
    straggler_break_seconds bridged. The run is a straggler
    of the whole run when persistence ≥ straggler_persistence_ratio (then every
    deviating run of ≥ straggler_min_span_seconds, or the whole work, is its span),
    else of each run ≥ straggler_min_span_seconds, and of each chain of shorter runs
    that recurs (recurring(), the module doc)."""
    if not ticks:
        return 0.0, []
    persistence = sum(flags) / len(flags)
    need = MIN_SPAN / interval
    brk = BREAK / interval
    merged: list[tuple[int, int]] = []
    for a, b in runs(flags):
        # bridged within one stretch of work only: a gap in the ticks is another job
        if merged and a - merged[-1][1] - 1 <= brk and ticks[a] - ticks[merged[-1][1]] == a - merged[-1][1]:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    long_runs = [(a, b) for a, b in merged if b - a + 1 >= need - 1e-9]
    if cold_costs is not None:
        chains = recurring(merged, flags, cold_costs, interval, ticks)
        long_runs = sorted(chains + [r for r in long_runs if not any(a <= r[0] and r[1] <= b for a, b in chains)])
    long_runs = [(ticks[a], ticks[b]) for a, b in long_runs]
    if persistence >= value("straggler_persistence_ratio") and not long_runs:
        long_runs = [(ticks[0], ticks[-1])]
    elif persistence < value("straggler_persistence_ratio") and not long_runs:
        return persistence, []
    return persistence, long_runs


def recurring(merged: Sequence[tuple[int, int]], flags: Sequence[bool], costs: Sequence[float],
              interval: float, ticks: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """The (first, last) position ranges of the chains of deviating runs (`merged`:
    ascending, breaks bridged) that recur (module doc): runs less than
    straggler_recur_seconds apart are one chain, which recurs from its first run to
    its last when at a deviating window of its second run or later the costs of the
    deviating windows of the last straggler_recur_seconds add up to
    straggler_cost_ratio of that time. A chain does not cross a gap in `ticks` (the
    work ticks: the job ended and another started)."""
    gap = RECUR / interval
    chains: list[list[tuple[int, int]]] = []
    for r in merged:
        prev = chains[-1][-1][1] if chains else None
        if (prev is not None and r[0] - prev < gap
                and (ticks is None or ticks[r[0]] - ticks[prev] == r[0] - prev)):
            chains[-1].append(r)
        else:
            chains.append([r])
    out = []
    for chain in chains:
        if len(chain) < 2:
            continue
        window: deque[tuple[int, float]] = deque()
        total = 0.0
        found = False
        for n, (a, b) in enumerate(chain):
            for j in range(a, b + 1):
                if not flags[j]:
                    continue
                window.append((j, costs[j] * interval))
                total += costs[j] * interval
                while window[0][0] <= j - gap:
                    total -= window.popleft()[1]
                if n and total >= COST * RECUR - 1e-9:
                    found = True
                    break
            if found:
                break
        if found:
            out.append((chain[0][0], chain[-1][1]))
    return out


@dataclass(slots=True)
class Persistence:
    """Live straggler confirmation of one GPU (see module doc). Feed every window.

    It also books what the straggler costs its peers (GPU-seconds of their waiting)
    the way the report counts it over its span: from the first deviating window of
    the run, owed until the run is confirmed and dropped if it never is; windows of a
    break are owed until the run deviates again (then the break is part of the span)
    and dropped when the run ends with it. A run that makes the GPU recur (module
    doc) is confirmed with what it owes; since stays set while the recurring
    straggler lasts, so its owner keeps feeding it every window."""
    since: float | None = None      # start of the current deviating run (breaks bridged)
    last: float | None = None       # last window that deviated
    sign: float = 0.0
    latest: tuple[str, float] | None = None
    owed: float = 0.0               # peers' waiting in the run, not booked yet
    tail: float = 0.0               # peers' waiting since the last deviating window
    # recurrence: the last deviating window of the previous run of this sign, the
    # (t, cost × interval) of the deviating windows of the last RECUR seconds, and
    # whether the runs recur (a confirmed straggler until RECUR passes without one)
    before: float | None = None
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    recurs: bool = False

    def update(self, t: float, interval: float, signal: tuple[str, float] | None,
               charge: float = 0.0, cost: float = 0.0) -> tuple[tuple[str, float] | None, float]:
        """(the confirmed (signal, z) at window end t or None, GPU-seconds of peers'
        waiting booked now); `charge` is this window's share of that waiting, `cost`
        the share of its peers' time the GPU cost them over the window."""
        if signal is not None:
            sign = math.copysign(1.0, signal[1])
            if sign != self.sign:
                self.before, self.recurs = None, False
                self.recent.clear()
            if self.since is None or self.last is None or sign != self.sign or t - self.last > BREAK:
                # an earlier run of this sign less than RECUR ago: the runs may recur
                chained = self.last is not None and sign == self.sign and t - self.last < RECUR
                self.before = self.last if chained else None
                self.recurs = self.recurs and chained
                self.since, self.sign = t, sign
                self.owed = self.tail = 0.0
            self.last, self.latest = t, signal
            self.owed += self.tail + charge
            self.tail = 0.0
            self.recent.append((t, cost * interval))
        while self.recent and self.recent[0][0] <= t - RECUR:
            self.recent.popleft()
        if self.last is not None and t - self.last >= RECUR:
            self.before, self.recurs = None, False
        if (signal is not None and not self.recurs and self.before is not None and self.sign < 0
                and sum(c for _, c in self.recent) >= COST * RECUR - 1e-9):
            self.recurs = True
        if self.since is None or self.last is None:
            return None, 0.0
        if t - self.last > BREAK and not self.recurs:
            self.since = self.latest = None
            self.owed = self.tail = 0.0
            return None, 0.0
        if signal is None:
            self.tail += charge
        confirmed = self.recurs or self.last - self.since + interval >= MIN_SPAN - 1e-9
        if not confirmed:
            return None, 0.0
        booked, self.owed = self.owed, 0.0
        return self.latest, booked

    def job_ended(self) -> None:
        """The group released its workload: runs of a later job do not recur with
        this one's (the report's chains do not cross a gap in the work either)."""
        self.before, self.recurs = None, False
        self.recent.clear()
