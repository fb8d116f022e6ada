"""Cells of recorded or scraped GPU telemetry: quantities with units, timestamps, GPU
indices. Shared by the log readers (sources/recorded/) and the DCGM field map
(sources/dcgm/); it imports neither."""
from __future__ import annotations

import calendar
import math
import re
import time

MIB = 2.0 ** 20

# nvidia-smi's markers of a value it does not have
NOT_AVAILABLE = re.compile(r"^\[?(N/?A|Not Supported|Unknown|Unknown Error|Insufficient Permissions|"
                 r"Requested functionality has been deprecated|-)\]?$", re.I)
# what nvidia-smi writes in a cell of a GPU it cannot read
LOST = re.compile(r"GPU is lost|GPU requires reset|Unknown Error", re.I)
_NUM_UNIT = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)?$")

# unit -> (dimension, factor to the base unit of that dimension)
UNITS: dict[str, tuple[str, float]] = {
    "%": ("ratio", 0.01),
    "W": ("W", 1.0), "mW": ("W", 1e-3), "kW": ("W", 1e3),
    "B": ("B", 1.0), "KiB": ("B", 2.0 ** 10), "MiB": ("B", MIB), "GiB": ("B", 2.0 ** 30),
    "Hz": ("Hz", 1.0), "kHz": ("Hz", 1e3), "MHz": ("Hz", 1e6), "GHz": ("Hz", 1e9),
    "C": ("C", 1.0),
    "us": ("s", 1e-6), "ms": ("s", 1e-3), "s": ("s", 1.0),
    "J": ("J", 1.0), "mJ": ("J", 1e-3), "kJ": ("J", 1e3),
    "KB/s": ("B/s", 1e3), "MB/s": ("B/s", 1e6),
}


class CellError(ValueError):
    """A value that cannot be used; str() says why in a few words."""


def parse_quantity(cell: str, unit: str | None, lo: float | None = None, hi: float | None = None) -> float | None:
    """'71.25 W' with expected unit 'W' -> 71.25 in base units (W, B, Hz, s, ratio...).

    None for nvidia-smi's not-available markers. Raises CellError for text that is not
    a number, a unit other than the expected one, or a value outside lo..hi (given in
    the expected unit, before conversion)."""
    s = cell.strip()
    got = None
    try:   # fast path, the common case: '71.25 W' or a bare number
        value = float(s[:-len(unit)] if unit and s.endswith(unit) else s)
    except ValueError:
        if not s or NOT_AVAILABLE.match(s):
            return None
        m = _NUM_UNIT.match(s)
        if not m:
            raise CellError(f"not a number: {s[:40]!r}") from None
        value = float(m.group(1))
        got = m.group(2)
    if got is not None and unit is not None and got != unit:
        raise CellError(f"value {s!r} is in {got}, expected {unit}")
    use = got or unit
    if use is not None and use not in UNITS:
        raise CellError(f"unknown unit {use!r} in {s!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi) or not math.isfinite(value):
        rng = f"{lo:g}..{hi:g}" if lo is not None and hi is not None else "range"
        raise CellError(f"value {s!r} outside {rng}")
    if use == "%":
        return value / 100.0      # exact for whole percents, unlike * 0.01
    return value * UNITS[use][1] if use is not None else value


_smi_time_cache: dict[str, float] = {}


def parse_smi_time(s: str) -> float:
    """nvidia-smi's '2025/07/27 00:22:27.858' (no zone; read as UTC) -> epoch seconds."""
    head, dot, frac = s.strip().partition(".")
    base = _smi_time_cache.get(head)
    if base is None:
        try:
            base = float(calendar.timegm(time.strptime(head, "%Y/%m/%d %H:%M:%S")))
        except ValueError:
            raise CellError(f"not a timestamp: {s.strip()[:40]!r}") from None
        if len(_smi_time_cache) > 100_000:
            _smi_time_cache.clear()
        _smi_time_cache[head] = base
    if dot:
        if not is_gpu_index(frac):
            raise CellError(f"not a timestamp: {s.strip()[:40]!r}")
        return base + int(frac) / 10 ** len(frac)
    return base


def parse_any_time(s: str) -> float:
    """Epoch seconds or milliseconds, nvidia-smi time, or ISO 8601 -> epoch seconds (UTC
    when no zone is given)."""
    from datetime import datetime, timezone
    s = s.strip()
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):
            raise CellError(f"not a timestamp: {s[:40]!r}")
        return v / 1000.0 if v > 1e11 else v   # epoch milliseconds are 13 digits
    if "/" in s:
        return parse_smi_time(s)
    try:
        d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise CellError(f"not a timestamp: {s[:40]!r}") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


# digits a GPU index (or the fraction of a second of a timestamp) may have: more is
# no driver's, and past 4,300 Python's int() refuses the text with ValueError
INDEX_DIGITS = 18


def is_gpu_index(s: str) -> bool:
    """A GPU index as drivers write it: ASCII digits only ('٣' and '１' are decimal
    to Python, and no GPU's index), at most INDEX_DIGITS of them."""
    return s.isascii() and s.isdigit() and len(s) <= INDEX_DIGITS
