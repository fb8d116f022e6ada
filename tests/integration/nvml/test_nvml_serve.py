"""`gpulse serve --source nvml` as a process, loading the fake libnvidia-ml through
LD_LIBRARY_PATH exactly as it would load the driver's library."""
from __future__ import annotations

import ctypes.util
import statistics
import textwrap
import time

import pytest
import requests

import fakenvml
from conftest import Gpulse, require_binary
from scrape import one, per_gpu, series


@pytest.fixture(scope="module", autouse=True)
def built():
    require_binary("gcc")
    fakenvml.build()


def scenario(tmp_path, text: str, name: str = "scenario.txt") -> dict[str, str]:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return fakenvml.env(p)


def test_serve_reports_every_gpu(gpulse_proc, tmp_path):
    g = gpulse_proc("--source", "nvml", env=scenario(tmp_path, """
        gpus 8
        util * const 0.9
        mig 7 3g.40gb:1 3g.40gb:2
    """))
    text = g.wait_metrics(lambda t: len([v for v in per_gpu(t, "gpulse_gpu_busy_seconds_total").values() if v > 0]) >= 7,
                    "busy time on every GPU", 15)
    up = per_gpu(text, "gpulse_gpu_up")
    assert up == {str(i): 1.0 for i in range(8)} | {"7/1": 1.0, "7/2": 1.0}
    info = {dict(k)["gpu"]: dict(k) for k in series(text, "gpulse_gpu_info")}
    assert info["3"]["model"] == "NVIDIA H100 80GB HBM3" and info["3"]["driver"] == "550.54.15"
    assert info["7/2"]["mig_profile"] == "3g.40gb" and info["7/2"]["parent_uuid"] == info["7"]["uuid"]
    assert dict(next(iter(series(text, "gpulse_build_info"))))["source"] == "nvml"
    for name in ("gpulse_gpu_power_watts", "gpulse_gpu_temperature_celsius", "gpulse_gpu_energy_joules_total"):
        assert set(per_gpu(text, name)) >= {str(i) for i in range(8)}, name
    busy = per_gpu(text, "gpulse_gpu_busy_seconds_total")
    sampled = per_gpu(text, "gpulse_gpu_sampled_seconds_total")
    assert busy["0"] / sampled["0"] == pytest.approx(0.9, abs=0.01)


# The simulator's sync-stall scenario (every GPU to 0 % for 0.3 s every 2 s, 0.95
# while computing, ~90 W stalled and ~580 W computing), written for the fake driver.
# The stall sits at [0.05, 0.35) of each period, so its edges fall between the
# driver's 1/6 s sample times and it spans two samples (0.33 s), as a 0.3 s stall
# does in the simulator's 0.1 s steps; with an edge on a sample time it could span
# one (0.17 s), under --min-stall.
SYNC_STALL = """
    gpus 4
    util * square period=2 duty=0.85 high=0.95 low=0 phase=1.65
    power * follow idle=90 max=604
    memory * const 66571993088
"""


def test_stall_scenario_gives_the_same_derived_metrics_as_the_simulator(gpulse_proc, tmp_path):
    nv = gpulse_proc("--source", "nvml", env=scenario(tmp_path, SYNC_STALL))
    sim = gpulse_proc("--source", "sim", "--sim.scenario", "sync-stall", "--sim.gpus", "4")
    got = {}
    for name, g in (("nvml", nv), ("sim", sim)):
        got[name] = g.wait_metrics(lambda t: one(t, "gpulse_group_stall_period_seconds") is not None
                             and one(t, "gpulse_group_sampled_seconds_total") >= 8, f"{name} stall period", 25)
    figures = {}
    for name, text in got.items():
        sampled = one(text, "gpulse_group_sampled_seconds_total")
        busy = per_gpu(text, "gpulse_gpu_busy_seconds_total")
        gpu_sampled = per_gpu(text, "gpulse_gpu_sampled_seconds_total")
        figures[name] = {
            "period": one(text, "gpulse_group_stall_period_seconds"),
            "stall_fraction": one(text, "gpulse_group_sync_stall_seconds_total") / sampled,
            "busy": statistics.mean(busy[k] / gpu_sampled[k] for k in busy),
            "spin": sum(per_gpu(text, "gpulse_gpu_spin_wait_seconds_total").values()),
            "imbalance": one(text, "gpulse_group_imbalance_ratio"),
        }
    n, s = figures["nvml"], figures["sim"]
    assert n["period"] == pytest.approx(2.0, abs=0.15) and s["period"] == pytest.approx(2.0, abs=0.15)
    # (episodes are counted only once they can no longer merge, ~20 s later, so the
    # comparison uses the live stall seconds and the period)
    assert n["stall_fraction"] == pytest.approx(s["stall_fraction"], abs=0.05), figures
    assert n["busy"] == pytest.approx(s["busy"], abs=0.05), figures
    assert n["spin"] < 0.5 and s["spin"] < 0.5, figures       # stalls are idle, not spin-waits
    assert n["imbalance"] < 0.1 and s["imbalance"] < 0.1, figures


def test_one_gpu_lost_while_the_others_keep_reporting(gpulse_proc, tmp_path):
    g = gpulse_proc("--source", "nvml", env=scenario(tmp_path, """
        gpus 4
        fault 2 * lost at=1.5
    """))
    first = g.wait_metrics(lambda t: per_gpu(t, "gpulse_gpu_up").get("2") == 0, "GPU 2 down", 15)
    time.sleep(2.5)
    later = g.metrics()
    up = per_gpu(later, "gpulse_gpu_up")
    assert up == {"0": 1, "1": 1, "2": 0, "3": 1}
    b0, b1 = per_gpu(first, "gpulse_gpu_busy_seconds_total"), per_gpu(later, "gpulse_gpu_busy_seconds_total")
    for gpu in ("0", "1", "3"):
        assert b1[gpu] > b0[gpu] + 0.5, gpu         # the healthy GPUs keep integrating
    assert "gpulse_gpu_power_watts" in later and "2" not in per_gpu(later, "gpulse_gpu_power_watts")
    errors = {dict(k)["call"]: v for k, v in series(later, "gpulse_source_errors_total").items()}
    assert errors.get("nvmlDeviceGetMemoryInfo", 0) >= 1


def test_hung_call_does_not_delay_scrapes(gpulse_proc, tmp_path):
    # The hang outlasts each request's 5 s timeout, so an answer at all proves the
    # scrape did not wait on the driver, however loaded the machine is; it lasts until
    # the test has seen staleness and five more scrapes inside it (its release file),
    # so it neither ends first on a slow start-up nor makes the test sit out a fixed span.
    release = tmp_path / "release"
    # a start slower than --stale-after (discovery's calls held 1.2 s), then the hang
    g = gpulse_proc("--source", "nvml", "--stale-after", "1s", env=scenario(tmp_path, f"""
        gpus 2
        fault * nvmlDeviceGetUUID hang at=0 secs=1.2
        fault * nvmlDeviceGetSamples hang at=4 secs=600 release={release}
    """))
    session = requests.Session()
    stale_seen = False
    try:
        # the staleness of the hang, not of a slow start: a start that takes over the
        # 1 s of --stale-after on a loaded machine reads stale too, until its first
        # poll. So only after the GPUs' series came (a poll succeeded), and once no
        # poll has for three times --stale-after (not a starved thread's second)
        g.wait_metrics(lambda t: "gpulse_gpu_up{" in t, "a first successful poll", 60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stale_seen:
            r = session.get(g.url + "/metrics", timeout=5)
            stale_seen = (one(r.text, "gpulse_exporter_stale") == 1
                          and one(r.text, "gpulse_exporter_seconds_since_last_sample") >= 3)
            time.sleep(0.1)
        assert stale_seen, "staleness never became visible while the driver hung"
        for _ in range(5):                       # still inside the hang
            r = session.get(g.url + "/metrics", timeout=5)
            assert r.status_code == 200 and one(r.text, "gpulse_exporter_stale") == 1
            time.sleep(0.1)
    finally:
        release.touch()
    text = g.wait_metrics(lambda t: one(t, "gpulse_exporter_stale") == 0, "recovery after the hang", 150)
    assert per_gpu(text, "gpulse_gpu_up") == {"0": 1, "1": 1}


def test_nvml_missing_is_one_clear_line(tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this host has a real libnvidia-ml")
    empty = tmp_path / "lib"
    empty.mkdir()
    g = Gpulse("--source", "nvml", env={"LD_LIBRARY_PATH": str(empty)}, ready=False)
    rc = g.proc.wait(timeout=30)
    out = g.output()
    assert rc == 1, out
    assert "libnvidia-ml.so.1 not found" in out and "--source sim" in out
    assert "Traceback" not in out


def test_driver_not_loaded_exits_unless_waiting(gpulse_proc, tmp_path):
    env = scenario(tmp_path, "gpus 2\ninit_error 9 until=2\n")
    g = Gpulse("--source", "nvml", env=env, ready=False)
    rc = g.proc.wait(timeout=30)
    out = g.output()
    assert rc == 1 and "driver is not loaded" in out and "Traceback" not in out, out
    waiting = gpulse_proc("--source", "nvml", "--nvml.wait",
                          env=scenario(tmp_path, "gpus 2\ninit_error 9 until=2\n", "later.txt"))
    text = waiting.wait_metrics(lambda t: per_gpu(t, "gpulse_gpu_up") == {"0": 1, "1": 1}, "GPUs after the driver came", 15)
    assert "gpulse_gpu_info" in text


RSS_BUDGET = 50e6   # bytes: the exporter's resident memory at 64 GPUs, after analysis has run


def test_resident_memory_within_budget(gpulse_proc, tmp_path):
    g = gpulse_proc("--source", "nvml", env=scenario(tmp_path, """
        gpus 64
        util * square period=2 duty=0.85 high=0.95 low=0 phase=1.65
    """))
    g.wait_metrics(lambda t: len([v for v in per_gpu(t, "gpulse_gpu_busy_seconds_total").values() if v > 0]) == 64,
                   "busy time on all 64 GPUs", 30)
    with open(f"/proc/{g.proc.pid}/status") as fh:
        rss = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
    assert rss <= RSS_BUDGET, f"gpulse serve --source nvml at 64 GPUs holds {rss / 1e6:.1f} MB resident"
