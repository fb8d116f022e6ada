"""The live sampler thread on a virtual clock (gpulse/clock.py): a straggler's
minutes of verdict in the seconds the CPU takes, then the last snapshot held."""
from __future__ import annotations

import pytest

from gpulse.clock import VirtualClock
from gpulse.sampler import Sampler
from gpulse.sources.sim import SimSource
from testing.config import test_config


def test_the_sampler_in_virtual_time_confirms_a_straggler_and_holds_its_last_snapshot():
    """The live sampler thread on a virtual clock: minutes of verdict in the time
    the CPU takes; then ready no more, alive, never stale, the verdict served."""
    cfg = test_config(source="sim", sim__gpus=4, sim__scenario="straggler-throttled")
    sampler = Sampler(cfg, SimSource(cfg), clock=VirtualClock(wall0=1e9, until=300.0))
    sampler.start()
    try:
        sampler._thread.join(60)
        assert not sampler.alive and sampler.held
        h = sampler.health()
        assert h["alive"] and not h["stale"] and "virtual clock is spent" in h["not_ready"]
        snap = sampler.snapshot
        assert snap.wall == pytest.approx(1e9 + 300.1)
        assert [(v.info.gpu, v.straggler is not None) for v in snap.gpus] == [
            ("0", False), ("1", False), ("2", False), ("3", True)]
        assert snap.gpus[3].cause.cause == "throttling"
        assert snap.health["polls_total"] == 3001   # 0, 0.1, ..., 300 s
    finally:
        sampler.stop()
