"""dcgm-exporter expositions under fuzzed input, and the counters gpulse derives from them (see tests/fuzzing.py)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ, hostile_text, mutated, read_log_property, scratch, seed  # noqa: F401 - scratch is a fixture


DCGM_NAMES = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED",
              "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "not_dcgm"]
label_values = st.one_of(st.sampled_from(["0", "7", "", "-1", "1/2", "²", "١", "0" * 400, 'a"b', "a\\", "\n", "😀"]),
                         st.text(max_size=8))
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "0x10", "1_000", "", "abc"]))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def exposition(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 15))):
        name = draw(st.sampled_from(DCGM_NAMES))
        labels = draw(st.dictionaries(st.sampled_from(["gpu", "UUID", "GPU_I_ID", "Hostname", "pod", "namespace",
                                                        "container", "modelName", "err_code"]), label_values,
                                      max_size=5))
        body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        ts = draw(st.one_of(st.just(""), st.integers(-2**63, 2**63).map(lambda x: f" {x}")))
        lines.append(f"{name}{{{body}}} {draw(number)}{ts}")
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(hostile_text))
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=st.one_of(exposition(), hostile_text), data=st.data())
def test_fuzz_dcgm_exposition(text, data):
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    series, bad = parse_exposition(text)
    for line, why in bad:
        assert "\n" not in why
    mapper = DcgmMapper()
    t = 0.0
    for _ in range(data.draw(st.integers(1, 3))):       # stateful across scrapes: counters, XIDs
        mapper.map([(n, lab, v, 0) for n, lab, v, _ts in series], t)
        t += data.draw(st.sampled_from([1.0, 0.0, -5.0, 1e9]))


@FUZZ
@given(data=st.data())
def test_fuzz_dcgm_real_capture_mutated(data):
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    text = data.draw(mutated(seed(data.draw(st.sampled_from(["dcgm", "dcgm8"])))))
    series, _ = parse_exposition(text)
    DcgmMapper().map([(n, lab, v, 0) for n, lab, v, _ts in series], 0.0)


def _flat(counters: dict) -> dict:
    out = {}
    for fam, v in counters.items():
        for lab, x in (v.items() if isinstance(v, dict) else [((), v)]):
            out[(fam, lab)] = x
    return out


@FUZZ
@given(answers=st.lists(st.lists(st.tuples(
    st.sampled_from(["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                     "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]),
    st.sampled_from(["0", "1"]),
    st.one_of(st.sampled_from(["-0", "-0.0", "0", "0.005", "7400000", "9.3e18", "2147483632", "NaN", "+Inf", "-1"]),
              st.integers(0, 2**40).map(str))), max_size=12), min_size=1, max_size=6),
    steps=st.lists(st.sampled_from([1.0, 0.0, -3.0, 0.5]), min_size=6, max_size=6))
def test_fuzz_dcgm_counters_never_decrease(answers, steps):
    """Whatever DCGM's counters do between and within answers (resets, -0, duplicates,
    blanks, garbage), the counters gpulse exports from them never go down."""
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    mapper = DcgmMapper(one_node=True)
    prev: dict = {}
    t = 0.0
    for answer, dt in zip(answers, steps):
        text = "".join(f'{name}{{gpu="{gpu}",Hostname="h"}} {value}\n' for name, gpu, value in answer)
        series, _ = parse_exposition(text)
        m = mapper.map([(n, lab, v, 0) for n, lab, v, _ts in series], t)
        for key, rec in m.readings.items():
            for k, v in _flat(rec.counters).items():
                assert v >= prev.get((key, k), 0.0), (key, k, prev.get((key, k)), v)
                prev[(key, k)] = v
        t += dt


@pytest.mark.parametrize("gpu", ["²", "0²", "١", "0/²", "1/١٢"])
def test_unicode_digit_gpu_labels(scratch, gpu):
    """str.isdigit() is true for '²', which int() refuses: the fuzzer's first find in
    the dcgm path (a crash in the GPU sort order of a replayed log)."""
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    line = f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-x"}} 50\nDCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-y"}} 40\n'
    series, _ = parse_exposition(line)
    DcgmMapper().map([(n, lab, v, 0) for n, lab, v, _ts in series], 0.0)
    read_log_property(scratch, line * 3, "dcgm")
