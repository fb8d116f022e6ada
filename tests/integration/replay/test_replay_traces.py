"""The real 8×H100 traces replayed through the engine: what the analysis must find.

See ../shared/data/README.md for what happens in each run. Stall episodes are read
from what Prometheus would see — the group's stall-seconds counter, tick by tick —
not from the engine's internals.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

import pytest

from conftest import require_data
from testing.config import test_config
from gpulse.drive import run_offline
from gpulse.sources.recorded import read_log
from gpulse.sources.replay import ReplaySource


@dataclass
class Replayed:
    start: float                                  # recorded start of the log
    ticks: list[tuple[float, float, bool]]        # (t, group stall seconds so far, group holding)
    dev_busy: dict[str, list[float]]              # per GPU, per tick
    dev_active: dict[str, list[float]]
    totals: dict[str, object]                     # per GPU Integrals at the end
    stall_seconds: float
    stall_period: float | None
    run: object                                   # the RecordedRun (replay streams it; this is all of it)

    def episodes(self) -> list[tuple[float, float]]:
        """(start offset, stalled seconds) of each stretch of ticks in which the stall
        counter grew; a quiet tick ends a stretch."""
        out: list[list[float]] = []
        prev_s, prev_grew = 0.0, False
        prev_t = self.start
        for t, s, _ in self.ticks:
            d = s - prev_s
            if d > 1e-9:
                if prev_grew:
                    out[-1][1] += d
                else:
                    out.append([prev_t - self.start, d])
            prev_grew, prev_s, prev_t = d > 1e-9, s, t
        return [(a, b) for a, b in out]


@functools.lru_cache(maxsize=None)
def replay(name: str) -> Replayed:
    cfg = test_config(source="replay", replay__file=str(require_data(f"traces/h100-8gpu/{name}.csv")),
                      replay__speed=0)
    src = ReplaySource(cfg)
    ticks, dev_b, dev_a = [], {}, {}
    snap = None
    for _, snap in run_offline(src, cfg):
        (group,) = snap.groups
        ticks.append((snap.t, group.stall_seconds, group.holding))
        for g in snap.gpus:
            if g.deviation_busy is not None:
                dev_b.setdefault(g.info.gpu, []).append(g.deviation_busy)
                dev_a.setdefault(g.info.gpu, []).append(g.deviation_active)
    (group,) = snap.groups
    return Replayed(src.run.start, ticks, dev_b, dev_a, {g.info.gpu: g.totals for g in snap.gpus},
                    group.stall_seconds, group.stall_period, read_log(cfg.replay.file))


def _window(values: list[float], ticks, lo: float, hi: float, start: float) -> list[float]:
    return [v for v, (t, _, _) in zip(values, ticks) if lo <= t - start <= hi]


def test_ckpt1_rank0_stands_out_and_the_rest_spin_wait():
    r = replay("ckpt1")
    # while the job trains (t ≈ 106..665 s): GPU 0 far below its peers in busy
    busy0 = statistics.median(_window(r.dev_busy["0"], r.ticks, 120, 650, r.start))
    assert busy0 < -5
    for g in "1234567":
        assert abs(statistics.median(_window(r.dev_busy[g], r.ticks, 120, 650, r.start))) < 1
    # GPUs 1-7 alike, and most of their run is spin-waiting (busy, not working)
    spins = [r.totals[g].spin_wait / r.totals[g].sampled for g in "1234567"]
    assert min(spins) > 0.5
    assert max(spins) - min(spins) < 0.05
    assert r.totals["0"].spin_wait / r.totals["0"].sampled < 0.05


def test_ckpt1000_counts_the_checkpoint_stalls_and_their_period():
    r = replay("ckpt1000")
    long = [(a, d) for a, d in r.episodes() if d >= 10]
    # the two checkpoints inside the run, ~17 s each, ~250 s apart
    assert len(long) == 2
    (a1, d1), (a2, d2) = long
    assert 340 < a1 < 356 and 592 < a2 < 608
    assert 12 < d1 < 20 and 12 < d2 < 20
    # those stalls are (nearly) all the stall time: not split up, nothing else counted
    assert d1 + d2 >= 0.9 * r.stall_seconds
    assert r.stall_period is not None and abs(r.stall_period - 249) <= 0.1 * 249
    # ... although GPUs 1-7 read ~100 % utilisation through them
    for a, d in long:
        lo, hi = r.start + a + 2, r.start + a + d - 2
        utils = [rec.sample.util for rec in r.run.records
                 if rec.gpu != "0" and lo <= rec.t <= hi and rec.sample.util is not None]
        assert statistics.mean(utils) > 0.95


def test_ckpt500_restart_gap_is_not_a_stall():
    r = replay("ckpt500")
    # the job exits at ≈400.6 s and memory is released; at ≈527 s the next run creates
    # its CUDA contexts (0.5 GiB each) and trains from ≈631 s
    released = [holding for t, _, holding in r.ticks if 410 <= t - r.start <= 520]
    assert released and not any(released)
    in_gap = [s for t, s, _ in r.ticks if 410 <= t - r.start <= 620]
    assert in_gap[-1] - in_gap[0] == pytest.approx(0.0)
    assert all(not (405 < a < 625) for a, _ in r.episodes())
    # there are no minutes-long episodes anywhere
    assert max(d for _, d in r.episodes()) < 60
