"""Every simulated scenario through the real engine, in virtual time."""
import pytest

from testing.config import test_config
from gpulse.drive import run_offline
from gpulse.sources.sim import SimSource


def run(scenario, gpus=8, seconds=60.0, **over):
    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=gpus, **over)
    snaps = [s for _, s in run_offline(SimSource(cfg), cfg, until=seconds)]
    return cfg, snaps


def group(snap):
    assert len(snap.groups) == 1
    return snap.groups[0]


def test_imbalance_after_one_window():
    cfg, snaps = run("imbalance", gpus=4, seconds=cfg_window() + 1)
    g = group(snaps[-1])
    assert g.imbalance >= 0.75
    assert g.load_balance <= 0.65


def cfg_window():
    return test_config().analysis_window


def test_straggler_stands_out_in_active():
    _, snaps = run("straggler", seconds=40)
    dev = {v.info.gpu: v.deviation_active for v in snaps[-1].gpus}
    hot = max(dev, key=dev.get)
    assert hot == "1"
    assert dev[hot] >= 3
    assert all(z <= 2 for k, z in dev.items() if k != hot)


def test_sync_stall_fraction_and_period():
    _, snaps = run("sync-stall", seconds=60)
    first, last = snaps[9], snaps[-1]      # rate over the last 50 s, like rate() would
    span = last.t - first.t
    rate = (group(last).stall_seconds - group(first).stall_seconds) / span
    assert 0.10 <= rate <= 0.20
    assert group(last).stall_period == pytest.approx(2.0, rel=0.10)
    # episodes are counted once they can no longer merge (at most 20 s late)
    assert group(last).stalls_total >= 15


def test_checkpoint_spin_wait_stall_period_and_cold_rank():
    _, snaps = run("checkpoint", seconds=140)
    last = snaps[-1]
    spin = {v.info.gpu: v.totals.spin_wait for v in last.gpus}
    assert spin["0"] == 0
    assert all(spin[str(i)] > 30 for i in range(1, 8))      # 4 checkpoints × 15 s
    g = group(last)
    assert g.stalls_total >= 4
    assert g.stall_period == pytest.approx(30.0, rel=0.10)
    # GPU 0 stands out in busy: mid-checkpoint, it is the one not spinning
    mid = next(s for s in snaps if 140 - 32 < s.t < 140 and s.t % 30 > 22)
    busy = {v.info.gpu: v.deviation_busy for v in mid.gpus}
    assert min(busy, key=busy.get) == "0"
    assert busy["0"] <= -3


@pytest.mark.parametrize("scenario", ["balanced", "idle"])
def test_balanced_and_idle_have_no_stalls(scenario):
    _, snaps = run(scenario, seconds=45)
    for s in snaps[5:]:
        g = group(s)
        assert g.stalls_total == 0
        assert g.imbalance < 0.15


def test_idle_is_no_job():
    _, snaps = run("idle", seconds=20)
    g = group(snaps[-1])
    assert not g.holding and g.stall_seconds == 0


def test_gpu_lost_keeps_the_others():
    _, snaps = run("gpu-lost", seconds=20)
    last = snaps[-1]
    up = {v.info.gpu: v.up for v in last.gpus}
    assert up["7"] is False and all(up[str(i)] for i in range(7))
    lost = next(v for v in last.gpus if v.info.gpu == "7")
    assert lost.counters["xid_errors_total"] == {("79",): 1.0}
    assert lost.active_ratio is None
    assert group(last).gpus == tuple(str(i) for i in range(8))


def test_deterministic_for_a_seed():
    a = run("sync-stall", seconds=10, sim__seed=7)[1][-1]
    b = run("sync-stall", seconds=10, sim__seed=7)[1][-1]
    c = run("straggler", seconds=10, sim__seed=8)[1][-1]
    assert [v.totals.busy for v in a.gpus] == [v.totals.busy for v in b.gpus]
    assert [v.totals.busy for v in a.gpus] != [v.totals.busy for v in c.gpus]
