"""Sync stalls: stretches where every GPU of a peer group is not doing real work.

Each GPU's history is a list of Runs — maximal stretches with the same state
(inactive = active fraction below the idle threshold; holds = memory allocated or a
process attached). The tracker sweeps the runs of all members in time order:

    holding(t)  = at least one member holds a workload
    worked(t)   = some member has been active since the group last started holding
    stalled(t)  = holding(t) ∧ worked(t) ∧ every member inactive at t

    sync_stall_seconds += |{t : stalled(t)}|         (every co-inactive moment)
    sync_stalls        += 1 per maximal stalled stretch of length ≥ min_stall
    holding_seconds    += |{t : holding(t)}|         (denominator of the stall fraction)

Why `worked`: a job that has allocated memory but not started computing (loading
data, compiling, the first minutes of a run) is not stalling; nor is anything after
all memory was released ("no job": start-up, crash, restart). A stretch that ends
because the job released its memory is the job ending, not a stall episode: its
seconds were already counted live but it is not counted as an episode.

A member with no samples in a stretch (a gap) counts as active and not holding, so
missing data can never fabricate a stall.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(slots=True)
class Run:
    start: float
    end: float
    inactive: bool
    holds: bool


@dataclass(frozen=True, slots=True)
class Episode:
    start: float
    duration: float


class StallTracker:
    """Co-inactivity state of one peer group; feed it with advance()."""

    def __init__(self, min_stall: float, keep_episodes: int = 256):
        self.min_stall = min_stall
        self.stall_seconds = 0.0
        self.stalls_total = 0
        self.holding_seconds = 0.0
        self.processed_until: float | None = None
        self.episodes: deque[Episode] = deque(maxlen=keep_episodes)
        self.holding = False
        self._worked = False
        self._open_start: float | None = None
        self._open_len = 0.0

    @property
    def in_stall(self) -> bool:
        return self._open_start is not None

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
        # events: (time, member, inactive, holds); a member's state between its runs is a gap
        events: list[tuple[float, int, bool, bool]] = []
        for i, member in enumerate(runs):
            for r in member:
                if r.end <= lo or r.start >= until:
                    continue
                events.append((max(r.start, lo), i, r.inactive, r.holds))
                if r.end < until:
                    events.append((r.end, i, False, False))  # gap unless the next run starts here
        # stable sort: a member's gap marker stays before its next run starting at the same instant
        events.sort(key=lambda e: e[0])
        inactive = [False] * n
        holds = [False] * n
        n_inactive = 0
        n_holds = 0
        t = lo
        k = 0
        while k < len(events):
            te = events[k][0]
            if te > t:
                self._segment(t, te, n_inactive == n and n > 0, n_holds > 0, n_inactive < n)
                t = te
            # apply every event at this instant
            while k < len(events) and events[k][0] == te:
                _, i, ina, hol = events[k]
                n_inactive += int(ina) - int(inactive[i])
                n_holds += int(hol) - int(holds[i])
                inactive[i], holds[i] = ina, hol
                k += 1
        if until > t:
            self._segment(t, until, n_inactive == n and n > 0, n_holds > 0, n_inactive < n)
        self.processed_until = until

    def _segment(self, a: float, b: float, all_inactive: bool, holding: bool, someone_active: bool) -> None:
        dt = b - a
        if not holding:
            if self._open_start is not None:      # ended by the job releasing its memory
                self._open_start = None
                self._open_len = 0.0
            self._worked = False
            self.holding = False
            return
        self.holding = True
        self.holding_seconds += dt
        if someone_active:
            self._worked = True
        if all_inactive and self._worked:
            if self._open_start is None:
                self._open_start = a
                self._open_len = 0.0
            self._open_len += dt
            self.stall_seconds += dt
        elif self._open_start is not None:
            # durations are multiples of the sample spacing: compare with a little slack
            if self._open_len >= self.min_stall * (1 - 1e-6):
                self.stalls_total += 1
                self.episodes.append(Episode(self._open_start, self._open_len))
            self._open_start = None
            self._open_len = 0.0

    def episode_starts(self) -> list[float]:
        return [e.start for e in self.episodes]
