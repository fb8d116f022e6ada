"""nvml/calls.Direct against pynvml's own wrappers, on the fake libnvidia-ml: the
same answers and the same errors from the calls the source makes every second."""
from __future__ import annotations

import textwrap
import time

import pynvml
import pytest

import fakenvml
from conftest import require_binary
from gpulse.sources.nvml.calls import Direct

UTIL, POWER = pynvml.NVML_GPU_UTILIZATION_SAMPLES, pynvml.NVML_TOTAL_POWER_SAMPLES


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    """gpu(scenario) -> handle of GPU 0 with NVML initialised on that scenario."""
    require_binary("gcc")
    fakenvml.preload()
    inited = []

    def make(scenario: str):
        path = tmp_path / "scenario.txt"
        path.write_text(textwrap.dedent(scenario))
        monkeypatch.setenv("FAKENVML_SCENARIO", str(path))
        monkeypatch.setenv("FAKENVML_EPOCH_US", str(int(time.time() * 1e6)))
        pynvml.nvmlInit()
        inited.append(1)
        return pynvml.nvmlDeviceGetHandleByIndex(0)

    yield make
    for _ in inited:
        pynvml.nvmlShutdown()


def wrapped_samples(h, kind, since):
    vtype, raw = pynvml.nvmlDeviceGetSamples(h, kind, since)
    return vtype, sorted((s.timeStamp, s.sampleValue.uiVal) for s in raw)


@pytest.mark.parametrize("kind", [UTIL, POWER])
def test_samples_match_pynvml(gpu, kind):
    h = gpu("""
        gpus 2
        util * square period=2 duty=0.85 high=0.95 low=0.1
        power * follow idle=90 max=604
    """)
    since = int((time.time() - 3) * 1e6)
    vtype, got = Direct().samples(h, kind, since)
    want_type, want = wrapped_samples(h, kind, since)
    assert vtype == want_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert len(got) >= 12              # 3 s of samples 1/6 s apart
    # the wrapper ran a moment later: it may hold a newer sample, never a different one
    assert [x for x in want if x[0] <= got[-1][0]] == got
    assert all(ts > since for ts, _ in got)


def test_a_full_buffer_is_read_again_into_a_larger_one(gpu):
    h = gpu("""
        gpus 1
        buffer 300
        util * square period=1 duty=0.5 high=0.9 low=0.2
    """)
    d = Direct()
    vtype, got = d.samples(h, UTIL, 0)          # the whole driver buffer
    assert len(got) == 300 > Direct.FIRST_CAPACITY
    assert [x for x in wrapped_samples(h, UTIL, 0)[1] if x[0] <= got[-1][0]][-300:] == got
    # the larger buffer is kept: a small read afterwards is still right
    since = got[-5][0]
    assert [x for x in d.samples(h, UTIL, since)[1] if x[0] <= got[-1][0]] == got[-4:]


def test_errors_are_pynvml_errors(gpu):
    h = gpu("""
        gpus 1
        nosamples 0
        power_samples 0 off
    """)
    d = Direct()
    with pytest.raises(pynvml.NVMLError) as e:
        d.samples(h, UTIL, int(time.time() * 1e6))   # none buffered since scenario t = 0
    assert e.value.value == pynvml.NVML_ERROR_NOT_FOUND
    with pytest.raises(pynvml.NVMLError) as e:
        d.samples(h, POWER, 0)
    assert e.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError) as e:
        d.fn("nvmlDeviceGetNoSuchThing")
    assert e.value.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


def test_memory_and_reasons_match_pynvml(gpu):
    h = gpu("""
        gpus 1
        memory 0 const 12345678912
        reasons 0 const 68
    """)
    d = Direct()
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    assert d.memory(h) == (mem.total, mem.used) == (mem.total, 12345678912)
    name = "nvmlDeviceGetCurrentClocksEventReasons"
    assert d.u64(name, h) == pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 68


def test_field_values_match_pynvml(gpu):
    from gpulse.sources.nvml.source import FIELD_SCOPES, F_ENERGY, F_PCIE_REPLAY
    h = gpu("""
        gpus 1
        pcie_replay 0 const 17
        unsupported 0 nvlink_tx
    """)
    buf = (pynvml.c_nvmlFieldValue_t * len(FIELD_SCOPES))()
    for v, (f, s) in zip(buf, FIELD_SCOPES):
        v.fieldId, v.scopeId = f, s
    got = Direct().field_values(h, buf)
    want = pynvml.nvmlDeviceGetFieldValues(h, list(FIELD_SCOPES))
    assert [g[0] for g in got] == [w.fieldId for w in want] == [f for f, _ in FIELD_SCOPES]
    assert [g[1] for g in got] == [w.nvmlReturn for w in want]
    assert any(g[1] != pynvml.NVML_SUCCESS and g[2] is None for g in got)     # the unsupported one
    by_id = {g[0]: g[2] for g in got}
    assert by_id[F_PCIE_REPLAY] == 17
    # energy grows between the two reads; the same member of the union is read
    w = {x.fieldId: x for x in want}
    assert w[F_ENERGY].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert 0 <= w[F_ENERGY].value.ullVal - by_id[F_ENERGY] < 1e6


@pytest.mark.parametrize("vtype,member,value", [
    (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", -2.5),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 4_000_000_000),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**52 + 5),
    (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -7),
    (getattr(pynvml, "NVML_VALUE_TYPE_SIGNED_INT", 5), "siVal", -3),
])
def test_value_types_read_from_the_union_bytes(vtype, member, value):
    from gpulse.sources.nvml.calls import value_of
    u = pynvml.c_nvmlValue_t()
    u.ullVal = 0xDEADBEEF_00000000 if member in ("uiVal", "siVal") else 0   # unwritten high word
    setattr(u, member, value)
    assert value_of(vtype)(u.ullVal) == value
