"""What counts as real work ("active") for one sample.

NVML utilisation means "a kernel was running". A rank blocked in an NCCL collective
runs a spinning kernel, so it reads ~100 % while doing nothing useful. In the real
8×H100 traces, GPUs 1–7 read 100 % at ~150 W while rank 0 checkpoints, against
~550 W when computing (700 W limit, ~70 W idle). Power tells the two apart:

    power-gated:  active = 0            if util >= SPIN_UTIL and power < G
                  active = util         otherwise
                  G = --power-gate (default 0.3) × the enforced power limit when known
                  (NVML, DCGM, the simulator): 210 W on a 700 W H100, which sits between
                  spin-waiting (~150 W) and work (~550 W).
                  Without a limit (a recorded nvidia-smi log) G = max(power-gate × the
                  highest power seen, IDLE_MULT × the idle floor), the idle floor being the
                  lowest power seen at idle utilisation. The second term matters when a GPU
                  never computes at full power during the log: in ckpt1.csv GPUs 1–7 spin
                  at ~150 W almost the whole run and peak at ~300 W, but idled at ~70 W
                  while the job started, so G = 210 W.
                  The gate only applies to high utilisation: light real work (15 % at
                  160 W) is low power *and* low utilisation, and stays active.
    utilization:  active = util (raw; cannot see spin-waits)
    sm_active:    active = SM activity (DCGM_FI_PROF_SM_ACTIVE / GPM), the best signal
    gr_engine_active: active = graphics-engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE);
                  like utilisation it counts a spinning kernel as active.

A sample without the chosen measure falls back to power-gated, then to raw
utilisation, so a source that lacks a field degrades instead of going blank.

Averaged power (nvidia-smi's 1 s power.draw, Engine.power_averaged): a spin-wait
shorter than the average never brings a sample under G, so the gate reads every
sample of a rank that spin-waits 0.1-0.6 s per step as work. The average of a 1 s
average over a window is the window's mean power, though, so the share of real work
is read linearly from where each sample's power lies between the GPU's own levels:
    share = clamp((P - S) / (W - S), 0, 1),  active = min(util, share)
    S: its spin-wait level, SPIN_MULT x its idle floor (150 W against 74 W idle on
       the real H100 traces), never at or above G;
    W: its sustained working power, the WORK_QUANTILE of its power while busy above
       G, over the last WorkLevel.SPAN samples (so a GPU capped mid-run is judged
       on its capped level).
Each GPU is calibrated on itself: a power-capped GPU that draws less, or a hotter one
that draws more, is not judged against its peers' watts. Only the active integral
takes the share; co-idle (the stall model) keeps the binary gate.
"""
from __future__ import annotations

from ..model import Sample
from .thresholds import value

# Spin-waiting is only plausible at high reported utilisation.
SPIN_UTIL = value("spin_util_ratio")
# Spin-waiting draws about twice idle power on the H100 traces, work six to eight times.
IDLE_MULT = value("idle_power_factor")
SPIN_MULT = value("spin_power_factor")
WORK_QUANTILE = value("work_power_quantile")


def spin_gate_watts(gate: float, power_limit_w: float | None, max_power_seen_w: float | None,
                    idle_floor_w: float | None) -> float | None:
    """G, the power below which a highly utilised GPU is spin-waiting (see module doc)."""
    if power_limit_w and power_limit_w > 0:
        return gate * power_limit_w
    g = gate * max_power_seen_w if max_power_seen_w and max_power_seen_w > 0 else None
    if idle_floor_w and idle_floor_w > 0:
        g = max(g or 0.0, IDLE_MULT * idle_floor_w)
    return g


class WorkLevel:
    """W of one GPU (see module doc): a histogram of its busy power above G, in
    BIN-watt bins, halved every SPAN samples so that it follows the GPU's recent
    level; the quantile is read again every STALE samples, not at each one."""

    BIN = 2.0
    SPAN = 6000        # about 10 minutes of 100 ms samples
    STALE = 50
    __slots__ = ("counts", "n", "since", "level")

    def __init__(self) -> None:
        self.counts: dict[int, float] = {}
        self.n = 0.0
        self.since = 0
        self.level: float | None = None

    def add(self, s: Sample, gate_w: float | None) -> None:
        if s.util is None or s.util < SPIN_UTIL or s.power_w is None or gate_w is None or s.power_w < gate_w:
            return
        b = int(s.power_w / self.BIN)
        self.counts[b] = self.counts.get(b, 0.0) + 1.0
        self.n += 1.0
        self.since += 1
        if self.n >= self.SPAN:
            self.counts = {k: v / 2 for k, v in self.counts.items() if v >= 1.0}
            self.n = sum(self.counts.values())
        if self.level is None or self.since >= self.STALE:
            self.since = 0
            need, acc = WORK_QUANTILE * self.n, 0.0
            for k in sorted(self.counts):
                acc += self.counts[k]
                if acc >= need:
                    self.level = (k + 0.5) * self.BIN
                    break


def work_levels(gate_w: float | None, idle_floor_w: float | None,
                work: WorkLevel) -> tuple[float, float] | None:
    """(S, W) of one GPU for the averaged-power share, or None while either is
    unknown or they leave no range (see module doc)."""
    if gate_w is None or not idle_floor_w or work.level is None:
        return None
    spin = min(SPIN_MULT * idle_floor_w, gate_w)
    return (spin, work.level) if work.level > spin else None


def _power_gated(s: Sample, gate_w: float | None) -> float | None:
    if s.util is None:
        return None
    if s.util >= SPIN_UTIL and s.power_w is not None and gate_w is not None and s.power_w < gate_w:
        return 0.0
    return s.util


def _power_share(s: Sample, gate_w: float | None, levels: tuple[float, float] | None) -> float | None:
    if levels is None or s.util is None or s.util < SPIN_UTIL or s.power_w is None:
        return _power_gated(s, gate_w)
    spin, work = levels
    return min(s.util, max(0.0, min(1.0, (s.power_w - spin) / (work - spin))))


def activity_of(s: Sample, mode: str, gate_w: float | None,
                levels: tuple[float, float] | None = None) -> float | None:
    """The active fraction (0..1) of one sample under `mode`; None when unknown.

    mode is one of: auto, power-gated, utilization, sm_active, gr_engine_active; gate_w
    is G from spin_gate_watts(); levels, (S, W) from work_levels() where the power is
    averaged, replace the gate by the linear share (module doc). auto takes SM activity where the sample has it, else
    power-gated utilisation — per sample, so a DCGM endpoint that starts serving
    profiling fields later is used as soon as they appear.
    """
    if mode == "auto":
        return s.sm_active if s.sm_active is not None else _power_share(s, gate_w, levels)
    if mode == "sm_active" and s.sm_active is not None:
        return s.sm_active
    if mode == "gr_engine_active" and s.gr_active is not None:
        return s.gr_active
    if mode == "utilization":
        return s.util
    return _power_share(s, gate_w, levels)
