"""The vectorised reader of nvidia-smi --query-gpu rows (pyarrow, the `report` extra).

A batch of data rows is parsed by pyarrow's CSV reader and its cells checked and
converted in Arrow (the numeric columns together, as one array laid end to end, each
cell against its own column; timestamps too: the date and time of day once per
distinct second, the fraction added); what comes back is the batch as columns, one
Python list per field, and where each row is in them. It takes a row only when every
cell it uses is plain: a number in the strict form `-?digits[.digits]` with the
column's unit or none, in its range; a timestamp `YYYY/MM/DD hh:mm:ss[.fff]`; text of
printable ASCII; a clock-event reason as `Active` or `Not Active` (any case), or the
`.active` mask as `0x` and hex digits. Every other row (a marker such as [N/A], a lost
GPU, a wrong field count, a stray byte) is handed back to the row-by-row reader in
smi_csv, which is the one that judges and reports it: the values of a row taken here
are what that reader would have made of it, and the problems are its own. smi_csv
makes the runs of rows taken here records.Rows, columns still, never a Record per row.

Without pyarrow, `reader()` is None and every row is read row by row.
The row-by-row reader asks for this one once a run of rows fills a batch.
"""
from __future__ import annotations

import importlib.util
import io
import math
import string
import sys
from typing import Any, Sequence

from ..cells import NOT_AVAILABLE, UNITS, CellError, parse_smi_time

# pyarrow, imported on the first full batch: a short log, and the exporter that never
# reads one, do not pay its import (~0.3 s, ~70 MB)
pa: Any = None
pc: Any = None
pcsv: Any = None
_tried = False

# Rows per batch: Arrow's fixed cost per call is paid once per this many rows, and the
# batch is all of a log that is held at once (a few MB), whatever the file's size.
BATCH = 32768
# Fewer rows than this go row by row (a small log, a stretch between two headers).
MIN_ROWS = 256
# BATCH is for a header of this many used columns or fewer; a wider one reads as many
# cells a batch, in fewer rows (a batch's columns are all of a log held at once)
BATCH_COLUMNS = 4


# One of a job's logs reads no fewer rows a batch than this, however many logs: below
# it Arrow's fixed cost per call outweighs the memory saved (measured on the 20 MB
# log: 2.9 s at 1,024 or 4,096 rows a batch, 3.8 s at 512, 1.7-2.2 s at BATCH).
SHARE_MIN = 1024


def batch_rows(columns: int, together: int = 1) -> int:
    """Rows a batch holds under a header of this many used columns, for one of
    `together` logs read at once (RunFacts.together): the batches of a job's logs
    together hold what one log's would, down to SHARE_MIN rows each."""
    whole = max(MIN_ROWS, BATCH * BATCH_COLUMNS // max(BATCH_COLUMNS, columns))
    return whole if together <= 1 else max(min(whole, SHARE_MIN), whole // together)

_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"
# a number and the letters of a unit or none: a column's cell is plain where they are
# none or its unit (no unit has a digit, a point or a minus, so each trim stops at the other)
_NUMBER_UNIT = rf"^ *{_NUMBER}(?: *[A-Za-z%/]+)? *$"
_UNIT_CHARS = " " + "".join(sorted(set("".join(UNITS))))
_NUMBER_CHARS = " -.0123456789"
assert not set(_UNIT_CHARS) & set(_NUMBER_CHARS) - {" "} and set(_UNIT_CHARS) <= set("% /" + string.ascii_letters)
_TIME = r"^ *(?P<h>[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})(?P<f>(?:\.[0-9]+)?) *$"
_TEXT = r"^[ -~]*$"        # printable ASCII: str.strip() and Arrow's trim of spaces agree
# clock-event reason states (smi_csv._state), strictly: anything else is judged row by row
_STATE = r"(?i)^(active|not active)$"
_MASK = r"^0[xX][0-9a-fA-F]{1,16}$"


class _Reader:
    def __init__(self, cols: Sequence[Any], ncells: int, text_fields: set[str], state_fields: set[str]):
        self.cols = cols
        self.text_fields = text_fields
        self.state_fields = state_fields
        self.fields = [c.field for c in cols]
        self.commas = ncells - 1
        self.names = [f"c{i}" for i in range(ncells)]
        self.read_opts = pcsv.ReadOptions(column_names=self.names, use_threads=False, block_size=1 << 24)
        self.parse_opts = pcsv.ParseOptions(quote_char=False, double_quote=False, escape_char=False,
                                            newlines_in_values=False, ignore_empty_lines=False)
        self.convert_opts = pcsv.ConvertOptions(column_types={n: pa.string() for n in self.names},
                                                include_columns=[self.names[p] for p in sorted({c.pos for c in cols})],
                                                strings_can_be_null=False, quoted_strings_can_be_null=False)
        self._bases: dict[str, float | None] = {}
        # the numeric columns are parsed together, laid end to end: a pyarrow call costs
        # ~30 us whatever its length, and a job's logs read in small batches of wide rows
        # (22 columns of 1,024 rows), where a handful of calls a column were most of it
        self.numeric = [i for i, c in enumerate(cols)
                        if c.field != "t" and c.field not in state_fields and c.field not in text_fields]
        self._consts: dict[int, tuple[Any, ...]] = {}

    def read(self, texts: list[str]) -> tuple[list[int], list[list[Any]]]:
        """The batch as columns: per row, where its values are in the columns (-1: read
        that row yourself), and per column of the header (self.fields), its values as
        smi_csv would make them (the time as epoch seconds; a state cell as its text,
        strictly Active, Not Active or a hex mask)."""
        n = len(texts)
        where = [-1] * n
        # a field count, a byte or a line break Arrow would read otherwise: row by row.
        # Most batches have none: the whole text is looked at first, and Arrow, which
        # refuses a row of another field count (no quotes: every comma splits), says
        # whether one row is off where the commas add up
        whole = "\n".join(texts)
        table = None
        if whole.isascii() and "\r" not in whole and whole.count(",") == self.commas * n:
            plain: Sequence[int] = range(n)
            try:
                table = self._table(whole)
            except pa.ArrowInvalid:
                table = None
        if table is None:
            plain = [j for j, t in enumerate(texts) if t.count(",") == self.commas and t.isascii() and "\r" not in t]
            if not plain:
                return where, []
            table = self._table("\n".join([texts[j] for j in plain]))
        good = None
        columns: list[Any] = []
        numbers = self._numbers(table, len(plain))
        for i, c in enumerate(self.cols):
            cell = table.column(self.names[c.pos])
            if i in numbers:
                ok, value = numbers[i]
            elif c.field == "t":
                value = self._times(cell)
                ok = pc.is_valid(value)
            elif c.field in self.state_fields:
                value = pc.utf8_trim(cell, " ")
                ok = pc.match_substring_regex(value, _MASK if c.field == "thr_mask" else _STATE)
            elif c.field in self.text_fields:
                ok = pc.match_substring_regex(cell, _TEXT)
                value = pc.utf8_trim(cell, " ")
                value = pc.if_else(pc.match_substring_regex(value, NOT_AVAILABLE.pattern, ignore_case=True),
                                   pa.scalar(None, pa.string()), value)
            good = ok if good is None else pc.and_(good, ok)
            columns.append(value)
        kept = pc.fill_null(good, False) if good is not None else None
        if type(plain) is range and (kept is None or pc.all(kept).as_py()):
            where = list(plain)          # every row plain and kept (most batches)
        else:
            k = 0
            for j, ok in zip(plain, kept.to_pylist() if kept is not None else [True] * len(plain)):
                if ok:
                    where[j] = k
                k += 1
        return where, [c.to_pylist() for c in columns]

    def _table(self, text: str) -> Any:
        """Rows of ASCII text, a column of strings per cell of the header."""
        return pcsv.read_csv(io.BytesIO(text.encode("ascii")), self.read_opts, self.parse_opts, self.convert_opts)

    def _numbers(self, table: Any, n: int) -> dict[int, tuple[Any, Any]]:
        """Per numeric column (its index in self.cols): whether each cell is a plain number
        in the column's unit or none and in its range, and its value in base units. The
        columns are parsed as one array, end to end, each cell by what its own column
        asks, so each value is what parsing the column alone would make of it."""
        if not self.numeric:
            return {}
        cells = pa.chunked_array([chunk for i in self.numeric
                                  for chunk in table.column(self.names[self.cols[i].pos]).chunks], pa.string())
        # a match and two trims, not a regex's groups (extracting groups was most of the
        # parse). A cell is plain where it is a number with nothing or its column's unit
        # after it; trimmed of the number's characters it is the unit, and trimmed of the
        # unit's letters the number (cast only there: a cast of anything else raises)
        lo, hi, unit, factor, percent = self._constants(n)
        rest = pc.utf8_trim(cells, _NUMBER_CHARS)
        plain = pc.and_(pc.match_substring_regex(cells, _NUMBER_UNIT),
                        pc.or_(pc.equal(rest, ""), pc.equal(rest, unit)))
        num = pc.cast(pc.if_else(plain, pc.utf8_trim(cells, _UNIT_CHARS), pa.scalar(None, pa.string())),
                      pa.float64())
        ok = pc.and_(pc.is_finite(num), pc.and_(pc.greater_equal(num, lo), pc.less_equal(num, hi)))
        # as parse_quantity: a percent divided by 100 (exact for whole percents), another
        # unit times its factor, none times 1 (exact)
        value = pc.if_else(percent, pc.divide(num, 100.0), pc.multiply(num, factor))
        return {i: (ok.slice(k * n, n), value.slice(k * n, n)) for k, i in enumerate(self.numeric)}

    def _constants(self, n: int) -> tuple[Any, ...]:
        """Per cell of the numeric columns laid end to end, n rows each: its column's
        lower and upper bound (infinite where none), unit ("" where none), factor to the
        base unit and whether the unit is a percent. Batches have a few sizes."""
        got = self._consts.get(n)
        if got is None:
            specs = [self.cols[i] for i in self.numeric]

            def each(f: Any, kind: Any) -> Any:
                return pa.concat_arrays([pa.repeat(pa.scalar(f(c), kind), n) for c in specs])
            got = (each(lambda c: -math.inf if c.lo is None else float(c.lo), pa.float64()),
                   each(lambda c: math.inf if c.hi is None else float(c.hi), pa.float64()),
                   each(lambda c: c.unit or "", pa.string()),
                   each(lambda c: UNITS[c.unit][1] if c.unit not in (None, "%") else 1.0, pa.float64()),
                   each(lambda c: c.unit == "%", pa.bool_()))
            if len(self._consts) > 8:
                self._consts.clear()
            self._consts[n] = got
        return got

    def _times(self, cell: Any) -> Any:
        """parse_smi_time of plain timestamps, in Arrow: the date and time of day once
        per distinct second, the fraction added (a correctly rounded decimal, as
        int(frac) / 10 ** len(frac) is); null where the cell is no plain timestamp or
        its date is no date (row by row)."""
        m = pc.extract_regex(cell, _TIME)
        head = pc.struct_field(m, [0])
        frac = pc.struct_field(m, [1])
        enc = pc.dictionary_encode(head)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        base = pa.array([self._base(h) for h in enc.dictionary.to_pylist()], pa.float64())
        base = pc.take(base, enc.indices)
        has_frac = pc.not_equal(frac, "")
        fraction = pc.cast(pc.binary_join_element_wise("0", pc.if_else(has_frac, frac, ".0"), ""), pa.float64())
        return pc.if_else(has_frac, pc.add(base, fraction), base)

    def _base(self, head: str) -> float | None:
        base = self._bases.get(head, _UNSEEN)
        if base is _UNSEEN:
            try:
                base = parse_smi_time(head)
            except CellError:
                base = None
            if len(self._bases) > 100_000:
                self._bases.clear()
            self._bases[head] = base
        return base  # type: ignore[return-value]


_UNSEEN = object()


def reader(cols: Sequence[Any], ncells: int, state_fields: set[str], text_fields: set[str]) -> _Reader | None:
    """A vectorised reader for rows under this header, or None: pyarrow is not
    installed, or a column needs the row-by-row reader (a unit the cells module does
    not know)."""
    if not available():
        return None
    if any(c.field not in text_fields and c.unit is not None and c.unit not in UNITS for c in cols):
        return None
    return _Reader(cols, ncells, text_fields, state_fields)


def available() -> bool:
    """Whether pyarrow (the report extra) is installed; imported on the first call."""
    global pa, pc, pcsv, _tried
    if not _tried:
        _tried = True
        try:
            import pyarrow
            import pyarrow.compute
            import pyarrow.csv
        except ImportError:          # the report extra is not installed: row by row
            return False
        pa, pc, pcsv = pyarrow, pyarrow.compute, pyarrow.csv
        # pyarrow's numeric kernels (pyarrow 26: cast, divide, greater_equal, ...) try
        # `import dateutil` at every call. Where it is not installed, each try searched
        # sys.path again (a failed import is not remembered): a fifth of reading a log,
        # more the smaller a job's batches. Recorded once as missing, each try is a
        # dictionary lookup, and it fails as before.
        if importlib.util.find_spec("dateutil") is None:
            sys.modules.setdefault("dateutil", None)  # type: ignore[arg-type]
    return pa is not None
