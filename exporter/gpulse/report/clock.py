"""Which clock the report's times are on, and how they are written.

nvidia-smi (CSV, dmon, -q) writes the local time of the machine it ran on with no
zone. The parsers read such times as UTC, so by default the report shows the wall
clock as the log wrote it and says that the zone is unknown. `--timezone` (an IANA
name such as Europe/Berlin, or an offset such as +02:00) says where the log was
written: the recording is moved onto true Unix time (so findings.json's UTC times
are right and line up with Prometheus, Slurm or the training logs) and every time
is shown in that zone, so the wall clock still reads as in the log.

Logs that carry a zone (dcgm-exporter's millisecond timestamps) and Prometheus data
are already on Unix time; there `--timezone` only picks the zone times are shown in.
"""
from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from ..sources.recorded import FORMATS
from .errors import UsageError

# log formats whose timestamps carry no zone (the readers take them as UTC)
ZONELESS_FORMATS = tuple(name for name, f in FORMATS.items() if f.zoneless)

_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$", re.I)


def parse_zone(text: str) -> tzinfo:
    """'Europe/Berlin', 'UTC', '+02:00', 'UTC-5', '+0530' -> a tzinfo; a one-line
    UsageError otherwise."""
    s = text.strip()
    if s.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    m = _OFFSET.match(s)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        if hours > 14 or minutes >= 60:
            raise UsageError(f"--timezone: offset {text!r} is out of range (-14:00 to +14:00)")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if m.group(1) == "-" else delta)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        return ZoneInfo(s)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"--timezone: unknown time zone {text!r}: give an IANA name such as Europe/Berlin "
                         "or an offset such as +02:00") from None


@dataclasses.dataclass(frozen=True)
class Clock:
    """How times are written in one report."""
    zone: tzinfo = timezone.utc
    known: bool = True          # False: a zoneless log read as UTC, zone not given
    epoch: bool = True          # False: the log had no clock at all; only elapsed time exists

    def wall(self, t: float, with_date: bool = False) -> str:
        d = datetime.fromtimestamp(t, self.zone)
        return d.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")

    def zone_name(self, t: float) -> str:
        """'Europe/Berlin (UTC+02:00)', 'UTC', or what the unknown zone means."""
        if not self.known:
            return "local time of the recording machine (zone unknown; pass --timezone)"
        off = datetime.fromtimestamp(t, self.zone).utcoffset() or timedelta(0)
        mins = int(off.total_seconds() // 60)
        utc = "UTC" if mins == 0 else f"UTC{'+' if mins > 0 else '-'}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"
        key = getattr(self.zone, "key", None)
        return f"{key} ({utc})" if key and key != "UTC" else utc

    def when(self, t: float, t0: float) -> str:
        """A moment in a finding: wall clock and, in words, how far into the run."""
        into = f"{elapsed(t - t0)} into the recording"
        return f"{self.wall(t)} ({into})" if self.epoch else into


def elapsed(seconds: float) -> str:
    """12 s, 4 min 05 s, 1 h 02 min."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def clock_of(rec: Any) -> Clock:
    """The Clock a Recording's times are shown on (UTC unless the report set one)."""
    return getattr(rec, "clock", None) or Clock(epoch=bool(getattr(rec, "epoch", True)))


def settle(rec: Any, log_format: str | None, zone_text: str | None) -> None:
    """Fix the Recording's clock: move a zoneless log onto Unix time in the given zone
    (one offset, the one at the start of the run, so ticks stay evenly spaced), or
    note that its zone is unknown. Sets rec.clock."""
    zone = parse_zone(zone_text) if zone_text else timezone.utc
    zoneless = log_format in ZONELESS_FORMATS and rec.epoch
    if zoneless and zone_text and rec.ticks:
        naive = datetime.fromtimestamp(rec.times[0], timezone.utc).replace(tzinfo=None)
        shift = -(naive.replace(tzinfo=zone).utcoffset() or timedelta(0)).total_seconds()
        if shift:
            for i in range(rec.ticks):
                rec.times[i] += shift
            for gr in rec.groups.values():
                gr.episodes = [dataclasses.replace(e, start=e.start + shift) for e in gr.episodes]
    if zoneless and not zone_text:
        rec.notes.append(f"the log's timestamps carry no time zone (nvidia-smi writes local time); they are "
                         f"shown as written and findings.json reads them as UTC: pass --timezone to set the zone")
    rec.clock = Clock(zone=zone, known=not (zoneless and not zone_text), epoch=rec.epoch)
