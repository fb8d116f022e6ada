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
                  from the timestamp rhythm (see smi_csv._poll_rhythm).
  dmon            `nvidia-smi dmon [-o DT]` output.
  nvidia-smi-q    `nvidia-smi -q [-l N]` text.
  dcgm            dcgm-exporter output: exposition text (one or many scrapes), CSV
                  exports, or Prometheus HTTP API JSON (see sources/recorded/dcgm.py).

Bad input never stops the read: every line that cannot be used becomes one LogError
naming file and line, and the rest is kept. Only a file with nothing usable in it
(empty, unknown header) raises LogFormatError, whose message is that one line.
Timestamps without a zone (nvidia-smi writes local time, unmarked) are read as UTC;
only differences matter to the analysis.
"""
from __future__ import annotations

import bisect
import bz2
import collections
import gzip
import heapq
import io
import itertools
import lzma
import math
import os
import stat
import zlib
from typing import Iterable, Iterator

from ...model import DeviceInfo, gpu_sort_key
from .formats import FORMATS, detect_format, expected
from .records import LogError, LogFormatError, Problems, Record, RecordedRun, Rows, RunFacts

# A log is read line by line as it is consumed, so memory follows the reader's window,
# not the file. Two things cannot stream and are capped instead (the other, API JSON, in recorded/dcgm.py):
MAX_LINE = 1 << 20          # characters in one line: more is no text log (/dev/zero, a binary)
# Rows of different GPUs are written up to ~1 s apart within one poll (a stalled query);
# records are handed out in time order within this much recorded time.
REORDER_S = 5.0
REORDER_MAX = 200_000       # records held for that at most
# Line numbers quoted per kind of timestamp trouble; the rest are counted.
SHOW_LINES = 5
# A forward jump of the clock is a gap (the logger paused, the node restarted) while
# the gaps of a log stay within the time it recorded, or this long: the report and
# export analyse every tick of the span, so one row stamped a month ahead, or a first
# poll stamped 1970 (a clock not set at boot), would make their work follow the span,
# not the data. A longer jump is a clock step (see _clock_steps).
GAP_FREE_S = 3600.0


def kept_as_gap(jump: float, gaps: float, first: float, latest: float) -> bool:
    """Whether a forward jump of `jump` seconds after `latest` is a gap (GAP_FREE_S's
    rule), `gaps` the seconds of the gaps kept since `first`; else it is no gap: a clock
    step in one log, logs of different runs in a job's (job.py)."""
    return gaps + jump <= max(GAP_FREE_S, latest - first - gaps)
# GPU entities one log may name (a whole cluster's worth); rows of more are skipped, so
# per-GPU state, the engine and the report's picture stay bounded whatever the file says.
MAX_GPUS = 4096
# how often a line's place in the file is kept for `fraction` (progress of a replay)
MARK_LINES = 256


# Compressed logs are read as they are (long 100 ms logs are often kept gzipped), each
# kind known by its first bytes, never by its name. zstd has no reader in this Python's
# standard library: such a log is one line asking for it decompressed.
_READERS = {"gzip": (b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
            "bzip2": (b"BZh", bz2.BZ2File),
            "xz": (b"\xfd7zXZ\x00", lzma.LZMAFile)}
_ZSTD = b"\x28\xb5\x2f\xfd"
# what a damaged or cut-short compressed stream raises while read
_DAMAGED = (EOFError, OSError, zlib.error, lzma.LZMAError)
# A compressed log's text as a multiple of its bytes, for what reading it costs (whether
# it is worth a process of its own): with gzip the real 8xH100 trace ckpt1 compresses 11x,
# a 200 MB log of ckpt1000 tiled 8.3x, a 22-column job log 19x (bzip2 16x, xz 29x on
# ckpt1); the least, rounded down.
COMPRESSED_TEXT = 8


def compression_of(head: bytes) -> str | None:
    """The compression ('gzip', 'bzip2', 'xz') a file's first bytes (8 or more) name,
    else None."""
    for kind, (magic, _) in _READERS.items():
        if head.startswith(magic) and (kind != "bzip2" or head[3:4].isdigit() and head[3:4] != b"0"):
            return kind
    return None


def _not_a_header(first: str) -> str:
    """Why a log's first line is no header: binary bytes named as such, a text line
    quoted."""
    if "\ufffd" in first or any(c < " " and c not in "\t\r\n" for c in first):
        return f"binary data, not a text log: expected {expected()}"
    return f"unknown header {first.strip()[:80]!r}: expected {expected()}"


class LogStream:
    """One recorded log, read as `records()` is consumed: time-ordered records, the
    devices, format, nodes and problems found so far. Reading it again means a new
    LogStream (replay's loop does that).

    Raises LogFormatError (one line) from the constructor when the file cannot be
    opened or its format is unknown, and from records() when nothing in it is usable
    or a cap is hit."""

    def __init__(self, path: str, fmt: str = "auto", interval: float = 1.0, samples_only: bool = False,
                 together: int = 1):
        self.path = path
        self.interval = interval
        self.err = Problems(path)
        # what the format reader has learnt so far (and whether only samples are wanted)
        self.facts = RunFacts(samples_only=samples_only, together=together)
        self.start: float | None = None
        self.end: float | None = None
        self.done = False
        self.backwards: list[int] = []     # lines where a GPU's clock went back
        self.n_backwards = 0
        self.repeats: list[int] = []       # lines repeating a GPU's previous timestamp
        self.n_repeats = 0
        self.forwards: list[int] = []      # lines where the clock jumped ahead (a clock step)
        self.n_forwards = 0
        self.max_forward = 0.0             # seconds, the longest such jump
        try:
            st = os.stat(path)
        except OSError as e:
            raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "a device"
            raise LogFormatError(f"{path}: is {what}, not a recorded log")
        self.size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        try:
            raw = open(path, "rb")
        except OSError as e:
            raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
        try:
            head = raw.peek(8)[:8]      # a pipe's first bytes stay in it
        except OSError as e:
            raw.close()
            raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
        if head.startswith(_ZSTD):
            raw.close()
            raise LogFormatError(f"{path}:1: zstd-compressed: decompress it first (zstdcat)")
        self.compression = compression_of(head)     # None: a text log
        # UTF-16 with its byte-order mark: what PowerShell's `>` writes of nvidia-smi on
        # Windows; else UTF-8, a byte-order mark no part of the first column's name
        wide = not self.compression and head[:2] in (b"\xff\xfe", b"\xfe\xff")
        # where the file has been read to, for progress against its size, where characters
        # are not its bytes (compressed, or UTF-16); None where progress counts the
        # characters read (a UTF-8 log, or a pipe, which has no size and no place to tell)
        self._raw_at = raw.tell if (self.compression or wide) and self.size else None
        self.damaged: str | None = None    # a compressed stream's damage, once met
        self._raw = raw                    # a decompressing reader leaves its file open
        self._fh = io.TextIOWrapper(_READERS[self.compression][1](raw) if self.compression else raw,
                                    encoding="utf-16" if wide else "utf-8-sig", errors="replace", newline="")
        self._line_no = 0
        self.chars_read = 0                # ~bytes for these ASCII logs
        # (line, chars read through it) every MARK_LINES lines not yet handed out: a reader
        # may read ahead by a whole batch, so progress counts what was consumed, not read
        self._marks: collections.deque[tuple[int, int]] = collections.deque()
        self._consumed = 0
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
                raise self.err.fatal(first_no, _not_a_header(first))
        if fmt not in FORMATS:
            raise LogFormatError(f"{self.path}: unknown log format {fmt!r} (one of: auto, {', '.join(FORMATS)})")
        return fmt, itertools.chain(head, lines)

    # -- what has been learnt so far

    @property
    def devices(self) -> list[DeviceInfo]:
        found = self.facts.found
        return [found[k] for k in sorted(found, key=gpu_sort_key)]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.facts.nodes_found)

    @property
    def errors(self) -> list[LogError]:
        return sorted(self.err.items, key=lambda e: e.line)

    @property
    def error_count(self) -> int:
        return self.err.count

    @property
    def fraction(self) -> float:
        """Share of the file handed out as records so far (0 when the size is unknown),
        to within MARK_LINES lines: what a replay or report has got through, however far
        the format's reader has read ahead."""
        if self.done:
            return 1.0
        return min(1.0, self._consumed / self.size) if self.size else 0.0

    @property
    def lines_read(self) -> int:
        """Lines of the file read so far (the report's progress counts them as rows)."""
        return self._line_no

    def warnings(self) -> list[str]:
        """One line per kind of timestamp trouble, with counts and the first lines."""
        out = []
        for n, lines, what in (
                (self.n_forwards, self.forwards,
                 f"the clock jumps ahead (by up to {span_words(self.max_forward)}) further than the log has "
                 "recorded; the clock is taken to have stepped forward and the rows after it follow the earlier "
                 "ones without a gap"),
                (self.n_backwards, self.backwards,
                 "a GPU's timestamp goes backwards; the clock is taken to have stepped back and the rows after it "
                 "are kept in order after the earlier ones"),
                (self.n_repeats, self.repeats,
                 "a row repeats its GPU's previous timestamp; the repeat is dropped")):
            if n:
                more = f" and {n - len(lines)} more" if n > len(lines) else ""
                out.append(f"{self.path}: {n} time(s) {what} (line {', '.join(map(str, lines))}{more})")
        if self.damaged:
            out.append(self.damaged)
        return out

    def close(self) -> None:
        self._fh.close()
        self._raw.close()

    def _damage(self, e: BaseException) -> None:
        """A compressed stream cut short or damaged after line self._line_no: the rows
        before it are the log (a logger killed mid-write leaves a gzip stream without its
        end), said in a warning; before any line, nothing to read."""
        what = "ends before its end (cut short)" if isinstance(e, EOFError) else f"is damaged ({e})"
        if not self._line_no:
            raise LogFormatError(f"{self.path}:1: its {self.compression} stream {what}: nothing to read")
        self.damaged = f"{self.path}: its {self.compression} stream {what} after line {self._line_no}; " \
                       "the lines before it are read"

    # -- reading

    def _lines(self) -> Iterator[str]:
        fh, raw_at = self._fh, self._raw_at
        while True:
            try:
                line = fh.readline(MAX_LINE + 1)
            except _DAMAGED as e:
                if self.compression is None:
                    raise LogFormatError(f"{self.path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
                self._damage(e)
                return
            if not line:
                return
            self._line_no += 1
            self.chars_read += len(line)
            if self._line_no % MARK_LINES == 0:
                self._marks.append((self._line_no, self.chars_read if raw_at is None else raw_at()))
            if len(line) > MAX_LINE and not line.endswith(("\n", "\r")):
                raise self.err.fatal(self._line_no, f"a line longer than {MAX_LINE >> 20} MiB characters: "
                                                     "not a text log")
            # a byte-order mark (the file's, or one of a log appended to it) is no data
            yield line.rstrip("\r\n").lstrip("\ufeff")

    def records(self) -> Iterator[Record]:
        """Every usable record, ordered by time (file order on ties)."""
        for item in self.items():
            if type(item) is Rows:
                for rec in item.records():
                    self.consumed_through(rec.line)
                    yield rec
            else:
                yield item

    def items(self) -> Iterator[Record | Rows]:
        """records(), with runs of plain rows kept as Rows where the reader made them
        (the replay's way: a run is handed on whole, not a Record per row). Whoever
        takes the rows of a Rows says how far it got with consumed_through(), for
        `fraction`; a Record counts as consumed when it is handed out."""
        try:
            parsed = FORMATS[self.format].read(self._all_lines, self.err, self.interval, self.facts)
            n = 0
            for item in self._in_order(self._clock_steps(parsed)):
                if type(item) is Rows:
                    t0, t1, k = item.t[0], item.t[-1], len(item)
                else:
                    t0 = t1 = item.t
                    k = 1
                    self.consumed_through(item.line)
                if self.start is None:
                    self.start = t0
                self.end = t1
                n += k
                yield item
            if not n:
                first_err = self.err.items[0] if self.err.items else None
                why = f" (first problem: line {first_err.line}: {first_err.message})" if first_err else ""
                raise self.err.fatal(0, f"no usable {self.format} rows{why}")
            self.done = True
        finally:
            self.close()

    def consumed_through(self, line: int) -> None:
        """The records up to this line of the file are handed out (`fraction`)."""
        marks = self._marks
        while marks and marks[0][0] <= line:
            self._consumed = marks.popleft()[1]

    def _clock_steps(self, recs: Iterable[Record | Rows]) -> Iterator[Record | Rows]:
        """File order -> a clock that never steps back by more than REORDER_S.

        A GPU's own rows are in time order in any real log; one going back by more
        than the reorder window is a clock stepped back (NTP, a restart with another
        zone): the rest of the file is moved so that row follows the GPU's previous one
        by that GPU's last step, as if the clock had not moved. Sorting them in instead
        would interleave two stretches of the run and change what it looks like.

        A jump ahead is a gap while all gaps together stay within the time recorded
        between them (or GAP_FREE_S); beyond that it is a clock stepped forward, moved
        back the same way, so the span, and the work of whoever reads it tick by
        tick, follows the data. One row stamped a month ahead is then two steps, out
        and back, and costs nothing.

        Rows pass whole as far as nothing of this applies to them (each GPU's rows
        after its previous ones, no jump past REORDER_S, no clock moved so far); from
        the first row that needs a look, they are taken one Record at a time."""
        last: dict[str, float] = {}
        step: dict[str, float] = {}
        offset = 0.0
        latest = -math.inf
        first: float | None = None
        gaps = 0.0                   # recorded seconds in the jumps kept as gaps
        for item in recs:
            if type(item) is Rows:
                j = 0
                if not offset:
                    n = len(item)
                    ts, gpus = item.t, item.gpu
                    while j < n:
                        t, g = ts[j], gpus[j]
                        prev = last.get(g)
                        if prev is None:
                            if len(last) >= MAX_GPUS:
                                break
                        elif t <= prev:
                            break
                        if first is None:
                            first = t
                        elif t - latest > REORDER_S:
                            break
                        if prev is not None:
                            step[g] = t - prev
                        last[g] = t
                        if t > latest:
                            latest = t
                        j += 1
                    if j == n:
                        yield item
                        continue
                    if j:
                        yield item.cut(0, j)
                rest: Iterable[Record] = item.records(j)
            else:
                rest = (item,)
            for r in rest:
                g = r.gpu
                prev = last.get(g)
                if prev is None and len(last) >= MAX_GPUS:
                    self.facts.found.pop(g, None)
                    self.err.add(r.line, f"GPU {g[:40]!r}: more than {MAX_GPUS} GPUs in one log; row skipped")
                    continue
                t = r.t + offset
                jump = t - latest
                if first is None:
                    first = t
                elif jump > REORDER_S:
                    if kept_as_gap(jump, gaps, first, latest):
                        gaps += jump
                    else:
                        self._note_forward(r.line, jump)
                        shift = jump - step.get(g, self.interval)
                        offset -= shift
                        t -= shift
                if prev is None:
                    last[g] = t
                else:
                    if t < prev:
                        self._note_backwards(r.line)
                        if t < prev - REORDER_S:
                            shift = max(latest, prev) - t + step.get(g, self.interval)
                            offset += shift
                            t += shift
                    if t > prev:
                        step[g] = t - prev
                        last[g] = t
                if offset:
                    r = r.moved(t - r.t)
                if t > latest:
                    latest = t
                yield r

    def _in_order(self, recs: Iterable[Record | Rows]) -> Iterator[Record | Rows]:
        """Time order within REORDER_S of recorded time; then one record per GPU and
        instant (a repeated timestamp is a duplicated row).

        Rows whose times do not go back stay Rows while the records come in order:
        they wait in the queue as one item and leave it, whole or a head at a time,
        when a Record in their place would; their GPUs' times are past the last
        handed out (_clock_steps let no earlier one through), so none is a repeat.
        A record out of order (a row stamped a few ms before the one before it) turns
        the queue into a heap until a row of Rows comes whose time is the latest yet:
        the heap, sorted, is then the queue again (a record that comes in order never
        finds the heap holding a later one, so the order handed out is the heap's)."""
        # while the records come in time order (nearly always), the window is a queue in
        # that order, which is what the heap would hand out, at the same moments; the
        # first record out of order turns it into the heap
        queue: collections.deque[Record | Rows] | None = collections.deque()
        held = [0]                   # records in the queue, counting every row of its Rows
        heap: list[tuple[float, int, Record]] = []
        latest = -math.inf
        last: dict[str, float] = {}
        failed: LogFormatError | None = None
        seq = 0
        try:
            for item in recs:
                if type(item) is not Rows:
                    rest: Iterable[Record] = (item,)
                else:
                    rest = ()
                    ts, n, i = item.t, len(item), 0
                    while i < n:
                        if queue is None and ts[i] >= latest:
                            # in order again, after everything read so far: the heap, in
                            # the order it hands out, is the queue (what follows is
                            # appended in that order), so the rows go on as Rows, not a
                            # Record each to the end of the log
                            queue = collections.deque(r for _, _, r in sorted(heap))
                            held[0] = len(heap)
                            heap = []
                        if queue is not None:
                            j, t = i, latest
                            while j < n and ts[j] >= t:
                                t = ts[j]
                                j += 1
                            if j > i:
                                queue.append(item if i == 0 and j == n else item.cut(i, j))
                                held[0] += j - i
                                latest = t
                                yield from self._release(queue, latest, last, held)
                            if j == n:
                                break
                            # row j goes back in time: the window is a heap from here
                            heap = [(q.t, seq + k, q) for k, q in enumerate(_each(queue))]  # sorted: a heap
                            seq += len(heap)
                            queue = None
                            i = j
                        # a Record a row while they go back in time
                        while i < n and ts[i] < latest:
                            heapq.heappush(heap, (ts[i], seq, next(item.records(i, i + 1))))
                            seq += 1
                            i += 1
                            yield from self._spill(heap, latest, last)
                for r in rest:
                    t = r.t
                    if queue is not None:
                        if t >= latest:
                            queue.append(r)
                            held[0] += 1
                            latest = t
                            yield from self._release(queue, latest, last, held)
                            continue
                        heap = [(q.t, seq + k, q) for k, q in enumerate(_each(queue))]    # sorted: a heap already
                        seq += len(heap)
                        queue = None
                    heapq.heappush(heap, (t, seq, r))
                    seq += 1
                    latest = max(latest, t)
                    yield from self._spill(heap, latest, last)
        except LogFormatError as e:     # a cap hit: what was read before it still counts
            failed = e
        while queue:
            q = queue.popleft()
            if type(q) is Rows:
                last.update(zip(q.gpu, q.t))
                yield q
                continue
            out = self._once(q, last)
            if out is not None:
                yield out
        while heap:
            out = self._once(heapq.heappop(heap)[2], last)
            if out is not None:
                yield out
        if failed is not None:
            raise failed

    def _spill(self, heap: list[tuple[float, int, Record]], latest: float,
               last: dict[str, float]) -> Iterator[Record]:
        """What the heap hands out once `latest` is read: everything before latest -
        REORDER_S, then the oldest while it holds more than REORDER_MAX records."""
        while heap and (heap[0][0] < latest - REORDER_S or len(heap) > REORDER_MAX):
            out = self._once(heapq.heappop(heap)[2], last)
            if out is not None:
                yield out

    def _release(self, queue: collections.deque[Record | Rows], latest: float, last: dict[str, float],
                 held: list[int]) -> Iterator[Record | Rows]:
        """What the queue hands out once `latest` is read: everything before latest -
        REORDER_S, then the oldest while it holds more than REORDER_MAX records."""
        edge = latest - REORDER_S
        while queue:
            q = queue[0]
            if type(q) is Rows:
                ts = q.t
                if ts[0] >= edge:
                    break
                queue.popleft()
                if ts[-1] >= edge:
                    k = bisect.bisect_left(ts, edge)
                    queue.appendleft(q.cut(k))
                    q = q.cut(0, k)
                held[0] -= len(q)
                last.update(zip(q.gpu, q.t))
                yield q
                continue
            if q.t >= edge:
                break
            held[0] -= 1
            out = self._once(queue.popleft(), last)
            if out is not None:
                yield out
        while held[0] > REORDER_MAX:
            q = queue.popleft()
            if type(q) is Rows:
                if len(q) > 1:
                    queue.appendleft(q.cut(1))
                q = next(q.records(0, 1))
            held[0] -= 1
            out = self._once(q, last)
            if out is not None:
                yield out

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

    def _note_forward(self, line: int, jump: float) -> None:
        self.n_forwards += 1
        self.max_forward = max(self.max_forward, jump)
        if len(self.forwards) < SHOW_LINES:
            self.forwards.append(line)

    def _note_backwards(self, line: int) -> None:
        self.n_backwards += 1
        if len(self.backwards) < SHOW_LINES:
            self.backwards.append(line)


def _each(queue: Iterable[Record | Rows]) -> Iterator[Record]:
    for q in queue:
        if type(q) is Rows:
            yield from q.records()
        else:
            yield q


def span_words(seconds: float) -> str:
    """A time as people say it: 35 s, 45 min, 30 days, 56 years."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    for unit, n in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600)):
        if seconds >= 2 * n:
            return f"{seconds / n:.0f} {unit}"
    return f"{seconds / 60:.0f} min"


def read_log(path: str, fmt: str = "auto", interval: float = 1.0) -> RecordedRun:
    """Read a whole recorded log into memory (tools and tests; replay and the report
    stream it through LogStream). `interval` spaces instants when the log has no clock.

    Raises LogFormatError (one line, naming file and line) when nothing in it can be
    replayed; every lesser problem is in RecordedRun.errors and the rest is kept."""
    stream = LogStream(path, fmt, interval)
    records = list(stream.records())
    return RecordedRun(path=path, format=stream.format, devices=stream.devices, records=records,
                       errors=stream.errors, error_count=stream.error_count, timed=stream.facts.timed,
                       has_sm_active=stream.facts.has_sm_active, nodes=stream.nodes, warnings=stream.warnings())


__all__ = ["COMPRESSED_TEXT", "FORMATS", "LogError", "LogFormatError", "LogStream", "Record", "RecordedRun",
           "compression_of", "read_log", "detect_format"]
