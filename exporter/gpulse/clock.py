"""The time the drive loop (drive.py) runs on: the wall clock live, virtual time offline.

A clock answers three things: `now()` (monotonic seconds, what a source's `poll(now)`
and the loop's schedule read), `wall()` (Unix time, stamped on ingests and snapshots)
and `sleep_until(t, stop)` (wait for the next poll). The wall clock sleeps for real;
a virtual clock jumps to `t` at once, so a source is driven as fast as the CPU allows
and every run of the same input does the same work whatever the machine's load.

`GPULSE_VIRTUAL_CLOCK` (seconds) runs `gpulse serve` in virtual time, for tests of
verdicts that take minutes of samples: the exporter polls and analyses that many
seconds as fast as it can, then holds its last snapshot (ready, never stale) until it
is stopped. With `GPULSE_VIRTUAL_CLOCK_FILE` the clock writes its wall time there (µs
since the epoch, decimal) each time it moves, so a stand-in for the GPU driver (the
tests' fake libnvidia-ml) can follow it. Both are for tests; nothing else reads them.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Mapping


class WallClock:
    """Real time: the monotonic clock for schedules, time.time() for stamps."""

    spent = False   # real time never runs out

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep_until(self, t: float, stop: threading.Event) -> None:
        stop.wait(max(0.0, t - time.monotonic()))


class VirtualClock:
    """Time that moves only when the loop waits. It starts at 0 (`wall0` on the wall);
    after `until` seconds it is spent and the loop that runs on it ends."""

    def __init__(self, wall0: float = 0.0, until: float | None = None, publish: str | None = None):
        self.t = 0.0
        self.wall0 = wall0
        self.until = until
        self.publish = publish
        self._write()

    @property
    def spent(self) -> bool:
        return self.until is not None and self.t > self.until

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.wall0 + self.t

    def sleep_until(self, t: float, stop: threading.Event) -> None:
        if t > self.t:
            self.t = t
            self._write()

    def _write(self) -> None:
        if self.publish is None:
            return
        # written whole then renamed: a reader never sees half a number
        tmp = f"{self.publish}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{round(self.wall() * 1e6)}\n")
        os.replace(tmp, self.publish)


class ClockError(ValueError):
    """A GPULSE_VIRTUAL_CLOCK setting that cannot be used; str() is the one line."""


def clock_from_env(environ: Mapping[str, str]) -> WallClock | VirtualClock:
    """The wall clock, or the virtual clock GPULSE_VIRTUAL_CLOCK asks for (module doc)."""
    raw = environ.get("GPULSE_VIRTUAL_CLOCK")
    if raw is None:
        return WallClock()
    try:
        until = float(raw)
    except ValueError:
        until = -1.0
    if not until > 0 or until == float("inf"):
        raise ClockError(f"GPULSE_VIRTUAL_CLOCK: {raw!r} is not a number of seconds above 0")
    publish = environ.get("GPULSE_VIRTUAL_CLOCK_FILE") or None
    try:
        return VirtualClock(wall0=time.time(), until=until, publish=publish)
    except OSError as e:
        raise ClockError(f"GPULSE_VIRTUAL_CLOCK_FILE: cannot write {publish}: {e.strerror}") from None
