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

Averaged power (nvidia-smi's 1 s power.draw; Engine.power_averaged): a spin-wait
shorter than the average never brings a sample under G, so the gate reads every
sample of a rank that spin-waits 0.1-0.6 s per step as work. The mean of a 1 s
average over a window is the window's mean power, though, so where a GPU's own
levels are known the active integral takes the share of work read from where each
sample's power lies between them:
    share = min(util, clamp((P - S) / (W - S), 0, 1))    (util >= SPIN_UTIL only)
    S: its spin-wait level, the median power of its own busy samples under G (at
       least share_spin_seconds of them: a wait of a second or more, such as a
       checkpoint or a start-up barrier; 145-163 W on the H100 traces);
    W: its working level, the WORK_QUANTILE of its power over its sustained-compute
       samples (busy above G for at least a second: the average is all work), at
       least share_work_seconds of them; both over its last ~10 minutes.
    Where no GPU of the source has a spin level (steps with sub-second waits only),
    S is its idle floor, a lower bound: every GPU's waits read ~0.17 of work on the
    H100 levels, and a straggler's cost ~0.84 of its true figure (Engine._judge_share).
The share applies only where W - S is at least share_gap_factor x G: on a GPU that
never computes long enough to show its full power (ckpt1's peers peak at ~300 W
between checkpoints), a spin-wait a few watts above S would read as work.
Otherwise, and on instantaneous power, the gate stands (PowerLevels.levels).
"""
from __future__ import annotations

from ..model import Sample
from .thresholds import value

# Spin-waiting is only plausible at high reported utilisation.
SPIN_UTIL = value("spin_util_ratio")
# Spin-waiting draws about twice idle power on the H100 traces, work six to eight times.
IDLE_MULT = value("idle_power_factor")
SPIN_SECONDS = value("share_spin_seconds")
WORK_SECONDS = value("share_work_seconds")
WORK_QUANTILE = value("work_power_quantile")
GAP_FACTOR = value("share_gap_factor")


def spin_gate_watts(gate: float, power_limit_w: float | None, max_power_seen_w: float | None,
                    idle_floor_w: float | None) -> float | None:
    """G, the power below which a highly utilised GPU is spin-waiting (see module doc)."""
    if power_limit_w and power_limit_w > 0:
        return gate * power_limit_w
    g = gate * max_power_seen_w if max_power_seen_w and max_power_seen_w > 0 else None
    if idle_floor_w and idle_floor_w > 0:
        g = max(g or 0.0, IDLE_MULT * idle_floor_w)
    return g


def _quantile(counts: dict[int, float], q: float, width: float) -> float:
    need, acc = q * sum(counts.values()), 0.0
    for k in sorted(counts):
        acc += counts[k]
        if acc >= need:
            break
    return (k + 0.5) * width


class PowerLevels:
    """S and W of one GPU (module doc): its busy seconds by power, in BIN-watt bins,
    under the gate (spin) and in sustained compute (work); each halved when it
    passes SPAN seconds, so that the levels follow the GPU's recent ones (a GPU
    capped mid-run is judged on its capped level). add() is the per-sample cost:
    a few comparisons and one dict update."""

    BIN = 2.0
    SPAN = 600.0
    SUSTAIN = 1.0       # seconds above the gate before an averaged sample is all work
    __slots__ = ("spin", "work", "spin_s", "work_s", "above_since")

    def __init__(self) -> None:
        self.spin: dict[int, float] = {}
        self.work: dict[int, float] = {}
        self.spin_s = 0.0
        self.work_s = 0.0
        self.above_since: float | None = None

    def add(self, t: float, dt: float, util: float | None, power_w: float | None, gate_w: float | None) -> None:
        if util is None or util < SPIN_UTIL or power_w is None or gate_w is None:
            self.above_since = None
            return
        b = int(power_w / self.BIN)
        if power_w < gate_w:
            self.above_since = None
            self.spin[b] = self.spin.get(b, 0.0) + dt
            self.spin_s += dt
            if self.spin_s > self.SPAN:
                self.spin, self.spin_s = _halve(self.spin)
            return
        if self.above_since is None:
            self.above_since = t
        if t - self.above_since >= self.SUSTAIN:
            self.work[b] = self.work.get(b, 0.0) + dt
            self.work_s += dt
            if self.work_s > self.SPAN:
                self.work, self.work_s = _halve(self.work)

    def spin_level(self) -> float | None:
        """S, once share_spin_seconds of spin-waiting are seen, else None."""
        return _quantile(self.spin, 0.5, self.BIN) if self.spin_s >= SPIN_SECONDS else None

    def levels(self, gate_w: float | None, spin_w: float | None) -> tuple[float, float] | None:
        """(S, W) for the share, or None where the gate stands (module doc): no gate,
        no spin level (spin_w: its own spin_level(), or a peer's where it never
        waits), too little sustained compute, or too small a gap between them."""
        if gate_w is None or spin_w is None or self.work_s < WORK_SECONDS:
            return None
        work_w = _quantile(self.work, WORK_QUANTILE, self.BIN)
        return (spin_w, work_w) if work_w - spin_w >= GAP_FACTOR * gate_w else None


def _halve(counts: dict[int, float]) -> tuple[dict[int, float], float]:
    kept = {k: v / 2 for k, v in counts.items()}
    return kept, sum(kept.values())


def share_of(s: Sample, mode: str, act: float, levels: tuple[float, float]) -> float:
    """The active share of one sample between its GPU's levels (module doc), for
    mode auto or power-gated; act, what activity_of() gave, where the share does not
    apply (SM activity under auto, low utilisation, no power)."""
    u, pw = s.util, s.power_w
    if u is None or u < SPIN_UTIL or pw is None or (mode == "auto" and s.sm_active is not None):
        return act
    spin, work = levels
    # min(u, clamp(x, 0, 1)), written as the comparisons min() and max() make, in their
    # order (so the same value, NaN included): it runs for every sample of a log, and
    # the three builtin calls were most of its cost
    x = (pw - spin) / (work - spin)
    x = x if x < 1.0 else 1.0
    x = x if x > 0.0 else 0.0
    return x if x < u else u


def _power_gated(s: Sample, gate_w: float | None) -> float | None:
    if s.util is None:
        return None
    if s.util >= SPIN_UTIL and s.power_w is not None and gate_w is not None and s.power_w < gate_w:
        return 0.0
    return s.util


def activity_of(s: Sample, mode: str, gate_w: float | None) -> float | None:
    """The active fraction (0..1) of one sample under `mode`; None when unknown.

    mode is one of: auto, power-gated, utilization, sm_active, gr_engine_active; gate_w
    is G from spin_gate_watts(). auto takes SM activity where the sample has it, else
    power-gated utilisation — per sample, so a DCGM endpoint that starts serving
    profiling fields later is used as soon as they appear.
    """
    if mode == "auto":
        return s.sm_active if s.sm_active is not None else _power_gated(s, gate_w)
    if mode == "sm_active" and s.sm_active is not None:
        return s.sm_active
    if mode == "gr_engine_active" and s.gr_active is not None:
        return s.gr_active
    if mode == "utilization":
        return s.util
    return _power_gated(s, gate_w)
