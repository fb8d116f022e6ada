"""Traces with the timing and levels of real recordings, for detection tests.

Levels and timing come from ../shared/data at run time, never from constants here:

- from traces/h100-8gpu/ckpt1000.csv: the median power of an H100 computing
  (utilisation ≥ 90 %, high power), spin-waiting (utilisation ≥ 90 %, low power) and
  idle (utilisation < 10 %); the memory a worker holds and an idle GPU shows; the
  poll interval and how far behind the poll's first row each later row is written
  in the polls that spread their rows (row skew: the upper decile of those, applied
  to every poll, the bad case for co-idle stretches);
- from traces/alibaba-minibatch: per-worker mini-batch times per iteration.

A scenario is a function state(gpu, t) -> "compute" | "spin" | "idle" | "free"
("idle": memory held, nothing running; "free": memory released). It is evaluated on
a 10 ms grid; each nvidia-smi row then reports, like the driver does, utilisation as
the share of the time since the previous row with a kernel running (computing or
spinning), `power.draw` as the mean of the last second (the 1 s average recent
drivers report) or `power.draw.instant`, and memory. Rows of one poll are written
milliseconds apart, polls jitter around the interval, and noise is added; all from
one seeded random generator, so a trace is the same on every run.
"""
from __future__ import annotations

import bisect
import calendar
import csv
import functools
import itertools
import math
import random
import time
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conftest import require_data

GRID = 0.01          # the scenario is evaluated every 10 ms
START = float(calendar.timegm((2026, 1, 1, 0, 0, 0)))   # logs carry a real clock


@dataclass(frozen=True)
class Levels:
    compute_w: float
    spin_w: float
    idle_w: float          # memory held, nothing running
    free_w: float          # memory released
    held_mib: float
    free_mib: float
    poll_s: float
    row_skew_s: float      # delay of each further row of one poll, in the polls where rows are skewed


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


@functools.lru_cache(maxsize=None)
def real_levels(name: str = "ckpt1000", gpus: int = 8) -> Levels:
    path = require_data(f"traces/h100-8gpu/{name}.csv")
    compute, spin, idle, idle_free, held, free, polls, skews = [], [], [], [], [], [], [], []
    rows = []
    for line in Path(path).read_text().splitlines()[1:]:
        c = _cells(line)
        if len(c) != 4:
            continue
        try:
            hh, mm, ss = c[0].split(" ")[1].split(":")
            t = int(hh) * 3600 + int(mm) * 60 + float(ss)
            rows.append((t, float(c[1].split()[0]), float(c[2].split()[0]), float(c[3].split()[0])))
        except (ValueError, IndexError):
            continue
    for k in range(0, len(rows) - gpus, gpus):
        poll = rows[k:k + gpus]
        polls.append(rows[k + gpus][0] - poll[0][0])
        skews.append((poll[-1][0] - poll[0][0]) / (gpus - 1))
        for t, w, u, m in poll[1:]:      # GPU 0 holds extra memory at idle: use the others
            if u >= 90:
                (compute if w > 300 else spin).append(w)
                held.append(m)
            elif u < 10:
                if m < 100:
                    free.append(m)
                    idle_free.append(w)
                else:
                    idle.append(w)
    skewed = [x for x in skews if x > 0]
    return Levels(statistics.median(compute), statistics.median(spin), statistics.median(idle),
                  statistics.median(idle_free), statistics.median(held), statistics.median(free), statistics.median(polls),
                  statistics.quantiles(skewed, n=10)[-1])


State = Callable[[int, float], str]


def write_smi_log(path: Path, gpus: int, seconds: float, state: State, seed: int = 1,
                  instant: bool = False, util_scale: Callable[[int, float], float] | None = None,
                  lv: Levels | None = None) -> Path:
    """An nvidia-smi --query-gpu log of `seconds` for `gpus` GPUs (see module doc).

    util_scale(gpu, t) scales the utilisation a computing GPU reports (1 = 100 %):
    steps that leave the GPU partly idle within each sample."""
    lv = lv or real_levels()
    rnd = random.Random(seed)
    n = int(seconds / GRID) + 1
    grid = [i * GRID for i in range(n)]
    # what a state reads as: busy (a kernel running), watts, memory held; the grid's
    # running sums are taken in grid order, as the driver's counters would add up
    busy_of = {"compute": 1.0, "spin": 1.0}
    watts_of = {"compute": lv.compute_w, "spin": lv.spin_w, "free": lv.free_w}
    per_gpu = []
    for g in range(gpus):
        states = [state(g, t) for t in grid]
        busy = [busy_of.get(s, 0.0) for s in states]
        if util_scale is not None:
            busy = [util_scale(g, t) if s == "compute" else b for s, b, t in zip(states, busy, grid)]
        power = [watts_of.get(s, lv.idle_w) for s in states]
        held = [s != "free" for s in states]
        per_gpu.append((list(itertools.accumulate(busy, initial=0.0)),
                        list(itertools.accumulate(power, initial=0.0)), held))
    power_col = "power.draw.instant" if instant else "power.draw"
    lines = [f"timestamp, {power_col} [W], utilization.gpu [%], memory.used [MiB]"]
    prev = [0.0] * gpus
    avg_rows = int(1.0 / GRID)
    stamps: dict[int, str] = {}
    t = lv.poll_s
    while t < seconds - 1.0:
        row_t = t
        for g in range(gpus):
            row_t += lv.row_skew_s * rnd.uniform(0.5, 1.5) if g else 0.0
            i, j = int(prev[g] / GRID), max(int(row_t / GRID), int(prev[g] / GRID) + 1)
            j = min(j, n - 1)
            pb, pp, held = per_gpu[g]
            util = 100.0 * (pb[j] - pb[i]) / max(1, j - i)
            util = min(100.0, max(0.0, round(util + rnd.gauss(0, 1.0)))) if util > 2 else 0.0
            if instant:
                w = (pp[j + 1] - pp[j])
            else:
                k = max(0, j + 1 - avg_rows)
                w = (pp[j + 1] - pp[k]) / (j + 1 - k)
            w = max(1.0, w + rnd.gauss(0, 3.0))
            mib = lv.held_mib if held[j] else lv.free_mib
            lines.append(f"{_stamp(START + row_t, stamps)}, {w:.2f} W, {util:.0f} %, {mib:.0f} MiB")
            prev[g] = row_t
        t += lv.poll_s + rnd.gauss(0, 0.002)
    path.write_text("\n".join(lines) + "\n")
    return path


def _stamp(t: float, seconds: dict[int, str] | None = None) -> str:
    """nvidia-smi's timestamp of t (UTC), to the millisecond; `seconds` caches the
    date and time of day per whole second (a log has one for every poll's rows)."""
    ms = int(round((t % 1) * 1000))
    if ms == 1000:
        t, ms = t + 0.001, 0
    whole = math.floor(t)
    head = seconds.get(whole) if seconds is not None else None
    if head is None:
        head = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(whole))
        if seconds is not None:
            seconds[whole] = head
    return head + f".{ms:03d}"


def stall_schedule(period: float, length: float, first: float, last: float, seed: int = 2,
                   jitter: float = 0.05) -> list[tuple[float, float]]:
    """[start, end) of stalls every `period` from `first` to `last`, each start off the
    100 ms grid (an odd offset plus jitter)."""
    rnd = random.Random(seed)
    out = []
    t = first + 0.037
    while t + length < last:
        s = t + rnd.uniform(-jitter, jitter)
        out.append((s, s + length))
        t += period
    return out


def in_any(spans: list[tuple[float, float]], t: float) -> bool:
    """Whether t falls in one of the sorted, disjoint [start, end) spans."""
    k = bisect.bisect_right(spans, (t, float("inf"))) - 1
    return k >= 0 and spans[k][0] <= t < spans[k][1]


def training(stalls: list[tuple[float, float]], startup: float, work_end: float,
             exit_stagger: float = 0.5) -> State:
    """A data-parallel job: start-up with memory held and nothing running, then work
    with every GPU idle together during `stalls`, then exit (GPU 0 frees its memory
    first, the others `exit_stagger` later), then an idle tail with memory free."""
    def state(g: int, t: float) -> str:
        if t < 1.0:
            return "free"
        if t < startup:
            return "idle"
        if t < work_end:
            return "idle" if in_any(stalls, t) else "compute"
        return "free" if t >= work_end + (0 if g == 0 else exit_stagger) else "idle"
    return state


def _outside_work(t: float, startup: float, work_end: float) -> str:
    """The state of a GPU outside a job's work: memory free for the first second and
    after the job, held idle during start-up; "" while it works."""
    if t < 1.0 or t >= work_end:
        return "free"
    return "idle" if t < startup else ""


@functools.lru_cache(maxsize=None)
def alibaba_batches(job: int) -> dict[int, dict[int, float]]:
    """iteration -> worker -> normalised mini-batch time (0..1000), as recorded."""
    path = require_data(f"traces/alibaba-minibatch/job_{job}_norm.csv")
    out: dict[int, dict[int, float]] = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            out.setdefault(int(r["time"]), {})[int(r["worker"])] = float(r["batch_time_norm"])
    return out


def alibaba_job(job: int, seconds_per_row: float, step_scale: float, startup: float) -> tuple[State, int, float]:
    """One GPU per worker. Each recorded iteration stands for `seconds_per_row` of
    training made of steps; in a step every worker computes for its batch time
    (normalised time × step_scale seconds) at full power, then spin-waits in the
    all-reduce at idle-level power until the slowest worker is done.
    Returns (state, workers, work end)."""
    rows = alibaba_batches(job)
    its = sorted(rows)
    workers = max(max(w) for w in rows.values()) + 1
    med_all = statistics.median(v for w in rows.values() for v in w.values())
    work_end = startup + len(its) * seconds_per_row
    # each iteration's workers and step, figured once: state() is asked for every GPU
    # at every grid point of the log
    per_it = [(rows[i], max(rows[i].values()) * step_scale) for i in its]

    def state(g: int, t: float) -> str:
        if t < 1.0 or t >= work_end or t < startup:
            return _outside_work(t, startup, work_end)
        k = int((t - startup) / seconds_per_row)
        w, step = per_it[k]
        into = (t - startup - k * seconds_per_row) % step
        mine = w.get(g, med_all) * step_scale
        return "compute" if into < mine else "spin"
    return state, workers, work_end


def hot_straggler(slow: int, compute_s: float, slow_compute_s: float, step_s: float,
                  startup: float, work_end: float) -> State:
    """Data-parallel steps of `step_s`: every GPU computes for `compute_s`, GPU `slow`
    for `slow_compute_s` (a slower GPU: clocks held down, a degraded link, more work),
    then spin-waits in the all-reduce until the step ends; start-up with memory held,
    then exit, memory released."""
    def state(g: int, t: float) -> str:
        outside = _outside_work(t, startup, work_end)
        if outside:
            return outside
        into = (t - startup) % step_s
        return "compute" if into < (slow_compute_s if g == slow else compute_s) else "spin"
    return state


Row = Callable[[int, float, float, float], tuple[float, str]]


def add_columns(path: Path, out: Path, gpus: int, header: str, row: Row) -> Path:
    """The nvidia-smi log at `path` (write_smi_log's: timestamp, power, utilisation,
    memory; the rows of one poll in GPU order) with more columns, as nvidia-smi writes
    them: `header` is appended to the header line, and each row becomes its
    timestamp, the watts and the cells that row(gpu, seconds since the first row,
    utilisation %, watts) returns (watts, ", cell, cell...")."""
    lines = path.read_text().splitlines()
    out_lines, t0 = [lines[0] + header], None
    for k, line in enumerate(lines[1:]):
        c = _cells(line)
        hh, mm, ss = c[0].split(" ")[1].split(":")
        t = int(hh) * 3600 + int(mm) * 60 + float(ss)
        t0 = t if t0 is None else t0
        w, extra = row(k % gpus, t - t0, float(c[2].split()[0]), float(c[1].split()[0]))
        out_lines.append(f"{c[0]}, {w:.2f} W, {c[2]}, {c[3]}{extra}")
    out.write_text("\n".join(out_lines) + "\n")
    return out


CKPT50 = "traces/h100-8gpu/ckpt50.csv"


ROWS_PER_POLL = 8


def poll_time(row: str) -> float:
    stamp = row.split(",", 1)[0].strip()
    head, _, frac = stamp.partition(".")
    return calendar.timegm(time.strptime(head, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0"))


def cut_trace(dest: Path, start_s: float, length_s: float) -> Path:
    """The polls of the real trace from start_s to start_s + length_s after its first row."""
    lines = require_data(CKPT50).read_text().splitlines()
    header, rows = lines[0], lines[1:]
    t0 = poll_time(rows[0])
    keep = []
    for i in range(0, len(rows) - ROWS_PER_POLL + 1, ROWS_PER_POLL):
        if start_s <= poll_time(rows[i]) - t0 < start_s + length_s:
            keep.extend(rows[i:i + ROWS_PER_POLL])
    dest.write_text("\n".join([header, *keep]) + "\n")
    return dest
