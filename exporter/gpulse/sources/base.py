"""The interface every source implements.

A source is polled by the sampler thread only; nothing on the scrape path calls it.
It may block (a hung driver call): the sampler's watchdog makes that visible as
staleness instead of delaying scrapes.
"""
from __future__ import annotations

import abc
from typing import Any

from ..analysis.coidle import UTIL_WINDOW
from ..clock import WallClock
from ..model import DeviceInfo, PollResult


# What a source corrects or drops in what it reads, counted rather than failed:
# family -> (help, label). Sources report them in PollResult.events keyed by
# (family, label value); each is exported as the counter gpulse_source_<family>.
EVENTS: dict[str, tuple[str, str]] = {
    "resets_total": (
        "Times a counter read from the source went backwards (the source restarted); gpulse counts on "
        "from where it was, so its own counter never decreases. Label counter: the gpulse family.", "counter"),
    "dropped_series_total": (
        "Series read from the source and dropped, by reason: duplicate (the same GPU and field twice in one "
        "answer; the largest value is kept), entity_limit (more GPU entities than a source may report).", "reason"),
    "expired_entities_total": (
        "GPU entities the source stopped reporting and gpulse forgot after the expiry delay.", ""),
}


class CountOn:
    """Counters as a source reports them -> as gpulse exports them, which never decrease.

    The first reading is taken as is, then every increase; a decrease is a reset of the
    source's counter (driver reload, dcgm-exporter restart, a logger started again),
    after which its new value is all new, as Prometheus' rate() reads a reset. Keys are
    whatever identifies one counter, e.g. (gpu, family, label values)."""

    def __init__(self) -> None:
        self._raw: dict[Any, float] = {}
        self._counted: dict[Any, float] = {}
        # a labelled family of one GPU, as counters() takes it: [{label values: value}
        # raw, counted, the labels in the order counters() last gave them, the dict it
        # gave], per (gpu, family) (no key tuple to make per label per row)
        self._families: dict[tuple[str, str], list[Any]] = {}
        self.resets: dict[str, int] = {}      # by family, since the last take_resets()

    def __call__(self, key: Any, family: str, v: float) -> float:
        prev = self._raw.get(key)
        self._raw[key] = v
        if prev is None:
            self._counted[key] = v
        elif v >= prev:
            self._counted[key] += v - prev
        else:
            self.resets[family] = self.resets.get(family, 0) + 1
            self._counted[key] += v
        return self._counted[key]

    def counters(self, gpu: str, counters: dict[str, Any]) -> dict[str, Any]:
        """A Reading's counters (floats, or {label values: float}) counted on."""
        # __call__'s work inlined: one call per reading of a log's rows
        out: dict[str, Any] = {}
        families = self._families
        for fam, v in counters.items():
            if isinstance(v, dict):
                held = families.get((gpu, fam))
                if held is None:
                    held = families[(gpu, fam)] = [{}, {}, None, None]
                raw, counted, given_labels = held[:3]
                if v == raw:
                    # nothing moved since the last reading (most rows of a log: the
                    # throttle and ECC counters sit still): each counted value stands,
                    # as the loop below would leave it (it adds x - prev = 0). The dict
                    # given last time holds them, in this reading's order: it is shared
                    # (readers of a Reading's counters copy, never change them)
                    labels = tuple(v)
                    if labels != given_labels:
                        held[2], held[3] = labels, dict(zip(v, map(counted.__getitem__, v)))
                    out[fam] = held[3]
                    continue
                d = out[fam] = {}
                held[2], held[3] = None, d
                for lab, x in v.items():
                    prev = raw.get(lab)
                    raw[lab] = x
                    if prev is None:
                        counted[lab] = d[lab] = x
                    elif x >= prev:
                        counted[lab] = d[lab] = counted[lab] + (x - prev)
                    else:
                        self.resets[fam] = self.resets.get(fam, 0) + 1
                        counted[lab] = d[lab] = counted[lab] + x
            else:
                out[fam] = self((gpu, fam), fam, v)
        return out

    def counters_each(self, gpu: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`counters` of each of one GPU's readings in turn (a log's rows).

        A row equal to the one before it (most rows of a log: its counters sit still)
        moves nothing, so its counted values are the row before's: it gets that row's
        dict, shared (readers of a Reading's counters copy, never change them), instead
        of a new dict per family per row."""
        out: list[dict[str, Any]] = []
        prev: dict[str, Any] | None = None
        counted: dict[str, Any] = {}
        for r in rows:
            # equal and in the same order: the shared dict lists the families as this row would
            if prev is None or r != prev or list(r) != list(prev):
                counted = self.counters(gpu, r)
                prev = r
            out.append(counted)
        return out

    def forget(self, gpu: str) -> None:
        for d in (self._raw, self._counted, self._families):
            for k in [k for k in d if k[0] == gpu]:
                del d[k]

    def take_resets(self) -> dict[str, int]:
        out, self.resets = self.resets, {}
        return out


class SourceError(Exception):
    """Fatal source problem with a one-line, user-facing message (no traceback)."""


class Source(abc.ABC):
    #: short name used in logs and gpulse_build_info{source=...}
    name: str = "source"
    #: whether samples carry a real-work signal (sm_active); decides the default
    #: activity measure (see gpulse.analysis.activity)
    has_sm_active: bool = False
    #: the source gains nothing from polls closer than this (seconds); the sampler then
    #: sleeps that long instead of --sample-interval. NVML buffers its own samples.
    poll_interval: float | None = None
    #: how far apart this source's samples are by nature, when more than the polls
    #: (dcgm-exporter refreshes every --dcgm.interval); the engine counts a silence of
    #: a few of these as a gap only then
    sample_spacing: float | None = None
    #: how far back a sample's utilisation reaches (seconds): NVML-style utilisation
    #: averages over the driver's sample period, at least 1/6 s (analysis.coidle)
    util_window: float = UTIL_WINDOW
    #: whether the power the source reads is an average over about a second (True),
    #: an instant (False), or unknown (None: Engine.power_averaged judges from the data)
    power_averaged: bool | None = None
    #: the time the loop that drives it runs on (clock.py), set before open(): a
    #: source that stamps samples with its own reading of time asks this clock
    loop_clock: Any = WallClock()

    @abc.abstractmethod
    def open(self) -> list[DeviceInfo]:
        """Connect and discover devices. Raise SourceError with a clear message when
        the source cannot be used at all (no NVML library, unreadable file, ...)."""

    @abc.abstractmethod
    def poll(self, now: float) -> PollResult:
        """Read every device once. `now` is the caller's monotonic time; live sources
        use it (or their own driver timestamps) as Sample.t, replay ignores it and
        returns recorded samples up to the replay position. Per-GPU failures go into
        Reading.up/error, never raise."""

    def close(self) -> None:
        """Release the library/connection. Must be safe to call twice."""

    @property
    def finished(self) -> bool:
        """True when a finite source (replay without loop) has nothing more to give."""
        return False
