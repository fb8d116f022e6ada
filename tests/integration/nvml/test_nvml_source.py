"""The NVML source through the real pynvml ctypes path, against the fake libnvidia-ml.

The fake is loaded into this process (fakenvml.preload); each test writes its own
scenario, which the fake loads at the source's nvmlInit with t = 0 pinned to a known
time, so expected driver values can be computed exactly.
"""
from __future__ import annotations

import math
import time

import pynvml
import pytest

import fakenvml
from gpulse.sources.base import SourceError
from gpulse.sources.nvml.source import READ_INTERVAL, init_message
from nvmlfixtures import fake, nvml, readings, samples  # noqa: F401 (fake, nvml: fixtures)
from testing.config import test_config

PERIOD = 1 / 6      # the fake's default driver sample period


def square(tau, period, duty, high, low, phase):
    x = (tau + phase) % period      # the fake's square wave, also for t < 0
    return high if x < duty * period else low


def square_mean(tau, **shape):
    """A utilisation sample at tau: the wave's mean over the driver period before it
    (the fake's 32 points)."""
    return sum(square(tau - PERIOD + PERIOD * i / 32, **shape) for i in range(1, 33)) / 32


# ---------------------------------------------------------------- discovery


def test_discovery_whole_gpus_and_mig_instances(nvml):
    o = nvml("""
        gpus 3
        driver 550.90.07
        cuda 12040
        name 2 NVIDIA A100-SXM4-80GB
        mig 2 3g.40gb:1 2g.20gb:5
    """)
    by = {d.gpu: d for d in o.devices}
    assert list(by) == ["0", "1", "2", "2/1", "2/5"]
    g0 = by["0"]
    assert g0.model == "NVIDIA H100 80GB HBM3"
    assert g0.uuid.startswith("GPU-") and g0.uuid != by["1"].uuid
    assert g0.pci_bus_id == "00000000:18:00.0"
    assert (g0.driver, g0.cuda_version) == ("550.90.07", "12.4")
    assert (g0.mig_profile, g0.gpu_instance, g0.parent_uuid) == ("", "", "")
    m = by["2/5"]
    assert m.model == "NVIDIA A100-SXM4-80GB"
    assert (m.mig_profile, m.gpu_instance) == ("2g.20gb", "5")
    assert m.parent_uuid == by["2"].uuid and m.uuid.startswith("MIG-")
    assert by["2/1"].mig_profile == "3g.40gb"


def test_mig_instance_memory_and_no_utilisation(nvml):
    o = nvml("""
        gpus 1
        mig 0 3g.40gb:1
    """)
    res = o.drive(0.5)
    mig = readings(res, "0/1")[-1]
    assert mig.up and mig.samples == []          # NVML has no utilisation for MIG
    assert mig.gauges["memory_total_bytes"] == 40 * 2**30
    parent = readings(res, "0")[-1]
    assert parent.samples == [] and parent.gauges["power_watts"] > 0


# ---------------------------------------------------------------- utilisation samples


def test_get_samples_reads_every_driver_sample_once(nvml):
    shape = dict(period=1.0, duty=0.45, high=0.95, low=0.05, phase=0.05)
    o = nvml("""
        gpus 2
        util * square period=1 duty=0.45 high=0.95 low=0.05 phase=0.05
    """)
    t_open = time.time()
    res = o.drive(2.2)
    t_end = time.time()
    for gpu in ("0", "1"):
        ss = samples(res, gpu)
        ts = [s.t for s in ss]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        # consecutive driver samples, none lost or repeated across the reads
        assert gaps and all(abs(g - PERIOD) < 0.002 for g in gaps), gaps
        # the first read takes the driver's samples of the second before it
        assert ss[0].t - (t_open - READ_INTERVAL) == pytest.approx(0, abs=PERIOD + 0.05)
        assert ss[-1].t - t_open > 1.0                   # and later reads continue from there
        for s in ss:
            assert s.util == pytest.approx(square_mean(s.t - o.epoch, **shape), abs=0.006)
            assert t_open - READ_INTERVAL - PERIOD < s.t <= t_end


def test_polls_between_reads_make_no_nvml_calls(nvml):
    o = nvml("gpus 4\n")
    t0 = time.monotonic()
    assert o.src.poll(t0).readings
    before = fakenvml.calls()
    ticks = round(READ_INTERVAL / 0.1)
    for k in range(1, ticks):   # the sampler's 0.1 s ticks until the next read
        assert o.src.poll(t0 + 0.1 * k).readings == []
    assert fakenvml.calls() == before
    assert len(o.src.poll(t0 + READ_INTERVAL).readings) == 4
    assert fakenvml.calls() > before


def test_empty_buffer_falls_back_without_advancing_the_timestamp(nvml):
    o = nvml("""
        gpus 2
        util * const 0.3
        nosamples 0 at=0 until=2.2
    """)
    rates_before = fakenvml.calls("nvmlDeviceGetUtilizationRates")
    res = o.drive(3.3)                 # reads at 0, 1, 2 and 3 s

    def on_grid(s):
        # the driver's samples sit on its period to the microsecond; a fallback's stamp
        # is the wall clock's, within 1e-4 of a period (17 us) once in 5,000
        k = (s.t - o.epoch) / PERIOD
        return abs(k - round(k)) < 1e-4

    ss = samples(res, "0")
    assert all(s.util == pytest.approx(0.3) for s in ss)
    # at 0 s the driver's samples from before t = 0; at the reads inside the window
    # (1 and 2 s), with the last sample over a second old, one instantaneous reading each
    fallback = [s for s in ss if not on_grid(s)]
    assert 1 <= len(fallback) <= 2
    # an instantaneous reading is stamped when its call returns, after its poll began
    # inside the window: on a loaded machine it can return well after the window. A
    # read is due from half a poll before its second (NvmlSource.poll), so the read
    # after the first can begin 0.95 s after the scenario's t = 0
    began = {id(s): b for b, r in zip(o.began, res) for x in r.readings if x.gpu == "0" for s in x.samples}
    early = READ_INTERVAL - test_config().sample_interval / 2
    assert all(early <= s.t - o.epoch and began[id(s)] <= s.t and began[id(s)] - o.epoch < 2.2 for s in fallback), \
        [(s.t - o.epoch, began[id(s)] - o.epoch) for s in fallback]
    assert fakenvml.calls("nvmlDeviceGetUtilizationRates") - rates_before == len(fallback)
    # the driver's samples are picked up from the first one after the window, since
    # the fallback never moved the last-seen timestamp past them
    late = [s for s in ss if s.t - o.epoch >= 2.2]
    first_k = math.ceil(2.2 / PERIOD)
    assert late and all(on_grid(s) for s in late)
    assert late[0].t - o.epoch == pytest.approx(first_k * PERIOD, abs=0.002)
    # GPU 1 always had samples: never a fallback
    assert all(on_grid(s) for s in samples(res, "1"))


def test_power_is_matched_to_each_sample_by_time(nvml):
    o = nvml("""
        gpus 1
        util 0 square period=1 duty=0.45 high=0.95 low=0.05 phase=0.05
        power 0 follow idle=70 max=690
    """)
    ss = samples(o.drive(1.8), "0")
    shape = dict(period=1.0, duty=0.45, high=0.95, low=0.05, phase=0.05)
    levels = {square(s.t - o.epoch, **shape) for s in ss}
    assert levels == {0.95, 0.05}                  # both levels were seen
    for s in ss:
        # power at the sample's own instant (utilisation is its period's mean)
        assert s.power_w == pytest.approx(70 + square(s.t - o.epoch, **shape) * 620, abs=0.01)
        assert s.memory_used_bytes == 60e9


def test_power_without_power_samples_reads_the_instant_field(nvml):
    # a fast square wave: an instant reads either level, a 1 s average their mean
    o = nvml("""
        gpus 1
        power_samples 0 off
        power 0 square period=0.25 duty=0.5 high=600 low=200
    """)
    assert o.src.power_averaged is False          # declared as the source opens
    usage = fakenvml.calls("nvmlDeviceGetPowerUsage")
    fields = fakenvml.calls("nvmlDeviceGetFieldValues")
    res = o.drive(1.2)
    assert fakenvml.calls("nvmlDeviceGetPowerUsage") == usage
    assert fakenvml.calls("nvmlDeviceGetFieldValues") - fields >= 2
    powers = {s.power_w for s in samples(res, "0")}
    assert powers and powers <= {200.0, 600.0}
    assert readings(res, "0")[-1].gauges["power_watts"] in (200.0, 600.0)
    assert o.src.power_averaged is False


def test_power_without_instant_field_uses_power_usage_and_is_averaged(nvml):
    o = nvml("""
        gpus 2
        power_samples 0 off
        power_instant 0 off
        power * square period=0.25 duty=0.5 high=600 low=200
    """)
    # GPU 0 reads nvmlDeviceGetPowerUsage, a 1 s average: the source says so
    assert o.src.power_averaged is True
    before = fakenvml.calls("nvmlDeviceGetPowerUsage")
    res = o.drive(1.2)
    assert fakenvml.calls("nvmlDeviceGetPowerUsage") - before >= 2
    r = readings(res, "0")[-1]
    assert r.gauges["power_watts"] == pytest.approx(400.0, abs=1.0)
    assert all(s.power_w == pytest.approx(400.0, abs=1.0) for s in samples(res, "0"))
    # GPU 1 keeps the driver's power samples: instants, matched to each sample
    assert {s.power_w for s in samples(res, "1")} <= {200.0, 600.0}
    assert o.src.power_averaged is True


def test_power_kind_with_every_gpu_on_instants(nvml):
    o = nvml("""
        gpus 2
        power_samples 1 off
    """)
    assert o.src.power_averaged is False


# ---------------------------------------------------------------- metric families


FAMILIES = """
    gpus 2
    util * const 0.8
    power * const 300
    memory * const 40e9
    memory_total * const 80e9
    temp * const 61
    memory_temp * const 70
    sm_clock * const 1755
    mem_clock * const 2619
    power_limit * const 650
    fan 1 const 0.4
    reasons 0 const 36
    ecc_corrected 0 const 5
    ecc_uncorrected 0 const 1
    remapped_corrected 0 const 2
    remapped_uncorrected 0 const 1
    remap_pending 0 const 1
    pcie_replay 0 const 7
    pcie_tx * linear rate=1e9
    pcie_rx * linear rate=5e8
    nvlink_tx * linear rate=4e10
    nvlink_rx * linear rate=2e10
"""


def test_each_metric_family_in_base_units(nvml):
    o = nvml(FAMILIES)
    t0 = time.time()
    res = o.drive(2.3)
    elapsed = time.time() - t0
    r0, r1 = readings(res, "0")[-1], readings(res, "1")[-1]
    g = r0.gauges
    assert g["memory_used_bytes"] == 40e9 and g["memory_total_bytes"] == 80e9
    assert g["power_watts"] == 300 and g["power_limit_watts"] == 650
    assert g["temperature_celsius"] == 61 and g["memory_temperature_celsius"] == 70
    assert g["sm_clock_hertz"] == 1755e6 and g["memory_clock_hertz"] == 2619e6
    assert g["remapped_rows"] == {("correctable",): 2, ("uncorrectable",): 1}
    assert g["remapping_pending"] == 1
    assert "fan_speed_ratio" not in g and r1.gauges["fan_speed_ratio"] == pytest.approx(0.4)

    c = r0.counters
    assert c["ecc_errors_total"] == {("corrected",): 5, ("uncorrected",): 1}
    assert c["pcie_replays_total"] == 7
    # one nvmlDeviceGetFieldValues call read these at one instant tau (the first poll:
    # the batch is read every 5 s)
    tau = c["pcie_bytes_total"][("tx",)] / 1e9
    assert 0 < tau <= elapsed
    assert c["pcie_bytes_total"][("rx",)] == pytest.approx(5e8 * tau, abs=2)
    assert c["nvlink_bytes_total"][("tx",)] == pytest.approx(4e10 * tau, abs=2048)   # KiB -> bytes
    assert c["nvlink_bytes_total"][("rx",)] == pytest.approx(2e10 * tau, abs=2048)
    assert c["energy_joules_total"] == pytest.approx(300 * tau, abs=0.01)          # mJ -> J

    th = c["throttle_seconds_total"]
    assert th[("sw_power_cap",)] == th[("sw_thermal",)] > 0.5      # 0x24 = both bits
    assert th[("sw_power_cap",)] <= elapsed
    assert sum(v for k, v in th.items() if k not in (("sw_power_cap",), ("sw_thermal",))) == 0
    assert set(th) == {(r,) for r in ("gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown",
                                      "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake",
                                      "display_clocks")}
    assert sum(r1.counters["throttle_seconds_total"].values()) == 0


def test_unsupported_calls_are_remembered_not_retried(nvml):
    names = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
             "nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetFanSpeed")
    before = {n: fakenvml.calls(n) for n in names}
    o = nvml("""
        gpus 2
        unsupported * reasons
        unsupported * temp
        fault * nvmlDeviceGetEnforcedPowerLimit unsupported
    """)
    res = o.drive(2.3)                     # reads at 0, 1 and 2 s
    for n in names:
        assert fakenvml.calls(n) - before[n] == 2, n     # once per GPU, then never again
    r = readings(res, "0")[-1]
    assert "temperature_celsius" not in r.gauges and "power_limit_watts" not in r.gauges
    assert "throttle_seconds_total" not in r.counters
    assert r.gauges["sm_clock_hertz"] > 0 and r.samples
    assert not any(x.call_errors for x in res)           # not supported is not an error


def test_transient_errors_are_counted_by_call_and_gpu_stays_up(nvml):
    o = nvml("""
        gpus 2
        fault 0 nvmlDeviceGetMemoryInfo error code=999
    """)
    res = o.drive(1.8)                 # reads at 0 and 1 s
    errors = sum(x.call_errors.get("nvmlDeviceGetMemoryInfo", 0) for x in res)
    assert errors == len(readings(res, "0")) >= 2
    r0 = readings(res, "0")[-1]
    assert r0.up and r0.samples and "memory_used_bytes" not in r0.gauges
    assert "memory_used_bytes" in readings(res, "1")[-1].gauges


# ---------------------------------------------------------------- XIDs


def test_xid_events_counted_per_gpu_and_code(nvml):
    o = nvml("""
        gpus 3
        mig 2 1g.10gb:3
        xid 1 at=0.1 code=79
        xid 1 at=0.2 code=48
        xid 1 at=0.3 code=48
        xid 0 at=0.3 code=13
        xid 2 at=0.2 code=31 gi=3
    """)
    res = o.drive(1.6)
    last = {x.gpu: x for x in res[-1].readings}
    assert last["1"].counters["xid_errors_total"] == {("79",): 1, ("48",): 2}
    assert last["0"].counters["xid_errors_total"] == {("13",): 1}
    assert last["2/3"].counters["xid_errors_total"] == {("31",): 1}   # a MIG instance's own
    assert "xid_errors_total" not in last["2"].counters


def test_xid_events_can_be_switched_off(nvml):
    before = fakenvml.calls("nvmlEventSetCreate")
    o = nvml("gpus 1\nxid 0 at=0.1 code=79\n", nvml__xid_events=False)
    res = o.drive(0.7)
    assert fakenvml.calls("nvmlEventSetCreate") == before
    assert "xid_errors_total" not in readings(res, "0")[-1].counters


# ---------------------------------------------------------------- faults


def test_one_gpu_lost_while_the_others_report(nvml):
    o = nvml("""
        gpus 3
        fault 1 * lost at=0.6 until=1.3
    """)
    res = o.drive(3.8)                 # down at the 1 s read, retried 1 s later, back by 3 s
    r1 = readings(res, "1")
    down = [r for r in r1 if not r.up]
    assert down and "GPU is lost" in down[0].error and "\n" not in down[0].error
    assert r1[-1].up and r1[-1].samples                    # retried and back
    for gpu in ("0", "2"):
        assert all(r.up for r in readings(res, gpu))
        ts = [s.t for s in samples(res, gpu)]
        assert max(b - a for a, b in zip(ts, ts[1:])) < 0.2  # never a gap
    assert sum(x.call_errors.get("nvmlDeviceGetMemoryInfo", 0) for x in res) >= 1


def test_hung_call_blocks_only_the_poll_and_no_sample_is_lost(nvml):
    o = nvml("""
        gpus 2
        fault 0 nvmlDeviceGetSamples hang at=0.4 secs=1.2
    """)
    res = o.drive(3.2)                 # reads at 0, 1 (stuck until 1.6) and 2.6 s
    for gpu in ("0", "1"):
        ts = [s.t for s in samples(res, gpu)]
        # the driver buffered through the hang: still every sample, one period apart
        assert all(abs((b - a) - PERIOD) < 0.002 for a, b in zip(ts, ts[1:]))
        assert ts[-1] - o.epoch > 2.4 and ts[0] - o.epoch < 0
    assert all(r.up for r in readings(res, "0"))


def test_driver_gone_reinitialises_with_backoff(nvml):
    o = nvml("""
        gpus 2
        reasons * const 1
        driver_gone at=1.2 until=1.8
    """)
    res = o.drive(4.2)
    r0 = readings(res, "0")
    assert any(not r.up for r in r0)
    assert r0[-1].up and r0[-1].samples                      # back after nvmlInit again
    assert all(r.devices is None or [d.gpu for d in r.devices] == ["0", "1"] for r in res)
    idle = [r.counters["throttle_seconds_total"][("gpu_idle",)] for r in r0
            if "throttle_seconds_total" in r.counters]
    assert idle == sorted(idle) and idle[-1] > 0             # our counters survive re-init


def test_init_failure_is_one_clear_line(nvml):
    with pytest.raises(SourceError) as e:
        nvml("init_error 9\n")
    msg = str(e.value)
    assert "driver is not loaded" in msg and "--source sim" in msg and "\n" not in msg


def test_library_missing_message_names_the_library():
    msg = init_message(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert "libnvidia-ml.so.1 not found" in msg and "--source sim" in msg


def test_wait_keeps_retrying_until_nvml_comes(nvml):
    o = nvml("gpus 2\ninit_error 9 until=0.8\n", nvml__wait=True)
    assert o.devices == []
    assert o.src.poll(time.monotonic()).readings == []
    res = o.drive(2.0)
    found = [r.devices for r in res if r.devices is not None]
    assert found and [d.gpu for d in found[0]] == ["0", "1"]
    assert readings(res, "1")[-1].up


# ---------------------------------------------------------------- GPM


def test_gpm_sm_activity_on_gpus_and_mig_instances(nvml):
    o = nvml("""
        gpus 2
        util * const 0.5
        sm * const 0.37
        mig 1 2g.20gb:1
    """, nvml__gpm=True)
    assert o.src.has_sm_active
    res = o.drive(1.7)
    gpu = [s for s in samples(res, "0") if s.sm_active is not None]
    assert gpu and all(s.sm_active == pytest.approx(0.37) and s.gr_active == pytest.approx(0.5) for s in gpu)
    mig = samples(res, "1/1")
    assert mig and all(s.sm_active == pytest.approx(0.37) and s.util is None for s in mig)


def test_gpm_off_by_default(nvml):
    before = fakenvml.calls("nvmlGpmSampleGet")
    o = nvml("gpus 1\n")
    res = o.drive(1.2)
    assert not o.src.has_sm_active
    assert fakenvml.calls("nvmlGpmSampleGet") == before
    assert all(s.sm_active is None for s in samples(res, "0"))
