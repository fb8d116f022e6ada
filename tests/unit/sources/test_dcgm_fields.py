"""The DCGM field map (sources/dcgm/fields.py) on dcgm-exporter's real expositions, and
recorded dcgm-exporter output (sources/recorded/dcgm.py)."""
from __future__ import annotations

import re

import pytest

from conftest import require_data
from gpulse.sources.dcgm import DcgmMapper, is_blank, parse_exposition
from gpulse.sources.recorded import read_log
from testing.fakedcgm import H100, L4, MIG_TEXT, capture, l4_with, map_text

MIB = 2 ** 20


# ---------------------------------------------------------------- mapping the real captures

def test_l4_capture_maps_every_family():
    m = map_text(capture(L4), t=5.0)
    assert list(m.readings) == ["0"]
    assert m.invalid == [] and m.blank == 0
    assert m.nodes == ["i-030791dc5a37cd257"]          # the Hostname label
    d = m.devices["0"]
    assert (d.uuid, d.model, d.pci_bus_id, d.driver) == (
        "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", "NVIDIA L4", "00000000:31:00.0", "580.105.08")
    r = m.readings["0"]
    assert r.samples[0].t == 5.0
    assert (r.samples[0].util, r.samples[0].power_w, r.samples[0].memory_used_bytes, r.samples[0].gr_active) == (0.0, 16.365, 0.0, 0.0)
    assert r.samples[0].sm_active is None                   # this exporter config has no SM_ACTIVE
    g = r.gauges
    assert g["sm_clock_hertz"] == 210e6 and g["memory_clock_hertz"] == 405e6
    assert g["temperature_celsius"] == 31
    assert g["memory_total_bytes"] == (22563 + 0 + 470) * MIB      # free + used + reserved
    assert g["tensor_active_ratio"] == 0.0
    assert g["remapped_rows"] == {("correctable",): 0.0, ("uncorrectable",): 0.0}
    c = r.counters
    assert c["energy_joules_total"] == pytest.approx(4742.776)      # 4742776 mJ
    assert c["pcie_replays_total"] == 0
    assert c["pcie_bytes_total"] == {("tx",): 0.0, ("rx",): 0.0}  # a rate: nothing integrated yet
    assert r.attribution is None and r.holds_workload is None
    assert m.has_sm_active is False


def test_link_and_nvlink_fields_on_the_real_capture():
    """The L4 capture, with the link and NVLink fields dcgm-exporter prints when its
    collectors CSV lists them (an H100 with NVLink, its link trained at x8 of x16),
    each on the capture's own labels."""
    text = capture(L4)
    labels = re.search(r"^DCGM_FI_DEV_GPU_TEMP(\{[^}]*\})", text, re.M).group(1)
    extra = {"DCGM_FI_DEV_PCIE_LINK_GEN": 5, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5,
             "DCGM_FI_DEV_PCIE_LINK_WIDTH": 8, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16,
             "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 12, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 3,
             "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 7, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 0}
    text += "".join(f"{name}{labels} {v}\n" for name, v in extra.items())
    r = map_text(text, t=5.0).readings["0"]
    g = r.gauges
    assert (g["pcie_link_generation"], g["pcie_link_max_generation"]) == (5.0, 5.0)
    assert (g["pcie_link_width"], g["pcie_link_max_width"]) == (8.0, 16.0)
    assert r.counters["nvlink_errors_total"] == {("crc_flit",): 12.0, ("crc_data",): 3.0, ("replay",): 7.0,
                                                 ("recovery",): 0.0}


def test_h100_capture_pod_attribution():
    m = map_text(capture(H100))
    assert list(m.readings) == [str(i) for i in range(8)]
    assert m.readings["6"].attribution == {"namespace": "dynamo-workload", "container": "main",
                                          "pod": "vllm-agg-0-vllmdecodeworker-5fljt"}
    assert m.readings["6"].holds_workload is True
    assert all(m.readings[g].attribution is None for g in "0123457")
    assert m.readings["0"].samples[0].power_w == 67.268
    assert m.readings["3"].gauges["temperature_celsius"] == 28


def test_promql_json_export_uses_exported_labels():
    run = read_log(str(require_data("captures/dcgm-exporter/h100x8-eks-aicr-promql-DCGM_FI_DEV_POWER_USAGE.json")))
    assert run.format == "dcgm" and run.errors == []
    assert [d.gpu for d in run.devices] == [str(i) for i in range(8)]
    by = {r.gpu: r for r in run.records}
    # through Prometheus, plain pod/namespace name dcgm-exporter's own pod
    assert by["0"].reading.attribution is None
    assert by["6"].reading.attribution == {"namespace": "dynamo-workload", "pod": "vllm-agg-0-vllmdecodeworker-5fljt",
                                   "container": "main"}
    assert all(60 < r.sample.power_w < 200 for r in run.records)
    assert 1771529464 < run.start <= run.end < 1771529466


@pytest.mark.parametrize("metric, check", [
    ("GPU_UTIL", lambda r: r.sample.util is not None and 0 <= r.sample.util <= 1),
    ("FB_USED", lambda r: r.sample.memory_used_bytes is not None),
    ("GPU_TEMP", lambda r: 20 < r.reading.gauges["temperature_celsius"] < 60),
])
def test_promql_json_exports(metric, check):
    run = read_log(str(require_data(f"captures/dcgm-exporter/h100x8-eks-aicr-promql-DCGM_FI_DEV_{metric}.json")))
    assert run.errors == [] and len(run.records) == 8
    assert all(check(r) for r in run.records)


# ---------------------------------------------------------------- sentinels, garbage, spellings, MIG


def test_garbage_utilisation_dropped_and_counted():
    m = map_text(l4_with(DEV_GPU_UTIL="218322032"))
    assert m.readings["0"].samples[0].util is None
    assert m.invalid == [(0, "DCGM_FI_DEV_GPU_UTIL{gpu=0} = 2.18322e+08: outside 0..100")]
    assert m.readings["0"].samples[0].power_w == 16.365      # the rest of the GPU is kept


def test_an_integer_no_float_holds_is_not_a_number():
    """dcgm-exporter's text parser keeps an integer as an int; one of 400 digits is
    beyond any float, and float() of it raised out of the reader (found by the fuzz test)."""
    m = map_text(l4_with(DEV_SM_CLOCK="9" * 400))
    assert m.invalid == [(0, "DCGM_FI_DEV_SM_CLOCK{gpu=0} = " + "9" * 40 + ": not a number")]
    assert m.readings["0"].samples[0].power_w == 16.365      # the rest of the GPU is kept


def test_blank_sentinels_skipped_silently():
    m = map_text(l4_with(DEV_GPU_UTIL="9223372036854775794",          # int64 NOT_SUPPORTED
                      DEV_GPU_TEMP="2147483632",                     # int32 blank
                      PROF_GR_ENGINE_ACTIVE="140737488355328.000000"))  # fp64 blank
    r = m.readings["0"]
    assert m.blank == 3 and m.invalid == []
    assert r.samples[0].util is None and r.samples[0].gr_active is None
    assert "temperature_celsius" not in r.gauges


def test_int32_blank_value_is_honest_for_64bit_counters():
    assert is_blank(2147483632.0, "gauge:temperature_celsius")
    assert not is_blank(2147483632.0, "counter:energy_joules_total")


def test_lowercase_hostname_label():
    m = map_text(capture(L4).replace('Hostname="', 'hostname="'))
    assert m.nodes == ["i-030791dc5a37cd257"]


def test_second_host_named_apart():
    text = capture(L4)
    m = map_text(text + text.replace("i-030791dc5a37cd257", "other-node"))
    assert sorted(m.readings) == ["0", "other-node:0"]


def test_mig_entities():
    m = map_text(MIG_TEXT)
    assert sorted(m.readings) == ["0/2", "0/9"]
    d = m.devices["0/2"]
    assert (d.gpu_instance, d.mig_profile, d.parent_uuid, d.uuid) == ("2", "3g.40gb", "GPU-aaaa", "")
    r = m.readings["0/2"]
    assert r.samples[0].sm_active == 0.87 and r.samples[0].util is None       # utilisation is blank on MIG
    assert r.samples[0].memory_used_bytes == 30000 * MIB
    assert r.attribution == {"namespace": "ml", "pod": "job-0", "container": "trainer"}
    assert m.readings["0/9"].attribution is None
    assert m.has_sm_active is True


def _scrape_line(name: str, value: float, gpu: str = "0") -> str:
    return f'{name}{{gpu="{gpu}",UUID="GPU-x",modelName="NVIDIA H100 80GB HBM3"}} {value}\n'


def test_rates_xid_and_throttle_accumulate_across_scrapes():
    mapper = DcgmMapper()
    seq = [(0.0, 1e9, 0, 0x0), (2.0, 3e9, 79, 0x4), (3.0, 3e9, 79, 0x4), (4.0, 3e9, 13, 0x0)]
    last = None
    for t, pcie_rate, xid, mask in seq:
        text = (_scrape_line("DCGM_FI_PROF_PCIE_TX_BYTES", pcie_rate) + _scrape_line("DCGM_FI_DEV_XID_ERRORS", xid)
                + _scrape_line("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", mask))
        last = map_text(text, t, mapper).readings["0"].counters
    # trapezoid: 2 s × (1+3)/2 GB/s + 1 s × 3 + 1 s × 3
    assert last["pcie_bytes_total"][("tx",)] == pytest.approx(4e9 + 3e9 + 3e9)
    # XID 79 once (it stays the last XID for two scrapes), then XID 13
    assert last["xid_errors_total"] == {("79",): 1.0, ("13",): 1.0}
    # sw_power_cap (0x4) was set from t=2 to t=4
    assert last["throttle_seconds_total"][("sw_power_cap",)] == pytest.approx(2.0)
    assert last["throttle_seconds_total"][("gpu_idle",)] == 0.0


def test_broken_line_costs_only_itself():
    text = capture(L4).replace("DCGM_FI_DEV_GPU_TEMP{gpu", "DCGM_FI_DEV_GPU_TEMP{gpu=", 1)
    series, bad = parse_exposition(text)
    assert len(bad) == 1 and bad[0][1].startswith("not a Prometheus exposition line: 'DCGM_FI_DEV_GPU_TEMP{gpu==")
    assert len(series) == 22


# ---------------------------------------------------------------- recorded dcgm-exporter output

def test_text_log_of_many_scrapes_with_times(tmp_path):
    l4 = capture(L4)
    p = tmp_path / "dcgm.log"
    p.write_text("1700000000\n" + l4 + "1700000001.5\n" + l4.replace("16.365000", "70.5")
                 + "2023-11-14T22:13:23Z\n" + l4)
    run = read_log(str(p))
    assert run.format == "dcgm" and run.timed and run.errors == []
    assert [r.t for r in run.records] == [1700000000.0, 1700000001.5, 1700000003.0]
    assert [r.sample.power_w for r in run.records] == [16.365, 70.5, 16.365]


def test_text_log_without_clock(tmp_path):
    p = tmp_path / "dcgm.log"
    p.write_text(capture(H100) * 3)
    run = read_log(str(p), interval=2.0)
    assert not run.timed
    assert sorted({r.t for r in run.records}) == [0.0, 2.0, 4.0]
    assert len(run.records) == 24


def test_text_log_with_garbage_names_the_line(tmp_path):
    text = capture(L4).replace("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"", "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"", 1)
    text = text.replace(" 0\n# HELP DCGM_FI_DEV_MEM_COPY_UTIL", " 218322032\n# HELP DCGM_FI_DEV_MEM_COPY_UTIL", 1)
    p = tmp_path / "dcgm.log"
    p.write_text(text + "half a line {\n")
    run = read_log(str(p))
    assert [str(e) for e in run.errors] == [
        f"{p}:24: DCGM_FI_DEV_GPU_UTIL{{gpu=0}} = 2.18322e+08: outside 0..100; value dropped",
        f"{p}:70: neither an exposition sample nor a time: 'half a line {{'; skipped",
    ]
    assert run.records[0].sample.util is None and run.records[0].sample.power_w == 16.365


def test_text_log_truncated_last_line(tmp_path):
    p = tmp_path / "dcgm.log"
    p.write_text(capture(L4) + capture(L4).splitlines()[2][:60] + "\n")      # cut inside the labels
    run = read_log(str(p))
    assert [e.line for e in run.errors] == [70]
    assert run.errors[0].message.startswith("not a Prometheus exposition line: 'DCGM_FI_DEV_SM_CLOCK{gpu=")
    assert len(run.records) == 1 and run.records[0].reading.gauges["sm_clock_hertz"] == 210e6


def test_csv_exports(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text("timestamp,gpu,Hostname,DCGM_FI_DEV_GPU_UTIL,DCGM_FI_PROF_SM_ACTIVE,DCGM_FI_DEV_POWER_USAGE\n"
                    "2025-01-01T00:00:00Z,0,n1,100,0.05,150\n"
                    "2025-01-01T00:00:00Z,1,n1,3,0.90,540\n"
                    "2025-01-01T00:00:01Z,0,n1,100,0.06,151\n"
                    "2025-01-01T00:00:01Z,1,n1,4\n")
    run = read_log(str(wide))
    assert run.has_sm_active and run.nodes == ("n1",)
    assert [str(e) for e in run.errors] == [f"{wide}:5: truncated line: 4 fields, header has 6; row skipped"]
    assert [s.sm_active for s in run.samples("0")] == [0.05, 0.06]
    assert run.samples("1")[0].util == 0.03
    long = tmp_path / "long.csv"
    long.write_text("time,metric,gpu,value\n"
                    "1700000000,DCGM_FI_DEV_GPU_UTIL,0,50\n1700000000,DCGM_FI_DEV_FB_USED,0,1000\n"
                    "1700000001,DCGM_FI_DEV_GPU_UTIL,0,oops\n")
    run = read_log(str(long))
    assert [str(e) for e in run.errors] == [f"{long}:4: DCGM_FI_DEV_GPU_UTIL: not a number: 'oops'; value dropped"]
    assert run.records[0].sample.util == 0.5 and run.records[0].sample.memory_used_bytes == 1000 * MIB
    grafana = tmp_path / "grafana.csv"
    grafana.write_text('Time,"DCGM_FI_DEV_GPU_UTIL{gpu=""0"", Hostname=""n2""}","DCGM_FI_DEV_GPU_UTIL{gpu=""1"", Hostname=""n2""}"\n'
                       "2025-01-01 00:00:00,10,20\n")
    run = read_log(str(grafana))
    assert {r.gpu: r.sample.util for r in run.records} == {"0": 0.1, "1": 0.2}
