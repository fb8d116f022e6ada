"""The cases of the evaluation corpus and their ground truth.

Every case is built from real recordings in ../shared/data, read at run time:

- `h100/ckptN`: the six real 8xH100 nvidia-smi logs themselves, labelled from their
  rows with the reading of ../shared/data/README.md (h100_truth; the polls are
  0.1 s apart, which is the truth's time grid there);
- `pai/job_N-<fmt>`: the four Alibaba PAI jobs (traces/alibaba-minibatch): one GPU per
  worker computes for its recorded mini-batch time at full power, then spin-waits in
  the all-reduce (busy, idle-level power) until the slowest worker is done, then
  all-reduce for a few percent of the step;
- `seed`: GPUs 0-1 at 99 %, GPUs 2-3 under 15 % (4 GPUs);
- `stall-*`: recurring all-GPU stalls (0.3 s / 2.5 s, 0.6 s / 2.5 s, ~15 s / ~28 s with
  rank 0 off the GPU while the others spin-wait, as in the real checkpoint traces),
  each starting after a healthy stretch, off the 100 ms sample grid, with jitter;
- negatives: balanced, one checkpoint pause, a restart gap, a long start-up.

Power and memory levels come from the real H100 traces (levels()). Each synthetic case
is written in both log formats (1 s-averaged `power.draw`, `power.draw.instant`),
with start-up (memory held, no work), exit (GPU 0 frees its memory first) and an
idle tail, the row skew and query stalls of the real logs (smi.write_log).

Ground truth of synthetic cases is computed from the timeline the log is sampled
from (truth_of), never from a detector, with the definitions of the threshold table:
  stall      the group is co-inactive (no GPU computing) >= stall_page_ratio of a
             2-minute window, in >= stall_recurring_episodes separate stretches of at
             least min_stall_seconds within 10 minutes, or co-inactive over half of
             10 minutes; onset = the first such moment;
  rhythm     the period the case was built with (None: no steady rhythm);
  straggler  a GPU that costs its peers >= straggler_cost_ratio of their time over a
             5-minute window (hot: its true active share above the peer median;
             cold: its busy share below it while they spin-wait) beyond straggler_z
             robust z, and whose deviation recurs: for >= 2 minutes with the
             stretches in which it deviates while its peers spin-wait (breaks under
             straggler_break_seconds bridged) two or more, or one of at least
             straggler_min_span_seconds; or, off the GPU, in one window holding two
             of them (a rank off the GPU every few minutes, straggler_recur_seconds). One
             pause of the job, its rank off the GPU once, is the stall model's,
             not a straggler (analysis.verdict); onset = when it first stood out
             over one minute before that. The truth has no measurement
             noise, so its MAD is floored only at TRUTH_MAD_FLOOR (against a zero
             division), not at z_mad_floor, the detectors' guard against noise;
  imbalance  over the whole training span (max - min) / max of the true active
             shares > imbalance_alert_ratio with max > imbalance_min_active_ratio.
"""
from __future__ import annotations

import csv
import functools
import itertools
import random
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from gpulse.analysis.thresholds import value

from .smi import COMPUTE, IDLE, LOAD, OFF, PART, SPIN, Levels, Timeline

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
H100 = DATA / "traces" / "h100-8gpu"
PAI = DATA / "traces" / "alibaba-minibatch"
GRID = 0.05
MERGE_GAP, WARMUP, EXIT_GUARD = 1.0, 5.0, 15.0
TRUTH_MAD_FLOOR = 0.01


@dataclass
class Truth:
    stall: bool
    stall_onset: float | None = None          # seconds after the first row
    period: float | None = None               # rhythm; None: none expected
    stragglers: tuple[str, ...] = ()
    straggler_onset: float | None = None      # the earliest of straggler_onsets
    imbalance: bool = False
    rhythm_scored: bool = True                # False: the period is not known (real logs)
    note: str = ""
    straggler_onsets: dict = field(default_factory=dict)   # gpu -> onset


@dataclass
class Case:
    name: str
    fmt: str                                  # "avg" | "instant"
    truth: Truth
    timeline: Timeline | None = None          # None: a real log used as it is
    source: Path | None = None
    seed: int = 0
    params: dict = field(default_factory=dict)


# -- levels from the real traces ------------------------------------------------

def _smi_rows(path: Path):
    with open(path, encoding="utf-8") as f:
        next(f)
        for i, line in enumerate(f):
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 4:
                continue
            try:
                yield i % 8, float(cells[1].split()[0]), float(cells[2].split()[0]), float(cells[3].split()[0])
            except ValueError:
                continue


@functools.lru_cache(maxsize=1)
def levels() -> Levels:
    """Compute, spin-wait and idle power and memory of the real 8xH100 runs (read once
    a process: 0.23 s, and every case's build asks; Levels is frozen)."""
    compute, spin, idle, job, free = [], [], [], [], []
    for gpu, w, util, mib in _smi_rows(H100 / "ckpt1000.csv"):
        if util >= 95 and w > 300:
            compute.append(w)
        if mib > 1000:
            job.append(mib)
        elif util == 0 and gpu and mib < 100:       # before the job: no context at all
            idle.append(w)
            free.append(mib)
    for gpu, w, util, mib in _smi_rows(H100 / "ckpt1.csv"):
        if gpu and util >= 95 and w < 250:
            spin.append(w)
    med = statistics.median
    return Levels(med(compute), med(spin), med(idle), med(job), med(free))


# -- the real logs ----------------------------------------------------------------

H100_RUNS = ("ckpt1", "ckpt10", "ckpt50", "ckpt100", "ckpt500", "ckpt1000")


# -- synthetic timelines ------------------------------------------------------------

LEAD, STARTUP, TAIL = 10.0, 60.0, 20.0


def job_exit(tl: Timeline, train_end: float) -> None:
    """Job exit at train_end: GPU 0 frees its memory first, the rest within a second."""
    for g in range(tl.gpus):
        tl.add(g, train_end, train_end + (0.0 if g == 0 else 0.3 + 0.05 * g), IDLE)
        tl.add(g, train_end + 2.0, tl.end, OFF)


def start_up(tl: Timeline, a: float, length: float = STARTUP) -> float:
    for g in range(tl.gpus):
        tl.add(g, a, a + length, LOAD)
    return a + length


def _noisy_compute(tl: Timeline, rng: random.Random, a: float, b: float, level: float = 1.0) -> None:
    """Every GPU computing, each with its own short dips (not aligned: no stall)."""
    for g in range(tl.gpus):
        t = a
        while t < b:
            run = rng.uniform(1.0, 3.0)
            tl.add(g, t, min(b, t + run), COMPUTE if level >= 1.0 else PART, level)
            t += run
            dip = rng.uniform(0.02, 0.08)
            tl.add(g, t, min(b, t + dip), IDLE)
            t += dip


def stall_case(name: str, seed: int, gpus: int, period: float, length: float, jitter: float,
               healthy: float, stalled: float, spin: bool = False) -> Timeline:
    """Healthy training, then stalls of `length` every `period` (jittered, off-grid).
    spin: rank 0 off the GPU while the others spin-wait (the checkpoint pattern)."""
    rng = random.Random(seed)
    end = LEAD + STARTUP + healthy + stalled + TAIL
    tl = Timeline(gpus, end)
    a = start_up(tl, LEAD)
    onset = a + healthy
    _noisy_compute(tl, rng, a, onset)
    t = onset + rng.uniform(0.013, 0.087)          # off the 100 ms grid
    stop = onset + stalled
    while t < stop:
        s = t + rng.uniform(-jitter, jitter)
        ln = max(0.05, length * (1 + rng.uniform(-0.1, 0.1)))
        for g in range(gpus):
            tl.add(g, tl.seg[g][-1][1] if tl.seg[g] else t, s, COMPUTE)
            tl.add(g, s, s + ln, (IDLE if g == 0 else SPIN) if spin else IDLE)
        t += period
    for g in range(gpus):
        tl.add(g, tl.seg[g][-1][1], stop, COMPUTE)
    job_exit(tl, stop)
    return tl


def balanced(seed: int, gpus: int = 8, train: float = 900.0) -> Timeline:
    rng = random.Random(seed)
    tl = Timeline(gpus, LEAD + STARTUP + train + TAIL)
    a = start_up(tl, LEAD)
    _noisy_compute(tl, rng, a, a + train)
    job_exit(tl, a + train)
    return tl


def one_pause(seed: int, gpus: int = 8, train: float = 900.0, pause: float = 90.0) -> Timeline:
    """One checkpoint: rank 0 off the GPU, the others spin-waiting, once."""
    rng = random.Random(seed)
    tl = Timeline(gpus, LEAD + STARTUP + train + TAIL)
    a = start_up(tl, LEAD)
    mid = a + train / 2 + rng.uniform(0.0, 0.1)
    _noisy_compute(tl, rng, a, mid)
    for g in range(gpus):
        tl.add(g, mid, mid + pause, IDLE if g == 0 else SPIN)
    _noisy_compute(tl, rng, mid + pause, a + train)
    job_exit(tl, a + train)
    return tl


def restart(seed: int, gpus: int = 8, train: float = 400.0, gap: float = 120.0) -> Timeline:
    """The job exits, nothing runs for `gap`, a new one starts up and trains."""
    rng = random.Random(seed)
    tl = Timeline(gpus, LEAD + 2 * STARTUP + 2 * train + gap + TAIL)
    a = start_up(tl, LEAD)
    _noisy_compute(tl, rng, a, a + train)
    for g in range(gpus):
        tl.add(g, a + train, a + train + gap, OFF)
    b = start_up(tl, a + train + gap)
    _noisy_compute(tl, rng, b, b + train)
    job_exit(tl, b + train)
    return tl


def long_startup(seed: int, gpus: int = 8, train: float = 600.0) -> Timeline:
    rng = random.Random(seed)
    tl = Timeline(gpus, LEAD + 240.0 + train + TAIL)
    a = start_up(tl, LEAD, 240.0)
    _noisy_compute(tl, rng, a, a + train)
    job_exit(tl, a + train)
    return tl


def seed_imbalance(seed: int, train: float = 1500.0) -> Timeline:
    """GPUs 0-1 at 99 %, GPUs 2-3 under 15 %, for 25 minutes (the imbalance alert
    holds 15)."""
    rng = random.Random(seed)
    tl = Timeline(4, LEAD + STARTUP + train + TAIL)
    a = start_up(tl, LEAD)
    for g in range(4):
        t = a
        while t < a + train:
            run = rng.uniform(2.0, 6.0)
            level = 0.99 if g < 2 else rng.uniform(0.08, 0.14)
            tl.add(g, t, min(a + train, t + run), PART, level)
            t += run
    job_exit(tl, a + train)
    return tl


# Seconds per 1000 normalised mini-batch-time units: job 1 then runs ~49 minutes and
# its worker 6 straggles for ~5 of them (the recorded times are normalised per job,
# so only their ratios are real).
PAI_SCALE = 2.0


def pai_rows(job: int) -> tuple[dict[int, dict[int, float]], list[int], list[int]]:
    """An Alibaba PAI job's recorded mini-batch times: {iteration: {worker: time}},
    the iterations in order, the workers."""
    rows: dict[int, dict[int, float]] = {}
    with open(PAI / f"job_{job}_norm.csv", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            rows.setdefault(int(r["time"]), {})[int(r["worker"])] = float(r["batch_time_norm"])
    return rows, sorted(rows), sorted({w for v in rows.values() for w in v})


def pai_job(job: int, max_train: float, scale: float = PAI_SCALE, allreduce: float = 0.05) -> tuple[Timeline, dict]:
    """One Alibaba PAI job: worker w computes b[w, i] / 1000 * scale seconds, spin-waits
    for the slowest worker, then all workers all-reduce for `allreduce` of the step.
    A recorded row stands for the iterations up to the next recorded one."""
    rows, iters, workers = pai_rows(job)
    last = {w: 500.0 for w in workers}
    tl = Timeline(len(workers), LEAD + STARTUP + max_train + TAIL)
    t = start_up(tl, LEAD)
    stop = t + max_train
    for k, it in enumerate(iters):
        last.update(rows[it])                      # a missing worker keeps its last time
        reps = (iters[k + 1] - it) if k + 1 < len(iters) else 1
        b = [max(1.0, last[w]) / 1000 * scale for w in workers]
        step = max(b)
        for _ in range(reps):
            if t >= stop:
                break
            for g, bw in enumerate(b):
                tl.add(g, t, t + bw, COMPUTE)
                tl.add(g, t + bw, t + step * (1 + allreduce), SPIN)
            t += step * (1 + allreduce)
    end = min(t, stop)
    job_exit(tl, end)
    return tl, {"workers": len(workers), "train_end": end}


# -- ground truth from a timeline -------------------------------------------------------

def _grids(tl: Timeline) -> tuple[list[list[bool]], list[list[bool]], list[bool], int]:
    """Per GPU on a GRID: computing (active), busy (computing or spin-waiting), and
    for the group: holding a job past its start-up."""
    n = int(tl.end / GRID)
    idle = value("idle_ratio")
    act, busy, held = [], [], [False] * n
    for g in range(tl.gpus):
        a_row, b_row = [False] * n, [False] * n
        for a, b, state, part in tl.seg[g]:
            on = state == COMPUTE or (state == PART and part >= idle)
            bz = on or state == SPIN
            lo, hi = int(a / GRID), min(n, int(b / GRID))
            if hi > lo:
                a_row[lo:hi] = [on] * (hi - lo)
                b_row[lo:hi] = [bz] * (hi - lo)
                if state not in (OFF, LOAD):
                    held[lo:hi] = [True] * (hi - lo)
        act.append(a_row)
        busy.append(b_row)
    return act, busy, held, n


def truth_of(tl: Timeline, period: float | None) -> Truth:
    act, busy, held, n = _grids(tl)
    return _truth(act, busy, held, n, period)


def _prefix(xs) -> list[int]:
    return list(itertools.accumulate(xs, initial=0))


def _stragglers(act: list[list[bool]], busy: list[list[bool]], held: list[bool], n: int, dt: float,
                window: float = 300.0) -> dict[int, list[float]]:
    """GPU -> the ends of the windows (every 10 s) in which it is a straggler: it costs
    its peers straggler_cost_ratio of their time (hot: it computes while they wait;
    cold: its rank is off the GPU while they spin-wait, analysis.verdict) and that gap
    stands out of the group's spread by straggler_z."""
    w5, step = int(window / dt), int(10 / dt)
    pa, pb = [_prefix(r) for r in act], [_prefix(r) for r in busy]
    hp = _prefix(held)
    z_lim, cost_lim = value("straggler_z"), value("straggler_cost_ratio")
    flagged: dict[int, list[float]] = {}

    def spread(xs: list[float], med: float) -> float:
        return max(1.4826 * statistics.median(abs(x - med) for x in xs), TRUTH_MAD_FLOOR)

    for i in range(w5, n + 1, step):
        if hp[i] - hp[i - w5] < 0.9 * w5:
            continue
        a = [(p[i] - p[i - w5]) / w5 for p in pa]
        b = [(p[i] - p[i - w5]) / w5 for p in pb]
        ma, mb = statistics.median(a), statistics.median(b)
        ms = statistics.median(y - x for x, y in zip(a, b))
        sa, sb = spread(a, ma), spread(b, mb)
        for g in range(len(a)):
            hot, cold = a[g] - ma, min(mb - b[g], ms)
            if (hot >= cost_lim and hot / sa > z_lim) or (cold >= cost_lim and (mb - b[g]) / sb > z_lim):
                flagged.setdefault(g, []).append(i * dt)
    return flagged


def _deviation_stretches(g: int, act: list[list[bool]], busy: list[list[bool]], n: int,
                         dt: float) -> list[list[tuple[float, float]]]:
    """GPU g's stretches (seconds) in which it computes (hot), then those in which it is
    off the GPU (cold), while most of its peers spin-wait; breaks under
    straggler_break_seconds bridged, as the detectors bridge them."""
    peers = len(act) - 1
    brk = value("straggler_break_seconds") / dt
    # the peers spin-waiting at each instant: all GPUs' count less g's own
    spins = [[b and not a for a, b in zip(ra, rb)] for ra, rb in zip(act, busy)]
    spinning = [sum(col) - own for col, own in zip(zip(*spins), spins[g])][:n]
    out = []
    for hot in (True, False):
        row = act[g] if hot else [not x for x in busy[g]]
        stretches: list[list[int]] = []
        for i in range(n):
            if row[i] and 2 * spinning[i] >= peers:
                if stretches and i - stretches[-1][1] <= brk:
                    stretches[-1][1] = i
                else:
                    stretches.append([i, i])
        out.append([(a * dt, (b + 1) * dt) for a, b in stretches])
    return out


def _recurs(ts: list[float], stretches: list[list[tuple[float, float]]]) -> bool:
    """Whether a GPU flagged at window ends `ts` deviates in a way that recurs (see the
    module doc): within its flagged span, two or more stretches or one of at least
    straggler_min_span_seconds, with the flags lasting 2 minutes; or two stretches
    within one flagged 5-minute window (straggler_recur_seconds) off the GPU (cold:
    analysis.verdict). One stretch alone is a pause of the job."""
    span, recur = value("straggler_min_span_seconds"), value("straggler_recur_seconds")
    for cold, st in enumerate(stretches):
        inside = [(a, b) for a, b in st if b > ts[0] - 300 and a < ts[-1]]
        if (ts[-1] - ts[0] >= 120 - 1e-6 and len(ts) >= 12
                and (len(inside) >= 2 or any(b - a >= span for a, b in inside))):
            return True
        if cold and any(sum(1 for a, b in inside if b > t - recur and a < t) >= 2 for t in ts):
            return True
    return False


def _truth(act: list[list[bool]], busy: list[list[bool]], held: list[bool], n: int,
           period: float | None, imbalance: bool | None = None, dt: float = GRID,
           co: list[bool] | None = None) -> Truth:
    if co is None:
        co = [held[i] and not any(r[i] for r in act) for i in range(n)]
    # stretches of co-inactivity at least min_stall long. A blip of work under
    # MERGE_GAP does not end a stall; stretches before the group has worked
    # WARMUP seconds (start-up blips) or ending within EXIT_GUARD of the job
    # releasing its memory (the final synchronisation) are not episodes.
    min_n = value("min_stall_seconds") / dt
    merge, warm, guard = int(MERGE_GAP / dt), WARMUP / dt, int(EXIT_GUARD / dt)
    worked = [0.0] * n
    w = 0.0
    for i in range(n):
        w = w + 1 if held[i] and not co[i] else (w if held[i] else 0.0)
        worked[i] = w
    release = [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        release[i] = release[i + 1] if held[i] else i
    stretches: list[list[int]] = []
    for i, c in enumerate(co):
        if not c:
            continue
        if stretches and i - stretches[-1][1] <= merge:
            stretches[-1][1] = i + 1
        else:
            stretches.append([i, i + 1])
    starts = [a for a, b in stretches
              if b - a >= min_n and worked[a] >= warm and release[b] - b > guard]
    w2, w10 = int(120 / dt), int(600 / dt)
    ratio, need = value("stall_page_ratio"), value("stall_recurring_episodes")
    prefix = _prefix(co)
    stall_onset = None
    for i in range(w2, n + 1, int(1 / dt)):
        if (prefix[i] - prefix[i - w2]) / w2 >= ratio:
            recurring = sum(1 for s in starts if i - w10 <= s and s + min_n <= i) >= need
            # stalled most of 10 minutes: lost time whether or not the stretches separate
            sustained = i >= w10 and (prefix[i] - prefix[i - w10]) / w10 >= 0.5
            if recurring or sustained:
                stall_onset = i * dt
                break
    # a hot straggler stands out in real work, a cold one in busy (the others
    # spin-wait for it while its rank works off the GPU)
    flagged, early = _stragglers(act, busy, held, n, dt), _stragglers(act, busy, held, n, dt, 60.0)
    strag = {g: ts for g, ts in flagged.items() if _recurs(ts, _deviation_stretches(g, act, busy, n, dt))}
    # onset: when it first stood out over one minute, in the 5 minutes before the
    # first 5-minute window that flags it (the 5-minute mean lags the change)
    onset = {g: min([t for t in early.get(g, []) if ts[0] - 300 <= t <= ts[0]] or [ts[0]])
             for g, ts in strag.items()}
    if imbalance is None:
        span = [i for i in range(n) if held[i]]
        shares = [sum(r[i] for i in span) / len(span) for r in act] if span else [0.0]
        hi, lo = max(shares), min(shares)
        imbalance = hi > value("imbalance_min_active_ratio") and (hi - lo) / hi > value("imbalance_alert_ratio")
    return Truth(stall_onset is not None, stall_onset, period,
                 tuple(sorted((str(g) for g in strag), key=int)),
                 min(onset.values(), default=None), imbalance,
                 straggler_onsets={str(g): t for g, t in sorted(onset.items())})


def h100_truth(name: str) -> Truth:
    """Truth of a real 8xH100 log, computed from its rows with the README's reading:
    the group is co-inactive when every GPU reads under 10 % or GPU 0 does while
    GPUs 1-7 read >= 90 % (the README: 100 % at ~150 W is waiting); a GPU is busy
    when it reads >= 10 % and works when it is busy outside those moments;
    the group holds a job while GPUs 1-7 hold memory, from the first poll in which
    any GPU reads >= 10 % (the README's active window). Rows are grouped 8 to a poll
    (their position is the GPU index); ckpt10 only up to data row 43240, where the
    grouping breaks (see the README). No run is imbalanced: every rank runs the
    same steps."""
    rows = list(_smi_rows(H100 / f"{name}.csv"))
    if name == "ckpt10":
        rows = rows[:43240]
    polls = [rows[k:k + 8] for k in range(0, len(rows) - 7, 8)]
    n = len(polls)
    act = [[False] * n for _ in range(8)]
    busy = [[False] * n for _ in range(8)]
    held, co = [False] * n, [False] * n
    started = False
    for i, poll in enumerate(polls):
        started = started or any(u >= 10 for _, _, u, _ in poll)
        held[i] = started and all(m > 1000 for g, _, _, m in poll if g)
        utils = [u for _, _, u, _ in poll]
        # the README's two co-inactive readings: every GPU under 10 %, or GPU 0 under
        # 10 % while GPUs 1-7 read >= 90 % (spin-waiting for it)
        co[i] = held[i] and (max(utils) < 10 or (utils[0] < 10 and min(utils[1:]) >= 90))
        for g, w, u, _ in poll:
            act[g][i] = u >= 10 and not co[i]
            busy[g][i] = u >= 10
    t = _truth(act, busy, held, n, None, imbalance=False, dt=0.1, co=co)
    t.rhythm_scored = False
    return t


def cases(quick: bool = False, select: str | None = None) -> list[Case]:
    """Every case, deterministic (each case its own seeded generator). quick: shorter
    runs, one log format for synthetic cases. select: only the cases whose name matches
    this regular expression, the others not built at all (building every case takes
    seconds; a test wants one or two)."""
    want = (lambda name: True) if select is None else re.compile(select).search
    out: list[Case] = []
    fmts = ("avg",) if quick else ("avg", "instant")
    for name in H100_RUNS:
        if not want(f"h100/{name}"):
            continue
        out.append(Case(f"h100/{name}", "avg", h100_truth(name), source=H100 / f"{name}.csv"))
    healthy, stalled = (360.0, 420.0) if quick else (420.0, 900.0)
    synth = [
        ("stall-0.3s-2.5s", 2.5, lambda s: stall_case("a", s, 8, 2.5, 0.3, 0.1, healthy, stalled)),
        ("stall-0.6s-2.5s", 2.5, lambda s: stall_case("b", s, 8, 2.5, 0.6, 0.1, healthy, stalled)),
        ("stall-15s-28s-ckpt", 28.0, lambda s: stall_case("c", s, 8, 28.0, 15.0, 2.0, healthy, stalled, spin=True)),
        ("stall-2s-15s", 15.0, lambda s: stall_case("d", s, 4, 15.0, 2.0, 0.5, healthy, stalled)),
        ("short-stall-0.2s-5s", 5.0, lambda s: stall_case("e", s, 8, 5.0, 0.2, 0.2, healthy, stalled)),
        ("balanced", None, lambda s: balanced(s)),
        ("one-pause", None, lambda s: one_pause(s)),
        ("restart", None, lambda s: restart(s)),
        ("long-startup", None, lambda s: long_startup(s)),
        ("seed-imbalance", None, lambda s: seed_imbalance(s)),
    ]
    for k, (name, period, build) in enumerate(synth):
        for fmt in fmts:
            if not want(f"{name}-{fmt}"):
                continue
            seed = 1000 + 10 * k + (fmt == "instant")
            tl = build(seed)
            t = truth_of(tl, period)
            out.append(Case(f"{name}-{fmt}", fmt, t, timeline=tl, seed=seed, params={"period": period}))
    for job in (1, 2, 3, 4):
        # job 1 whole (its straggler comes 60 % in); the others' first 20 / 40 minutes
        max_train = 3600.0 if job == 1 else (1200.0 if quick else 2400.0)
        for fmt in fmts:
            if not want(f"pai/job_{job}-{fmt}"):
                continue
            tl, info = pai_job(job, max_train)
            t = truth_of(tl, None)
            out.append(Case(f"pai/job_{job}-{fmt}", fmt, t, timeline=tl, seed=2000 + 10 * job + (fmt == "instant"),
                            params=info))
    return out
