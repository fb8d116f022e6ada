"""Recorded GPU logs -> time-ordered records per GPU, for replay and the post-mortem report.

    stream = LogStream("ckpt1000.csv")        # format detected from the first lines
    for rec in stream.records(): ...          # read as consumed; memory does not follow the file
    stream.devices, stream.errors, stream.warnings()

    run = read_log("ckpt1000.csv")            # the same, all in memory (tools and tests)
    run.devices, run.records, run.samples("0"), run.errors

Formats (`fmt`):
  nvidia-smi-csv  `nvidia-smi --query-gpu=... --format=csv[,nounits]` logs. Without an
                  `index`/`uuid`/`pci.bus_id` column the GPUs are the rows of each
                  sampling instant in order; how many rows make one instant is read
                  from the timestamp rhythm (see _rows_per_poll).
  dmon            `nvidia-smi dmon [-o DT]` output.
  nvidia-smi-q    `nvidia-smi -q [-l N]` text.
  dcgm            dcgm-exporter output: exposition text (one or many scrapes), CSV
                  exports, or Prometheus HTTP API JSON (see gpulse.sources.dcgm).

Bad input never stops the read: every line that cannot be used becomes one LogError
naming file and line, and the rest is kept. Only a file with nothing usable in it
(empty, unknown header) raises LogFormatError, whose message is that one line.
Timestamps without a zone (nvidia-smi writes local time, unmarked) are read as UTC;
only differences matter to the analysis.
"""
from __future__ import annotations

import calendar
import dataclasses
import heapq
import itertools
import math
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ...model import DeviceInfo, Sample
from ..base import SourceError

FORMATS = ("nvidia-smi-csv", "dmon", "nvidia-smi-q", "dcgm")

# Keep at most this many detailed errors; the rest are only counted.
MAX_ERRORS = 1000

MIB = 2.0 ** 20


class LogFormatError(SourceError):
    """The file cannot be replayed at all. str() is one line naming file (and line)."""


@dataclass(frozen=True, slots=True)
class LogError:
    path: str
    line: int          # 1-based; 0 when the problem is the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass(slots=True)
class Record:
    """One GPU at one recorded instant: what a live source's Reading would carry."""

    t: float
    gpu: str
    sample: Sample
    gauges: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    attribution: dict[str, str] | None = None
    holds_workload: bool | None = None
    error: str | None = None     # set when the log says the GPU could not be read
    line: int = 0


@dataclass
class RecordedRun:
    path: str
    format: str
    devices: list[DeviceInfo]
    records: list[Record]              # ordered by t (stable: file order on ties)
    errors: list[LogError]
    error_count: int = 0               # errors found, including those beyond MAX_ERRORS
    timed: bool = True                 # False when the log had no clock and times are inferred
    has_sm_active: bool = False
    nodes: tuple[str, ...] = ()        # hostnames the log names, first first
    warnings: list[str] = field(default_factory=list)   # timestamp trouble, one line per kind

    @property
    def start(self) -> float | None:
        return self.records[0].t if self.records else None

    @property
    def end(self) -> float | None:
        return self.records[-1].t if self.records else None

    def samples(self, gpu: str) -> list[Sample]:
        return [r.sample for r in self.records if r.gpu == gpu]

    def samples_by_gpu(self) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {d.gpu: [] for d in self.devices}
        for r in self.records:
            out.setdefault(r.gpu, []).append(r.sample)
        return out


class _Errors:
    """Collects per-line problems for one file."""

    def __init__(self, path: str):
        self.path = path
        self.items: list[LogError] = []
        self.count = 0

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.items) < MAX_ERRORS:
            self.items.append(LogError(self.path, line, message))

    def fatal(self, line: int, message: str) -> LogFormatError:
        return LogFormatError(str(LogError(self.path, line, message)))


# ---------------------------------------------------------------- shared helpers

def gpu_sort_key(gpu: str) -> tuple:
    """'2' < '10'; MIG '0/1' right after GPU 0; host-prefixed names after plain ones."""
    host, _, rest = gpu.rpartition(":")
    return (host,) + tuple((0, int(p), "") if p.isdecimal() else (1, 0, p) for p in rest.split("/"))


_NA = re.compile(r"^\[?(N/?A|Not Supported|Unknown|Unknown Error|Insufficient Permissions|"
                 r"Requested functionality has been deprecated|-)\]?$", re.I)
_LOST = re.compile(r"GPU is lost|GPU requires reset|Unknown Error", re.I)
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
        if not s or _NA.match(s):
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


def _devices(found: dict[str, DeviceInfo]) -> list[DeviceInfo]:
    return [found[k] for k in sorted(found, key=gpu_sort_key)]


def _rows_per_poll(times: list[float]) -> int:
    """How many consecutive rows one nvidia-smi poll writes, from the time rhythm alone.

    Rows of one poll are written back to back (ms apart); the next poll comes a sampling
    interval later. For the true row count N, the gap after every N-th row is the long
    one, so at one phase of k mod N nearly all gaps are long; at any other N at most
    half of them are. Score each candidate by its best phase's lower-quartile gap and
    take the smallest N that scores at least half the best (N, 2N, 3N... all score).
    One GPU: every gap is long and N = 1 wins.
    """
    gaps = [b - a for a, b in zip(times, times[1:])][:8192]
    if len(gaps) < 4:
        return 1
    scores: dict[int, float] = {}
    for n in range(1, min(64, len(gaps) // 3) + 1):
        best = 0.0
        for phase in range(n):
            col = sorted(gaps[phase::n])
            best = max(best, col[len(col) // 4])
        scores[n] = best
    top = max(scores.values())
    if top <= 0:
        return 1
    return min(n for n, s in scores.items() if s >= 0.5 * top)


# ---------------------------------------------------------------- format detection

_DMON_HEAD = re.compile(r"^#\s*(?:date[\s,]+)?(?:time[\s,]+)?gpu\b", re.I)
_EXPOSITION = re.compile(r"^(#\s*(HELP|TYPE)\s|DCGM_FI_\w*[\s{])")


def detect_format(lines: list[str]) -> str | None:
    """The format of a log from its first meaningful lines; None when unknown."""
    meaningful = [ln.strip() for ln in lines[:50] if ln.strip()]
    if not meaningful:
        return None
    first = meaningful[0]
    if "NVSMI LOG" in first or first.startswith("Timestamp") and any("NVSMI LOG" in m or m.startswith("GPU ") for m in meaningful[:10]):
        return "nvidia-smi-q"
    if _DMON_HEAD.match(first):
        return "dmon"
    if first.startswith("{") or first.startswith("["):
        return "dcgm"        # Prometheus HTTP API JSON
    if any(_EXPOSITION.match(m) for m in meaningful[:5]):
        return "dcgm"
    if "," in first:
        names = [c.strip().strip('"').lower() for c in first.split(",")]
        if any(n.startswith("dcgm_fi_") for n in names) or {"value"} <= set(names) and (
                {"metric", "__name__", "name", "field"} & set(names)):
            return "dcgm"
        if any(_smi_column_known(n) for n in names):
            return "nvidia-smi-csv"
    return None


# ---------------------------------------------------------------- nvidia-smi --query-gpu CSV

# First dotted component of every nvidia-smi --query-gpu field (as nvidia-smi prints the
# header) plus the query aliases; a header column outside this vocabulary is reported.
_SMI_PREFIXES = frozenset((
    "accounting addressing_mode c2c clocks clocks_event_reasons clocks_event_reasons_counters "
    "clocks_throttle_reasons compute_cap compute_mode count display_active display_attached "
    "display_mode dramencryption driver_model driver_version ecc edpp_multiplier encoder "
    "enforced fabric fan gom gpu_bus_id gpu_name gpu_recovery_action gpu_serial gpu_uuid gsp "
    "hostname index inforom kmd_version memory mig module name pci pcie persistence_mode "
    "platform power power_smoothing protected_memory pstate remapped_rows retired_pages serial "
    "temperature timestamp utilization uuid vbios_version vgpu_device_capability "
    "vgpu_driver_capability").split())

_HEADER_CELL = re.compile(r"^([A-Za-z_][\w.]*)(?:\s*\[([^\]]*)\])?$")

# column -> (field, expected unit, lo, hi in that unit)
_SMI_FIELDS: dict[str, tuple[str, str | None, float | None, float | None]] = {
    "timestamp": ("t", None, None, None),
    "index": ("index", None, None, None),
    "uuid": ("uuid", None, None, None), "gpu_uuid": ("uuid", None, None, None),
    "name": ("model", None, None, None), "gpu_name": ("model", None, None, None),
    "pci.bus_id": ("pci", None, None, None), "gpu_bus_id": ("pci", None, None, None),
    "driver_version": ("driver", None, None, None),
    "utilization.gpu": ("util", "%", 0, 100),
    "power.draw": ("power", "W", 0, 10000),
    "power.draw.average": ("power_avg", "W", 0, 10000),
    "power.draw.instant": ("power_inst", "W", 0, 10000),
    "memory.used": ("mem_used", "MiB", 0, 2 ** 24),
    "memory.total": ("mem_total", "MiB", 0, 2 ** 24),
    "temperature.gpu": ("temp", "C", -50, 250),
    "temperature.memory": ("mtemp", "C", -50, 250),
    "clocks.current.sm": ("sm_clock", "MHz", 0, 100000), "clocks.sm": ("sm_clock", "MHz", 0, 100000),
    "clocks.current.memory": ("mem_clock", "MHz", 0, 100000), "clocks.mem": ("mem_clock", "MHz", 0, 100000),
    "enforced.power.limit": ("limit_enforced", "W", 0, 10000),
    "power.limit": ("limit", "W", 0, 10000),
    "fan.speed": ("fan", "%", 0, 100),
    "ecc.errors.corrected.volatile.total": ("ecc_corrected", None, 0, None),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", None, 0, None),
    "remapped_rows.correctable": ("remap_correctable", None, 0, None),
    "remapped_rows.uncorrectable": ("remap_uncorrectable", None, 0, None),
    "remapped_rows.pending": ("remap_pending", "bool", None, None),
    "clocks_event_reasons_counters.sw_power_cap": ("thr:sw_power_cap", "us", 0, None),
    "clocks_event_reasons_counters.sync_boost": ("thr:sync_boost", "us", 0, None),
    "clocks_event_reasons_counters.sw_thermal_slowdown": ("thr:sw_thermal", "us", 0, None),
    "clocks_event_reasons_counters.hw_thermal_slowdown": ("thr:hw_thermal", "us", 0, None),
    "clocks_event_reasons_counters.hw_power_brake_slowdown": ("thr:hw_power_brake", "us", 0, None),
}
_TEXT_FIELDS = {"t", "index", "uuid", "model", "pci", "driver", "remap_pending"}


def _smi_column_known(name: str) -> bool:
    m = _HEADER_CELL.match(name.strip())
    return bool(m) and m.group(1).split(".")[0].lower() in _SMI_PREFIXES


@dataclass
class _Column:
    pos: int
    field: str
    unit: str | None
    lo: float | None
    hi: float | None
    label: str


def _smi_header(cells: list[str], line: int, err: _Errors) -> list[_Column] | None:
    """Columns gpulse uses from a --query-gpu header; None when the line is no header."""
    if not any(_smi_column_known(c) for c in cells):
        return None
    cols = []
    for pos, raw in enumerate(cells):
        label = raw.strip()
        m = _HEADER_CELL.match(label)
        if not m or m.group(1).split(".")[0].lower() not in _SMI_PREFIXES:
            err.add(line, f"unknown column {label!r} ignored (not an nvidia-smi --query-gpu field)")
            continue
        spec = _SMI_FIELDS.get(m.group(1))
        if spec is None:
            continue       # a real nvidia-smi field gpulse does not use
        fld, unit, lo, hi = spec
        head_unit = m.group(2)
        if fld in _TEXT_FIELDS:
            cols.append(_Column(pos, fld, unit, lo, hi, label))
            continue
        if head_unit is not None and head_unit != unit:
            want = UNITS.get(unit or "", ("", 1.0))[0]
            if head_unit in UNITS and UNITS[head_unit][0] == want and unit is not None:
                # same dimension, other scale (KiB for MiB): convert the bounds along
                k = UNITS[unit][1] / UNITS[head_unit][1]
                cols.append(_Column(pos, fld, head_unit, None if lo is None else lo * k,
                                    None if hi is None else hi * k, label))
            else:
                err.add(line, f"column {label!r}: unit [{head_unit}] is not {unit or 'unitless'}; column ignored")
            continue
        cols.append(_Column(pos, fld, unit, lo, hi, label))
    return cols


_SMI_GAUGES = (("power", "power_watts"), ("mem_used", "memory_used_bytes"), ("mem_total", "memory_total_bytes"),
               ("temp", "temperature_celsius"), ("mtemp", "memory_temperature_celsius"),
               ("sm_clock", "sm_clock_hertz"), ("mem_clock", "memory_clock_hertz"),
               ("fan", "fan_speed_ratio"))


def _smi_record(t: float, gpu: str, v: dict[str, Any], line: int, lost: str | None) -> Record:
    power = next((v[k] for k in ("power", "power_avg", "power_inst") if v.get(k) is not None), None)
    v["power"] = power
    sample = Sample(t=t, util=v.get("util"), power_w=power, memory_used_bytes=v.get("mem_used"))
    gauges: dict[str, Any] = {g: v[k] for k, g in _SMI_GAUGES if v.get(k) is not None}
    limit = v.get("limit_enforced") if v.get("limit_enforced") is not None else v.get("limit")
    if limit is not None:
        gauges["power_limit_watts"] = limit
    rows = {(k,): v[f"remap_{k}"] for k in ("correctable", "uncorrectable") if v.get(f"remap_{k}") is not None}
    if rows:
        gauges["remapped_rows"] = rows
    if v.get("remap_pending") is not None:
        gauges["remapping_pending"] = 1.0 if v["remap_pending"].lower() in ("yes", "1", "true") else 0.0
    counters: dict[str, Any] = {}
    ecc = {(k,): v[f"ecc_{k}"] for k in ("corrected", "uncorrected") if v.get(f"ecc_{k}") is not None}
    if ecc:
        counters["ecc_errors_total"] = ecc
    thr = {(k[4:],): val for k, val in v.items() if k.startswith("thr:") and val is not None}
    if thr:
        counters["throttle_seconds_total"] = thr
    return Record(t=t, gpu=gpu, sample=sample, gauges=gauges, counters=counters, line=line,
                  error=lost)


def _smi_rows(lines: Iterable[str], err: _Errors, run: "LogStream") -> Iterator[tuple]:
    """Data rows of a --query-gpu log in file order: (line, position, t, values, lost, key field)."""
    cols: list[_Column] | None = None
    ncells = 0
    position = 0
    header_line = 0
    key_field: str | None = None
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        cells = [c.strip() for c in text.split(",")]
        if cols is None or (not text[0].isdigit() and _smi_column_known(cells[0])):
            hdr = _smi_header(cells, i, err)
            if hdr is None:
                if cols is None:
                    raise err.fatal(i, f"unknown header {text[:80]!r}: expected an nvidia-smi "
                                       "--query-gpu=... --format=csv header such as "
                                       "'timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]'")
            else:
                cols, ncells, header_line = hdr, len(cells), i
                position = 0     # a new header: the logger restarted, instants start over
                if not any(c.field in ("util", "power", "power_avg", "power_inst", "mem_used") for c in cols):
                    raise err.fatal(i, "header has none of utilization.gpu, power.draw, memory.used: nothing to replay")
                has = {c.field for c in cols}
                run.timed = "t" in has
                key_field = next((k for k in ("index", "uuid", "pci") if k in has), None)
                continue
        pos = position
        position += 1
        if len(cells) != ncells:
            what = "truncated line" if len(cells) < ncells else "too many fields (lines run together?)"
            err.add(i, f"{what}: {len(cells)} fields, header on line {header_line} has {ncells}; row skipped")
            continue
        values: dict[str, Any] = {}
        lost = None
        for c in cols:
            cell = cells[c.pos]
            if c.field in _TEXT_FIELDS:
                values[c.field] = None if _NA.match(cell) else cell
                continue
            if _LOST.search(cell):
                lost = cell.strip("[]")
                continue
            try:
                values[c.field] = parse_quantity(cell, c.unit, c.lo, c.hi)
            except CellError as e:
                err.add(i, f"column {c.label!r}: {e}; value dropped")
        t = None
        if values.get("t") is not None:
            try:
                t = parse_smi_time(values["t"])
            except CellError as e:
                err.add(i, f"column 'timestamp': {e}; row skipped")
                continue
        if values:
            yield i, pos, t, values, lost, key_field


# rows read ahead to learn how many rows one poll writes (see _rows_per_poll)
RHYTHM_ROWS = 8193


def _read_smi_csv(lines: Iterable[str], err: _Errors, interval: float, run: "LogStream") -> Iterator[Record]:
    rows = _smi_rows(lines, err, run)
    ahead = list(itertools.islice(rows, RHYTHM_ROWS))
    n_per_poll = _rows_per_poll([r[2] for r in ahead if r[2] is not None]) if run.timed else 1
    names: dict[str, str] = {}
    found = run.found
    instant = -1
    last_index = None
    for line, pos, t, values, lost, key_field in itertools.chain(ahead, rows):
        if key_field == "index":
            raw_idx = values.get("index")
            if raw_idx is None or not is_gpu_index(raw_idx):
                err.add(line, f"column 'index': not a GPU index: {raw_idx!r}; row skipped")
                continue
            gpu = str(int(raw_idx))
        elif key_field is not None:
            ident = values.get(key_field)
            if ident is None:
                err.add(line, f"no {key_field} on this row; row skipped")
                continue
            gpu = names.setdefault(ident, str(len(names)))
        else:
            gpu = str(pos % n_per_poll)
        if t is None:
            # no clock in the log: one instant per round of GPUs, `interval` apart
            idx = int(gpu.split("/")[0]) if gpu.isdecimal() else pos
            if last_index is None or idx <= last_index:
                instant += 1
            last_index = idx
            t = instant * interval
        if gpu not in found:
            found[gpu] = DeviceInfo(gpu=gpu, uuid=values.get("uuid") or "", model=values.get("model") or "",
                                    pci_bus_id=values.get("pci") or "", driver=values.get("driver") or "")
        yield _smi_record(t, gpu, values, line, lost)


# ---------------------------------------------------------------- nvidia-smi dmon

# dmon column -> (field, unit as dmon prints it, lo, hi)
_DMON_FIELDS: dict[str, tuple[str, str | None, float | None, float | None]] = {
    "pwr": ("power", "W", 0, 10000), "gtemp": ("temp", "C", -50, 250), "mtemp": ("mtemp", "C", -50, 250),
    "sm": ("util", "%", 0, 100), "mem": (None, "%", None, None), "enc": (None, "%", None, None),
    "dec": (None, "%", None, None), "jpg": (None, "%", None, None), "ofa": (None, "%", None, None),
    "mclk": ("mem_clock", "MHz", 0, 100000), "pclk": ("sm_clock", "MHz", 0, 100000),
    "pviol": (None, "%", None, None), "tviol": (None, None, None, None),
    "fb": ("mem_used", "MiB", 0, 2 ** 24), "bar1": (None, None, None, None), "ccpm": (None, None, None, None),
    "sbecc": (None, None, None, None), "dbecc": (None, None, None, None), "pci": (None, None, None, None),
    "rxpci": ("rx", "MB/s", 0, None), "txpci": ("tx", "MB/s", 0, None),
    "gpu": ("index", None, None, None), "date": ("date", None, None, None), "time": ("time", None, None, None),
}


def _read_dmon(lines: Iterable[str], err: _Errors, interval: float, run: "LogStream") -> Iterator[Record]:
    names: list[str] | None = None
    found = run.found
    instant = -1
    last_idx: int | None = None
    last_t: float | None = None
    day = 0.0
    pcie: dict[str, dict[tuple[str, ...], float]] = {}
    prev_t: dict[str, float] = {}
    run.timed = False
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith("#"):
            toks = [t.lower() for t in re.split(r"[\s,]+", text.lstrip("#").strip()) if t]
            if "gpu" in toks:
                names = toks
                for n in toks:
                    if n not in _DMON_FIELDS:
                        err.add(i, f"unknown dmon column {n!r} ignored")
                last_idx = None
            continue       # the units line, or a comment
        if names is None:
            raise err.fatal(i, "no dmon header ('# gpu pwr gtemp ...') before the first data line")
        toks = [t for t in re.split(r"[\s,]+", text) if t]
        if len(toks) != len(names):
            err.add(i, f"truncated line: {len(toks)} fields, the dmon header has {len(names)}; row skipped"
                    if len(toks) < len(names) else
                    f"{len(toks)} fields, the dmon header has {len(names)}; row skipped")
            continue
        row = dict(zip(names, toks))
        idx_txt = row.get("gpu", "")
        if not is_gpu_index(idx_txt):
            err.add(i, f"column 'gpu': not a GPU index: {idx_txt!r}; row skipped")
            continue
        idx = int(idx_txt)
        t: float | None = None
        if "time" in row:
            try:
                if "date" in row:
                    t = float(calendar.timegm(time.strptime(row["date"] + " " + row["time"], "%Y%m%d %H:%M:%S")))
                else:
                    h, m, s = (int(x) for x in row["time"].split(":"))
                    t = day + h * 3600 + m * 60 + s
                    if last_t is not None and t < last_t - 3600:   # past midnight
                        day += 86400.0
                        t += 86400.0
            except ValueError:
                err.add(i, f"not a dmon date/time: {row.get('date', '')} {row['time']!r}; row skipped")
                continue
            run.timed = True
        else:
            if last_idx is None or idx <= last_idx:
                instant += 1
            t = instant * interval
        last_idx = idx
        last_t = t
        values: dict[str, Any] = {}
        for name, cell in row.items():
            fld, unit, lo, hi = _DMON_FIELDS.get(name, (None, None, None, None))
            if fld is None or fld in ("index", "date", "time"):
                continue
            try:
                values[fld] = parse_quantity(cell, unit, lo, hi)
            except CellError as e:
                err.add(i, f"column {name!r}: {e}; value dropped")
        gpu = str(idx)
        found.setdefault(gpu, DeviceInfo(gpu=gpu))
        rec = _smi_record(t, gpu, values, i, None)
        # dmon prints PCIe throughput as a rate; integrate it into byte counters
        acc = pcie.setdefault(gpu, {})
        if gpu in prev_t and t > prev_t[gpu]:
            for d in ("rx", "tx"):
                if values.get(d) is not None:
                    acc[(d,)] = acc.get((d,), 0.0) + values[d] * (t - prev_t[gpu])
        elif any(values.get(d) is not None for d in ("rx", "tx")):
            for d in ("rx", "tx"):
                acc.setdefault((d,), 0.0)
        prev_t[gpu] = t
        if acc:
            rec.counters["pcie_bytes_total"] = dict(acc)
        yield rec
    if names is None:
        raise err.fatal(1, "no dmon header ('# gpu pwr gtemp ...') found")


# ---------------------------------------------------------------- nvidia-smi -q

_Q_LINE = re.compile(r"^( *)(\S.*?)\s+:\s?(.*)$")
_Q_THROTTLE = {"SW Power Capping": "sw_power_cap", "Sync Boost": "sync_boost",
               "SW Thermal Slowdown": "sw_thermal", "HW Thermal Slowdown": "hw_thermal",
               "HW Power Braking": "hw_power_brake"}


class _QBlock:
    """(path, value, line) entries of one GPU in one -q snapshot."""

    def __init__(self, bus_id: str, line: int):
        self.bus_id = bus_id
        self.line = line
        self.entries: list[tuple[tuple[str, ...], str, int]] = []

    def get(self, *path: str) -> tuple[str, int] | None:
        for p, v, ln in self.entries:
            if p == path:
                return v, ln
        return None


def _q_blocks(lines: Iterable[str], err: _Errors,
              versions: dict[str, str]) -> Iterator[tuple[float | None, int, list[_QBlock]]]:
    """One (time, line, GPU blocks) per snapshot, each as soon as the next one starts."""
    snap: list[Any] | None = None      # [t, line, blocks]
    block: _QBlock | None = None
    stack: list[str] = []
    for i, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if "NVSMI LOG" in line or snap is None:     # a file may start without the banner
            if snap is not None:
                yield snap[0], snap[1], snap[2]
            snap = [None, i, []]
            block = None
            if "NVSMI LOG" in line:
                continue
        current = snap[2]
        indent = len(line) - len(line.lstrip(" "))
        m = _Q_LINE.match(line)
        if indent == 0:
            block = None
            if m and m.group(2) == "Timestamp":
                try:
                    snap[0] = float(calendar.timegm(time.strptime(m.group(3).strip(), "%a %b %d %H:%M:%S %Y")))
                except ValueError:
                    err.add(i, f"not an nvidia-smi -q timestamp: {m.group(3).strip()!r}")
            elif m and m.group(2) in ("Driver Version", "CUDA Version"):
                versions[m.group(2)] = m.group(3).strip()
            elif not m and line.startswith("GPU "):
                block = _QBlock(line[4:].strip(), i)
                current.append(block)
                stack = []
            continue
        if block is None:
            continue
        level = indent // 4 - 1
        del stack[level:]
        if m:
            block.entries.append((tuple(stack) + (m.group(2).strip(),), m.group(3).strip(), i))
            stack.append(m.group(2).strip())      # 'Process ID : 1' heads its own sub-block
        else:
            stack.append(line.strip())
    if snap is not None:
        yield snap[0], snap[1], snap[2]


def _q_value(block: _QBlock, unit: str | None, lo: float | None, hi: float | None,
             err: _Errors, *path: str) -> float | None:
    got = block.get(*path)
    if got is None:
        return None
    try:
        return parse_quantity(got[0], unit, lo, hi)
    except CellError as e:
        err.add(got[1], f"{' / '.join(path)}: {e}; value dropped")
        return None


def _read_smi_q(lines: Iterable[str], err: _Errors, interval: float, run: "LogStream") -> Iterator[Record]:
    found = run.found
    versions: dict[str, str] = {}
    for n, (t, line, blocks) in enumerate(_q_blocks(lines, err, versions)):
        if t is None:
            run.timed = False
            t = n * interval
        records: list[Record] = []
        for idx, b in enumerate(blocks):
            gpu = str(idx)
            v: dict[str, Any] = {
                "util": _q_value(b, "%", 0, 100, err, "Utilization", "GPU"),
                "mem_used": _q_value(b, "MiB", 0, 2 ** 24, err, "FB Memory Usage", "Used"),
                "mem_total": _q_value(b, "MiB", 0, 2 ** 24, err, "FB Memory Usage", "Total"),
                "temp": _q_value(b, "C", -50, 250, err, "Temperature", "GPU Current Temp"),
                "mtemp": _q_value(b, "C", -50, 250, err, "Temperature", "Memory Current Temp"),
                "sm_clock": _q_value(b, "MHz", 0, 100000, err, "Clocks", "SM"),
                "mem_clock": _q_value(b, "MHz", 0, 100000, err, "Clocks", "Memory"),
                "fan": _q_value(b, "%", 0, 100, err, "Fan Speed"),
                "remap_correctable": _q_value(b, None, 0, None, err, "Remapped Rows", "Correctable Error"),
                "remap_uncorrectable": _q_value(b, None, 0, None, err, "Remapped Rows", "Uncorrectable Error"),
            }
            # drivers >= 530 nest power under 'GPU Power Readings'; older ones under 'Power Readings'
            v["power"] = (_q_value(b, "W", 0, 10000, err, "GPU Power Readings", "Average Power Draw")
                          if b.get("GPU Power Readings", "Average Power Draw") else
                          _q_value(b, "W", 0, 10000, err, "Power Readings", "Power Draw"))
            v["limit"] = (_q_value(b, "W", 0, 10000, err, "GPU Power Readings", "Current Power Limit")
                          if b.get("GPU Power Readings", "Current Power Limit") else
                          _q_value(b, "W", 0, 10000, err, "Power Readings", "Enforced Power Limit"))
            pending = b.get("Remapped Rows", "Pending")
            v["remap_pending"] = pending[0] if pending and not _NA.match(pending[0]) else None
            for label, reason in _Q_THROTTLE.items():
                v["thr:" + reason] = _q_value(b, "us", 0, None, err, "Clocks Event Reasons Counters", label)
            corrected = [_q_value(b, None, 0, None, err, "ECC Errors", "Volatile", k)
                         for k in ("SRAM Correctable", "DRAM Correctable")]
            uncorrected = [_q_value(b, None, 0, None, err, "ECC Errors", "Volatile", k)
                           for k in ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable")]
            if any(x is not None for x in corrected):
                v["ecc_corrected"] = sum(x for x in corrected if x is not None)
            if any(x is not None for x in uncorrected):
                v["ecc_uncorrected"] = sum(x for x in uncorrected if x is not None)
            rec = _smi_record(t, gpu, v, b.line, None)
            replays = _q_value(b, None, 0, None, err, "PCI", "Replays Since Reset")
            if replays is not None:
                rec.counters["pcie_replays_total"] = replays
            procs = [(p, val) for p, val, _ in b.entries if p and p[0] == "Processes"]
            mig_gis = _q_mig(b, t, gpu, found, records, err)
            if procs or b.get("Processes") is not None:
                pids = [val for p, val in procs if p[-1] == "Process ID"]
                rec.holds_workload = bool(pids)
                gis = [val for p, val in procs if p[-1] == "GPU instance ID"]
                for gi, mig_rec in mig_gis.items():
                    mig_rec.holds_workload = gi in gis
            uuid = b.get("GPU UUID")
            model = b.get("Product Name")
            found.setdefault(gpu, DeviceInfo(gpu=gpu, uuid=uuid[0] if uuid else "",
                                             model=model[0] if model else "", pci_bus_id=b.bus_id,
                                             driver=versions.get("Driver Version", ""),
                                             cuda_version=versions.get("CUDA Version", "")))
            records.append(rec)
        yield from records
    if not found:
        raise err.fatal(1, "no 'GPU <bus id>' section: not nvidia-smi -q output")


def _q_mig(b: _QBlock, t: float, gpu: str, found: dict[str, DeviceInfo], records: list[Record],
           err: _Errors) -> dict[str, Record]:
    """MIG instances of one GPU block -> records keyed by GPU instance id."""
    out: dict[str, Record] = {}
    cur: dict[str, Any] | None = None
    instances: list[dict[str, Any]] = []
    for p, val, ln in b.entries:
        if not p or p[0] != "MIG Device":
            continue
        if p == ("MIG Device", "Index"):
            cur = {"line": ln}
            instances.append(cur)
        if cur is None:
            continue
        if p == ("MIG Device", "GPU Instance ID"):
            cur["gi"] = val
        elif p in (("MIG Device", "FB Memory Usage", "Used"), ("MIG Device", "Shared FB Memory Usage", "Used")):
            cur["used"] = (val, ln)
        elif p in (("MIG Device", "FB Memory Usage", "Total"), ("MIG Device", "Shared FB Memory Usage", "Total")):
            cur["total"] = (val, ln)
    parent = b.get("GPU UUID")
    for inst in instances:
        gi = inst.get("gi")
        if gi is None:
            continue
        key = f"{gpu}/{gi}"
        v: dict[str, Any] = {}
        for name, fld in (("used", "mem_used"), ("total", "mem_total")):
            if name in inst:
                try:
                    v[fld] = parse_quantity(inst[name][0], "MiB", 0, 2 ** 24)
                except CellError as e:
                    err.add(inst[name][1], f"MIG Device {gi} memory: {e}; value dropped")
        rec = _smi_record(t, key, v, inst["line"], None)
        found.setdefault(key, DeviceInfo(gpu=key, gpu_instance=gi, parent_uuid=parent[0] if parent else ""))
        records.append(rec)
        out[gi] = rec
    return out


# ---------------------------------------------------------------- entry point

# A log is read line by line as it is consumed, so memory follows the reader's window,
# not the file. Two things cannot stream and are capped instead:
MAX_LINE = 1 << 20          # characters in one line: more is no text log (/dev/zero, a binary)
MAX_JSON = 64 << 20         # bytes of a Prometheus API JSON answer, which is parsed whole
# Rows of different GPUs are written up to ~1 s apart within one poll (a stalled query);
# records are handed out in time order within this much recorded time.
REORDER_S = 5.0
REORDER_MAX = 200_000       # records held for that at most
# Line numbers quoted per kind of timestamp trouble; the rest are counted.
SHOW_LINES = 5
# GPU entities one log may name (a whole cluster's worth); rows of more are skipped, so
# per-GPU state, the engine and the report's picture stay bounded whatever the file says.
MAX_GPUS = 4096


class LogStream:
    """One recorded log, read as `records()` is consumed: time-ordered records, the
    devices, format, nodes and problems found so far. Reading it again means a new
    LogStream (replay's loop does that).

    Raises LogFormatError (one line) from the constructor when the file cannot be
    opened or its format is unknown, and from records() when nothing in it is usable
    or a cap is hit."""

    def __init__(self, path: str, fmt: str = "auto", interval: float = 1.0):
        self.path = path
        self.interval = interval
        self.err = _Errors(path)
        self.found: dict[str, DeviceInfo] = {}
        self.timed = True
        self.has_sm_active = False
        self.nodes_found: list[str] = []
        self.start: float | None = None
        self.end: float | None = None
        self.done = False
        self.backwards: list[int] = []     # lines where a GPU's clock went back
        self.n_backwards = 0
        self.repeats: list[int] = []       # lines repeating a GPU's previous timestamp
        self.n_repeats = 0
        try:
            st = os.stat(path)
        except OSError as e:
            raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "a device"
            raise LogFormatError(f"{path}: is {what}, not a recorded log")
        self.size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        try:
            # utf-8-sig: a byte-order mark is no part of the first column's name
            self._fh = open(path, encoding="utf-8-sig", errors="replace", newline="")
        except OSError as e:
            raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
        self._line_no = 0
        self.chars_read = 0                # ~bytes for these ASCII logs: progress of a replay
        try:
            self.format, self._all_lines = self._detect(fmt)
        except LogFormatError:
            self.close()
            raise

    def _detect(self, fmt: str) -> tuple[str, Iterator[str]]:
        """The format, from the first lines (or as given), and every line from the first."""
        lines = self._lines()
        head: list[str] = []
        for ln in lines:
            head.append(ln)
            if len(head) >= 50 and any(h.strip() for h in head):
                break
        if not any(h.strip() for h in head):
            raise self.err.fatal(1, "empty file: nothing to replay")
        if fmt == "auto":
            fmt = detect_format(head) or ""
            if not fmt:
                first_no, first = next((n, ln) for n, ln in enumerate(head, 1) if ln.strip())
                raise self.err.fatal(first_no, f"unknown header {first.strip()[:80]!r}: expected nvidia-smi "
                                               "--query-gpu CSV, nvidia-smi dmon, nvidia-smi -q or dcgm-exporter output")
        if fmt not in FORMATS:
            raise LogFormatError(f"{self.path}: unknown log format {fmt!r} (one of: auto, {', '.join(FORMATS)})")
        return fmt, itertools.chain(head, lines)

    # -- what has been learnt so far

    @property
    def devices(self) -> list[DeviceInfo]:
        return _devices(self.found)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.nodes_found)

    @property
    def errors(self) -> list[LogError]:
        return sorted(self.err.items, key=lambda e: e.line)

    @property
    def error_count(self) -> int:
        return self.err.count

    @property
    def fraction(self) -> float:
        """Share of the file read so far (0 when the size is unknown)."""
        if self.done:
            return 1.0
        if not self.size or self._fh.closed:
            return 0.0
        try:
            return min(1.0, os.lseek(self._fh.fileno(), 0, os.SEEK_CUR) / self.size)
        except OSError:
            return 0.0

    def warnings(self) -> list[str]:
        """One line per kind of timestamp trouble, with counts and the first lines."""
        out = []
        for n, lines, what in (
                (self.n_backwards, self.backwards,
                 "a GPU's timestamp goes backwards; the clock is taken to have stepped back and the rows after it "
                 "are kept in order after the earlier ones"),
                (self.n_repeats, self.repeats,
                 "a row repeats its GPU's previous timestamp; the repeat is dropped")):
            if n:
                more = f" and {n - len(lines)} more" if n > len(lines) else ""
                out.append(f"{self.path}: {n} time(s) {what} (line {', '.join(map(str, lines))}{more})")
        return out

    def close(self) -> None:
        self._fh.close()

    # -- reading

    def _lines(self) -> Iterator[str]:
        fh = self._fh
        while True:
            line = fh.readline(MAX_LINE + 1)
            if not line:
                return
            self._line_no += 1
            self.chars_read += len(line)
            if len(line) > MAX_LINE and not line.endswith(("\n", "\r")):
                raise self.err.fatal(self._line_no, f"a line longer than {MAX_LINE >> 20} MiB characters: "
                                                     "not a text log")
            # a byte-order mark (the file's, or one of a log appended to it) is no data
            yield line.rstrip("\r\n").lstrip("\ufeff")

    def records(self) -> Iterator[Record]:
        """Every usable record, ordered by time (file order on ties)."""
        try:
            if self.format == "dcgm":
                from ..dcgm.source import read_dcgm_log
                parsed = read_dcgm_log(self._all_lines, self.err, self.interval, self)
            else:
                reader = {"nvidia-smi-csv": _read_smi_csv, "dmon": _read_dmon, "nvidia-smi-q": _read_smi_q}[self.format]
                parsed = reader(self._all_lines, self.err, self.interval, self)
            n = 0
            for rec in self._in_order(self._clock_steps(parsed)):
                if self.start is None:
                    self.start = rec.t
                self.end = rec.t
                n += 1
                yield rec
            if not n:
                first_err = self.err.items[0] if self.err.items else None
                why = f" (first problem: line {first_err.line}: {first_err.message})" if first_err else ""
                raise self.err.fatal(0, f"no usable {self.format} rows{why}")
            self.done = True
        finally:
            self.close()

    def _clock_steps(self, recs: Iterable[Record]) -> Iterator[Record]:
        """File order -> a clock that never steps back by more than REORDER_S.

        A GPU's own rows are in time order in any real log; one going back by more
        than the reorder window is a clock stepped back (NTP, a restart with another
        zone): the rest of the file is moved so that row follows the GPU's previous one
        by that GPU's last step, as if the clock had not moved. Sorting them in instead
        would interleave two stretches of the run and change what it looks like."""
        last: dict[str, float] = {}
        step: dict[str, float] = {}
        offset = 0.0
        latest = -math.inf
        for r in recs:
            if r.gpu not in last and len(last) >= MAX_GPUS:
                self.found.pop(r.gpu, None)
                self.err.add(r.line, f"GPU {r.gpu[:40]!r}: more than {MAX_GPUS} GPUs in one log; row skipped")
                continue
            t = r.t + offset
            prev = last.get(r.gpu)
            if prev is not None and t < prev:
                self._note_backwards(r.line)
                if t < prev - REORDER_S:
                    shift = max(latest, prev) - t + step.get(r.gpu, self.interval)
                    offset += shift
                    t += shift
            if offset:
                r.t = t
                r.sample = dataclasses.replace(r.sample, t=t)
            if prev is not None and t > prev:
                step[r.gpu] = t - prev
            last[r.gpu] = max(t, prev) if prev is not None else t
            latest = max(latest, t)
            yield r

    def _in_order(self, recs: Iterable[Record]) -> Iterator[Record]:
        """Time order within REORDER_S of recorded time; then one record per GPU and
        instant (a repeated timestamp is a duplicated row)."""
        heap: list[tuple[float, int, Record]] = []
        latest = -math.inf
        last: dict[str, float] = {}
        failed: LogFormatError | None = None
        try:
            for seq, r in enumerate(recs):
                heapq.heappush(heap, (r.t, seq, r))
                latest = max(latest, r.t)
                while heap and (heap[0][0] < latest - REORDER_S or len(heap) > REORDER_MAX):
                    out = self._once(heapq.heappop(heap)[2], last)
                    if out is not None:
                        yield out
        except LogFormatError as e:     # a cap hit: what was read before it still counts
            failed = e
        while heap:
            out = self._once(heapq.heappop(heap)[2], last)
            if out is not None:
                yield out
        if failed is not None:
            raise failed

    def _once(self, r: Record, last: dict[str, float]) -> Record | None:
        prev = last.get(r.gpu)
        if prev is not None and r.t <= prev:
            if r.t == prev:
                self.n_repeats += 1
                if len(self.repeats) < SHOW_LINES:
                    self.repeats.append(r.line)
            else:           # only past REORDER_MAX: too far back to sort in
                self._note_backwards(r.line)
            return None
        last[r.gpu] = r.t
        return r

    def _note_backwards(self, line: int) -> None:
        self.n_backwards += 1
        if len(self.backwards) < SHOW_LINES:
            self.backwards.append(line)


def is_gpu_index(s: str) -> bool:
    """A GPU index as drivers write it: ASCII digits only ('٣' and '１' are decimal
    to Python, and no GPU's index)."""
    return s.isascii() and s.isdigit()


def read_log(path: str, fmt: str = "auto", interval: float = 1.0) -> RecordedRun:
    """Read a whole recorded log into memory (tools and tests; replay and the report
    stream it through LogStream). `interval` spaces instants when the log has no clock.

    Raises LogFormatError (one line, naming file and line) when nothing in it can be
    replayed; every lesser problem is in RecordedRun.errors and the rest is kept."""
    stream = LogStream(path, fmt, interval)
    records = list(stream.records())
    return RecordedRun(path=path, format=stream.format, devices=stream.devices, records=records,
                       errors=stream.errors, error_count=stream.error_count, timed=stream.timed,
                       has_sm_active=stream.has_sm_active, nodes=stream.nodes, warnings=stream.warnings())


__all__ = ["FORMATS", "LogError", "LogFormatError", "LogStream", "Record", "RecordedRun", "read_log", "detect_format",
           "parse_quantity", "parse_smi_time", "parse_any_time", "CellError", "gpu_sort_key", "is_gpu_index"]
