"""Pure functions over samples: no clock, no I/O, no threads.

The same code runs live (engine fed by the sampler), on replayed logs, in the
post-mortem report and in the benchmarks. Each function documents its formula.
"""
from .activity import activity_of, spin_gate_watts
from .balance import imbalance, load_balance, peer_deviation, robust_z
from .coidle import Episode, Run, StallTracker
from .integrate import Integrals, integrate_sample
from .period import stall_period

__all__ = [
    "activity_of", "spin_gate_watts", "imbalance", "load_balance", "peer_deviation",
    "robust_z", "Episode", "Run", "StallTracker", "Integrals", "integrate_sample", "stall_period",
]
