"""`nvidia-smi --query-gpu=... --format=csv[,nounits]` logs.

Without an `index`/`uuid`/`pci.bus_id` column the GPUs are the rows of each sampling
instant in order; how many rows make one instant is read from the timestamp rhythm
(see rows_per_poll)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ...model import DeviceInfo, Sample
from ..cells import LOST, NOT_AVAILABLE, UNITS, CellError, is_gpu_index, parse_quantity, parse_smi_time
from . import smi_fast
from .dcgm import sniff_csv
from .records import LogFormatError, Problems, Record, Rows, RunFacts
from .smi import (ACTIVE, NOT_ACTIVE, SMI_REASONS, ReasonTime, mask_cell_states, plain_parts, row_plan,
                  smi_record)

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
    # no nvidia-smi field: what a wrapper adds to name the node (see _host_prefix)
    "hostname": ("host", None, None, None),
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
    "pcie.link.gen.current": ("link_gen", None, 1, 64), "pcie.link.gen.gpucurrent": ("link_gen", None, 1, 64),
    "pcie.link.gen.max": ("link_gen_max", None, 1, 64),
    "pcie.link.gen.gpumax": ("link_gen_gpumax", None, 1, 64), "pcie.link.gen.hostmax": ("link_gen_hostmax", None, 1, 64),
    "pcie.link.width.current": ("link_width", None, 1, 64), "pcie.link.width.max": ("link_width_max", None, 1, 64),
}
# clock-event reasons as states: clocks_event_reasons.<name> (drivers >= 535) or
# clocks_throttle_reasons.<name> (older), Active / Not Active; `.active`, a bit mask
for _prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
    for _name, _reason in SMI_REASONS.items():
        _SMI_FIELDS[f"{_prefix}.{_name}"] = ("thr_state:" + _reason, None, None, None)
    _SMI_FIELDS[f"{_prefix}.active"] = ("thr_mask", None, None, None)
_STATE_FIELDS = {f for f, *_ in _SMI_FIELDS.values() if f.startswith("thr_state:")} | {"thr_mask"}
_TEXT_FIELDS = {"t", "index", "uuid", "model", "pci", "driver", "host", "remap_pending"} | _STATE_FIELDS
# the columns a samples-only read keeps (RunFacts.samples_only): the clock, which GPU,
# and what a Sample and the power limit are made of
_SAMPLE_FIELDS = {"t", "index", "uuid", "pci", "host", "util", "power", "power_avg", "power_inst", "mem_used",
                  "limit", "limit_enforced"}
# which power.draw column the rows' power comes from (smi_record takes the first) ->
# whether it is an average: power.draw is the 1 s average on recent drivers and the
# instant on older ones, so the data decide (None)
_POWER_AVERAGED = (("power", None), ("power_avg", True), ("power_inst", False))


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


def _smi_header(cells: list[str], line: int, err: Problems, prefix: bool = False) -> list[_Column] | None:
    """Columns gpulse uses from a --query-gpu header; None when the line is no header.
    prefix: the first cell is a host's name written before every line (_host_prefix)."""
    if not any(_smi_column_known(c) for c in cells):
        return None
    cols = [_Column(0, "host", None, None, None, "hostname")] if prefix else []
    for pos, raw in enumerate(cells):
        if prefix and pos == 0:
            continue
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


def _second_is_column(text: str) -> bool:
    parts = text.split(",", 2)
    return len(parts) > 1 and _smi_column_known(parts[1])


def _host_prefix(cells: list[str], lines: "_peekable") -> bool:
    """Whether a header line and the line after it were both written after the host's
    name, as `nvidia-smi --query-gpu=... --format=csv -lms 100 | sed "s/^/$(hostname), /"`
    (or a wrapper doing the same) writes every line: the header's first cell is no
    column and the next line's first cell is that same name. Such a first cell is the
    node's name, as a `hostname` column's would be."""
    first = cells[0]
    return (bool(first) and len(cells) > 1 and not _smi_column_known(first)
            and any(_smi_column_known(c) for c in cells[1:]) and lines.next_text().split(",", 1)[0].strip() == first)


# a stretch of rows without a row missing this long is rhythm enough (_poll_rhythm)
RHYTHM_RUN = 1024


def _poll_rhythm(times: list[float], places: list[int] | None = None) -> tuple[int, float]:
    """(N, the gap between polls): how many consecutive rows one nvidia-smi poll
    writes, from the time rhythm alone.

    Rows of one poll are written back to back (ms apart); the next poll comes a sampling
    interval later. For the true row count N, the gap after every N-th row is the long
    one, so at one phase of k mod N nearly all gaps are long; at any other N at most
    half of them are. Score each candidate by its best phase's lower-quartile gap and
    take the smallest N that scores at least half the best (N, 2N, 3N... all score).
    One GPU: every gap is long and N = 1 wins. The best score is the gap between polls.

    `places`: each time's row's place in the log (the row-by-row reader's count of its
    lines). A row missing there (a line skipped) may have kept its place (a truncated
    line) or taken two (two rows run together on one line), so the phase is read off
    the longest stretch without one, where that is RHYTHM_RUN rows or all of them; else
    each gap at its row's place.
    """
    at = None
    if places is not None and places and places[-1] - places[0] != len(places) - 1:
        runs, start = [], 0
        for i in range(1, len(places) + 1):
            if i == len(places) or places[i] != places[i - 1] + 1:
                runs.append((i - start, start))
                start = i
        length, start = max(runs)
        if length >= min(RHYTHM_RUN, len(places)):
            times = times[start:start + length]
        else:
            at = places
    if at is None:
        # a phase's gaps are a slice
        gaps = [b - a for a, b in zip(times, times[1:])][:8192]
    else:
        pairs = [(p, b - a) for p, q, a, b in zip(at, at[1:], times, times[1:]) if q == p + 1][:8192]
        gaps = [g for _, g in pairs]
        at = [p for p, _ in pairs]
    if len(gaps) < 4:
        return 1, 0.0
    scores: dict[int, float] = {}
    for n in range(1, min(64, len(gaps) // 3) + 1):
        if at is None:
            cols = [gaps[phase::n] for phase in range(n)]
        else:
            cols = [[] for _ in range(n)]
            for p, g in zip(at, gaps):
                cols[p % n].append(g)
        best = 0.0
        for col in cols:
            if col:
                col.sort()
                best = max(best, col[len(col) // 4])
        scores[n] = best
    top = max(scores.values())
    if top <= 0:
        return 1, 0.0
    return min(n for n, s in scores.items() if s >= 0.5 * top), top


@dataclass
class _Plain:
    """A run of consecutive rows the vectorised reader took whole: their lines, the
    position of the first (the next ones follow), where each row's values are in the
    columns, and the columns (one per field of the header)."""
    lines: list[int]
    position: int
    where: list[int]
    cols: list[_Column]
    columns: list[list[Any]]
    key_field: str | None
    plan: Any = field(default=None, init=False, repr=False, compare=False)   # values()' own, made once

    def values(self, j: int, err: Problems) -> dict[str, Any]:
        """Row j's values as _row_values makes them (the time as epoch seconds)."""
        k = self.where[j]
        plan = self.plan
        if plan is None:
            # once per run: the fields of the plain columns, and the state columns apart
            plain = [(c.field, column) for c, column in zip(self.cols, self.columns) if c.field not in _STATE_FIELDS]
            plan = self.plan = (tuple(f for f, _ in plain), tuple(col for _, col in plain),
                                 tuple((c, column) for c, column in zip(self.cols, self.columns)
                                       if c.field in _STATE_FIELDS))
        fields, columns, states = plan
        values: dict[str, Any] = dict(zip(fields, [column[k] for column in columns]))
        if states:
            line = self.lines[j]
            for c, column in states:
                _put_state(values, c, column[k], line, err)
        return values


def _smi_rows(lines: Iterable[str], err: Problems, run: RunFacts) -> Iterator[Any]:
    """Data rows of a --query-gpu log in file order: (line, position, t, values, lost, key
    field) per row, or a _Plain run of rows.

    Runs of rows that cannot be a header (they start with a digit) are read a batch at a
    time: by the vectorised reader where it is installed (smi_fast), which takes the
    rows whose every cell is plain and hands back the rest, and row by row otherwise.
    Every problem is found row by row, when its row's turn comes, so both ways report
    the same problems on the same lines in the same order."""
    cols: list[_Column] | None = None
    ncells = 0
    position = 0
    header_line = 0
    key_field: str | None = None
    fast: Any = None           # smi_fast's reader for this header; False: none to be had
    limit = smi_fast.BATCH     # rows a batch holds under this header (smi_fast.batch_rows)
    batch: list[tuple[int, str]] = []

    def row(i: int, text: str) -> tuple | None:
        nonlocal position
        pos = position
        position += 1
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != ncells:
            what = "truncated line" if len(cells) < ncells else "too many fields (lines run together?)"
            err.add(i, f"{what}: {len(cells)} fields, header on line {header_line} has {ncells}; row skipped")
            return None
        t, values, lost = _row_values(cols, cells, i, err)
        if values is None or not values:
            return None
        return i, pos, t, values, lost, key_field

    def flush() -> Iterator[Any]:
        nonlocal position
        nonlocal fast
        if fast is None and len(batch) >= limit:     # a long log: worth the vectorised reader
            fast = smi_fast.reader(cols, ncells, _STATE_FIELDS, _TEXT_FIELDS) or False
        if not fast or len(batch) < smi_fast.MIN_ROWS:
            for i, text in batch:
                out = row(i, text)
                if out is not None:
                    yield out
            batch.clear()
            return
        where, columns = fast.read([text for _, text in batch])
        j, n = 0, len(batch)
        while j < n:
            if where[j] < 0:
                out = row(*batch[j])
                if out is not None:
                    yield out
                j += 1
                continue
            k = j
            while k < n and where[k] >= 0:
                k += 1
            # rows j..k-1 are plain: one block, its rows at positions position.. on
            yield _Plain([i for i, _ in batch[j:k]], position, where[j:k], cols, columns, key_field)
            position += k - j
            j = k
        batch.clear()

    host_first = False         # the rows start with the host's name, not a digit
    numbered = _peekable(enumerate(lines, 1))
    try:
        for i, raw in numbered:
            text = raw.strip()
            if not text:
                continue
            # a data row: no header starts with a digit, nor has a host's name before a value
            if cols is not None and (text[0].isdigit() or host_first and not _second_is_column(text)):
                batch.append((i, text))
                if len(batch) >= limit:
                    yield from flush()
                continue
            if batch:
                yield from flush()
            cells = [c.strip() for c in text.split(",")]
            prefix = _host_prefix(cells, numbered)
            if cols is None or _smi_column_known(cells[0]) or prefix:
                hdr = _smi_header(cells, i, err, prefix)
                if hdr is None:
                    if cols is None:
                        raise err.fatal(i, f"unknown header {text[:80]!r}: expected an nvidia-smi "
                                           "--query-gpu=... --format=csv header such as "
                                           "'timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]'")
                else:
                    if run.samples_only:
                        hdr = [c for c in hdr if c.field in _SAMPLE_FIELDS]
                    cols, ncells, header_line = hdr, len(cells), i
                    limit = smi_fast.batch_rows(len(cols), run.together)
                    position = 0     # a new header: the logger restarted, instants start over
                    if not any(c.field in ("util", "power", "power_avg", "power_inst", "mem_used") for c in cols):
                        raise err.fatal(i, "header has none of utilization.gpu, power.draw, memory.used: nothing to replay")
                    has = {c.field for c in cols}
                    run.timed = "t" in has
                    run.power_averaged = next((avg for f, avg in _POWER_AVERAGED if f in has), None)
                    key_field = next((k for k in ("index", "uuid", "pci") if k in has), None)
                    host_first = any(c.field == "host" and c.pos == 0 for c in cols)
                    fast = None
                    continue
            out = row(i, text)
            if out is not None:
                yield out
    except LogFormatError:
        # a line no text log has (records.MAX_LINE): the rows before it still count
        if batch:
            yield from flush()
        raise
    if batch:
        yield from flush()


class _peekable:
    """(line number, text) pairs, with a look at the next non-empty text."""

    def __init__(self, it: Iterator[tuple[int, str]]):
        self._it = it
        self._held: list[tuple[int, str]] = []

    def __iter__(self) -> "_peekable":
        return self

    def __next__(self) -> tuple[int, str]:
        return self._held.pop(0) if self._held else next(self._it)

    def next_text(self) -> str:
        for item in self._held:
            if item[1].strip():
                return item[1]
        for item in self._it:
            self._held.append(item)
            if item[1].strip():
                return item[1]
        return ""


def _row_values(cols: list[_Column], cells: list[str], i: int,
                err: Problems) -> tuple[float | None, dict[str, Any] | None, str | None]:
    """One data row's cells -> (t, values, lost); values None when the row is skipped."""
    values: dict[str, Any] = {}
    lost = None
    for c in cols:
        cell = cells[c.pos]
        if c.field in _STATE_FIELDS:
            _state(values, c, cell, i, err)
            continue
        if c.field in _TEXT_FIELDS:
            values[c.field] = None if NOT_AVAILABLE.match(cell) else cell
            continue
        if LOST.search(cell):
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
            return None, None, None
    return t, values, lost


def _state(values: dict[str, Any], c: _Column, cell: str, line: int, err: Problems) -> None:
    """A clock-event reason cell (Active / Not Active, or the `.active` mask) into
    values["thr_states"]; a reason's own column wins over the mask."""
    if NOT_AVAILABLE.match(cell):
        return
    _put_state(values, c, cell, line, err)


def _put_state(values: dict[str, Any], c: _Column, cell: str, line: int, err: Problems) -> None:
    """_state of a cell that is no [N/A] marker (the vectorised reader's cells are
    Active, Not Active or a hex mask: checked there, not again per row)."""
    states = values.get("thr_states")
    if states is None:
        states = values["thr_states"] = {}
    if c.field == "thr_mask":
        try:
            held = mask_cell_states(cell)
        except ValueError:
            err.add(line, f"column {c.label!r}: not a hex bit mask: {cell[:40]!r}; value dropped")
            return
        if states:
            for r, on in held.items():
                states.setdefault(r, on)
        else:
            states.update(held)
        return
    word = cell.lower()
    if word not in (ACTIVE, NOT_ACTIVE):
        err.add(line, f"column {c.label!r}: not Active or Not Active: {cell[:40]!r}; value dropped")
        return
    states[c.field[_REASON_AT:]] = word == ACTIVE


def _states_of(cells: tuple[str, ...], state_cols: list[tuple[_Column, Any]], fields: tuple[str, ...]
               ) -> dict[str, bool]:
    """The clock-event states of a plain row's state cells (checked by the vectorised
    reader: Active, Not Active or a hex mask), as _put_state makes them in column
    order; `fields` are the state columns' fields. A log writes a few distinct
    combinations: each is decoded once, and the dict is shared (ReasonTime.add reads it)."""
    key = (fields, cells)
    states = _combos.get(key)
    if states is None:
        values: dict[str, Any] = {}
        for (c, _), cell in zip(state_cols, cells):
            _put_state(values, c, cell, 0, _NO_PROBLEMS)
        states = values.get("thr_states", {})
        if len(_combos) > 4096:
            _combos.clear()
        _combos[key] = states
    return states


_combos: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, bool]] = {}


class _NoProblems:
    """Where _states_of's cells could have a problem: they cannot (checked cells)."""

    def add(self, line: int, message: str) -> None:
        raise AssertionError(f"a checked state cell had a problem: {message}")


_NO_PROBLEMS: Any = _NoProblems()


# a state column's field is thr_state:<reason>
_REASON_AT = len("thr_state:")
assert all(f.startswith("thr_state:") for f in _STATE_FIELDS - {"thr_mask"})


def _link_gen_max(values: dict[str, Any]) -> None:
    """The highest PCIe generation the link can reach, where the log has the GPU's and
    the root port's instead: the lower of the two."""
    if values.get("link_gen_max") is None and values.get("link_gen_gpumax") is not None:
        host = values.get("link_gen_hostmax")
        values["link_gen_max"] = min(values["link_gen_gpumax"], host) if host else values["link_gen_gpumax"]


# rows read ahead to learn how many rows one poll writes (see _poll_rhythm)
RHYTHM_ROWS = 8193
# a batch's plain rows are made Rows this many at a time: each row's Sample and gauges
# are made as the stream asks for them, not a whole batch's at once (memory)
ROWS_PIECE = 4096
# rows with rarer fields (clock-event states, ECC, remapped rows) hold their own dicts
# from the start: fewer a piece
RARE_PIECE = 1024


class _Sync:
    """The places of an index-less log's rows, kept in step with its polls after a line
    is skipped (read()): `place` of a row, `run` of a run of consecutive rows.

    After a place missing, a row that comes `gap` or more after the last is a poll's
    first and its GPU 0; the places are taken as in step again once a whole poll (N rows
    from one such gap to the next) has come. The poll the line ran into may have lost
    its first row, so until then each poll's first row is GPU 0 again: the rows of that
    one poll may be off, none after it."""

    __slots__ = ("n", "gap", "shift", "expect", "suspect", "last_t", "since")

    def __init__(self, n: int, gap: float):
        self.n, self.gap = n, gap
        self.shift = 0                  # added to a row's place
        self.expect: int | None = None  # the next row's place
        self.suspect = False            # a place went missing and no whole poll has come since
        self.last_t: float | None = None
        self.since = -1                 # rows since the last poll's start, while suspect (-1: none yet)

    def _came(self, pos: int) -> None:
        expect = self.expect
        if expect is not None and pos != expect:
            if pos < expect:            # a header: places start over
                self.shift, self.suspect = 0, False
            else:
                self.suspect, self.since = True, -1

    def _next(self, pos: int, t: float | None) -> None:
        """Row `pos` at time t, while suspect."""
        last = self.last_t
        if t is not None:
            if last is not None and t - last >= self.gap:      # a poll's first row
                if self.since == self.n and (pos + self.shift) % self.n == 0:
                    self.suspect = False                        # a whole poll came: in step
                else:
                    self.shift = -pos % self.n
                self.since = 0
            self.last_t = t
        if self.since >= 0:
            self.since += 1

    def place(self, pos: int, t: float | None) -> int:
        self._came(pos)
        if self.suspect:
            self._next(pos, t)
        elif t is not None:
            self.last_t = t
        self.expect = pos + 1
        return pos + self.shift

    def run(self, first: int, times: list[float], where: list[int]) -> int | list[int]:
        """The shift of each of the rows first, first + 1, ... (their times: times[k] for k
        in where): one for all, where the places are in step."""
        self._came(first)
        self.expect = first + len(where)
        if not self.suspect:
            if where:
                self.last_t = times[where[-1]]
            return self.shift
        shifts = []
        for j, t in enumerate(times[k] for k in where):
            if self.suspect:
                self._next(first + j, t)
            else:
                self.last_t = t
            shifts.append(self.shift)
        return shifts


def read(lines: Iterable[str], err: Problems, interval: float, run: RunFacts) -> Iterator[Record | Rows]:
    """Records, and Rows for the runs of plain rows the vectorised reader took (a GPU's
    first row is always a Record: the stream and the replay see it as they would
    row by row)."""
    rows = _smi_rows(lines, err, run)
    # the times of the first RHYTHM_ROWS rows
    ahead: list[Any] = []
    times: list[float] = []
    places: list[int] = []      # each time's row's place (what names its GPU: `one`)
    seen = 0
    for item in rows:
        ahead.append(item)
        if isinstance(item, _Plain):
            take = min(len(item.lines), RHYTHM_ROWS - seen)
            tc = next((col for c, col in zip(item.cols, item.columns) if c.field == "t"), None)
            if tc is not None:
                times += [tc[k] for k in item.where[:take]]
                places += range(item.position, item.position + take)
            seen += take
        else:
            if item[2] is not None:
                times.append(item[2])
                places.append(item[1])
            seen += 1
        if seen >= RHYTHM_ROWS:
            break
    n_per_poll, poll_gap = _poll_rhythm(times, places) if run.timed else (1, 0.0)
    # Without a key column a row's GPU is its place in its poll (place mod N). A line
    # skipped may have held two rows run together, or a killed logger's partial row and
    # its restart's header, and the places after it would be off for the rest of the
    # log: after a place missing, the next row that comes half a poll's gap or more
    # after the last is a poll's first again (`sync`). A log without a place missing
    # never moves.
    sync = _Sync(n_per_poll, 0.5 * poll_gap) if n_per_poll > 1 and poll_gap > 0 else None
    names: dict[str, str] = {}
    found = run.found
    reasons = ReasonTime()
    instant = -1
    last_index = None
    nodes = run.nodes_found

    def one(line: int, pos: int, t: float | None, values: dict[str, Any], lost: str | None,
            key_field: str | None) -> Record | None:
        nonlocal instant, last_index
        if key_field == "index":
            raw_idx = values.get("index")
            if raw_idx is None or not is_gpu_index(raw_idx):
                err.add(line, f"column 'index': not a GPU index: {raw_idx!r}; row skipped")
                return None
            gpu = str(int(raw_idx))
        elif key_field is not None:
            ident = values.get(key_field)
            if ident is None:
                err.add(line, f"no {key_field} on this row; row skipped")
                return None
            gpu = names.setdefault(ident, str(len(names)))
        else:
            gpu = str(pos % n_per_poll)
        host = values.get("host")
        if host:
            # the node the row names: one log of several nodes (a merged log) keys the GPUs
            # of every node but the first by it, as dcgm-exporter's Hostname does
            if host not in nodes:
                nodes.append(host)
            if host != nodes[0]:
                gpu = f"{host}:{gpu}"
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
        _link_gen_max(values)
        return smi_record(t, gpu, values, line, lost, reasons)

    def plain(b: _Plain) -> Iterator[Record | Rows]:
        """A run of plain rows: Rows, but a Record for a row that needs one (a GPU's
        first, a row the key or the clock must be judged on). Each row's values are
        what smi_record would make of them, made a column at a time (smi.plain_parts),
        a piece at a time: rows with rarer fields (clock-event states, ECC, remapped
        rows) hold dicts several times a plain row's, and a job's logs are read together,
        so fewer of them make a piece."""
        col = {c.field: column for c, column in zip(b.cols, b.columns)}
        key_field, where, lines = b.key_field, b.where, b.lines
        tcol = col.get("t")
        if tcol is None:
            # no clock: one() counts the instants, row by row
            for j, k in enumerate(where):
                rec = one(lines[j], b.position + j, None, b.values(j, err), None, key_field)
                if rec is not None:
                    yield rec
            return
        state_cols = [(c, column) for c, column in zip(b.cols, b.columns) if c.field in _STATE_FIELDS]
        state_fields = tuple(c.field for c, _ in state_cols)
        derived = "link_gen_max" not in col and "link_gen_gpumax" in col
        # the fields a row's values dict has, in its order (see _Plain.values and one())
        keys = (tuple(c.field for c in b.cols if c.field not in _STATE_FIELDS)
                + (("thr_states",) if state_cols else ()) + (("link_gen_max",) if derived else ()))
        plan = row_plan(keys)
        if derived:
            gmax, hmax = col["link_gen_gpumax"], col.get("link_gen_hostmax")
            col["link_gen_max"] = gmax if hmax is None else [min(a, h) if h else a for a, h in zip(gmax, hmax)]
        keycol = col.get(key_field) if key_field is not None else None
        hostcol = col.get("host")
        ts: list[float] = []
        gpus: list[str] = []
        taken: list[int] = []      # rows of the block as Rows (their places in the columns)
        out_lines: list[int] = []
        rare = plan.states or plan.ecc or plan.remap or plan.pending
        piece = RARE_PIECE if rare else ROWS_PIECE

        def rows_so_far() -> Iterator[Rows]:
            if not ts:
                return
            states = [_states_of(tuple(column[k] for _, column in state_cols), state_cols, state_fields)
                      for k in taken] if state_cols else None
            samples, gauges, counters = plain_parts(plan, col, taken, gpus, ts, states, reasons)
            # a pending remapping's gauge is on the rows that logged a word (smi_record):
            # the rows' gauges have one set of fields where every row did
            uniform = not plan.pending or None not in map(col["remap_pending"].__getitem__, taken)
            yield Rows(list(ts), list(gpus), list(out_lines), samples, gauges, counters, uniform)
            ts.clear()
            gpus.clear()
            taken.clear()
            out_lines.clear()

        shift = 0
        if key_field is None and sync is not None:
            shift = sync.run(b.position, tcol, where)
        for j, k in enumerate(where):
            if key_field is None:
                gpu: str | None = str((b.position + j + (shift if type(shift) is int else shift[j])) % n_per_poll)
            else:
                raw = keycol[k]
                if raw is None:
                    gpu = None
                elif key_field == "index":
                    gpu = str(int(raw)) if is_gpu_index(raw) else None
                else:
                    gpu = names.setdefault(raw, str(len(names)))
            if gpu is not None and hostcol is not None:
                host = hostcol[k]
                if host:
                    if host not in nodes:
                        nodes.append(host)
                    if host != nodes[0]:
                        gpu = f"{host}:{gpu}"
            if gpu is None or gpu not in found:
                yield from rows_so_far()
                pos = b.position + j + (shift if type(shift) is int else shift[j])
                rec = one(lines[j], pos, tcol[k], b.values(j, err), None, key_field)
                if rec is not None:
                    yield rec
                continue
            ts.append(tcol[k])
            gpus.append(gpu)
            taken.append(k)
            out_lines.append(lines[j])
            if len(ts) >= piece:
                yield from rows_so_far()
        yield from rows_so_far()

    def in_turn() -> Iterator[Any]:
        # what was read ahead is let go of as it is read: a _Plain holds its batch's columns
        ahead.reverse()
        while ahead:
            yield ahead.pop()
        yield from rows

    for item in in_turn():
        if isinstance(item, _Plain):
            yield from plain(item)
            continue
        if sync is not None and item[5] is None:
            line, pos, t, values, lost, key_field = item
            rec = one(line, sync.place(pos, t), t, values, lost, key_field)
        else:
            rec = one(*item)
        if rec is not None:
            yield rec


def sniff(head: list[str]) -> bool:
    """A --query-gpu header: comma-separated nvidia-smi field names."""
    first = head[0]
    return "," in first and not sniff_csv(first) and any(
        _smi_column_known(c.strip().strip('"').lower()) for c in first.split(","))
