"""What reading a recorded log yields: records, the run, and its problems."""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from ...model import DeviceInfo, Reading, Sample
from ..base import SourceError

# Keep at most this many detailed errors; the rest are only counted.
MAX_ERRORS = 1000


class LogFormatError(SourceError):
    """The file cannot be replayed at all. str() is one line naming file (and line)."""


@dataclass(frozen=True, slots=True)
class LogError:
    path: str
    line: int          # 1-based; 0 when the problem is the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass(slots=True, init=False)
class Record:
    """One GPU at one recorded instant: the Reading a live source would have returned
    for it (its one sample in `samples`; `up` False and `error` set when the log says
    the GPU could not be read), and the line of the log it came from. `t` and `gpu`
    are the reading's, kept at hand: the stream asks for them several times a row."""

    reading: Reading
    line: int
    t: float = field(compare=False, repr=False)
    gpu: str = field(compare=False, repr=False)

    def __init__(self, reading: Reading, line: int = 0):
        self.reading = reading
        self.line = line
        self.t = reading.samples[0].t
        self.gpu = reading.gpu

    @property
    def sample(self) -> Sample:
        return self.reading.samples[0]

    def moved(self, dt: float) -> "Record":
        """The same record dt seconds later (a clock step, a replay loop)."""
        sample = self.sample.moved(dt)
        return Record(dataclasses.replace(self.reading, samples=[sample]), self.line)


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


class Problems:
    """Collects per-line problems for one file; format readers add to it."""

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


@dataclass
class RunFacts:
    """What a format reader learns about the run as it reads, for the LogStream that owns
    it (readers know this, not the stream: no reader imports stream.py)."""
    found: dict[str, DeviceInfo] = field(default_factory=dict)   # the GPUs, by entity key
    timed: bool = True                 # False when the log has no clock and times are inferred
    has_sm_active: bool = False
    # whether the power read is an average (nvidia-smi's power.draw.average) or an
    # instant (power.draw.instant); None: the data decide (Engine.power_averaged)
    power_averaged: bool | None = None
    nodes_found: list[str] = field(default_factory=list)        # hostnames the log names, first first
    # asked of the reader, not learnt: only the samples (utilisation, power, memory
    # used) and the power limit are wanted (a job's clock-alignment scan reads each log's
    # first half hour for its all-GPU stall edges). A reader may then skip every other
    # column; one that cannot reads them all.
    samples_only: bool = False
    # asked too: how many logs are read at once (a job's, merged in time order). A
    # reader that reads rows ahead in batches holds 1/together of one log's batch (down
    # to smi_fast.SHARE_MIN rows), so a job's memory does not grow with its logs.
    together: int = 1


class Rows:
    """Consecutive records of one log, as columns: what a format reader that reads a
    batch of rows at once (smi_fast) hands on, so that the stream and the replay move
    a run of plain rows as one object, not one Record per row. Every row is a GPU
    that could be read (up, no error), attributed to `attribution` (a job's workload:
    recorded.job) or to nothing; `records()` makes the Records the row-by-row reader
    would have made of them. `counters` None: every row's are empty; `uniform`: every
    row's gauges have the same fields in the same order."""

    __slots__ = ("t", "gpu", "line", "samples", "gauges", "counters", "uniform", "attribution", "_fields")

    def __init__(self, t: list[float], gpu: list[str], line: list[int], samples: list[Sample],
                 gauges: list[dict[str, Any]], counters: list[dict[str, Any]] | None = None,
                 uniform: bool = False, attribution: dict[str, str] | None = None):
        self.t = t
        self.gpu = gpu
        self.line = line
        self.samples = samples
        self.gauges = gauges
        self.counters = counters
        self.uniform = uniform
        self.attribution = attribution
        self._fields: tuple[str, ...] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled for another process (recorded.ahead): the samples as columns, a tuple
        # per field, not a Sample each (a named tuple pickles and unpickles through a
        # Python call per row, most of what sending a log's rows cost)
        return (_rows, (self.t, self.gpu, self.line, tuple(zip(*self.samples)), self.gauges, self.counters,
                        self.uniform, self.attribution))

    def fields(self) -> tuple[str, ...] | None:
        """The gauge fields every row has, in their order, where the rows are uniform
        and there are any; None otherwise."""
        if self._fields is None and self.uniform and self.t:
            self._fields = tuple(self.gauges[0])
        return self._fields

    def __len__(self) -> int:
        return len(self.t)

    def cut(self, i: int, j: int | None = None) -> "Rows":
        """Rows i..j (j None: to the end)."""
        c = self.counters
        return Rows(self.t[i:j], self.gpu[i:j], self.line[i:j], self.samples[i:j], self.gauges[i:j],
                    None if c is None else c[i:j], self.uniform, self.attribution)

    def records(self, i: int = 0, j: int | None = None) -> Iterator[Record]:
        """Rows i..j as the Records a row-by-row reader makes."""
        c, a = self.counters, self.attribution
        for k in range(i, len(self.t) if j is None else j):
            yield Record(Reading(self.gpu[k], [self.samples[k]], self.gauges[k], {} if c is None else c[k], True,
                                 None, dict(a) if a else None), self.line[k])


def _rows(t: list[float], gpu: list[str], line: list[int], samples: tuple[tuple[Any, ...], ...],
          gauges: list[dict[str, Any]], counters: list[dict[str, Any]] | None, uniform: bool,
          attribution: dict[str, str] | None) -> Rows:
    """Rows.__reduce__'s: each row's Sample made again from the columns, in C
    (tuple.__new__ is what a named tuple's own constructor calls)."""
    return Rows(t, gpu, line, list(map(tuple.__new__, itertools.repeat(Sample, len(t)), zip(*samples))), gauges,
                counters, uniform, attribution)
