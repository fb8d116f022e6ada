"""Straggler-cause cases: why the straggler is slow, labelled, built from real data.

    .venv/bin/python -m bench.lib.corpus --causes --out bench/out/causes [--quick]

writes one nvidia-smi --query-gpu CSV log per case and `causes.json` (each case's
labelled cause). Every case starts from real per-GPU activity read at run time from
../shared/data; nothing of it is copied into the repository:

- `pai-*`: Alibaba PAI job 1 (traces/alibaba-minibatch), iterations 1751-2001,
  where worker 6 becomes a straggler (its recorded mini-batch times double for
  ~130 iterations). One GPU per worker computes for its recorded batch time at
  full power and spin-waits in the all-reduce (busy, idle-level power) for the
  slowest worker, as in the detection corpus (cases.pai_job). Over the same
  activity, the columns a node's logger records say why worker 6 is slow:
    more-work     clocks, temperature, power and health as its peers': it just has
                  more to compute (data or sequence-length imbalance);
    throttled-*   clocks_event_reasons_counters.hw_thermal_slowdown (thermal) or
                  .sw_power_cap (power) climbing ~1 s per second over its slow
                  span, SM clock down to ~1410 MHz from 1980, at 87 C (thermal)
                  or at its 700 W power limit (power);
    hw-slowdown   SM clock down to ~1095 MHz with clocks_event_reasons.hw_slowdown
                  Active and no thermal or power counter moving, at 61 C and 480 W;
    ecc           uncorrectable volatile ECC errors appearing and a row remap
                  pending over the span, clocks normal;
    cold-rank     worker 6's rank is busy off the GPU instead: it computes only
                  its peers' median batch time and sits idle (memory held,
                  idle-level power) for the rest of its recorded time while the
                  peers spin-wait for it;
- `h100/ckptN+health`: the real 8xH100 ckpt1 and ckpt50 logs (rank 0 leaves the GPU
  to write checkpoints while GPUs 1-7 spin-wait), row for row, with the health
  columns appended at normal values; and the same logs as recorded (no health
  columns);
- `seed-imbalance+health`: the seed case (GPUs 0-1 at 99 %, GPUs 2-3 under 15 %)
  with normal clocks and health: a work-distribution problem.

Cases whose log lacks the columns that separate the causes are labelled with
`evidence: false`: a hot straggler (more work or throttled: the same rows) logged
without clocks or throttle reasons, and the plain seed case. For them the right
answer is "unknown" (naming the missing signal); a confident cause there is a
guess, and telling a possibly throttled GPU to rebalance is the error that matters.

Realistic values come from the real H100 capture in
captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv (read at run time): its SM and
memory clocks under load, its power limit, its load temperature, its clocks-event
reason fields. The logs carry the corpus's timing (smi.write_log: row skew, query
stalls, jitter, 1 s-averaged or instantaneous power, start-up and exit).

The reasons are logged in each spelling nvidia-smi has printed (`*-event-states`:
clocks_event_reasons.<reason> Active / Not Active; `*-throttle-states`: the pre-535
clocks_throttle_reasons.<reason>; `*-mask`: the `.active` bit mask alone; the rest:
the driver's counters beside the mask and hw_slowdown), and every GPU logs its PCIe
link (pcie.link.gen/width .current and .max; the generation lowered while idle):
    link-width    worker 6's link at x8 of x16 over its slow span;
    link-gen      at gen 3 of gen 5 while computing over its slow span.
PCIe replays, NVLink errors and XID events are no --query-gpu fields at all
(nvidia-smi -q and the exporter have them), so those causes are exercised on fake
NVML (tests/fakenvml/scenarios), not here.
"""
from __future__ import annotations

import functools
import json
import random
import statistics
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .cases import (DATA, H100, LEAD, Truth, job_exit, start_up, levels,
                    pai_rows, seed_imbalance, truth_of)
from .smi import COMPUTE, IDLE, SPIN, Extra, Levels, Timeline, write_log

CAPTURE = DATA / "captures" / "nvidia-smi" / "h100-80gb-hbm3-query-gpu.csv"
CAUSES = ("throttling", "degraded_hardware", "more_work", "off_gpu", "unknown")
JOB, FIRST, LAST, SLOW_WORKER = 1, 1751, 2001, 6
# Seconds per 1000 normalised units: steps of ~3 s, so the peers' spin-waits (2-3 s
# in the slow steps) outlast nvidia-smi's 1 s power average.
SCALE = 6.0
SLOW_FACTOR = 1.3          # a step in which worker 6 takes this much longer than the median is a slow step
SPAN_GAP = 30.0            # slow steps this close together are one slow span (the fault's)


@dataclass
class CauseCase:
    name: str
    cause: str                      # what the case was built as
    evidence: bool                  # the log carries the signals that tell that cause
    accept: tuple[str, ...]         # answers counted correct
    gpu: str                        # the straggler (or "" for an imbalance)
    path: Path | None = None
    fmt: str = "avg"
    replay: bool = True             # the live gauges can be read from its replay
    truth: Truth | None = None
    note: str = ""
    params: dict = field(default_factory=dict)


# -- the real capture ---------------------------------------------------------------

@dataclass(frozen=True)
class Capture:
    sm_mhz: float
    mem_mhz: float
    limit_w: float
    load_c: float
    load_w: float
    reason_fields: tuple[str, ...]  # the clocks-event-reason counters the driver reports


def capture() -> Capture:
    head, row = CAPTURE.read_text(encoding="utf-8").splitlines()[:2]
    v = dict(zip([c.strip() for c in head.split(",")], [c.strip() for c in row.split(",")]))
    num = lambda k: float(v[k].split()[0])  # noqa: E731
    reasons = tuple(k.split(" ")[0] for k in v if k.startswith("clocks_event_reasons_counters."))
    return Capture(num("clocks.current.sm [MHz]"), num("clocks.current.memory [MHz]"), num("power.limit [W]"),
                   num("temperature.gpu"), num("power.draw [W]"), reasons)


# -- health columns --------------------------------------------------------------------

REASON_BIT = {"gpu_idle": 0x1, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20,
              "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}
IDLE_MHZ = 345.0           # an H100's SM clock with no kernel running


# How a logger spells the clock-event reasons: the driver's counters with the mask and
# hw_slowdown (what recent drivers offer), every reason as Active / Not Active under
# its current or its pre-535 name, or the `.active` bit mask alone
SPELLINGS = ("counters", "event-states", "throttle-states", "mask")
LINK_GEN, LINK_WIDTH = 5, 16          # an H100 SXM5 in a Gen5 x16 slot
IDLE_GEN = 1                          # the generation an idle GPU lowers its link to


class Health(Extra):
    """The health columns of every GPU, normal unless `fault` says otherwise over
    `spans` [(a, b)...] for GPU `gpu`:
      "thermal" / "power"   throttled: reason held, clock down, hot or at the limit
      "hw_slowdown"         clock down, hw_slowdown Active, no counter moving
      "ecc"                 uncorrectable ECC errors and a pending row remap
      "link-width"          the PCIe link trained down to x8 of x16
      "link-gen"            the PCIe link at gen 3 of gen 5 while computing
    `spelling` (SPELLINGS) is how the reasons are logged; every GPU logs its PCIe
    link (generation lowered while idle)."""

    def __init__(self, cap: Capture, lv: Levels, seed: int, gpu: int = -1, spans: tuple = (),
                 fault: str = "", spelling: str = "counters"):
        self.cap, self.lv, self.gpu, self.spans, self.fault = cap, lv, gpu, list(spans), fault
        self.spelling = spelling
        self.rng = random.Random(seed)
        self.counters = [c for c in cap.reason_fields if c.split(".")[1] in REASON_BIT]
        prefix = "clocks_throttle_reasons" if spelling == "throttle-states" else "clocks_event_reasons"
        reasons = {"counters": ("clocks_event_reasons.active", "clocks_event_reasons.hw_slowdown",
                                *(f"{c} [us]" for c in self.counters)),
                   "mask": ("clocks_throttle_reasons.active",)}.get(
            spelling, tuple(f"{prefix}.{r}" for r in REASON_BIT))
        self.header = ("clocks.sm [MHz]", "clocks.mem [MHz]", "temperature.gpu", "power.limit [W]", *reasons,
                       "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending",
                       "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
                       "pcie.link.width.max")
        # counters since the driver loaded: a little history, the same on every row
        self.base = {c: float(self.rng.randrange(0, 5_000_000, 1000)) for c in self.counters}
        self.temp: dict[int, float] = {}
        self.errors_at = sorted(self.rng.uniform(*self.spans[0]) for _ in range(6)) if fault == "ecc" else []
        # what every row repeats, written once: the memory clock and the limit; the
        # reason counters as they stand on a GPU whose counter never moves; which
        # counter the faulty GPU's fault moves
        self._fixed = [f"{cap.mem_mhz:.0f} MHz", f"{cap.limit_w:.2f} W"]
        self._still = [f"{self.base[c]:.0f} us" for c in self.counters]
        self._moves = [(fault, c.split(".")[1]) in (("thermal", "hw_thermal_slowdown"), ("power", "sw_power_cap"))
                       for c in self.counters]

    def _faulty(self, gpu: int, t: float) -> bool:
        return gpu == self.gpu and any(a <= t < b for a, b in self.spans)

    def _in(self, t: float) -> float:
        """Seconds of the fault spans before t."""
        return sum(max(0.0, min(t, b) - a) for a, b in self.spans)

    def watts(self, gpu: int, t: float, watts: float) -> float:
        if not self._faulty(gpu, t) or self.fault not in ("power", "hw_slowdown"):
            return watts
        top = self.cap.limit_w if self.fault == "power" else 480.0
        # the compute part of the draw rises to the limit (or falls with the clock)
        k = (top - self.lv.idle_w) / (self.lv.compute_w - self.lv.idle_w)
        return self.lv.idle_w + max(0.0, watts - self.lv.idle_w) * k

    def cells(self, gpu: int, t: float, state: str, busy: float, watts: float) -> list[str]:
        faulty = self._faulty(gpu, t)
        sm = self.cap.sm_mhz if busy > 0.05 else IDLE_MHZ
        active = 0x0 if busy > 0.05 else REASON_BIT["gpu_idle"]
        if faulty and self.fault in ("thermal", "power") and busy > 0.05:
            sm = 1410.0 + 15 * self.rng.randint(-3, 3)
            active = REASON_BIT["hw_thermal_slowdown" if self.fault == "thermal" else "sw_power_cap"]
        if faulty and self.fault == "hw_slowdown" and busy > 0.05:
            sm = 1095.0 + 15 * self.rng.randint(-2, 2)
            active = REASON_BIT["hw_slowdown"]
        # temperature follows the power with a lag of tens of seconds
        target = 30.0 + (self.cap.load_c - 30.0) * min(1.2, watts / self.cap.load_w)
        if faulty and self.fault == "thermal":
            target = 87.0
        prev = self.temp.get(gpu, target)
        self.temp[gpu] = prev + (target - prev) * 0.01
        temp = int(round(self.temp[gpu] + self.rng.gauss(0.0, 0.3)))
        vals = [f"{sm:.0f} MHz", self._fixed[0], str(temp), self._fixed[1]]
        if self.spelling == "counters":
            vals += [f"0x{active:016X}", "Active" if active & REASON_BIT["hw_slowdown"] else "Not Active"]
            if gpu != self.gpu or not any(self._moves):
                vals += self._still
            else:
                for c, moves, still in zip(self.counters, self._moves, self._still):
                    vals.append(f"{self.base[c] + self._in(t) * 1e6 * 0.97:.0f} us" if moves else still)
        elif self.spelling == "mask":
            vals.append(f"0x{active:016x}")
        else:
            vals += ["Active" if active & bit else "Not Active" for bit in REASON_BIT.values()]
        errors = sum(1 for a in self.errors_at if a <= t) if gpu == self.gpu else 0
        vals += [str(errors), "Yes" if errors else "No"]
        gen = LINK_GEN if busy > 0.05 else IDLE_GEN
        width = LINK_WIDTH
        if faulty and self.fault == "link-width":
            width = LINK_WIDTH // 2
        if faulty and self.fault == "link-gen" and busy > 0.05:
            gen = 3
        vals += [str(gen), str(LINK_GEN), str(width), str(LINK_WIDTH)]
        return vals


# -- timelines from the PAI job ---------------------------------------------------------

def pai_window(cold: bool = False, scale: float = SCALE, allreduce: float = 0.05) -> tuple[Timeline, list[tuple[float, float]]]:
    """Job 1, iterations FIRST..LAST: each worker computes its recorded batch time and
    spin-waits for the slowest, then all of them all-reduce. cold: worker 6 computes
    only the median batch time of its peers and is off the GPU (memory held, idle)
    for the rest of its recorded time. Returns the timeline and worker 6's slow spans."""
    rows, iters, workers = pai_rows(JOB)
    last = {w: 500.0 for w in workers}
    for it in iters:
        if it >= FIRST:
            break
        last.update(rows[it])
    iters = [it for it in iters if FIRST <= it <= LAST]
    slow: list[tuple[float, float]] = []
    tl = Timeline(len(workers), float("inf"))     # the end is known once the steps are laid out
    t = start_up(tl, LEAD)
    for k, it in enumerate(iters):
        last.update(rows[it])
        reps = (iters[k + 1] - it) if k + 1 < len(iters) else 1
        b = [max(1.0, last[w]) / 1000 * scale for w in workers]
        med = statistics.median(b)
        step = max(b)
        for _ in range(reps):
            end = t + step * (1 + allreduce)
            for g, bw in enumerate(b):
                if cold and g == SLOW_WORKER:
                    tl.add(g, t, t + min(bw, med), COMPUTE)
                    tl.add(g, t + min(bw, med), t + bw, IDLE)
                    tl.add(g, t + bw, end, SPIN)
                else:
                    tl.add(g, t, t + bw, COMPUTE)
                    tl.add(g, t + bw, end, SPIN)
            if b[SLOW_WORKER] > SLOW_FACTOR * med:
                if slow and t - slow[-1][1] <= SPAN_GAP:
                    slow[-1] = (slow[-1][0], end)
                else:
                    slow.append((t, end))
            t = end
    tl.end = t + 2.0 + 20.0                      # exit, then an idle tail
    job_exit(tl, t)
    return tl, slow


def seed_window(seed: int) -> Timeline:
    return seed_imbalance(seed, train=900.0)


# -- the real H100 logs with health columns ----------------------------------------------

def h100_with_health(name: str, out: Path, cap: Capture, lv: Levels, seed: int) -> Path:
    """The real log row for row (8 rows a poll, position = GPU), health columns appended."""
    src = H100 / f"{name}.csv"
    lines = src.read_text(encoding="utf-8").splitlines()
    h = Health(cap, lv, seed)
    body = []
    for i, line in enumerate(lines[1:]):
        cells = [c.strip() for c in line.split(",")]
        try:
            watts, util = float(cells[1].split()[0]), float(cells[2].split()[0])
        except (IndexError, ValueError):
            body.append(line)          # a broken row stays as recorded
            continue
        body.append(", ".join([line.rstrip(), *h.cells(i % 8, 0.0, "", util / 100.0, watts)]))
    path = out / f"h100_{name}+health.csv"
    path.write_text("\n".join([", ".join([lines[0].rstrip(), *h.header]), *body]) + "\n", encoding="utf-8")
    return path


# -- the cases ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _pai_job() -> tuple[Timeline, list[tuple[float, float]], Timeline, list[tuple[float, float]], Truth, Truth]:
    """Job 1's hot and cold timelines, worker 6's slow spans in each and their truths:
    every PAI case is written from one of the two. Made once a process (0.36 s) and
    shared by every build() there, as one whole build shares them between its cases:
    write_log reads a timeline (its close() is done once), and the truths are taken
    before the first case is written, so a case built alone is the same bytes."""
    hot, spans = pai_window()
    cold, cold_spans = pai_window(cold=True)
    return hot, spans, cold, cold_spans, truth_of(hot, None), truth_of(cold, None)


def build(out: Path, quick: bool = False, only: Collection[str] | None = None) -> list[CauseCase]:
    """Write every cause case under `out` and causes.json; deterministic. `only` names
    the cases to write (a test that needs two of twenty pays for two); each is the same
    bytes as in the whole build, its seed being fixed by its place in the list."""
    def want(name: str) -> bool:
        return only is None or name in only

    out.mkdir(parents=True, exist_ok=True)
    lv, cap = levels(), capture()
    fmts = ("avg",) if quick else ("avg", "instant")
    built: list[CauseCase] = []
    hot, spans, cold, cold_spans, hot_truth, cold_truth = _pai_job()
    gpu = str(SLOW_WORKER)
    variants = [
        # name, timeline, fault, cause, evidence, accept
        ("pai-more-work", hot, "", "more_work", True, ("more_work",)),
        ("pai-throttled-thermal", hot, "thermal", "throttling", True, ("throttling",)),
        ("pai-throttled-power", hot, "power", "throttling", True, ("throttling",)),
        ("pai-hw-slowdown", hot, "hw_slowdown", "degraded_hardware", True, ("degraded_hardware",)),
        ("pai-ecc", hot, "ecc", "degraded_hardware", True, ("degraded_hardware",)),
        ("pai-cold-rank", cold, "", "off_gpu", True, ("off_gpu",)),
        # the reasons as logged without the driver's counters, each spelling
        ("pai-throttled-power-event-states", hot, "power", "throttling", True, ("throttling",)),
        ("pai-throttled-thermal-throttle-states", hot, "thermal", "throttling", True, ("throttling",)),
        ("pai-throttled-thermal-mask", hot, "thermal", "throttling", True, ("throttling",)),
        ("pai-hw-slowdown-mask", hot, "hw_slowdown", "degraded_hardware", True, ("degraded_hardware",)),
        # a degraded PCIe link: the worker computes longer for it, no more work
        ("pai-link-width", hot, "link-width", "degraded_hardware", True, ("degraded_hardware",)),
        ("pai-link-gen", hot, "link-gen", "degraded_hardware", True, ("degraded_hardware",)),
    ]
    for k, (name, tl, fault, cause, evidence, accept) in enumerate(variants):
        spelling = next((sp for sp in SPELLINGS if name.endswith("-" + sp)), "counters")
        for fmt in fmts:
            if not want(f"{name}-{fmt}"):
                continue
            seed = 3000 + 10 * k + (fmt == "instant")
            path = out / f"{name}-{fmt}.csv"
            sp = cold_spans if tl is cold else spans
            write_log(str(path), tl, lv, fmt, seed, extra=Health(cap, lv, seed, SLOW_WORKER, sp, fault, spelling))
            built.append(CauseCase(f"{name}-{fmt}", cause, evidence, accept, gpu, path, fmt,
                                   truth=cold_truth if tl is cold else hot_truth,
                                   params={"spans": [[round(a, 1), round(b, 1)] for a, b in sp], "fault": fault or None}))
    # the same activity as recorded without health columns
    for fmt in fmts:
        if not want(f"pai-hot-plain-{fmt}"):
            continue
        path = out / f"pai-hot-plain-{fmt}.csv"
        write_log(str(path), hot, lv, fmt, 3100 + (fmt == "instant"))
        built.append(CauseCase(f"pai-hot-plain-{fmt}", "more_work", False, ("unknown",), gpu, path, fmt,
                               truth=hot_truth, note="more work or throttled: no clocks or throttle reasons"))
    if want("pai-cold-rank-plain-avg"):
        path = out / "pai-cold-rank-plain-avg.csv"
        write_log(str(path), cold, lv, "avg", 3110)
        built.append(CauseCase("pai-cold-rank-plain-avg", "off_gpu", True, ("off_gpu",), gpu, path, "avg",
                               truth=cold_truth, note="busy and power alone show the cold rank"))
    for k, name in enumerate(("ckpt1", "ckpt50")):
        if want(f"h100/{name}+health"):
            built.append(CauseCase(f"h100/{name}+health", "off_gpu", True, ("off_gpu",), "0",
                                   h100_with_health(name, out, cap, lv, 3200 + k)))
        if want(f"h100/{name}"):
            built.append(CauseCase(f"h100/{name}", "off_gpu", True, ("off_gpu",), "0", H100 / f"{name}.csv",
                                   note="the recorded log as it is"))
    if want("seed-imbalance+health-avg"):
        path = out / "seed-imbalance+health-avg.csv"
        write_log(str(path), seed_window(3300), lv, "avg", 3301, extra=Health(cap, lv, 3301))
        built.append(CauseCase("seed-imbalance+health-avg", "more_work", True, ("more_work",), "", path,
                               replay=False, note="an imbalance finding: 4 GPUs have no straggler"))
    if want("seed-imbalance-avg"):
        path = out / "seed-imbalance-avg.csv"
        write_log(str(path), seed_window(3310), lv, "avg", 3311)
        built.append(CauseCase("seed-imbalance-avg", "more_work", False, ("unknown", "more_work"), "", path,
                           replay=False, note="no clocks: more work is likely, unknown is honest"))
    doc = {c.name: {**{k: v for k, v in asdict(c).items() if k not in ("truth", "path")},
                    "path": str(c.path), "stragglers": list(c.truth.stragglers) if c.truth else None}
           for c in built}
    (out / "causes.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return built


def expected(c: CauseCase) -> str:
    """The class a case counts under in the confusion matrix."""
    return c.cause if c.evidence else "unknown"

