"""Sync stalls: stretches where every GPU of a peer group is not doing real work.

Each GPU's history is a list of Runs — maximal stretches with the same state
(inactive = active fraction below the idle threshold; holds = memory allocated or a
process attached). The tracker sweeps the runs of all members in time order:

    holding(t)  = at least one member holds a workload
    warmed(t)   = since the group last started holding, some member has been active
                  for at least WARMUP_ACTIVE seconds in total
    stalled(t)  = holding(t) ∧ warmed(t) ∧ every member inactive at t

    sync_stall_seconds += |{t : stalled(t)}|         (every co-inactive moment, live)
    holding_seconds    += |{t : holding(t)}|         (denominator of the stall fraction)
    sync_stalls        += 1 per episode at least min_stall long

An *episode* is a stalled stretch, merged with the next one when the activity between
them is short against the stalls themselves (gap < MERGE_RATIO × the longer stretch,
at most MAX_MERGE_GAP, and the result no longer than MAX_MERGED): a checkpoint during which rank 0 touches the GPU for a moment
is one 17 s stall, not three, while 0.3 s stalls 1.7 s apart stay separate. An episode
is therefore counted once nothing can merge with it any more: MAX_MERGE_GAP after the
last stall, or MAX_PENDING after it ended while short stalls keep coming.

Sampling grid: a GPU's samples cover (t_prev, t] and a sample only partly inside a
stall reads active, so a stall of length L off the sample grid is seen as a co-inactive
stretch of about L − one sample spacing, shorter still when the rows of one poll are
written milliseconds apart (row skew). An episode is therefore counted when its
observed length plus half the sample spacing (`grid`, the caller's measured spacing)
reaches min_stall: a 0.3 s stall seen as 0.19 s counts under --min-stall 0.2s, a
single 0.1 s co-idle sample does not (unless the samples average a window, below).

Averaging window: NVML utilisation is the share of the driver's last sample period in
which a kernel ran, and that period is at least 1/6 s (between 1/6 s and 1 s depending
on the product, nvmlDeviceGetUtilizationRates). A sample reading idle says the GPU was
idle over the window (t − w, t]; the sample before it, read active, says the stall began
in the window before that. For a stall starting uniformly in that window the expected
start lies w + Δ/2 before the first idle sample (Δ: sample spacing) and the expected end
Δ/2 after the last one, so the observed stretch (from the previous sample to the last idle
one) is short by w on average, whatever the spacing: a 0.3 s stall polled every 100 ms
through a 1/6 s window reads ~0.18 s. Each closed stretch therefore gets `window` (the
source's averaging window, util_window_seconds for NVML-style utilisation, 0 for instantaneous
samples) added to its length and to the stalled seconds when every member's utilisation
read idle through it (a GPU spin-waiting is inactive by its power, which is not
averaged that way: such a stretch gets nothing), so the stall share is unbiased
for short stalls and negligibly changed for long ones.

Why `warmed`: a job that has allocated memory but not started computing (loading data,
compiling, the first minutes of a run, with the odd blip of activity) is not stalling;
nor is anything after all memory was released ("no job": start-up, crash, restart).
When the job releases its memory, the stall in progress (the job winding down) is the
job ending: its seconds were already counted live, but it is not an episode. Every
episode that had already ended is final at that moment and counted, so a rhythm keeps
its last cycles instead of losing everything that was still waiting to merge.

End of a log: a stall still in progress when the record stops (`final_episodes`) is an
*open* episode, cut by the end of the record rather than ended by work, when every
member still holds its memory and the stretch has lasted at most stall_open_max_seconds.
A job that exits releases its memory (the rule above: any member releasing it is the job
ending), so memory still held on every GPU says the job was still there, in the middle of
a stall, when logging stopped. A co-idle stretch with memory held for longer than any
stall the recordings show is the job done or hung, no stall that can be timed.

The merge, pending and warm-up lengths are stall_merge_ratio, stall_merge_gap_seconds,
stall_merged_max_seconds, stall_pending_seconds and warmup_active_seconds in
analysis/thresholds.py.

A member with no samples in a stretch (a gap) counts as active and not holding, so
missing data can never fabricate a stall.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from operator import itemgetter

from .thresholds import value


@dataclass(slots=True)
class Run:
    start: float
    end: float
    inactive: bool
    holds: bool
    idle: bool = True    # inactive because utilisation read idle (not busy at low power)


@dataclass(frozen=True, slots=True)
class Episode:
    start: float
    duration: float      # from the first to the last stalled moment
    stalled: float       # stalled seconds within it
    open: bool = False   # still in progress when the record ended (module doc)


UTIL_WINDOW = value("util_window_seconds")    # NVML utilisation's averaging window (module doc)
WARMUP_ACTIVE = value("warmup_active_seconds")
MERGE_RATIO = value("stall_merge_ratio")
MAX_MERGE_GAP = value("stall_merge_gap_seconds")
MAX_PENDING = value("stall_pending_seconds")   # an episode is counted at the latest this long after it ended
OPEN_MAX = value("stall_open_max_seconds")    # longest stall still open at the end of a log
MAX_MERGED = value("stall_merged_max_seconds")   # merging stops here, so a group stalled most of the time
                                                 # still produces episodes (and a period)


_at = itemgetter(0)   # an event's time, the sort key of every sweep


class StallTracker:
    """Co-inactivity state of one peer group; feed it with advance()."""

    def __init__(self, min_stall: float, keep_episodes: int = 256, grid: float = 0.0, window: float = 0.0):
        self.min_stall = min_stall
        self.grid = grid          # sample spacing; the caller may update it as it measures it
        self.window = window      # how far back each sample's utilisation reaches (see module doc)
        self.stall_seconds = 0.0
        self.stalls_total = 0
        self.holding_seconds = 0.0
        self.processed_until: float | None = None
        self.episodes: deque[Episode] = deque(maxlen=keep_episodes)
        self.holding = False
        self._active_since_hold = 0.0
        self._open_start: float | None = None   # the stalled stretch in progress
        self._open_len = 0.0
        self._open_idle = True                    # every member's utilisation read idle throughout
        self._all_hold = False                    # every member held memory in the latest segment
        self._pending: list[Episode] = []         # closed, may still merge with what follows
        self.changes = 0          # bumped whenever recent_episodes() may have changed

    @property
    def warmed(self) -> bool:
        return self._active_since_hold >= WARMUP_ACTIVE

    @property
    def in_stall(self) -> bool:
        return self._open_start is not None

    @property
    def pending(self) -> bool:
        """Whether closed episodes wait to be final (counted)."""
        return bool(self._pending)

    @property
    def open_since(self) -> float | None:
        """Start of the stall in progress, None when not stalled."""
        return self._open_start

    def advance(self, runs: list[list[Run]], until: float) -> None:
        """Process every member's runs up to `until` (the time all members have
        reported up to). Runs may extend before processed_until; that part is skipped."""
        lo = self.processed_until
        if lo is None:
            starts = [r[0].start for r in runs if r]
            if not starts:
                return
            lo = min(starts)
        if until <= lo:
            return
        n = len(runs)
        # events: (time, member, inactive, holds, idle); a member's state between its runs is a gap
        events: list[tuple[float, int, bool, bool, bool]] = []
        for i, member in enumerate(runs):
            for r in member:
                if r.end <= lo or r.start >= until:
                    continue
                events.append((max(r.start, lo), i, r.inactive, r.holds, r.inactive and r.idle))
                if r.end < until:
                    events.append((r.end, i, False, False, False))  # gap unless the next run starts here
        # stable sort: a member's gap marker stays before its next run starting at the same instant
        events.sort(key=_at)
        inactive = [False] * n
        holds = [False] * n
        idle = [False] * n
        n_inactive = 0
        n_holds = 0
        n_idle = 0
        t = lo
        k = 0
        while k < len(events):
            te = events[k][0]
            if te > t:
                self._segment(t, te, n_inactive == n and n > 0, n_holds > 0, n_inactive < n, n_idle == n,
                              n_holds == n)
                t = te
            # apply every event at this instant
            while k < len(events) and events[k][0] == te:
                _, i, ina, hol, idl = events[k]
                n_inactive += ina - inactive[i]     # bools count as 0 and 1
                n_holds += hol - holds[i]
                n_idle += idl - idle[i]
                inactive[i], holds[i], idle[i] = ina, hol, idl
                k += 1
        if until > t:
            self._segment(t, until, n_inactive == n and n > 0, n_holds > 0, n_inactive < n, n_idle == n,
                          n_holds == n)
        self.processed_until = until

    def _segment(self, a: float, b: float, all_inactive: bool, holding: bool, someone_active: bool,
                 all_idle: bool = False, all_hold: bool = False) -> None:
        dt = b - a
        self._all_hold = all_hold
        if not holding:
            # the job released its memory: a stall in progress is the job ending, not a
            # sync stall episode; those that ended before are final
            self._finalize(before=math.inf)
            self._open_start = None
            self._open_len = 0.0
            self._active_since_hold = 0.0
            self.holding = False
            return
        self.holding = True
        self.holding_seconds += dt
        if someone_active:
            self._active_since_hold += dt
        if all_inactive and self.warmed:
            if self._open_start is None:
                self._open_start = a
                self._open_len = 0.0
                self._open_idle = True
            self._open_idle = self._open_idle and all_idle
            self._open_len += dt
            self.stall_seconds += dt
            return
        if self._open_start is not None:
            self._close(a)
        if self._pending:
            if b - (self._pending[-1].start + self._pending[-1].duration) > MAX_MERGE_GAP:
                self._finalize(before=b)
            else:
                self._finalize(before=b - MAX_PENDING)

    def _close(self, end: float) -> None:
        """Add the stretch that just ended, then merge backwards while the activity
        between neighbours is short against them (a merge can enable another)."""
        p = self._pending
        self.changes += 1
        # the averaging window hides the stall's first moments (module doc); only
        # utilisation is averaged, so a stretch where some GPU was busy at idle-level
        # power (judged on power, not on a window) gets nothing
        w = self.window if self._open_idle else 0.0
        self.stall_seconds += w
        p.append(Episode(self._open_start - w, end - self._open_start + w, self._open_len + w))
        self._open_start = None
        self._open_len = 0.0
        _merge_tail(p)

    def _finalize(self, before: float) -> None:
        """Count the pending episodes that ended before `before`."""
        while self._pending and self._pending[0].start + self._pending[0].duration < before:
            self.changes += 1
            e = self._pending.pop(0)
            if self.counts(e.duration):
                self.stalls_total += 1
                self.episodes.append(e)

    def counts(self, duration: float) -> bool:
        """Whether a co-inactive stretch observed this long is an episode (see the
        module doc: half a sample spacing is lost on average to the grid)."""
        return duration + 0.5 * self.grid >= self.min_stall * (1 - 1e-6)

    def open_episode(self) -> Episode | None:
        """The stall in progress as an open episode, when the record ending now cuts a
        stall rather than ends a job (module doc, End of a log); None otherwise."""
        if self._open_start is None or self.processed_until is None or not self._all_hold:
            return None
        length = self.processed_until - self._open_start
        if length > OPEN_MAX:
            return None
        w = self.window if self._open_idle else 0.0
        return Episode(self._open_start - w, length + w, self._open_len + w, open=True)

    def final_episodes(self) -> list[Episode]:
        """Every episode of a record that ends now: the counted ones, then
        ending_episodes()."""
        return list(self.episodes) + self.ending_episodes()

    def ending_episodes(self) -> list[Episode]:
        """What a record ending now adds to the counted episodes: those still pending
        that count, and the open one (merged with its neighbour by the same rule as a
        closed one)."""
        if not self._pending and self._open_start is None:
            return []
        p = list(self._pending)
        ep = self.open_episode()
        if ep is not None:
            p.append(ep)
            _merge_tail(p)
        return [e for e in p if self.counts(e.duration)]

    def recent_episodes(self) -> list[Episode]:
        """Counted episodes plus those still waiting to be final that will count (for
        the period: a rhythm of stretches under --min-stall is not a stall rhythm)."""
        return list(self.episodes) + [e for e in self._pending if self.counts(e.duration)]


def _merge_tail(p: list[Episode]) -> None:
    """Merge the last episode of p backwards while the activity between neighbours is
    short against them (a merge can enable another); a merge with an open episode is
    open."""
    while len(p) >= 2:
        x, y = p[-2], p[-1]
        gap = y.start - (x.start + x.duration)
        if gap >= min(MAX_MERGE_GAP, MERGE_RATIO * max(x.duration, y.duration)):
            break
        if y.start + y.duration - x.start > MAX_MERGED:
            break
        p[-2:] = [Episode(x.start, y.start + y.duration - x.start, x.stalled + y.stalled, y.open)]
