"""DCGM's profiling signals and memory-copy utilisation, exported by name.

The real L4 capture (a default dcgm-exporter install) is idle, so every value in it
is 0: the tests put working values into the same lines, with the same labels, and
add the SM-activity line that dcgm-exporter's DCP counter set carries, then read
them through the real DCGM source and through `gpulse serve --source dcgm`.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from conftest import require_binary, require_data
from testing.config import test_config
from gpulse.sources.dcgm import DcgmSource
from testing.fakedcgm import DcgmExporter

L4 = "captures/dcgm-exporter/l4-gpu-operator.prom"

# dcgm-exporter field -> (value it prints, gpulse metric, value gpulse must export)
WORKING = {
    "DCGM_FI_PROF_SM_ACTIVE": ("0.640000", "gpulse_gpu_sm_active_ratio", 0.64),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("0.310000", "gpulse_gpu_tensor_active_ratio", 0.31),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("0.420000", "gpulse_gpu_dram_active_ratio", 0.42),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("0.870000", "gpulse_gpu_gr_engine_active_ratio", 0.87),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("37", "gpulse_gpu_memory_copy_utilization_ratio", 0.37),  # percent -> 0..1
}


def working_l4(**override: str) -> str:
    """The L4 capture with the fields of WORKING set (SM_ACTIVE added after GR_ENGINE_ACTIVE)."""
    text = require_data(L4).read_text()
    values = {name: v for name, (v, _, _) in WORKING.items()} | override
    out = []
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in values and not line.startswith("#"):
            line = line.rsplit(" ", 1)[0] + " " + values[name]
            out.append(line)
            if name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                out += ["# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.",
                        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge",
                        line.replace("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", 1)
                        .rsplit(" ", 1)[0] + " " + values["DCGM_FI_PROF_SM_ACTIVE"]]
            continue
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def endpoint():
    started = []

    def make(body: str) -> DcgmExporter:
        e = DcgmExporter(body)
        started.append(e)
        return e

    yield make
    for e in started:
        e.stop()


def _gauge_keys() -> dict[str, str]:
    return {metric.removeprefix("gpulse_gpu_"): field for field, (_, metric, _) in WORKING.items()}


def test_the_source_reports_each_signal_as_a_ratio(endpoint):
    ex = endpoint(working_l4())
    src = DcgmSource(test_config(source="dcgm", dcgm__url=ex.url))
    try:
        src.open()
        assert src.has_sm_active
        (r,) = src.poll(10.0).readings
        assert r.up
        for key, field in _gauge_keys().items():
            assert r.gauges[key] == pytest.approx(WORKING[field][2]), key
        # SM activity still drives the analysis, not only the gauge
        assert r.samples[0].sm_active == pytest.approx(0.64)
    finally:
        src.close()


def test_a_ratio_out_of_range_is_dropped_and_counted(endpoint):
    ex = endpoint(working_l4(DCGM_FI_PROF_DRAM_ACTIVE="1.700000", DCGM_FI_DEV_MEM_COPY_UTIL="180"))
    src = DcgmSource(test_config(source="dcgm", dcgm__url=ex.url))
    try:
        src.open()
        res = src.poll(0.0)
        (r,) = res.readings
        assert res.call_errors == {"dcgm_invalid_value": 2}
        assert "dram_active_ratio" not in r.gauges and "memory_copy_utilization_ratio" not in r.gauges
        assert r.gauges["tensor_active_ratio"] == pytest.approx(0.31)
    finally:
        src.close()


def test_served_by_name_and_promtool_clean(endpoint, gpulse_proc):
    promtool = require_binary("promtool")
    ex = endpoint(working_l4())
    g = gpulse_proc("--source", "dcgm", "--dcgm.url", ex.url, "--dcgm.interval", "200ms")
    names = [metric for _, metric, _ in WORKING.values()]
    text = g.wait_metrics(lambda t: all(f"\n{n}{{" in t for n in names), "every profiling gauge")
    for _, metric, want in WORKING.values():
        assert f"# TYPE {metric} gauge" in text
        (value,) = re.findall(rf'^{metric}{{gpu="0",node="[^"]+"}} (\S+)$', text, re.M)
        assert float(value) == pytest.approx(want), metric
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_each_signal_is_documented():
    from conftest import ROOT
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for _, metric, _ in WORKING.values():
        assert re.search(rf"^\| `{metric}` \| gauge \|", doc, re.M), metric
