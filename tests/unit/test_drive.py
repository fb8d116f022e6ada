"""The one drive loop (gpulse/drive.py) on its clocks (gpulse/clock.py)."""
from __future__ import annotations

import threading

import pytest

from gpulse.clock import ClockError, VirtualClock, WallClock, clock_from_env
from gpulse.drive import Driver, run_offline
from gpulse.engine import Engine
from gpulse.sources.sim import SimSource
from testing.config import test_config


def test_a_virtual_clock_jumps_and_runs_out(tmp_path):
    path = tmp_path / "clock"
    c = VirtualClock(wall0=1000.0, until=2.0, publish=str(path))
    assert (c.now(), c.wall(), path.read_text()) == (0.0, 1000.0, "1000000000\n")
    c.sleep_until(1.5, threading.Event())
    assert (c.now(), c.wall(), c.spent, path.read_text()) == (1.5, 1001.5, False, "1001500000\n")
    c.sleep_until(1.0, threading.Event())   # never backwards
    assert c.now() == 1.5
    c.sleep_until(2.5, threading.Event())
    assert c.spent


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "inf", "nan", ""])
def test_a_virtual_clock_setting_that_cannot_work_is_one_line(raw):
    with pytest.raises(ClockError) as e:
        clock_from_env({"GPULSE_VIRTUAL_CLOCK": raw})
    assert str(e.value).startswith("GPULSE_VIRTUAL_CLOCK: ") and "\n" not in str(e.value)


def test_an_unwritable_clock_file_is_one_line(tmp_path):
    with pytest.raises(ClockError) as e:
        clock_from_env({"GPULSE_VIRTUAL_CLOCK": "10", "GPULSE_VIRTUAL_CLOCK_FILE": str(tmp_path / "no" / "clock")})
    assert str(e.value).startswith("GPULSE_VIRTUAL_CLOCK_FILE: cannot write ")


def test_without_the_setting_the_clock_is_the_wall_clock():
    assert isinstance(clock_from_env({}), WallClock)


def _cfg():
    return test_config(source="sim", sim__gpus=4, sim__scenario="straggler-throttled")


def test_live_ticks_follow_the_clock_from_the_first_poll():
    """Live (clock ticks): a snapshot at the first poll (something to serve at
    once), the next two intervals on, then one at the first poll of each interval
    of the clock, each stamped with the clock's wall time."""
    cfg = _cfg()
    src = SimSource(cfg)
    engine = Engine(cfg, src.open(), src.name)
    driver = Driver(src, engine, VirtualClock(wall0=500.0, until=10.0), cfg.sample_interval, keep_going=True,
                    health=lambda: {"polls_total": driver.polls_total})
    walls = [(round(s.wall - 500.0, 6), s.health["polls_total"]) for s in driver.run()]
    assert walls[:3] == [(0.0, 1), (2.0, 21), (3.0, 31)]
    gaps = [b[0] - a[0] for a, b in zip(walls[1:], walls[2:])]
    assert len(walls) == 9 and all(1.0 - 1e-6 <= g <= 1.1 + 1e-6 for g in gaps), walls
    assert driver.polls_total == 101 and driver.last_success == pytest.approx(10.0)


def test_a_poll_that_raises_is_counted_live_and_ends_an_offline_run():
    cfg = _cfg()

    class Broken(SimSource):
        def poll(self, now):
            if 0.45 < now < 0.55:
                raise RuntimeError("driver fell over")
            return super().poll(now)

    src = Broken(cfg)
    engine = Engine(cfg, src.open(), src.name)
    driver = Driver(src, engine, VirtualClock(until=3.0), cfg.sample_interval, keep_going=True)
    assert len(list(driver.run())) == 2 and (driver.polls_total, driver.poll_failures_total) == (30, 1)
    with pytest.raises(RuntimeError, match="driver fell over"):
        list(run_offline(Broken(cfg), cfg, until=2.0))
