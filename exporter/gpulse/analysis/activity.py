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
"""
from __future__ import annotations

from ..model import Sample
from .thresholds import value

# Spin-waiting is only plausible at high reported utilisation.
SPIN_UTIL = value("spin_util_ratio")
# Spin-waiting draws about twice idle power on the H100 traces, work six to eight times.
IDLE_MULT = value("idle_power_factor")


def spin_gate_watts(gate: float, power_limit_w: float | None, max_power_seen_w: float | None,
                    idle_floor_w: float | None) -> float | None:
    """G, the power below which a highly utilised GPU is spin-waiting (see module doc)."""
    if power_limit_w and power_limit_w > 0:
        return gate * power_limit_w
    g = gate * max_power_seen_w if max_power_seen_w and max_power_seen_w > 0 else None
    if idle_floor_w and idle_floor_w > 0:
        g = max(g or 0.0, IDLE_MULT * idle_floor_w)
    return g


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
