"""One multi-node job from its per-node logs: one log per node, read as one run.

    alignment = job_logs(["n1.csv", "n2.csv"], names=[])  # node names: given, the log's, the stem;
                                                          # each node's clock offset
    stream = JobStream(alignment.logs, workload="job")    # a LogStream to ReplaySource

Each node's log is read by its own LogStream (any format it reads) and the records
are merged in time order as they are consumed (the order `heapq.merge` gives them:
one item held per log), so memory is that of one LogStream per log, whatever the
files' size. The merged rows go on gathered into Rows, columns as a single log's rows
go, rows of several logs in one where the nodes' polls interleave row by row: a job's
rows are not a Record each. Every
GPU is keyed `node:gpu` and carries one workload label, so the engine judges the
job's GPUs as one peer group across nodes, as it does for the Prometheus report's
workloads.

Clocks of different hosts differ by up to seconds. A sync stall starts (and ends) on
every node at once, so each node's clock offset is estimated from the edges of its
all-GPUs-not-working stretches against the reference node's (the first in natural
order that has any): the differences between each of its edges and the reference's
edges within ALIGN_LAG_S are the cross-correlation of the two edge trains; the
densest MATCH_S-wide bunch of them is the lag, and the median of that bunch the
offset, finer than the poll interval because the polls of different hosts fall at
different phases. The estimate is used only when enough edges agree and no other lag
is nearly as good (a stall rhythm shorter than the lag range makes it ambiguous);
otherwise the node's clock is taken as recorded, and the notes say so. The edges are
read from the first ALIGN_SCAN_S of each log (all of it when that aligns not every
node), before the analysis reads the logs again.

A job's logs are read on one clock, so they must have one and share a stretch of it:
a log without timestamps among timed ones, and a log that begins after every log that
began before it had ended (_overlap, from the alignment's scan; for logs longer than
the scan, JobStream._one_run as they are merged), are refused before anything is read,
and the merged records may leave no stretch that no node recorded longer than a single
log may (stream.kept_as_gap: GAP_FREE_S, or the time recorded so far). Beyond
that the logs are of different runs (a day apart, or one of them stamped in 1970),
which judged as one job would compare GPUs that never ran together, and would make
the analysis tick through the whole stretch between them.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import glob
import heapq
import itertools
import math
import os
import stat
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ...analysis.activity import activity_of, spin_gate_watts
from ...analysis.thresholds import value
from ...fdlimit import raise_open_files
from ...model import DeviceInfo, gpu_sort_key, natural_key
from ..replay import ReplaySource, file_size
from . import ahead
from .records import LogError, LogFormatError, Record, Rows, RunFacts
from .stream import REORDER_S, LogStream, kept_as_gap, span_words

# Clock offsets are looked for within this many seconds either way.
ALIGN_LAG_S = 10.0
# A node's edge matches a reference edge within this much of the lag.
MATCH_S = 0.25
# A node's all-idle or all-working state counts once it held this long (a poll's
# rows flicker; a sync stall worth aligning on lasts longer).
EDGE_HOLD_S = 0.5
# Enough agreeing edges for an offset: at least this many, and this share of the
# fewer edges of the two nodes; the next-best lag at most half as well supported.
MIN_EDGES = 3
MIN_SHARE = 0.5
# Edges of each kind read per log for the alignment; the scan stops there, so it
# costs a bounded part of a long log.
ALIGN_EDGES = 400
# Rows gathered across a job's logs into one Rows at most (JobStream._merged): the
# replay takes up to its CHUNK rows a poll, and a few thousand rows' objects are little
GATHER_ROWS = 4096
# Files the report holds open beside one per log (the interpreter's, pyarrow's, the
# outputs): a job's logs are all open at once while they are merged.
FD_HEADROOM = 32
# A clock's offset holds for the whole run (clocks differ, they do not drift apart
# within it), so the alignment reads this much of each log first, and reads the logs
# whole only when some node cannot be aligned on that.
ALIGN_SCAN_S = 1800.0


def expand(inputs: list[str]) -> list[str]:
    """Paths and glob patterns, in the order given (a pattern's matches sorted).
    Raises LogFormatError naming a pattern that matches nothing, a missing file, a file
    given twice, or a pipe among several logs (a job's logs are read twice: their clocks
    are aligned on a first read)."""
    out: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    pipes: list[str] = []
    for item in inputs:
        if glob.has_magic(item) and not os.path.lexists(item):     # a file named run[1].csv is that file
            paths = sorted(glob.glob(item))
            if not paths:
                raise LogFormatError(f"{item}: no file matches")
        else:
            paths = [item]
        for p in paths:
            try:
                st = os.stat(p)
            except OSError as e:
                if p == "-":
                    raise LogFormatError("-: no such file (a log is read by its path; a stream as a pipe, "
                                         "--input <(command))") from None
                raise LogFormatError(f"{p}: {'no such file' if not os.path.lexists(p) else e.strerror}") from None
            ident = (st.st_dev, st.st_ino)
            if ident in seen:
                raise LogFormatError(f"{p}: given twice (also as {seen[ident]}); give each node's log once")
            seen[ident] = p
            if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                pipes.append(p)
            out.append(p)
    if pipes and len(out) > 1:
        raise LogFormatError(f"{pipes[0]}: a pipe among a job's logs, which are read twice (their clocks are "
                             "aligned on a first read): give each node's log as a file")
    return out


@dataclass(frozen=True)
class NodeLog:
    path: str
    node: str
    offset: float = 0.0     # seconds this node's clock reads ahead of the reference's
    aligned: bool = False   # the offset was measured (the reference: aligned to itself)


def node_logs(paths: list[str], names: list[str], hosts: dict[str, tuple[str, ...]]) -> list[NodeLog]:
    """Each log with its node: the name given for it (in order), else the one host the
    log names by its first record (`hosts`, by path: the alignment's scan reads them),
    else the file's stem. Raises LogFormatError on two logs of one name."""
    if names and len(names) != len(paths):
        raise LogFormatError(f"{len(names)} node name(s) for {len(paths)} logs: give one --node-name per log, "
                             "in the order of the logs, or none")
    logs: list[NodeLog] = []
    by_name: dict[str, str] = {}
    for i, path in enumerate(paths):
        one = hosts[path][0] if len(hosts[path]) == 1 else ""
        node = names[i] if names else (one or os.path.splitext(os.path.basename(path))[0])
        if node in by_name:
            raise LogFormatError(f"node {node!r} named twice ({by_name[node]} and {path}): give each log its "
                                 "node with --node-name, one per log")
        by_name[node] = path
        logs.append(NodeLog(path, node))
    return logs


@dataclass
class Alignment:
    logs: list[NodeLog]                    # with their offsets
    reference: str = ""                    # the node the others are aligned to ('' when none)
    edges: dict[str, int] = field(default_factory=dict)     # node -> edges it matched (reference: its own)
    notes: list[str] = field(default_factory=list)

    def applied(self) -> str:
        """The offsets taken off the nodes' clocks, in one line ('' when none was measured)."""
        parts = [f"{lg.node} {lg.offset:+.2f} s ({self.edges.get(lg.node, 0)} edges)"
                 for lg in self.logs if lg.node != self.reference and lg.aligned]
        if not parts:
            return ""
        return (f"clock offsets applied, against node {self.reference} from the all-GPU stall edges the nodes "
                f"share: {', '.join(parts)}")


def job_logs(paths: list[str], names: list[str], fmt: str = "auto", idle_threshold: float = value("idle_ratio"),
             power_gate: float = value("power_gate_ratio"), interval: float = 1.0) -> Alignment:
    """The logs named (node_logs) and aligned (align) in one read of each log's start:
    the hostnames that name the nodes come from the alignment's own scan (reading them
    apart read the start of every log once more, a batch of rows of each)."""
    scanned = _scans(list(dict.fromkeys(paths)), fmt, idle_threshold, power_gate, interval, ALIGN_SCAN_S)
    logs = node_logs(paths, names, {p: sc[4] for p, sc in scanned.items()})
    return _aligned(logs, {lg.node: scanned[lg.path][:4] for lg in logs}, fmt, idle_threshold, power_gate,
                    interval)


def align(logs: list[NodeLog], fmt: str = "auto", idle_threshold: float = value("idle_ratio"),
          power_gate: float = value("power_gate_ratio"), interval: float = 1.0) -> Alignment:
    """The logs with each node's clock offset against the reference node (see module doc)."""
    scans = _scans([lg.path for lg in logs], fmt, idle_threshold, power_gate, interval, ALIGN_SCAN_S)
    return _aligned(logs, {lg.node: scans[lg.path][:4] for lg in logs}, fmt, idle_threshold, power_gate, interval)


def _aligned(logs: list[NodeLog], scanned: dict[str, tuple[Any, ...]], fmt: str, idle_threshold: float,
             power_gate: float, interval: float) -> Alignment:
    """align, from each node's scan of its log's start (_edges)."""
    untimed = [lg.path for lg in logs if not scanned[lg.node][2]]
    if untimed and len(untimed) < len(logs):
        raise LogFormatError(f"{untimed[0]}: no timestamps, while the other logs have them: the logs of one job "
                             "are read on one clock, so each must record the time of its rows (nvidia-smi "
                             "--query-gpu=timestamp,...; nvidia-smi dmon -o DT)")
    if not untimed:
        _overlap(logs, {n: span for n, (_, _, _, span) in scanned.items()})
    out = _align(logs, {n: e for n, (e, _, _, _) in scanned.items()})
    if any(not lg.aligned for lg in out.logs) and any(cut for _, cut, _, _ in scanned.values()):
        scans = _scans([lg.path for lg in logs], fmt, idle_threshold, power_gate, interval, None)
        out = _align(logs, {lg.node: scans[lg.path][0] for lg in logs})
    return out


def _overlap(logs: list[NodeLog], spans: dict[str, tuple[float, float] | None]) -> None:
    """Raises LogFormatError where a log begins after every log that began before it
    has ended: the logs share no stretch of time, so they are not one run's (two runs
    of a job, or a restart logged to new files). Judged as one job, the later log's
    GPUs would read as lost for the earlier one's run, and its own run would be no
    one's work. A log read only in part by the scan (spans: its end unknown) is taken
    as recording to the end of time; a log a node's logger began late, or one of a
    replacement node while the others ran on, overlaps them and is kept."""
    known = sorted(((span, lg) for lg in logs if (span := spans.get(lg.node)) is not None),
                   key=lambda x: x[0][0])
    until, last = -math.inf, None
    for (first, end), lg in known:
        if last is not None and first - until > ALIGN_LAG_S:
            raise _another_run(lg.path, first - until, last.path)
        if end > until:
            until, last = end, lg


def _another_run(path: str, after: float, last: str) -> LogFormatError:
    return LogFormatError(
        f"{path}: its first row comes {span_words(after)} after every log of the job that began before it had "
        f"ended (the last, {last}): the logs record no common stretch of time; a job's logs are its nodes' logs "
        "of one run, recorded at the same time (report on other runs apart)")


def _align(logs: list[NodeLog], edges: dict[str, tuple[list[float], list[float]]]) -> Alignment:
    order = sorted(edges, key=natural_key)
    ref = next((n for n in order if edges[n][0] or edges[n][1]), "")
    out = Alignment(list(logs), ref)
    if not ref:
        out.notes.append("the logs hold no all-GPU stall edges to align the nodes' clocks on: clocks taken as "
                         "recorded (a node's timeline may be off by its clock's error)")
        return out
    out.edges[ref] = len(edges[ref][0]) + len(edges[ref][1])
    for i, lg in enumerate(logs):
        if lg.node == ref:
            out.logs[i] = dataclasses.replace(lg, aligned=True)
            continue
        offset, matched, why = _offset(edges[lg.node], edges[ref])
        out.edges[lg.node] = matched
        if offset is None:
            out.notes.append(f"node {lg.node}: {why} with node {ref}: its clock taken as recorded")
        else:
            out.logs[i] = dataclasses.replace(lg, offset=offset, aligned=True)
    return out


def job_name(nodes: list[str]) -> str:
    """The workload label of a job's GPUs: what its node names share, up to a
    separator ('train-n0', 'train-n1' -> 'train'; 'node1', 'node2' -> 'node'), else 'job'."""
    common = os.path.commonprefix(nodes)
    cut = max(common.rfind(c) for c in "-_.")
    return (common[:cut] if cut > 0 else common).rstrip("-_.0123456789") or "job"


def _edges(path: str, fmt: str, idle: float, gate: float, interval: float, scan: float | None
           ) -> tuple[tuple[list[float], list[float]], bool, bool, tuple[float, float] | None, tuple[str, ...]]:
    """((starts, ends), cut short, timed: the log has a clock, (first, last) time of
    the log, last infinite when the scan stopped before its end; None when it has no
    readable row; the hosts the log names by its first record) of the stretches in
    which none of the log's GPUs works, each held EDGE_HOLD_S on both sides; at most
    ALIGN_EDGES of each, within `scan` recorded seconds of the log's start (None: all
    of it). Work is the engine's activity (power-gated utilisation, or SM activity): a
    rank spin-waiting in a collective is busy but not working, as in a checkpoint stall."""
    # samples and the power limit are all the scan reads: the reader may skip the rest
    # (clock-event states and counters, ECC, link columns), a third of a wide log's time
    stream = LogStream(path, fmt, interval, samples_only=True)
    working: dict[str, bool] = {}
    top: dict[str, float] = {}      # highest power seen per GPU
    floor: dict[str, float] = {}    # lowest power at idle utilisation
    limit: dict[str, float] = {}
    starts: list[float] = []
    ends: list[float] = []
    state: bool | None = None       # True: all idle
    cand: float | None = None
    first: float | None = None
    last = -math.inf
    cut = whole = False
    items = stream.items()
    try:
        head = next(items, None)
        # the hosts that name the node (node_logs): what the first record named
        hosts = stream.nodes
        for t, g, s, gauges in _readings(itertools.chain(() if head is None else (head,), items)):
            if first is None:
                first = t
            elif scan is not None and t - first > scan:
                cut = True
                break
            last = t
            if s.power_w is not None:
                top[g] = max(top.get(g, 0.0), s.power_w)
                if s.util is not None and s.util < idle:
                    floor[g] = min(floor.get(g, s.power_w), s.power_w)
            if gauges and gauges.get("power_limit_watts"):
                limit[g] = gauges["power_limit_watts"]
            a = activity_of(s, "auto", spin_gate_watts(gate, limit.get(g), top.get(g), floor.get(g)))
            if a is None:
                continue
            working[g] = a >= idle
            now = not any(working.values())
            if state is None:
                state = now
            elif now == state:
                cand = None
            elif cand is None:
                cand = t
            elif t - cand >= EDGE_HOLD_S:
                (starts if now else ends).append(cand)
                state, cand = now, None
                if len(starts) >= ALIGN_EDGES and len(ends) >= ALIGN_EDGES:
                    break
        else:
            whole = True                     # read to its end: its last time is known
    finally:
        stream.close()
    return ((starts, ends), cut, stream.facts.timed, None if first is None else (first, last if whole else math.inf),
            hosts)


def _scans(paths: list[str], fmt: str, idle: float, gate: float, interval: float, scan: float | None
           ) -> dict[str, tuple[Any, ...]]:
    """_edges of each log, by path. Where the logs are long (recorded.ahead.worth), the
    later half of them (by size) is scanned in a process of its own while this one
    scans the first half: the same scans, and the same error (the first log's that
    fails, in order) as one after the other."""
    sizes = [file_size(p) for p in paths]
    if len(paths) < 2 or not ahead.worth(sum(sizes)):
        return {p: _edges(p, fmt, idle, gate, interval, scan) for p in paths}
    half, total = 1, sizes[0]
    while half < len(paths) - 1 and 2 * (total + sizes[half]) <= sum(sizes):
        total += sizes[half]
        half += 1
    try:
        aside: ahead.Call | None = ahead.Call(_scan_all, paths[half:], fmt, idle, gate, interval, scan)
    except ahead.NoProcess:
        aside = None
    try:
        near = {p: _edges(p, fmt, idle, gate, interval, scan) for p in paths[:half]}
    except BaseException:
        if aside is not None:
            aside.close()
        raise
    if aside is not None:
        try:
            return {**near, **dict(zip(paths[half:], aside.result()))}
        except ahead.NoProcess:
            pass                         # it ended without an answer: scanned here
    return {**near, **{p: _edges(p, fmt, idle, gate, interval, scan) for p in paths[half:]}}


def _scan_all(paths: list[str], fmt: str, idle: float, gate: float, interval: float, scan: float | None
              ) -> list[tuple[Any, ...]]:
    """_edges of each log, in order (the half _scans hands to a process of its own)."""
    return [_edges(p, fmt, idle, gate, interval, scan) for p in paths]


def _readings(items: Iterable[Record | Rows]) -> Iterator[tuple[float, str, Any, dict[str, Any] | None]]:
    """(t, gpu, sample, gauges) of every readable record of a stream's items, in their
    order; a run of Rows read as columns, without a Record per row."""
    for item in items:
        if type(item) is Rows:
            yield from zip(item.t, item.gpu, item.samples, item.gauges)
            continue
        r = item.reading
        if r.error is None:
            yield item.t, r.gpu, r.samples[0], r.gauges


def _offset(mine: tuple[list[float], list[float]], ref: tuple[list[float], list[float]]
            ) -> tuple[float | None, int, str]:
    """(offset, edges matched, why none): the lag of `mine` behind `ref` (see module doc)."""
    diffs: list[float] = []
    for own, theirs in zip(mine, ref):
        for e in own:
            lo, hi = bisect.bisect_left(theirs, e - ALIGN_LAG_S), bisect.bisect_right(theirs, e + ALIGN_LAG_S)
            diffs.extend(e - r for r in theirs[lo:hi])
    if not diffs:
        return None, 0, "no all-GPU stall edges in common"
    diffs.sort()
    best, second = _densest(diffs)
    centre = statistics.median(diffs[best[1]:best[2]])
    # once more around the median: the bunch centred on the estimate
    lo, hi = bisect.bisect_left(diffs, centre - MATCH_S), bisect.bisect_right(diffs, centre + MATCH_S)
    offset = statistics.median(diffs[lo:hi])
    matched = sum(1 for own, theirs in zip(mine, ref) for e in own if _near(theirs, e - offset))
    fewer = min(len(mine[0]) + len(mine[1]), len(ref[0]) + len(ref[1]))
    if matched < MIN_EDGES or matched < MIN_SHARE * fewer:
        return None, matched, f"too few all-GPU stall edges in common ({matched} of {fewer})"
    if second * 2 > best[0]:
        return None, matched, (f"the all-GPU stall edges fit lags {offset:+.2f} s and {_second_lag(diffs, best):+.2f} s "
                               "about as well (a stall rhythm shorter than the lag range)")
    return offset, matched, ""


def _densest(diffs: list[float]) -> tuple[tuple[int, int, int], int]:
    """((count, first, end) of the densest 2*MATCH_S window of sorted diffs, the count
    of the densest window centred at least 4*MATCH_S away from it)."""
    wins = _windows(diffs)
    best = max(wins)
    mid = (diffs[best[1]] + diffs[best[2] - 1]) / 2
    second = max((c for c, a, b in wins if abs((diffs[a] + diffs[b - 1]) / 2 - mid) >= 4 * MATCH_S), default=0)
    return best, second


def _windows(diffs: list[float]) -> list[tuple[int, int, int]]:
    out, j = [], 0
    for i in range(len(diffs)):
        if j < i:
            j = i
        while j < len(diffs) and diffs[j] - diffs[i] <= 2 * MATCH_S:
            j += 1
        out.append((j - i, i, j))
    return out


def _second_lag(diffs: list[float], best: tuple[int, int, int]) -> float:
    """The centre of the best window away from `best` (for the message)."""
    mid = (diffs[best[1]] + diffs[best[2] - 1]) / 2
    far = [w for w in _windows(diffs) if abs((diffs[w[1]] + diffs[w[2] - 1]) / 2 - mid) >= 4 * MATCH_S]
    c, a, b = max(far)
    return (diffs[a] + diffs[b - 1]) / 2


def _near(sorted_times: list[float], t: float) -> bool:
    k = bisect.bisect_left(sorted_times, t - MATCH_S)
    return k < len(sorted_times) and sorted_times[k] <= t + MATCH_S


class _Problems:
    """The problems of every log, as one Problems (ReplaySource counts and logs them)."""

    def __init__(self, streams: list[LogStream]):
        self._streams = streams

    @property
    def items(self) -> list[LogError]:
        return [e for s in self._streams for e in s.err.items]

    @property
    def count(self) -> int:
        return sum(s.err.count for s in self._streams)


class JobStream:
    """The logs of one job as one LogStream (what ReplaySource reads): records of every
    node in time order, each node's moved by its offset, keyed `node:gpu`, with the
    job's workload."""

    def __init__(self, logs: list[NodeLog], fmt: str = "auto", interval: float = 1.0, workload: str = "",
                 keyed: bool = True):
        self.logs = logs
        self.workload = workload
        self.keyed = keyed          # False: GPUs keep the log's own keys (one node's log, as its exporter)
        self.streams: list[LogStream] = []
        need = len(logs) + FD_HEADROOM
        soft = raise_open_files(need)
        if soft is not None and soft < need:
            raise LogFormatError(f"{len(logs)} logs are read at once, a file open for each, and this process may "
                                 f"open {soft} files (the hard limit of ulimit -n): raise it, or report on fewer "
                                 "nodes at a time")
        try:
            for lg in logs:
                self.streams.append(LogStream(lg.path, fmt, interval, together=len(logs)))
        except LogFormatError:
            self.close()
            raise
        self.path = ", ".join(lg.path for lg in logs)
        self.format = "/".join(sorted({s.format for s in self.streams}))
        self.err = _Problems(self.streams)
        self.start: float | None = None
        self.end: float | None = None
        self.done = False
        self._facts: tuple[Any, Any] = (None, None)        # (what it was made of, the RunFacts)
        self._devices: tuple[Any, list[DeviceInfo]] = (None, [])

    # -- what has been learnt so far (LogStream's interface)

    @property
    def facts(self) -> RunFacts:
        """What the logs' readers have learnt so far, as one run's (LogStream.facts);
        made again only when that changed (the replay asks at every poll)."""
        kinds = {s.facts.power_averaged for s in self.streams}
        key = (self._found_key(), all(s.facts.timed for s in self.streams),
               any(s.facts.has_sm_active for s in self.streams), kinds.pop() if len(kinds) == 1 else None)
        if key != self._facts[0]:
            self._facts = (key, RunFacts(found={d.gpu: d for d in self.devices}, timed=key[1], has_sm_active=key[2],
                                         power_averaged=key[3], nodes_found=list(self.nodes)))
        return self._facts[1]

    def _found_key(self) -> tuple[int, ...]:
        # a reader's GPUs are only added to (a GPU past the cap is taken back as it is
        # found): how many each log has found says whether anything changed
        return tuple(len(s.facts.found) for s in self.streams)

    @property
    def devices(self) -> list[DeviceInfo]:
        key = self._found_key()
        if key != self._devices[0]:
            out = [dataclasses.replace(d, gpu=f"{lg.node}:{d.gpu}") if self.keyed else d
                   for lg, s in zip(self.logs, self.streams) for d in s.facts.found.values()]
            self._devices = (key, sorted(out, key=lambda d: gpu_sort_key(d.gpu)))
        return list(self._devices[1])

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(lg.node for lg in self.logs)

    @property
    def lines_read(self) -> int:
        return sum(s.lines_read for s in self.streams)

    @property
    def errors(self) -> list[LogError]:
        return [e for s in self.streams for e in s.errors]

    @property
    def error_count(self) -> int:
        return self.err.count

    @property
    def size(self) -> int:
        return sum(s.size for s in self.streams)

    @property
    def chars_read(self) -> int:
        return sum(s.chars_read for s in self.streams)

    @property
    def fraction(self) -> float:
        if self.done:
            return 1.0
        size = self.size
        return sum(s.fraction * s.size for s in self.streams) / size if size else 0.0

    def warnings(self) -> list[str]:
        return [w for s in self.streams for w in s.warnings()]

    def close(self) -> None:
        for s in self.streams:
            s.close()

    # -- reading

    def records(self) -> Iterator[Record | Rows]:
        """The logs' records merged in time order (_merged), each checked for a stretch
        no node recorded before it."""
        gaps = 0.0          # seconds no node recorded, in the stretches kept as gaps
        start = end = 0.0
        last: tuple[Any, int] | None = None     # the last row handed on: (its Record or Rows, its row)
        try:
            for item in self._merged():
                if type(item) is not Rows:
                    t = item.t
                    if last is None:
                        self.start = start = t
                    elif t - end > REORDER_S:
                        gaps = self._after_gap(last, item, t - end, gaps, start, end)
                    self.end = end = t
                    last = (item, 0)
                    yield item
                    continue
                ts, i, n = item.t, 0, len(item)
                if last is None:
                    self.start = start = end = ts[0]
                while i < n:
                    # the rows up to the next one after a stretch no node recorded go on as one
                    k, prev = i, end
                    while k < n and ts[k] - prev <= REORDER_S:
                        prev = ts[k]
                        k += 1
                    if k > i:
                        self.end = end = ts[k - 1]
                        last = (item, k - 1)
                        yield item if i == 0 and k == n else item.cut(i, k)
                    if k < n:
                        gaps = self._after_gap(last, next(item.records(k, k + 1)), ts[k] - end, gaps, start, end)
                        self.end = end = ts[k]
                        last = (item, k)
                        yield item.cut(k, k + 1)
                        k += 1
                    i = k
            self.done = True
        finally:
            self.close()

    def _after_gap(self, last: tuple[Any, int], rec: Record, jump: float, gaps: float, start: float,
                   end: float) -> float:
        """`rec` comes `jump` seconds after the last row handed on (`last`): the seconds
        kept as gaps with it, or the error of logs that share no stretch of time."""
        self._one_run(rec)
        if not kept_as_gap(jump, gaps, start, end):
            item, k = last
            raise self._apart(item if type(item) is not Rows else next(item.records(k, k + 1)), rec, jump)
        return gaps + jump

    def _merged(self) -> Iterator[Record | Rows]:
        """The logs' items (_node) in the order heapq.merge gives their rows by time
        (ties: the earlier log's first), the rows gathered into Rows (_Gather) across
        logs: a job's rows reach the replay as columns, as a single log's do, not as a
        Record each, even where the nodes' polls interleave row by row."""
        its = [self._node(lg, s) for lg, s in zip(self.logs, self.streams)]
        held: list[Any] = [None] * len(its)     # per log: its item in hand
        at = [0] * len(its)                     # its first row not handed on
        heap: list[tuple[float, int]] = []      # (time of that row, log), one per log with an item in hand
        gather = _Gather()

        def take(i: int) -> None:
            item = held[i] = next(its[i], None)
            at[i] = 0
            if item is not None:
                heapq.heappush(heap, (item.t[0] if type(item) is Rows else item.t, i))

        try:
            for i in range(len(its)):
                take(i)
            while heap:
                _, i = heapq.heappop(heap)
                item = held[i]
                if type(item) is not Rows:
                    if gather:
                        yield gather.rows()
                    yield item
                    take(i)
                    continue
                ts, p, n = item.t, at[i], len(item)
                if heap:
                    # a stream's Rows are in time order (LogStream._in_order): its rows go on
                    # while they come before the next log's row, ties to the earlier log
                    t, j = heap[0]
                    k = (bisect.bisect_right if i < j else bisect.bisect_left)(ts, t, p + 1)
                else:
                    k = n
                if not gather and p == 0 and k == n:
                    yield item               # a whole Rows (a log read alone, an export's): as it is
                else:
                    gather.add(item, p, k)
                    if len(gather) >= GATHER_ROWS:
                        yield gather.rows()
                if k == n:
                    take(i)
                else:
                    at[i] = k
                    heapq.heappush(heap, (ts[k], i))
        except Exception:
            # a log that fails further on (a line too long, a run apart): the rows merged
            # before its failure go on first, as they would one by one
            if gather:
                yield gather.rows()
            raise
        if gather:
            yield gather.rows()

    def _log_of(self, rec: Record) -> NodeLog | None:
        gpu = rec.reading.gpu
        return max((lg for lg in self.logs if not self.keyed or gpu.startswith(lg.node + ":")),
                   key=lambda lg: len(lg.node), default=None)

    def _one_run(self, rec: Record) -> None:
        """After a stretch no node recorded: raises LogFormatError where `rec` is the
        first of its log and every log that began before it has ended (_overlap's rule,
        for the logs the alignment's scan did not read to their end)."""
        me = self._log_of(rec)
        if me is None or not self.keyed:
            return
        began = {lg.path: (lg, s) for lg, s in zip(self.logs, self.streams) if s.start is not None}
        if me.path not in began or began[me.path][1].start - me.offset < rec.t - 1e-6:
            return                  # it began before: the whole job paused
        before = [(lg, s) for lg, s in began.values() if lg is not me and s.start - lg.offset < rec.t]
        if before and all(s.done for _, s in before):
            lg, s = max(before, key=lambda x: x[1].end - x[0].offset)
            if rec.t - (s.end - lg.offset) > ALIGN_LAG_S:
                raise _another_run(me.path, rec.t - (s.end - lg.offset), lg.path)

    def _apart(self, before: Record, after: Record, jump: float) -> LogFormatError:
        """The error of logs that leave a stretch no node recorded, longer than a
        single log may keep as a gap (module doc)."""
        def where(rec: Record) -> str:
            lg = self._log_of(rec)
            return f"{lg.path if lg is not None else '?'}:{rec.line}"
        return LogFormatError(f"the logs record no common stretch of time: nothing is recorded for "
                              f"{span_words(jump)} between {where(before)} and {where(after)}; a job's logs are "
                              "its nodes' logs of one run, recorded at the same time (report on other runs apart)")

    def items(self) -> Iterator[Record | Rows]:
        """LogStream.items(): the logs' records merged in time order, runs of one log's
        rows as Rows."""
        return self.records()

    def _node(self, lg: NodeLog, stream: LogStream) -> Iterator[Record | Rows]:
        """A node's items, each row keyed by its node and moved by its clock's offset."""
        prefix = lg.node + ":" if self.keyed else ""
        attribution = {"workload": self.workload} if self.workload else None
        shift = -lg.offset
        for item in stream.items():
            if type(item) is Rows:
                samples = [s.moved(shift) for s in item.samples] if shift else item.samples
                yield Rows([s.t for s in samples] if shift else item.t,
                           [prefix + g for g in item.gpu] if prefix else item.gpu, item.line, samples, item.gauges,
                           item.counters, item.uniform, attribution)
                # whoever takes a Rows says how far it got (LogStream.fraction): here,
                # once its rows are merged in, so a job's progress moves as it is read
                stream.consumed_through(item.line[-1])
                continue
            rec = item.moved(-lg.offset) if lg.offset else item
            r = rec.reading
            yield Record(dataclasses.replace(
                r, gpu=prefix + r.gpu,
                attribution={**(r.attribution or {}), **attribution} if attribution else r.attribution), rec.line)

    def consumed_through(self, line: int) -> None:
        """LogStream's: a job's logs count what is merged in (_node), not what the
        replay takes."""


class _Gather:
    """The rows of several logs' Rows, in the order they are added, as one Rows.

    Every Rows of a job carries the job's attribution (_node): the first one's is the
    gathered rows'. Rows without counters among rows with get an empty dict each, what
    the replay reads of them either way; the Rows is `uniform` where every row's gauges
    have the same fields in one order (otherwise the replay takes its rows one by one,
    as it does any Rows'). A row of one log between two of another's (the nodes' polls
    interleave) costs the replay a few appends here instead of a Record of its own."""

    __slots__ = ("t", "gpu", "line", "samples", "gauges", "counters", "uniform", "attribution", "fields", "n")

    def __init__(self) -> None:
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, item: Rows, p: int, k: int) -> None:
        """Rows p..k of `item`."""
        if not self.n:
            self.t, self.gpu, self.line, self.samples, self.gauges = [], [], [], [], []
            self.counters = None if item.counters is None else []
            self.attribution = item.attribution
            self.uniform = item.uniform
            self.fields = item.fields()
        if self.uniform and item.fields() != self.fields:
            self.uniform = False
        # rows without counters among rows with: each an empty dict, which is what the
        # replay reads of a Rows without (Rows.records)
        counters = self.counters
        if counters is None and item.counters is not None:
            counters = self.counters = [{} for _ in range(self.n)]
        if k == p + 1:
            self.t.append(item.t[p])
            self.gpu.append(item.gpu[p])
            self.line.append(item.line[p])
            self.samples.append(item.samples[p])
            self.gauges.append(item.gauges[p])
            if counters is not None:
                counters.append({} if item.counters is None else item.counters[p])
        else:
            self.t += item.t[p:k]
            self.gpu += item.gpu[p:k]
            self.line += item.line[p:k]
            self.samples += item.samples[p:k]
            self.gauges += item.gauges[p:k]
            if counters is not None:
                counters += [{} for _ in range(k - p)] if item.counters is None else item.counters[p:k]
        self.n += k - p

    def rows(self) -> Rows:
        """The rows gathered, as one Rows; none are left."""
        self.n = 0
        return Rows(self.t, self.gpu, self.line, self.samples, self.gauges, self.counters, self.uniform,
                    self.attribution)


class JobReplay(ReplaySource):
    """A ReplaySource over the job's logs as one run (cfg.replay.file is not read)."""

    def __init__(self, cfg: Any, logs: list[NodeLog], workload: str, keyed: bool = True):
        super().__init__(cfg)
        self.logs, self.workload, self.keyed = logs, workload, keyed

    def _open_stream(self) -> Any:
        return self._stream_of(functools.partial(JobStream, self.logs, self.fmt, self.untimed_interval, self.workload,
                                                 self.keyed), [lg.path for lg in self.logs])


__all__ = ["ALIGN_LAG_S", "Alignment", "JobStream", "NodeLog", "align", "expand", "job_logs", "job_name", "JobReplay",
           "node_logs"]
