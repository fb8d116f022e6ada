"""Recorded-log parsers on the real captures and traces, and on malformed input."""
from __future__ import annotations

import functools

import pytest

from gpulse.catalog import THROTTLE_REASONS

from conftest import require_data
from gpulse.sources.cells import CellError, parse_quantity, parse_smi_time
from gpulse.sources.recorded import LogFormatError, detect_format, read_log
from gpulse.sources.recorded.smi_csv import _poll_rhythm

MIB = 2 ** 20
TRACES = "traces/h100-8gpu/"


@functools.lru_cache(maxsize=None)
def _trace(name):
    """Each trace is read once per test run (about a second each)."""
    return read_log(str(require_data(TRACES + name + ".csv")))


# ---------------------------------------------------------------- nvidia-smi --query-gpu CSV, real captures

@pytest.mark.parametrize("name, util, power, mem_mib, limit", [
    ("h100-80gb-hbm3", 1.0, 631.95, 19818, 700.0),
    ("geforce-rtx-4080-super", 0.07, 84.24, 1474, 320.0),
    ("h100-mig", None, 433.78, 11125, 700.0),       # utilization.gpu is [N/A] with MIG on
])
def test_query_gpu_capture(name, util, power, mem_mib, limit):
    run = read_log(str(require_data(f"captures/nvidia-smi/{name}-query-gpu.csv")))
    assert run.format == "nvidia-smi-csv"
    assert run.errors == []
    assert [d.gpu for d in run.devices] == ["0"]
    d = run.devices[0]
    assert d.uuid.startswith("GPU-") and d.model.startswith("NVIDIA") and d.pci_bus_id.startswith("00000000:")
    (rec,) = run.records
    assert rec.sample.util == util
    assert rec.sample.power_w == power
    assert rec.sample.memory_used_bytes == mem_mib * MIB
    assert rec.reading.gauges["power_limit_watts"] == limit
    assert rec.reading.gauges["memory_total_bytes"] > rec.reading.gauges["memory_used_bytes"]
    # the five the driver counts (clocks_event_reasons_counters.*) and, from the
    # Active / Not Active columns, the others: every reason
    assert set(rec.reading.counters["throttle_seconds_total"]) == {(r,) for r in THROTTLE_REASONS}
    g = rec.reading.gauges
    assert (g["pcie_link_width"], g["pcie_link_max_width"]) == (16.0, 16.0)
    assert g["pcie_link_generation"] <= g["pcie_link_max_generation"]


def test_query_gpu_capture_time_is_utc():
    run = read_log(str(require_data("captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv")))
    # 2026/07/14 08:12:53.353 read as UTC
    assert run.records[0].t == pytest.approx(1784016773.353)


# ---------------------------------------------------------------- nvidia-smi -q, real captures

def test_q_text_capture_h100():
    run = read_log(str(require_data("captures/nvidia-smi/h100-80gb-hbm3-q.txt")))
    assert run.format == "nvidia-smi-q"
    assert run.errors == []
    (d,) = run.devices
    assert (d.model, d.pci_bus_id, d.driver, d.cuda_version) == ("NVIDIA H100 80GB HBM3", "00000000:00:09.0",
                                                                "590.48.01", "13.1")
    (rec,) = run.records
    assert rec.sample.util == 1.0
    assert rec.sample.power_w == 629.45          # Average Power Draw
    assert rec.sample.memory_used_bytes == 19818 * MIB
    assert rec.reading.gauges["temperature_celsius"] == 59
    assert rec.reading.gauges["sm_clock_hertz"] == 1980e6
    assert rec.reading.gauges["power_limit_watts"] == 700
    assert rec.reading.counters["pcie_replays_total"] == 9
    assert rec.reading.holds_workload is True             # gpu_burn and two memhogs are listed
    g = rec.reading.gauges                                # PCI / GPU Link Info
    assert (g["pcie_link_generation"], g["pcie_link_max_generation"]) == (5.0, 5.0)
    assert (g["pcie_link_width"], g["pcie_link_max_width"]) == (16.0, 16.0)
    # Clocks Event Reasons (Active / Not Active) with the counters: every reason known
    assert set(rec.reading.counters["throttle_seconds_total"]) == {(r,) for r in THROTTLE_REASONS}


def test_q_text_reasons_as_states_count_held_time(tmp_path):
    """Two -q snapshots a second apart, HW Slowdown Active in the second: that second
    counts for it (nvidia-smi counts no time for it); SW Power Cap Active there too, but
    its driver counter (0 us) is what counts for it."""
    text = require_data("captures/nvidia-smi/h100-80gb-hbm3-q.txt").read_text()
    stamp = next(line for line in text.splitlines() if line.startswith("Timestamp"))
    later = stamp.replace("08:12:53", "08:12:54")
    held = (text.replace(stamp, later)
            .replace("HW Slowdown                                    : Not Active",
                     "HW Slowdown                                    : Active")
            .replace("SW Power Cap                                   : Not Active",
                     "SW Power Cap                                   : Active"))
    path = tmp_path / "q.txt"
    path.write_text(text + held)
    run = read_log(str(path))
    assert run.errors == []
    first, second = (r.reading.counters["throttle_seconds_total"] for r in run.records)
    assert first[("hw_slowdown",)] == 0 and second[("hw_slowdown",)] == 1.0
    assert second[("sw_power_cap",)] == 0 and second[("gpu_idle",)] == 0


def test_q_text_capture_mig_instances():
    run = read_log(str(require_data("captures/nvidia-smi/h100-mig-q.txt")))
    gpus = [d.gpu for d in run.devices]
    assert gpus == ["0", "0/2", "0/3", "0/9", "0/10"]
    by = {r.gpu: r for r in run.records}
    assert by["0"].sample.util is None            # N/A with MIG on
    assert by["0/2"].sample.memory_used_bytes == 11091 * MIB
    assert by["0/2"].reading.gauges["memory_total_bytes"] == 40448 * MIB
    # every process runs in GPU instance 2
    assert by["0/2"].reading.holds_workload is True
    assert by["0/3"].reading.holds_workload is False
    mig = next(d for d in run.devices if d.gpu == "0/9")
    assert mig.gpu_instance == "9" and mig.parent_uuid.startswith("GPU-")


def test_q_text_capture_geforce():
    run = read_log(str(require_data("captures/nvidia-smi/geforce-rtx-4080-super-q.txt")))
    (rec,) = run.records
    assert rec.sample.util == pytest.approx(0.07)
    assert rec.reading.gauges["fan_speed_ratio"] == 0.0
    assert "memory_temperature_celsius" not in rec.reading.gauges     # printed as N/A
    assert "ecc_errors_total" not in rec.reading.counters              # no ECC on GeForce


# ---------------------------------------------------------------- the 8×H100 traces

@pytest.mark.parametrize("name, samples", [("ckpt1", 6807), ("ckpt500", 6693), ("ckpt1000", 6842)])
def test_trace_rows_map_to_gpus(name, samples):
    run = _trace(name)
    assert run.errors == []
    assert [d.gpu for d in run.devices] == [str(i) for i in range(8)]
    by = run.samples_by_gpu()
    assert all(len(v) == samples for v in by.values())
    # GPU 0 is recognisable by its idle memory (98-135 MiB against 14-17 MiB on the others)
    assert all(90 * MIB < s.memory_used_bytes < 140 * MIB for s in by["0"][:50])
    for g in "1234567":
        assert all(s.memory_used_bytes < 20 * MIB for s in by[g][:50])
    # each row keeps its own timestamp, per GPU in order
    for v in by.values():
        assert all(a.t < b.t for a, b in zip(v, v[1:]))
    assert run.end - run.start == pytest.approx({"ckpt1": 697.1, "ckpt500": 694.9, "ckpt1000": 698.1}[name], abs=0.1)


def test_trace_units_converted():
    run = _trace("ckpt1")
    first = run.records[0]
    # "2025/07/27 00:22:27.858, 71.25 W, 0 %, 130 MiB"
    assert (first.gpu, first.sample.power_w, first.sample.util, first.sample.memory_used_bytes) == \
        ("0", 71.25, 0.0, 130 * MIB)
    assert first.t == pytest.approx(parse_smi_time("2025/07/27 00:22:27.858"))


def test_trace_without_index_column_rows_per_poll():
    run = _trace("ckpt1000")
    ts = [r.t for r in sorted(run.records, key=lambda r: r.line)]
    assert _poll_rhythm(ts)[0] == 8


@pytest.mark.parametrize("cut", [7, 5000, 20000])
def test_a_truncated_row_of_a_log_without_an_index_loses_only_itself(tmp_path, cut):
    """A row short of a field among the first rows of an index-less log (its GPUs are
    the rows of each poll in turn): the rows around it keep their GPUs. Read on the rows
    left, the time rhythm put the rows after it one place off, so they read as another
    GPU's repeats and 36,000 of the trace's 43,600 rows were dropped."""
    lines = require_data(TRACES + "ckpt10.csv").read_text().splitlines()
    lines[cut] = lines[cut].rsplit(",", 1)[0]
    p = tmp_path / "cut.csv"
    p.write_text("\n".join(lines) + "\n")
    whole, run = read_log(str(require_data(TRACES + "ckpt10.csv"))), read_log(str(p))
    assert [e.line for e in run.errors] == [cut + 1] and run.warnings == []
    assert len(run.records) == len(whole.records) - 1
    kept = {(r.gpu, r.t) for r in run.records}
    assert kept == {(r.gpu, r.t) for r in whole.records if r.line != cut + 1}
    # the rhythm alone, the row's place left empty
    ts = [r.t for r in sorted(run.records, key=lambda r: r.line)]
    assert _poll_rhythm(ts, [r.line - 2 for r in sorted(run.records, key=lambda r: r.line)])[0] == 8


@pytest.mark.parametrize("rows_read", ["in batches", "row by row"])
@pytest.mark.parametrize("damage", ["restart", "run together", "both, early"])
def test_rows_after_a_line_that_held_more_than_a_row_keep_their_gpus(tmp_path, monkeypatch, damage, rows_read):
    """An index-less log names a row's GPU by its place in its poll. A logger killed
    mid-row and restarted onto the same file (its header on the end of the partial
    row, then a poll from GPU 0), or two rows run together on one line: the line is
    one problem, but the places after it were one or more off, and every later row of
    the real trace (33,595 of them) was read as another GPU's. From the next poll on,
    each row is its own GPU again, and the rhythm is still read as 8 GPUs."""
    lines = require_data(TRACES + "ckpt10.csv").read_text().splitlines()
    keep = list(range(len(lines)))          # the trace's line each line of the damaged log is
    if damage == "restart":
        cut = 10004                         # GPU 3's row, partly written
        nxt = next(k for k in range(cut + 1, cut + 20) if (k - 1) % 8 == 0)
        new = lines[:cut] + [lines[cut][:20] + lines[0]] + lines[nxt:]
        keep = keep[:cut] + [-1] + keep[nxt:]
    elif damage == "run together":
        cut = 10004
        new = lines[:cut] + [lines[cut][:20] + lines[cut + 1]] + lines[cut + 2:]
        keep = keep[:cut] + [-1] + keep[cut + 2:]
    else:
        new, keep = list(lines), list(keep)
        for cut in (3000, 700):             # within the rows the rhythm is read from
            new[cut:cut + 2] = [new[cut][:15] + new[cut + 1]]
            keep[cut:cut + 2] = [-1]
    p = tmp_path / "damaged.csv"
    p.write_text("\n".join(new) + "\n")
    if rows_read == "row by row":
        from gpulse.sources.recorded import smi_fast
        monkeypatch.setattr(smi_fast, "available", lambda: False)
    whole = {r.line: r.gpu for r in read_log(str(require_data(TRACES + "ckpt10.csv"))).records}
    run = read_log(str(p))
    assert len({e.line for e in run.errors}) == (2 if damage.startswith("both") else 1)
    assert {r.gpu for r in run.records} == {str(g) for g in range(8)}
    first_bad = min(n for n, k in enumerate(keep) if k < 0)
    wrong = [(r.line, r.gpu, whole[keep[r.line - 1] + 1]) for r in run.records
             if whole.get(keep[r.line - 1] + 1) != r.gpu]
    # only rows of the poll a line ran into may be off (up to 7 rows each)
    assert len(wrong) <= 7 * len({e.line for e in run.errors}), wrong[:10]
    assert all(line - first_bad < 8 or any(0 <= line - e.line < 8 for e in run.errors) for line, _, _ in wrong)


def test_rows_per_poll_rhythms():
    # 4 GPUs, rows 2 ms apart, polls 100 ms apart
    ts = [k * 0.1 + i * 0.002 for k in range(50) for i in range(4)]
    assert _poll_rhythm(ts)[0] == 4
    # one GPU
    assert _poll_rhythm([k * 0.1 for k in range(50)])[0] == 1
    # identical timestamps within a poll
    assert _poll_rhythm([k * 1.0 for k in range(30) for _ in range(3)])[0] == 3


# ---------------------------------------------------------------- small logs in every format

def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_csv_with_index_column_and_nounits(tmp_path):
    path = _write(tmp_path, "smi.csv", (
        "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]\n"
        "2025/01/01 00:00:00.000, 0, 50, 300.5, 1000\n"
        "2025/01/01 00:00:00.000, 1, 90, 500.0, 2000\n"
        "2025/01/01 00:00:01.000, 1, 80, 450.0, 2000\n"
        "2025/01/01 00:00:01.000, 0, 40, 250.0, 1000\n"))
    run = read_log(path)
    assert run.errors == []
    by = run.samples_by_gpu()
    assert [s.util for s in by["0"]] == [0.5, 0.4]
    assert [s.util for s in by["1"]] == [0.9, 0.8]
    assert by["1"][0].memory_used_bytes == 2000 * MIB


def test_csv_without_timestamp_spaces_instants(tmp_path):
    path = _write(tmp_path, "smi.csv", "index, utilization.gpu [%]\n0, 10 %\n1, 20 %\n0, 30 %\n1, 40 %\n")
    run = read_log(path, interval=0.5)
    assert run.timed is False
    assert [(r.t, r.gpu, r.sample.util) for r in run.records] == [
        (0.0, "0", 0.1), (0.0, "1", 0.2), (0.5, "0", 0.3), (0.5, "1", 0.4)]


def test_csv_uuid_identifies_gpus(tmp_path):
    path = _write(tmp_path, "smi.csv", (
        "timestamp, uuid, utilization.gpu [%]\n"
        "2025/01/01 00:00:00.000, GPU-b, 1 %\n"
        "2025/01/01 00:00:00.001, GPU-a, 2 %\n"
        "2025/01/01 00:00:01.000, GPU-a, 3 %\n"))
    run = read_log(path)
    assert {d.gpu: d.uuid for d in run.devices} == {"0": "GPU-b", "1": "GPU-a"}
    assert [s.util for s in run.samples("1")] == [0.02, 0.03]


def test_csv_gpu_lost_marks_record(tmp_path):
    path = _write(tmp_path, "smi.csv", (
        "timestamp, index, utilization.gpu [%]\n"
        "2025/01/01 00:00:00.000, 0, 10 %\n"
        "2025/01/01 00:00:00.000, 1, [GPU is lost]\n"))
    run = read_log(path)
    lost = [r for r in run.records if r.gpu == "1"][0]
    assert lost.reading.error == "GPU is lost"
    assert run.errors == []


def test_dmon_with_date_and_time(tmp_path):
    path = _write(tmp_path, "dmon.txt", (
        "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz\n"
        " 20250101   00:00:00      0    350     60     70     95     40      0      0   2619   1980\n"
        " 20250101   00:00:00      1    150     55      -    100     10      0      0   2619   1980\n"
        " 20250101   00:00:01      0    360     61     70     96     41      0      0   2619   1980\n"
        " 20250101   00:00:01      1    149     55      -    100     10      0      0   2619   1980\n"))
    run = read_log(path)
    assert run.format == "dmon" and run.timed and run.errors == []
    g1 = [r for r in run.records if r.gpu == "1"]
    assert [r.sample.util for r in g1] == [1.0, 1.0]
    assert g1[0].sample.power_w == 150
    assert "memory_temperature_celsius" not in g1[0].reading.gauges         # '-'
    assert g1[1].t - g1[0].t == 1.0
    assert g1[0].reading.gauges["sm_clock_hertz"] == 1980e6


def test_dmon_plain_counts_instants_and_integrates_pcie(tmp_path):
    path = _write(tmp_path, "dmon.txt", (
        "# gpu    rxpci  txpci\n"
        "# Idx     MB/s   MB/s\n"
        "    0      100     10\n"
        "    1        0      0\n"
        "# gpu    rxpci  txpci\n"
        "# Idx     MB/s   MB/s\n"
        "    0      100     30\n"
        "    1        0      0\n"))
    run = read_log(path, interval=2.0)
    assert run.timed is False
    g0 = [r for r in run.records if r.gpu == "0"]
    assert [r.t for r in g0] == [0.0, 2.0]
    # 100 MB/s for 2 s
    assert g0[1].reading.counters["pcie_bytes_total"][("rx",)] == pytest.approx(200e6)


def test_detect_format():
    assert detect_format(["timestamp, power.draw [W]"]) == "nvidia-smi-csv"
    assert detect_format(["# gpu   pwr  gtemp"]) == "dmon"
    assert detect_format(["#Date       Time        gpu    pwr"]) == "dmon"
    assert detect_format(["", "==============NVSMI LOG=============="]) == "nvidia-smi-q"
    assert detect_format(['DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5']) == "dcgm"
    assert detect_format(["# HELP DCGM_FI_DEV_SM_CLOCK SM clock"]) == "dcgm"
    assert detect_format(['{"status": "success"}']) == "dcgm"
    assert detect_format(["timestamp,gpu,DCGM_FI_DEV_GPU_UTIL"]) == "dcgm"
    assert detect_format(["time, watts, util"]) is None


# ---------------------------------------------------------------- malformed input

HEADER = "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]\n"


def test_empty_file(tmp_path):
    path = _write(tmp_path, "empty.csv", "")
    with pytest.raises(LogFormatError) as e:
        read_log(path)
    assert str(e.value) == f"{path}:1: empty file: nothing to replay"


def test_missing_file(tmp_path):
    with pytest.raises(LogFormatError, match=r"nope\.csv: cannot read: No such file"):
        read_log(str(tmp_path / "nope.csv"))


def test_unknown_header(tmp_path):
    path = _write(tmp_path, "x.csv", "\ntime, watts, util\n1, 2, 3\n")
    with pytest.raises(LogFormatError) as e:
        read_log(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: unknown header 'time, watts, util'")
    assert "\n" not in msg


def test_unknown_column_reported_rest_replays(tmp_path):
    path = _write(tmp_path, "x.csv", "timestamp, index, gpu util, utilization.gpu [%]\n"
                                     "2025/01/01 00:00:00.000, 0, 5, 50 %\n")
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:1: unknown column 'gpu util' ignored (not an nvidia-smi --query-gpu field)"]
    assert run.records[0].sample.util == 0.5


def test_truncated_line_skipped_rest_replays(tmp_path):
    path = _write(tmp_path, "x.csv", HEADER +
                  "2025/01/01 00:00:00.000, 0, 50 %, 300 W, 1000 MiB\n"
                  "2025/01/01 00:00:01.000, 0, 60 %, 31\n"
                  "2025/01/01 00:00:02.000, 0, 70 %, 320 W, 1000 MiB\n")
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:3: truncated line: 4 fields, header on line 1 has 5; row skipped"]
    assert [s.util for s in run.samples("0")] == [0.5, 0.7]


def test_truncated_line_keeps_gpu_positions(tmp_path):
    # no index column: a broken row still takes its GPU's place in the poll
    rows = []
    for k in range(20):
        for g in range(2):
            rows.append(f"2025/01/01 00:00:{k:02d}.{g * 2:03d}, {10 + g} %\n")
    rows[5] = rows[5][:18] + "\n"                     # cut inside the timestamp
    path = _write(tmp_path, "x.csv", "timestamp, utilization.gpu [%]\n" + "".join(rows))
    run = read_log(path)
    assert len(run.errors) == 1 and run.errors[0].line == 7
    assert {s.util for s in run.samples("0")} == {0.10}
    assert {s.util for s in run.samples("1")} == {0.11}


def test_wrong_unit_in_cell(tmp_path):
    path = _write(tmp_path, "x.csv", HEADER +
                  "2025/01/01 00:00:00.000, 0, 50 %, 300 mW, 1000 MiB\n"
                  "2025/01/01 00:00:01.000, 0, 60 %, 310 W, 1000 MiB\n")
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:2: column 'power.draw [W]': value '300 mW' is in mW, expected W; value dropped"]
    s0, s1 = run.samples("0")
    assert s0.power_w is None and s0.util == 0.5    # the rest of the row is kept
    assert s1.power_w == 310


def test_wrong_unit_in_header(tmp_path):
    path = _write(tmp_path, "x.csv", "timestamp, index, utilization.gpu [%], power.draw [%], memory.used [KiB]\n"
                                     "2025/01/01 00:00:00.000, 0, 50 %, 3 %, 2048 KiB\n")
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:1: column 'power.draw [%]': unit [%] is not W; column ignored"]
    # KiB is a memory unit: converted, not refused
    assert run.records[0].sample.memory_used_bytes == 2048 * 1024
    assert run.records[0].sample.power_w is None


def test_garbage_values_dropped(tmp_path):
    path = _write(tmp_path, "x.csv", HEADER +
                  "2025/01/01 00:00:00.000, 0, 218322032 %, 300 W, 1000 MiB\n"
                  "2025/01/01 00:00:01.000, 0, lots, 300 W, 1000 MiB\n"
                  "yesterday, 0, 5 %, 300 W, 1000 MiB\n")
    run = read_log(path)
    msgs = [str(e) for e in run.errors]
    assert msgs == [
        f"{path}:2: column 'utilization.gpu [%]': value '218322032 %' outside 0..100; value dropped",
        f"{path}:3: column 'utilization.gpu [%]': not a number: 'lots'; value dropped",
        f"{path}:4: column 'timestamp': not a timestamp: 'yesterday'; row skipped",
    ]
    assert [s.util for s in run.samples("0")] == [None, None]


def test_nothing_usable(tmp_path):
    path = _write(tmp_path, "x.csv", HEADER + "garbage\n")
    with pytest.raises(LogFormatError) as e:
        read_log(path)
    assert str(e.value) == (f"{path}: no usable nvidia-smi-csv rows (first problem: line 2: truncated line: "
                            "1 fields, header on line 1 has 5; row skipped)")


def test_header_without_any_signal(tmp_path):
    path = _write(tmp_path, "x.csv", "timestamp, index, name\n2025/01/01 00:00:00.000, 0, H100\n")
    with pytest.raises(LogFormatError, match=r"x\.csv:1: header has none of utilization\.gpu"):
        read_log(path)


def test_dmon_truncated_and_unknown_column(tmp_path):
    path = _write(tmp_path, "dmon.txt", (
        "# gpu    pwr     sm  bogus\n"
        "# Idx      W      %      ?\n"
        "    0    300     90      1\n"
        "    1    300\n"
        "    1    310     91      1\n"))
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:1: unknown dmon column 'bogus' ignored",
        f"{path}:4: truncated line: 2 fields, the dmon header has 4; row skipped",
    ]
    assert [r.gpu for r in run.records] == ["0", "1"]


def test_q_text_bad_value(tmp_path):
    text = open(require_data("captures/nvidia-smi/h100-80gb-hbm3-q.txt")).read()
    text = text.replace("GPU Current Temp                               : 59 C",
                        "GPU Current Temp                               : 59 F")
    line = text.splitlines().index("        GPU Current Temp                               : 59 F") + 1
    path = _write(tmp_path, "q.txt", text)
    run = read_log(path)
    assert [str(e) for e in run.errors] == [
        f"{path}:{line}: Temperature / GPU Current Temp: value '59 F' is in F, expected C; value dropped"]
    assert "temperature_celsius" not in run.records[0].reading.gauges
    assert run.records[0].sample.util == 1.0


def test_parse_quantity():
    assert parse_quantity("71.25 W", "W") == 71.25
    assert parse_quantity("130 MiB", "MiB") == 130 * MIB
    assert parse_quantity("130", "MiB") == 130 * MIB           # --format=csv,nounits
    assert parse_quantity("[N/A]", "W") is None
    assert parse_quantity("[Not Supported]", "W") is None
    with pytest.raises(CellError):
        parse_quantity("12 W", "%")
    with pytest.raises(CellError):
        parse_quantity("101 %", "%", 0, 100)
