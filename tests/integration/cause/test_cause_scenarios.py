"""Every straggler-cause sim scenario through the real engine in virtual time: the
GPU the scenario slows is the one straggler, with the scenario's cause."""
import pytest

from gpulse.analysis.thresholds import value
from testing.config import test_config
from gpulse.drive import run_offline
from gpulse.sources.sim import SCENARIOS, SimSource


EXPECTED = {   # scenario -> (straggler GPU, cause)
    "straggler-throttled": ("3", "throttling"),
    "straggler-hw-slowdown": ("3", "degraded_hardware"),
    "straggler-link-errors": ("3", "degraded_hardware"),
    "straggler-more-work": ("3", "more_work"),
    "straggler-off-gpu": ("3", "off_gpu"),
    "straggler": ("1", "more_work"),
}


def test_every_cause_scenario_is_registered():
    assert {n for n in SCENARIOS if n.startswith("straggler-")} == {n for n in EXPECTED if n != "straggler"}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_sim_scenario_through_the_engine(scenario):
    gpu, want = EXPECTED[scenario]
    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=8)
    confirm = value("straggler_min_span_seconds")
    seen = {}
    for _, snap in run_offline(SimSource(cfg), cfg, until=confirm + cfg.analysis_window + 30):
        for v in snap.gpus:
            assert (v.cause is None) == (v.straggler is None), (snap.t, v.info.gpu)
            if v.cause is not None:
                seen.setdefault(v.info.gpu, set()).add(v.cause.cause)
    assert seen == {gpu: {want}}
