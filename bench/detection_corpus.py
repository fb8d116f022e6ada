"""Labelled scenario corpus for the detection-quality bench.

Each run is one simulated node (its own `node` label) driven through the real
engine (`gpulse.engine.run_offline`) in virtual time: healthy for ONSET seconds,
then one anomaly with random parameters. At every scrape instant the bench keeps
what Prometheus would have scraped:

- the exporter's series the shipped rules read, rendered by the real collector
  (`gpulse.collector.snapshot_families`), and
- the baseline signal: an instantaneous utilisation gauge in percent, the value
  of the GPU at the scrape instant (`DCGM_FI_DEV_GPU_UTIL`, the way dcgm-exporter
  data is usually alerted on).

Ground truth comes from the scenario parameters, not from the detector:
    sync stall  positive ⇔ stall_length / stall_period > 0.2  (the alert's effect size)
    straggler   positive ⇔ |gap| ≥ 0.10                       (same)
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from gpulse.collector import snapshot_families
from gpulse.config import test_config
from gpulse.engine import run_offline
from gpulse.sources.sim import SCENARIOS, Scenario, SimSource

ONSET = 360.0            # healthy seconds first: every rate() window holds 5 m of data
DURATION = 1680.0        # onset + the slowest condition ramp (15 m share) + 10 m for: + slack
STALL_THRESHOLD = 0.2
GAP_THRESHOLD = 0.10

# Exporter series the sync-stall and straggler rules read (see prometheus/rules).
KEEP = {
    "gpulse_gpu_busy_seconds_total", "gpulse_gpu_active_seconds_total", "gpulse_gpu_sampled_seconds_total",
    "gpulse_group_active", "gpulse_group_sync_stall_seconds_total", "gpulse_group_sync_stalls_total",
    "gpulse_group_sampled_seconds_total", "gpulse_group_stall_period_seconds", "gpulse_gpu_up",
}
BASELINE_METRIC = "DCGM_FI_DEV_GPU_UTIL"


@dataclass
class Run:
    idx: int
    kind: str                    # stall | straggler | imbalance | pause | balanced
    seed: int
    gpus: int
    params: dict
    stall_positive: bool = False
    straggler_positive: bool = False
    stall_fraction: float = 0.0  # true share of time stalled after onset
    gap: float = 0.0             # true straggler gap (signed)
    series: dict = field(default_factory=dict)   # scrape interval -> {series text: [values]}

    @property
    def node(self) -> str:
        return f"r{self.idx:03d}"


class OnsetSim(SimSource):
    """The healthy scenario until `onset` seconds into the run, then the anomaly."""

    def __init__(self, cfg, healthy: Scenario, anomaly: Scenario, onset: float):
        super().__init__(cfg, anomaly)
        self.healthy = SimSource(cfg, healthy)
        self.onset = onset

    def sample(self, i, t):
        if self.t0 is not None and t - self.t0 < self.onset:
            self.healthy.t0 = self.t0
            return self.healthy.sample(i, t)
        return super().sample(i, t)


def expected_util(level: float, noise: float) -> float:
    """E[clip(level + U(-noise, noise), 0, 1)], the mean a GPU at this level shows."""
    over = max(0.0, level + noise - 1.0)
    under = max(0.0, noise - level)
    return level - over * over / (4 * noise) + under * under / (4 * noise)


def make_corpus(n: int, seed: int) -> list[Run]:
    """n runs with random parameters: 40 % stall, 40 % straggler, the rest negatives
    of other shapes (imbalanced halves, one long checkpoint pause, balanced)."""
    rng = random.Random(seed)
    runs = []
    for idx in range(n):
        u = rng.random()
        gpus = rng.choice((4, 8))
        noise = rng.uniform(0.005, 0.05)
        level = rng.uniform(0.55, 0.95)
        s = rng.randrange(1 << 30)
        if u < 0.4:
            period = math.exp(rng.uniform(math.log(1.0), math.log(60.0)))
            length = rng.uniform(0.2, min(5.0, 0.9 * period))
            jitter = rng.uniform(0.0, 0.1) * min(length, period - length)
            r = Run(idx, "stall", s, gpus, dict(period=round(period, 3), length=round(length, 3),
                                                jitter=round(jitter, 3), level=level, noise=noise))
            r.stall_fraction = length / period
            r.stall_positive = r.stall_fraction > STALL_THRESHOLD
        elif u < 0.8:
            gap = rng.uniform(0.0, 0.6)
            hot = level + gap <= 0.99 and (level - gap < 0.05 or rng.random() < 0.5)
            k = rng.randrange(gpus)
            slevel = level + gap if hot else level - gap
            r = Run(idx, "straggler", s, gpus, dict(gpu=k, level=level, straggler_level=slevel, noise=noise))
            # the simulator clips utilisation to 0..1, which pulls a level near either
            # end towards the middle: the truth is the gap between expected values
            r.gap = expected_util(slevel, noise) - expected_util(level, noise)
            r.straggler_positive = abs(r.gap) >= GAP_THRESHOLD
        elif u < 0.9:
            r = Run(idx, "imbalance", s, gpus, dict(level=0.95, low=rng.uniform(0.05, 0.9), noise=noise))
        elif u < 0.95:
            r = Run(idx, "pause", s, gpus, dict(length=rng.uniform(60.0, 240.0), level=level, noise=noise))
        else:
            r = Run(idx, "balanced", s, gpus, dict(level=level, noise=noise))
        runs.append(r)
    return runs


def scenarios(run: Run) -> tuple[Scenario, Scenario]:
    p = run.params
    healthy = replace(SCENARIOS["balanced"], level=p["level"], noise=p["noise"])
    if run.kind == "stall":
        anomaly = Scenario("stall", level=p["level"], noise=p["noise"], stall_period=p["period"],
                           stall_length=p["length"], stall_jitter=p["jitter"])
    elif run.kind == "straggler":
        anomaly = Scenario("straggler", level=p["level"], levels={p["gpu"]: p["straggler_level"]}, noise=p["noise"])
    elif run.kind == "imbalance":
        anomaly = Scenario("imbalance", level=p["level"], low_half=p["low"], noise=p["noise"])
    elif run.kind == "pause":
        # one checkpoint: rank 0 off the GPU, the others spin-waiting, once
        anomaly = Scenario("pause", level=p["level"], noise=p["noise"], ckpt_period=10 * DURATION,
                           ckpt_length=p["length"], ckpt_offset=ONSET + 60.0)
    else:
        anomaly = healthy
    return healthy, anomaly


def _labels(sample_labels: dict) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(sample_labels.items()))


def simulate(run: Run, scrape_intervals: tuple[int, ...]) -> Run:
    """Drive the run through the engine and keep every scrape's series."""
    cfg = test_config(source="sim", sim__gpus=run.gpus, sim__seed=run.seed, node_name=run.node)
    healthy, anomaly = scenarios(run)
    src = OnsetSim(cfg, healthy, anomaly, ONSET)
    out: dict[int, dict[str, list]] = {s: {} for s in scrape_intervals}
    n_scrapes = {s: 0 for s in scrape_intervals}
    for _, snap in run_offline(src, cfg, until=DURATION):
        t = snap.t - (src.t0 or 0.0)
        due = [s for s in scrape_intervals if t + 1e-6 >= (n_scrapes[s] + 1) * s]
        if not due:
            continue
        values: dict[str, float] = {}
        for fam in snapshot_families(snap):
            for smp in fam.samples:
                if smp.name in KEEP:
                    values[smp.name + "{" + _labels(smp.labels) + "}"] = smp.value
        for v in snap.gpus:
            sm = src.sample(int(v.info.gpu), snap.t)
            values[BASELINE_METRIC + "{" + _labels({"node": run.node, "gpu": v.info.gpu}) + "}"] = 100.0 * (sm.util or 0.0)
        for s in due:
            k = n_scrapes[s]
            n_scrapes[s] += 1
            for key, val in values.items():
                col = out[s].setdefault(key, [None] * k)
                col.extend([None] * (k - len(col)))
                col.append(val)
    for s in scrape_intervals:
        for col in out[s].values():
            col.extend([None] * (n_scrapes[s] - len(col)))
    run.series = out
    return run
