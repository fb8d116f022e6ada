"""Integrate sub-second samples into the per-GPU time counters.

Each sample covers the time since the previous sample of the same GPU (the driver
reports utilisation over the period that just ended), so for sample i:

    dt_i         = t_i − t_{i−1}                 (skipped when ≤ 0 or > max_gap: a gap
                                                  or a clock jump is uncovered time, never
                                                  negative time — counters only grow)
    busy        += util_i · dt_i                  rate(busy) = mean utilisation
    active      += active_i · dt_i
    spin_wait   += max(0, util_i − active_i) · dt_i
    idle        += dt_i   if util_i < idle_threshold
    sampled     += dt_i                           rate(sampled) = coverage (1 = no gaps)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Integrals:
    busy: float = 0.0
    active: float = 0.0
    spin_wait: float = 0.0
    idle: float = 0.0
    sampled: float = 0.0

    def add(self, other: "Integrals") -> None:
        self.busy += other.busy
        self.active += other.active
        self.spin_wait += other.spin_wait
        self.idle += other.idle
        self.sampled += other.sampled

    def sub(self, other: "Integrals") -> None:
        self.busy -= other.busy
        self.active -= other.active
        self.spin_wait -= other.spin_wait
        self.idle -= other.idle
        self.sampled -= other.sampled


def integrate_sample(acc: Integrals, dt: float, util: float, active: float, idle_threshold: float) -> None:
    """Add one sample's contribution (dt already validated by the caller)."""
    acc.busy += util * dt
    acc.active += active * dt
    if util > active:
        acc.spin_wait += (util - active) * dt
    if util < idle_threshold:
        acc.idle += dt
    acc.sampled += dt
