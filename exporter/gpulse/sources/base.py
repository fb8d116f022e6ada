"""The interface every source implements.

A source is polled by the sampler thread only; nothing on the scrape path calls it.
It may block (a hung driver call): the sampler's watchdog makes that visible as
staleness instead of delaying scrapes.
"""
from __future__ import annotations

import abc

from ..model import DeviceInfo, PollResult


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
