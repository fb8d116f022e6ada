"""ReplaySource: a recorded log replayed on the live timeline, in the test process
(tests/integration/replay/test_replay.py: a whole real trace, and `gpulse serve --source replay`)."""
from __future__ import annotations

import logging

import pytest

from gpulse.sources.base import SourceError
from gpulse.sources.replay import ReplaySource
from hostilelogs import SMALL_HEADER, replay_source, small_log, small_rows


def _times(result, gpu="0"):
    return [s.t for r in result.readings if r.gpu == gpu for s in r.samples]


def test_real_time_position_follows_now(tmp_path):
    src = replay_source(small_log(tmp_path, small_rows(10)), speed=1)
    assert [d.gpu for d in src.open()] == ["0", "1"]
    t0 = src.run.start
    first = src.poll(50.0)                       # anchors: recorded start = now 50
    assert [t - t0 for t in _times(first)] == [0.0]
    assert _times(src.poll(50.5)) == []          # nothing recorded in (0, 0.5]
    mid = src.poll(53.0)
    assert [t - t0 for t in _times(mid)] == [1.0, 2.0, 3.0]
    # each row keeps its own time: GPU 1's row of second 3 (3.001) is not due yet
    assert [round(t - t0, 3) for t in _times(mid, "1")] == [1.001, 2.001]
    r1 = next(r for r in mid.readings if r.gpu == "1")
    assert r1.gauges["power_watts"] == 102 and r1.gauges["memory_used_bytes"] == 1000 * 2 ** 20
    assert not src.finished
    last = src.poll(70.0)
    assert [t - t0 for t in _times(last)] == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert [round(t - t0, 3) for t in _times(last, "1")] == [3.001, 4.001, 5.001, 6.001, 7.001, 8.001, 9.001]
    assert src.finished


def test_speed_scales_time(tmp_path):
    src = replay_source(small_log(tmp_path, small_rows(10)), speed=4)
    src.open()
    src.poll(0.0)
    assert len(_times(src.poll(1.0))) == 4       # 1 s of wall time = 4 s recorded


def test_speed_zero_hands_out_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(ReplaySource, "CHUNK", 7)
    src = replay_source(small_log(tmp_path, small_rows(10)), speed=0)
    src.open()
    sizes = []
    while not src.finished:
        res = src.poll(0.0)
        sizes.append(sum(len(r.samples) for r in res.readings))
    assert sizes == [7, 7, 6]


def test_loop_keeps_time_monotonic(tmp_path):
    src = replay_source(small_log(tmp_path, small_rows(5)), speed=0, loop=True)
    src.open()
    seen = []
    for _ in range(4):
        seen += _times(src.poll(0.0))
        assert not src.finished
    # 5 samples a pass, 1 s apart; the next pass follows one step after the last sample
    t0 = seen[0]
    assert [t - t0 for t in seen[:12]] == [float(i) for i in range(12)]
    assert all(a < b for a, b in zip(seen, seen[1:]))


def test_loop_in_real_time(tmp_path):
    src = replay_source(small_log(tmp_path, small_rows(5)), speed=1, loop=True)
    src.open()
    src.poll(0.0)
    got = _times(src.poll(12.0))
    t0 = src.run.start
    assert [t - t0 for t in got] == [float(i) for i in range(1, 13)]


def test_every_gpu_reported_each_poll(tmp_path):
    rows = small_rows(3, gpus=2)
    src = replay_source(small_log(tmp_path, rows), speed=1)
    src.open()
    res = src.poll(0.0)
    assert [r.gpu for r in res.readings] == ["0", "1"]
    assert all(r.up for r in res.readings)


def test_recorded_gpu_lost_marks_reading_down(tmp_path):
    rows = small_rows(2)
    rows.append("2025/01/01 00:00:02.000, 0, 10 %, 100 W, 1000 MiB\n")
    rows.append("2025/01/01 00:00:02.001, 1, [GPU is lost], [GPU is lost], [GPU is lost]\n")
    src = replay_source(small_log(tmp_path, rows), speed=0)
    src.open()
    res = src.poll(0.0)
    by = {r.gpu: r for r in res.readings}
    assert by["0"].up
    assert not by["1"].up and by["1"].error == "recorded as 'GPU is lost' (line 7)"


def test_malformed_lines_logged_counted_rest_replays(tmp_path, caplog):
    rows = small_rows(4)
    rows[2] = "2025/01/01 00:00:01.000, 0, 50 %, 31\n"
    rows[3] = rows[3].replace(" W,", " mW,")
    path = small_log(tmp_path, rows)
    src = replay_source(path, speed=0)
    with caplog.at_level(logging.WARNING, logger="gpulse.replay"):
        src.open()
    assert caplog.messages == [
        f"{path}:4: truncated line: 4 fields, header on line 1 has 5; row skipped",
        f"{path}:5: column 'power.draw [W]': value '101 mW' is in mW, expected W; value dropped",
    ]
    res = src.poll(0.0)
    assert res.call_errors == {"replay_parse": 2}
    assert len(_times(res, "0")) == 3 and len(_times(res, "1")) == 4
    assert src.poll(0.0).call_errors == {}           # counted once


def test_many_problems_summed_up(tmp_path, caplog):
    rows = small_rows(30)
    rows = [r if i % 2 else r.replace(" %,", " W,") for i, r in enumerate(rows)]
    path = small_log(tmp_path, rows)
    with caplog.at_level(logging.WARNING, logger="gpulse.replay"):
        replay_source(path).open()
    assert len(caplog.messages) == 11
    assert caplog.messages[-1] == f"{path}: 20 more problems like these; those lines or values were skipped"


def test_unusable_file_is_one_line_source_error(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_text("")
    with pytest.raises(SourceError) as e:
        replay_source(str(p)).open()
    assert str(e.value) == f"{p}:1: empty file: nothing to replay"


def test_explicit_format(tmp_path):
    p = tmp_path / "run.log"
    p.write_text("# gpu   sm\n# Idx    %\n    0   50\n")
    src = replay_source(str(p), format="dmon", speed=0)
    assert [d.gpu for d in src.open()] == ["0"]
    res = src.poll(0.0)
    assert res.readings[0].samples[0].util == 0.5
    with pytest.raises(SourceError, match=r"run\.log:1: unknown header '# gpu   sm'"):
        replay_source(str(p), format="nvidia-smi-csv").open()


def test_dcgm_log_sets_sm_active(tmp_path):
    p = tmp_path / "dcgm.csv"
    p.write_text("timestamp,gpu,DCGM_FI_PROF_SM_ACTIVE\n1,0,0.5\n2,0,0.6\n")
    src = replay_source(str(p), speed=0)
    src.open()
    assert src.has_sm_active
    assert [s.sm_active for s in src.poll(0.0).readings[0].samples] == [0.5, 0.6]


def test_cap_hit_deep_in_the_log_ends_the_replay_not_the_source(tmp_path, caplog):
    # more rows than open() reads ahead, then a line no text log has
    rows = small_rows(60, gpus=2, step=0.01)
    path = tmp_path / "run.csv"
    with path.open("w") as fh:
        fh.write(SMALL_HEADER)
        for k in range(100):               # 100 passes of 60 instants, a minute apart: 12,000 rows
            for r in rows:
                fh.write(r.replace("2025/01/01 00:00:", f"2025/01/01 {k // 60:02d}:{k % 60:02d}:"))
        fh.write("x" * (2 << 20) + "\n")
    src = replay_source(str(path), speed=0)
    assert [d.gpu for d in src.open()] == ["0", "1"]
    assert src.run.fraction < 1.0
    n = 0
    errors = {}
    with caplog.at_level(logging.ERROR, logger="gpulse.replay"):
        while not src.finished:
            res = src.poll(0.0)
            n += sum(len(r.samples) for r in res.readings)
            for k, v in res.call_errors.items():
                errors[k] = errors.get(k, 0) + v
    assert n == 12_000
    assert errors == {"replay_parse": 1}
    assert caplog.messages == [f"{path}:12002: a line longer than 1 MiB characters: not a text log; "
                               "the replay stops here"]


def test_logged_counters_count_on_across_a_reset_and_a_loop(tmp_path):
    # ECC counters as nvidia-smi logged them: 5, 6, 7, then a driver reload (0, 1)
    head = "timestamp, index, utilization.gpu [%], ecc.errors.corrected.volatile.total\n"
    values = [5, 6, 7, 0, 1]
    path = tmp_path / "ecc.csv"
    path.write_text(head + "".join(f"2025/01/01 00:00:0{k}.000, 0, 50 %, {v}\n" for k, v in enumerate(values)))
    src = replay_source(str(path), speed=0, loop=True)
    src.CHUNK = len(values)                      # one pass a poll
    src.open()
    seen, resets = [], []
    for _ in range(3):
        res = src.poll(0.0)
        (r,) = res.readings
        seen.append(r.counters["ecc_errors_total"][("corrected",)])
        resets.append(res.events.get(("resets_total", "ecc_errors_total"), 0))
    # 5, 6, 7, the reload (+0), +1; the next pass goes on from 1 to 5 (+4), 6, 7, reload, +1 ...
    assert seen == [8, 15, 22]
    assert resets == [1, 1, 1]
