"""Recorded logs that lie or explode, read in process: caps, stray byte-order marks,
non-ASCII GPU indices, clock trouble named by line."""
from __future__ import annotations

import pytest

from gpulse.sources.recorded import LogFormatError, read_log

SMI = "timestamp, index, utilization.gpu [%], power.draw [W]\n"


def test_oversized_json_is_one_line(tmp_path, monkeypatch):
    from gpulse.sources.recorded import dcgm
    monkeypatch.setattr(dcgm, "MAX_JSON", 1000)
    p = tmp_path / "query.json"
    p.write_text('{"status": "success", "data": {"resultType": "matrix", "result": [\n' +
                 ",\n".join('{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0"}, "values": [[1, "5"]]}'
                            for _ in range(50)) + "]}}\n")
    with pytest.raises(LogFormatError) as e:
        read_log(str(p))
    assert str(e.value).startswith(f"{p}: Prometheus API JSON larger than 0 MiB: JSON is read whole")


@pytest.mark.parametrize("index", ["١", "１", "²"])
def test_non_ascii_gpu_index_is_a_skipped_row(tmp_path, index):
    p = tmp_path / "run.csv"
    p.write_text(SMI + "2025/01/01 00:00:00.000, 0, 50 %, 100 W\n"
                       f"2025/01/01 00:00:00.001, {index}, 50 %, 100 W\n"
                       "2025/01/01 00:00:01.000, 0, 50 %, 100 W\n")
    run = read_log(str(p))
    assert [d.gpu for d in run.devices] == ["0"] and len(run.records) == 2
    assert [e.line for e in run.errors] == [3] and "not a GPU index" in run.errors[0].message


def test_a_bom_inside_an_appended_log_is_no_column(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(b"\xef\xbb\xbf" + SMI.encode() + b"2025/01/01 00:00:00.000, 0, 50 %, 100 W\n" +
                  b"\xef\xbb\xbf" + SMI.encode() + b"2025/01/01 00:00:01.000, 0, 60 %, 110 W\n")
    run = read_log(str(p))
    assert run.errors == [] and [r.sample.util for r in run.records] == [0.5, 0.6]


def test_replay_warns_about_clock_trouble_with_lines(tmp_path, caplog):
    import logging
    from testing.config import test_config
    from gpulse.sources.replay import ReplaySource
    rows = [f"2025/01/01 00:01:{k:02d}.000, 0, 50 %, 100 W\n" for k in range(10)]
    rows.insert(5, rows[4])                                       # line 7 repeats line 6
    rows += [f"2025/01/01 00:00:{k:02d}.000, 0, 50 %, 100 W\n" for k in range(5)]   # back a minute: line 13
    p = tmp_path / "run.csv"
    p.write_text(SMI + "".join(rows))
    src = ReplaySource(test_config(source="replay", replay__file=str(p), replay__speed=0))
    with caplog.at_level(logging.WARNING, logger="gpulse.replay"):
        src.open()
        ts = []
        while not src.finished:
            ts += [s.t for r in src.poll(0.0).readings for s in r.samples]
    assert len(ts) == 15 and all(a < b for a, b in zip(ts, ts[1:]))
    assert caplog.messages == [
        f"{p}: 1 time(s) a GPU's timestamp goes backwards; the clock is taken to have stepped back and the rows "
        "after it are kept in order after the earlier ones (line 13)",
        f"{p}: 1 time(s) a row repeats its GPU's previous timestamp; the repeat is dropped (line 7)"]


def test_gpus_per_log_are_capped(tmp_path, monkeypatch):
    from gpulse.sources.recorded import stream
    monkeypatch.setattr(stream, "MAX_GPUS", 64)
    p = tmp_path / "many.csv"
    p.write_text(SMI + "".join(f"2025/01/01 00:00:00.{i % 1000:03d}, {i}, 50 %, 100 W\n" for i in range(100)) +
                 "".join(f"2025/01/01 00:00:01.{i % 1000:03d}, {i}, 50 %, 100 W\n" for i in range(100)))
    run = read_log(str(p))
    assert [d.gpu for d in run.devices] == [str(i) for i in range(64)]
    assert len(run.records) == 128 and run.error_count == 72
    assert run.errors[0].message == "GPU '64': more than 64 GPUs in one log; row skipped"
