"""Straggler sensitivity cases: synchronous data-parallel training with one slow GPU
or one slow node, at a graded slowdown, and controls that must name nothing.

Every case is a job of 8 GPUs (or 4 nodes x 8 GPUs, one log per node) that trains in
steps: each rank computes for c * (1 + noise) seconds (c drawn per case, 1.0-2.5 s;
noise uniform within +-JITTER, drawn per rank and step, so without a straggler the
slowest rank changes every step), spin-waits in the collective (busy at idle-level
power) until the slowest rank is done, then all of them all-reduce for ALLREDUCE * c.
After start-up and HEALTHY seconds of even training, the straggler's ranks take
`slowdown` longer per step until the job exits (ONSET: the labelled onset). Why
they are slow (`cause`), with the columns of causes.Health on every log:

    more_work  they compute longer; clocks, power and temperature as their peers';
    thermal    SM clock down, hw_thermal_slowdown counter climbing, hot (87 C);
    power      at the power limit, sw_power_cap counter climbing, SM clock down;
    link       the extra time is host-device copies over a degraded PCIe link (no
               kernel running: idle, memory held), with pcie.link.width.current 4
               against .max 16. The log reader does not parse the link width, so the
               case is labelled without evidence (the right cause answer: unknown);
    off_gpu    their rank works off the GPU for the extra time (idle at idle-level
               power, memory held) while the peers spin-wait.

Controls: per-rank jitter of +-2 % and +-8 %, every rank slowing together by 30 %
over the run (drift), one GPU 15 C hotter with no throttle and normal speed, uneven
memory use across GPUs, and a 4 x 8 job with +-2 % jitter.

`ckpt/` cases: the +10/+15/+20 % cells of every cause and the 8-GPU controls again,
all with 1 s-averaged power.draw and checkpoints as in the real ckpt1000 trace: every
CKPT_EVERY seconds of training rank 0 leaves the GPU for CKPT_SECONDS while its peers
spin-wait in the next collective (so each GPU shows its own spin-wait level, which
the averaged-power share needs: docs/activity.md). Rank 0 is then a recurring cold
straggler itself (below): a ckpt/ control has one true straggler, rank 0, and a
ckpt/ cell two, its slow GPU and rank 0 (one, where the slow GPU is rank 0).

Levels (power, memory) come from the real 8xH100 traces (cases.levels), clocks,
power limit and temperatures from the real H100 capture (causes.capture); the logs
carry the real logs' timing (smi.write_log: 100 ms polls, row skew, query stalls,
1 s-averaged or instantaneous power, start-up and exit).

Ground truth comes from the timeline, never from a detector: a GPU's cost is the
share of its peers' time spent waiting for it, sum over steps of (its time before
entering the collective - the median of its peers') / sum of step times, over the
5-minute stretch of steps where it is largest; a node's cost the same with the
median of its GPUs against the median of the other nodes' GPUs. A GPU (node) costing
>= COST_LIMIT is a straggler (slow node), a case with one is a positive; a case
whose largest cost is within BORDER of the limit is borderline (+5 % lands there:
0.05 / 1.05 / (1 + ALLREDUCE) = 4.6 %) and is scored apart.

A rank's stretches off the GPU while all its peers spin-wait (the checkpoints) count
as the model counts them (docs/activity.md, analysis.verdict.recurring): one alone is
a pause of the job, no cost; stretches less than straggler_recur_seconds apart that
together reach COST_LIMIT of straggler_recur_seconds make the rank a recurring
straggler, and then each is a step of its cost (its off time against its peers'
none). A checkpoint of CKPT_SECONDS every CKPT_EVERY + CKPT_SECONDS is 16 s of every
216 s, 5-11 % of any 5 minutes (its cost: 10.7 %, two in one window): rank 0 of every ckpt/ case is a straggler, onset at
its second checkpoint (`onsets`), its cause off_gpu. The detectors agree: before this
truth, the report and the live gauge named rank 0 in the 18 ckpt/ cases whose slow
GPU is not rank 0, each then counted a false positive (report and live precision
0.45 on `straggler_sweep.py --cases '^ckpt/'`).
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpulse.analysis.thresholds import value

from .cases import DATA, LEAD, STARTUP, job_exit, start_up, levels  # noqa: F401 (DATA: for the bench)
from .causes import Capture, Health, capture
from .smi import COMPUTE, IDLE, SPIN, Levels, Timeline, write_log

SLOWDOWNS = (0.05, 0.10, 0.15, 0.20, 0.30)
CAUSES = ("more_work", "thermal", "power", "link", "off_gpu")
CONTROLS = ("jitter2", "jitter8", "drift", "hot", "memory")
COST_LIMIT = 0.05
BORDER = 0.01
JITTER = 0.02
ALLREDUCE = 0.03
HEALTHY, SLOW, TAIL = 120.0, 480.0, 20.0
WINDOW = 300.0
CKPT_EVERY, CKPT_SECONDS = 200.0, 16.0
RECUR = value("straggler_recur_seconds")
GPUS = 8
# the answers counted right for the straggler's cause
ACCEPT = {"more_work": ("more_work",), "thermal": ("throttling",), "power": ("throttling",),
          "link": ("unknown", "degraded_hardware"), "off_gpu": ("off_gpu",)}


@dataclass
class SweepCase:
    name: str
    kind: str                            # "gpu", "node" or "control"
    cause: str                           # a CAUSES member; a control's name
    slowdown: float = 0.0
    nodes: int = 1
    fmt: str = "avg"
    seed: int = 0
    slow: tuple[tuple[int, int], ...] = ()   # (node, gpu) of the slow ranks
    evidence: bool = True
    accept: tuple[str, ...] = ()
    checkpoint: bool = False             # rank 0 checkpoints every CKPT_EVERY s
    # filled by build()
    paths: list[Path] = field(default_factory=list)
    onset: float = 0.0                   # seconds after the first row
    onsets: dict[str, float] = field(default_factory=dict)      # a true straggler's own onset, where not `onset`
    cost: dict[str, float] = field(default_factory=dict)        # "nodeN/gpu" -> cost
    node_cost: dict[str, float] = field(default_factory=dict)   # "nodeN" -> cost
    stragglers: tuple[str, ...] = ()
    slow_nodes: tuple[str, ...] = ()
    positive: bool = False
    borderline: bool = False

    @property
    def workload(self) -> str:
        """The case's name as a label value that is also a plain regular expression."""
        return self.name.replace("/", "-").replace("+", "-p")

    def node(self, n: int) -> str:
        return f"{self.workload}-n{n}"


def cases(quick: bool = False) -> list[SweepCase]:
    """Every case of the sweep (quick: a subset); deterministic."""
    out: list[SweepCase] = []
    for ci, cause in enumerate(CAUSES):
        for si, slow in enumerate(SLOWDOWNS):
            gpu = (1 + ci + 3 * si) % GPUS         # the straggler moves across the indices
            fmt = ("avg", "instant")[(ci + si) % 2]     # both power columns across the sweep
            out.append(SweepCase(f"{cause}+{round(slow * 100)}", "gpu", cause, slow, fmt=fmt,
                                 seed=5000 + 10 * ci + si, slow=((0, gpu),), evidence=cause != "link",
                                 accept=ACCEPT[cause]))
    for k, name in enumerate(CONTROLS):
        out.append(SweepCase(f"control-{name}", "control", name, fmt=("avg", "instant")[k % 2], seed=5100 + k))
    out.append(SweepCase("4x8/gpu+25", "gpu", "more_work", 0.25, nodes=4, seed=5200, slow=((2, 5),),
                         accept=ACCEPT["more_work"]))
    out.append(SweepCase("4x8/node+25", "node", "more_work", 0.25, nodes=4, fmt="instant", seed=5201,
                         slow=tuple((1, g) for g in range(GPUS)), accept=ACCEPT["more_work"]))
    out.append(SweepCase("4x8/control", "control", "jitter2", nodes=4, seed=5202))
    for c in [c for c in out if c.nodes == 1 and (c.kind == "control" or c.slowdown in (0.10, 0.15, 0.20))]:
        out.append(replace(c, name=f"ckpt/{c.name}", fmt="avg", seed=c.seed + 1000, checkpoint=True))
    if quick:
        keep = {"thermal+10", "thermal+20", "control-jitter8", "control-hot", "4x8/node+25",
                "ckpt/thermal+10", "ckpt/control-hot"}
        out = [c for c in out if c.name in keep]
    return out


# -- the job ------------------------------------------------------------------------------

class _Columns(Health):
    """causes.Health plus what the controls and the link cause need: one GPU hotter
    than its peers, uneven memory, the PCIe link width (current < max while the
    link is degraded)."""

    def __init__(self, cap: Capture, lv: Levels, seed: int, gpu: int = -1, spans: tuple = (),
                 fault: str = "", hot: int = -1, uneven: bool = False):
        super().__init__(cap, lv, seed, gpu, spans, fault)
        self.hot, self.uneven = hot, uneven
        self.header = (*self.header, "pcie.link.width.current", "pcie.link.width.max")

    def mib(self, gpu: int, t: float, mib: float) -> float:
        # GPU 0 keeps half of what the others hold, the rest spread over +-12 %
        return mib * (0.5 if gpu == 0 else 0.88 + 0.24 * gpu / (GPUS - 1)) if self.uneven else mib

    def cells(self, gpu: int, t: float, state: str, busy: float, watts: float) -> list[str]:
        vals = super().cells(gpu, t, state, busy, watts)
        if gpu == self.hot:
            vals[2] = str(int(vals[2]) + 15)
        narrow = self.fault == "link" and self._faulty(gpu, t)
        return [*vals, "4" if narrow else "16", "16"]


def lay_out(case: SweepCase, rng: random.Random) -> tuple[list[Timeline], list[tuple[float, float]], float]:
    """Lay the job out: per node a Timeline; the steps (start, end); the onset. A
    checkpoint is no step: truth() finds it on the timeline (pauses())."""
    end = LEAD + STARTUP + HEALTHY + SLOW + TAIL
    tls = [Timeline(GPUS, end) for _ in range(case.nodes)]
    for tl in tls:
        t = start_up(tl, LEAD)
    c = rng.uniform(1.0, 2.5)
    jit = 0.08 if case.cause == "jitter8" else JITTER
    first, onset, stop = t, t + HEALTHY, t + HEALTHY + SLOW
    slow = set(case.slow)
    ranks = [(n, g) for n in range(case.nodes) for g in range(GPUS)]
    steps = []
    ckpt = first + CKPT_EVERY / 2 if case.checkpoint else float("inf")
    while t < stop:
        if t >= ckpt:
            for (n, g) in ranks:
                tls[n].add(g, t, t + CKPT_SECONDS, IDLE if g == 0 else SPIN)
            t += CKPT_SECONDS
            ckpt += CKPT_EVERY
            continue
        f = 1.0 + 0.3 * (t - first) / (stop - first) if case.cause == "drift" else 1.0
        gpu_t = {r: c * f * (1 + rng.uniform(-jit, jit)) for r in ranks}
        off = {r: 0.0 for r in ranks}       # time off the GPU (or in copies) before the collective
        if t >= onset:
            for r in slow:
                extra = gpu_t[r] * case.slowdown
                if case.cause in ("off_gpu", "link"):
                    off[r] = extra
                else:
                    gpu_t[r] += extra
        step = max(gpu_t[r] + off[r] for r in ranks)
        e = t + step + ALLREDUCE * c
        for (n, g) in ranks:
            tl = tls[n]
            tl.add(g, t, t + gpu_t[(n, g)], COMPUTE)
            tl.add(g, t + gpu_t[(n, g)], t + gpu_t[(n, g)] + off[(n, g)], IDLE)
            tl.add(g, t + gpu_t[(n, g)] + off[(n, g)], e, SPIN)
        steps.append((t, e))
        t = e
    for tl in tls:
        tl.end = t + 2.0 + TAIL
        job_exit(tl, t)
    return tls, steps, onset


def step_work(tl: Timeline, gpu: int, steps: list[tuple[float, float]]) -> list[float]:
    """Per step, the time the GPU spends before it enters the collective (everything
    in the step but spin-waiting), read from the timeline's segments."""
    seg = tl.seg[gpu]
    out, i = [], 0
    for a, b in steps:
        while i < len(seg) and seg[i][1] <= a:
            i += 1
        w, j = 0.0, i
        while j < len(seg) and seg[j][0] < b:
            if seg[j][2] != SPIN:
                w += min(b, seg[j][1]) - max(a, seg[j][0])
            j += 1
        out.append(w)
    return out


def _worst_window(diff: list[float], steps: list[tuple[float, float]]) -> float:
    """max over 5-minute stretches of steps of sum(diff) / their length."""
    best, j, acc = 0.0, 0, 0.0
    for i, (a, b) in enumerate(steps):
        acc += diff[i]
        while steps[j][0] < b - WINDOW:
            acc -= diff[j]
            j += 1
        if b - steps[j][0] >= WINDOW - 5.0:
            best = max(best, acc / (b - steps[j][0]))
    return best


def pauses(tls: list[Timeline], gpus: int = GPUS) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(node, gpu) -> its stretches off the GPU (idle, memory held) of at least a
    second while every other GPU of the job spin-waits: the checkpoints."""
    spinning: list[tuple[float, float, tuple[int, int]]] = []
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for n, tl in enumerate(tls):
        for g in range(gpus):
            spinning += [(a, b, (n, g)) for a, b, state, _ in tl.seg[g] if state == SPIN]
    keys = {(n, g) for n in range(len(tls)) for g in range(gpus)}
    for n, tl in enumerate(tls):
        for g in range(gpus):
            for a, b, state, _ in tl.seg[g]:
                if state != IDLE or b - a < 1.0:
                    continue
                # every peer spin-waits over the whole stretch
                if all(any(x <= a + 1e-6 and y >= b - 1e-6 for x, y, k in spinning if k == p)
                       for p in keys - {(n, g)}):
                    out.setdefault((n, g), []).append((a, b))
    return out


def recurs(stretches: list[tuple[float, float]]) -> float | None:
    """When a rank's stretches off the GPU first make it a straggler (the start of the
    stretch that does), or None: as analysis.verdict.recurring judges deviating runs,
    stretches less than straggler_recur_seconds apart are one chain, which recurs at
    its second stretch or later once the stretches of the last straggler_recur_seconds
    add up to COST_LIMIT of that time. One stretch alone is a pause."""
    chain: list[tuple[float, float]] = []
    for a, b in sorted(stretches):
        chain = chain + [(a, b)] if chain and a - chain[-1][1] < RECUR else [(a, b)]
        if len(chain) >= 2 and sum(y - max(x, b - RECUR) for x, y in chain if y > b - RECUR) >= COST_LIMIT * RECUR:
            return a
    return None


def truth(case: SweepCase, tls: list[Timeline], steps: list[tuple[float, float]]) -> None:
    """Fill the case's costs and labels from its timelines."""
    keys = [(n, g) for n in range(case.nodes) for g in range(GPUS)]
    # a recurring rank's stretches are steps of its cost (module doc); others are pauses
    recurring = {k: (t, st) for k, st in pauses(tls).items() if (t := recurs(st)) is not None}
    extra = sorted({s for _, st in recurring.values() for s in st})
    all_steps = sorted(steps + extra)
    work = {k: step_work(tls[k[0]], k[1], all_steps) for k in keys}
    med = statistics.median
    cost, node_cost = {}, {}
    for k in keys:
        # the stretches are steps of the recurring rank's cost only: every other
        # rank's cost is over the training steps, as without checkpoints
        own = [i for i, s in enumerate(all_steps) if s not in extra or s in recurring.get(k, (0, ()))[1]]
        diff = [work[k][s] - med(work[o][s] for o in keys if o != k) for s in own]
        cost[f"{case.node(k[0])}/{k[1]}"] = _worst_window(diff, [all_steps[s] for s in own])
    if case.nodes > 1:
        for n in range(case.nodes):
            own = [k for k in keys if k[0] == n]
            rest = [k for k in keys if k[0] != n]
            diff = [med(work[k][s] for k in own) - med(work[k][s] for k in rest) for s in range(len(steps))]
            node_cost[case.node(n)] = _worst_window(diff, steps)
    case.cost, case.node_cost = cost, node_cost
    case.stragglers = tuple(k for k, v in cost.items() if v >= COST_LIMIT)
    case.onsets = {key: t for (n, g), (t, _) in recurring.items()
                   if (key := f"{case.node(n)}/{g}") in case.stragglers and (n, g) not in case.slow}
    case.slow_nodes = tuple(k for k, v in node_cost.items() if v >= COST_LIMIT)
    case.positive = bool(case.stragglers or case.slow_nodes)
    top = max([*cost.values(), *node_cost.values()])
    case.borderline = abs(top - COST_LIMIT) < BORDER


def build(case: SweepCase, out: Path, lv: Levels | None = None, cap: Capture | None = None) -> SweepCase:
    """Write the case's log(s) under `out` and label it; deterministic."""
    lv, cap = lv or levels(), cap or capture()
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(case.seed)
    tls, steps, onset = lay_out(case, rng)
    truth(case, tls, steps)
    # the rows' times are counted from the first poll (write_log starts within POLL of 0)
    case.onset = onset
    fault = {"thermal": "thermal", "power": "power", "link": "link"}.get(case.cause, "")
    case.paths = []
    for n, tl in enumerate(tls):
        gpus = [g for (m, g) in case.slow if m == n]
        seed = case.seed * 10 + n
        cols = _Columns(cap, lv, seed, gpus[0] if len(gpus) == 1 else -1,
                        ((onset, tl.end),) if gpus else (), fault if gpus else "",
                        hot=3 if case.cause == "hot" else -1, uneven=case.cause == "memory")
        path = out / f"{case.node(n)}.csv"
        write_log(str(path), tl, lv, case.fmt, seed, extra=cols)
        case.paths.append(path)
    return case
