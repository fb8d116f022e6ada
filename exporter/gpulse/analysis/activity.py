"""What counts as real work ("active") for one sample.

NVML utilisation means "a kernel was running". A rank blocked in an NCCL collective
runs a spinning kernel, so it reads ~100 % while doing nothing useful. In the real
8×H100 traces, GPUs 1–7 read 100 % at ~150 W while rank 0 checkpoints, against
~550 W when computing (700 W limit, ~70 W idle). Power tells the two apart:

    power-gated:  active = 0            if util >= SPIN_UTIL and power < gate × P_ref
                  active = util         otherwise
                  gate = --power-gate (default 0.3), P_ref = the enforced power limit when
                  known, else the highest power this GPU has drawn so far.
                  On the H100 traces P_ref ≈ 700 W → 210 W, which sits between spin-waiting
                  (~150 W) and work (~550 W). The gate only applies to high utilisation:
                  light real work (15 % at 160 W) is low power *and* low utilisation, and
                  stays active.
    utilization:  active = util (raw; cannot see spin-waits)
    sm_active:    active = SM activity (DCGM_FI_PROF_SM_ACTIVE / GPM), the best signal
    gr_engine_active: active = graphics-engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE);
                  like utilisation it counts a spinning kernel as active.

A sample without the chosen measure falls back to power-gated, then to raw
utilisation, so a source that lacks a field degrades instead of going blank.
"""
from __future__ import annotations

from ..model import Sample

# Spin-waiting is only plausible at high reported utilisation.
SPIN_UTIL = 0.5


def power_reference(power_limit_w: float | None, max_power_seen_w: float | None) -> float | None:
    """P_ref = enforced power limit when known, else the highest power seen so far."""
    if power_limit_w and power_limit_w > 0:
        return power_limit_w
    if max_power_seen_w and max_power_seen_w > 0:
        return max_power_seen_w
    return None


def _power_gated(s: Sample, p_ref: float | None, gate: float) -> float | None:
    if s.util is None:
        return None
    if s.util >= SPIN_UTIL and s.power_w is not None and p_ref is not None and s.power_w < gate * p_ref:
        return 0.0
    return s.util


def activity_of(s: Sample, mode: str, p_ref: float | None, gate: float) -> float | None:
    """The active fraction (0..1) of one sample under `mode`; None when unknown.

    mode is one of: power-gated, utilization, sm_active, gr_engine_active.
    """
    if mode == "sm_active" and s.sm_active is not None:
        return s.sm_active
    if mode == "gr_engine_active" and s.gr_active is not None:
        return s.gr_active
    if mode == "utilization":
        return s.util
    return _power_gated(s, p_ref, gate)
