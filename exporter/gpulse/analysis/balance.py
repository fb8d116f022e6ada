"""Load balance across the GPUs of one peer group.

Inputs are per-GPU fractions over the analysis window, x_i = active_i / sampled_i
(or busy_i / sampled_i), all in 0..1.

    imbalance    = (max − min) / max        0 = even, 1 = some GPU did nothing
    load_balance = mean / max               1 = even; the share of the group's capacity
                                            that is not spent waiting for the busiest GPU
    robust z_i   = (x_i − median) / max(1.4826 · MAD, floor)

MAD is the median absolute deviation from the median; 1.4826·MAD estimates the
standard deviation for normal data and ignores the straggler itself. The floor
(z_mad_floor in analysis/thresholds.py, 0.05, i.e. five percentage points) keeps a
perfectly even group from turning a 1 % wobble into a huge z-score: a GPU must be
≥ 0.175 away from its peers' median to reach |z| = straggler_z = 3.5.

A group whose busiest GPU is below `idle_max` (nothing running) is balanced by
definition: imbalance 0, load balance 1.

Example (pinned in the tests): 0.99, 0.99, 0.15, 0.15 → imbalance (0.99−0.15)/0.99 =
0.848, load balance 0.57/0.99 = 0.576.
"""
from __future__ import annotations

from statistics import median
from typing import Sequence

from .thresholds import value

MAD_TO_SIGMA = 1.4826   # a constant of the normal distribution, not a threshold
DEFAULT_Z_FLOOR = value("z_mad_floor")


def imbalance(xs: Sequence[float], idle_max: float = 0.0) -> float:
    if not xs:
        return 0.0
    hi = max(xs)
    if hi <= idle_max or hi <= 0:
        return 0.0
    return (hi - min(xs)) / hi


def load_balance(xs: Sequence[float], idle_max: float = 0.0) -> float:
    if not xs:
        return 1.0
    hi = max(xs)
    if hi <= idle_max or hi <= 0:
        return 1.0
    return (sum(xs) / len(xs)) / hi


def robust_z(xs: Sequence[float], floor: float = DEFAULT_Z_FLOOR) -> list[float]:
    """Robust z-score of every element against the others' median (see module doc)."""
    if len(xs) < 2:
        return [0.0 for _ in xs]
    med = median(xs)
    mad = median(abs(x - med) for x in xs)
    scale = max(MAD_TO_SIGMA * mad, floor)
    return [(x - med) / scale for x in xs]


def peer_deviation(xs: dict[str, float], floor: float = DEFAULT_Z_FLOOR) -> dict[str, float]:
    """robust_z keyed by GPU."""
    keys = list(xs)
    return dict(zip(keys, robust_z([xs[k] for k in keys], floor)))
