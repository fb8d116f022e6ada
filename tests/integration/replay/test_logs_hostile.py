"""Recorded logs that lie, stall or explode: replay and the report stream them, cap
what cannot stream, and keep the verdict of a real trace whatever its clock does."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc

import pytest

from conftest import ROOT, require_data
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log
from gpulse.sources.recorded import LogFormatError, LogStream, read_log, smi_fast

TRACE = "traces/h100-8gpu/ckpt1000.csv"


def _report(*args, timeout=180):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    return subprocess.run([sys.executable, "-m", "gpulse", "report", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_line_error(p, *wanted: str) -> str:
    assert p.returncode != 0
    out = p.stderr + p.stdout
    assert "Traceback" not in out and "Error:" not in out.replace("gpulse:", ""), out[-2000:]
    [line] = p.stderr.strip().splitlines()
    for w in wanted:
        assert w in line, line
    return line


_verdicts: dict[str, dict] = {}


def _verdict(path: str) -> dict:
    doc = analyse(from_log(path)).as_json()
    return doc


def _clean() -> dict:
    if "clean" not in _verdicts:
        _verdicts["clean"] = _verdict(str(require_data(TRACE)))
    return _verdicts["clean"]


def _summary(doc: dict) -> list[tuple[str, str]]:
    return [(f["kind"], f["severity"]) for f in doc["findings"]]


def _trace_lines() -> tuple[str, list[str]]:
    lines = require_data(TRACE).read_text().splitlines()
    return lines[0], lines[1:]


def _stamp(row: str) -> float:
    """The Unix time of an nvidia-smi row (its zoneless timestamp read as UTC)."""
    import calendar
    stamp = row.partition(",")[0]
    head, _, frac = stamp.strip().partition(".")
    return calendar.timegm(time.strptime(head, "%Y/%m/%d %H:%M:%S")) + int(frac) / 1000


def _shift(row: str, seconds: float) -> str:
    """An nvidia-smi row with its timestamp moved by `seconds`."""
    ms = round((_stamp(row) + seconds) * 1000)
    return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}," + row.partition(",")[2]


# ---------------------------------------------------------------- encoding and clocks

def test_bom_keeps_the_timestamp_column_and_the_finding(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + require_data(TRACE).read_bytes())
    run = read_log(str(p))
    assert run.timed and run.error_count == 0
    doc = _verdict(str(p))
    clean = _clean()
    assert _summary(doc) == _summary(clean)
    assert doc["findings"][0]["text"] == clean["findings"][0]["text"]
    assert doc["stall_period_seconds"] == clean["stall_period_seconds"]


def test_clock_stepping_back_and_repeated_rows_keep_the_verdict(tmp_path):
    header, rows = _trace_lines()
    # a clock stepped back 300 s from poll 3000 on (8 rows a poll: the first row of a poll),
    # and three polls logged twice (a logger writing its buffer again)
    step_at = 3000 * 8
    out = rows[:step_at] + [_shift(r, -300.0) for r in rows[step_at:]]
    for k in (1200, 2500, 5000):
        at = k * 8
        out[at:at] = out[at:at + 8]
    p = tmp_path / "clock.csv"
    p.write_text(header + "\n" + "\n".join(out) + "\n")
    run = read_log(str(p))
    # the step-back is seen where the first row after it is (file line: data row + header);
    # the three repeats sit 8 rows after their originals
    assert run.warnings[0].startswith(f"{p}: 1 time(s) a GPU's timestamp goes backwards")
    assert f"(line {step_at + 8 * 2 + 2})" in run.warnings[0]      # two repeated polls come before it
    assert run.warnings[1].startswith(f"{p}: 24 time(s) a row repeats its GPU's previous timestamp")
    assert f"(line {1200 * 8 + 8 + 2}, " in run.warnings[1] and "and 19 more)" in run.warnings[1]
    ts = {}
    for r in run.records:                      # every GPU's clock runs forward
        assert r.t > ts.get(r.gpu, 0.0)
        ts[r.gpu] = r.t
    doc = _verdict(str(p))
    clean = _clean()
    assert _summary(doc) == _summary(clean)
    assert doc["findings"][0]["text"] == clean["findings"][0]["text"]
    assert abs(doc["stall_period_seconds"] - clean["stall_period_seconds"]) <= 0.05 * clean["stall_period_seconds"]
    assert any("goes backwards" in n for n in doc["notes"]) and any("repeats" in n for n in doc["notes"])


# ---------------------------------------------------------------- what cannot stream

def test_symlink_to_dev_zero_is_one_line(tmp_path):
    link = tmp_path / "run.csv"
    link.symlink_to("/dev/zero")
    p = _report("--input", str(link), "--out", str(tmp_path / "out"))
    _one_line_error(p, f"{link}: is a device, not a recorded log")


def test_endless_line_is_one_line(tmp_path):
    p = tmp_path / "run.csv"
    with p.open("w") as fh:
        fh.write("timestamp, utilization.gpu [%]\n")
        fh.write("x" * (3 << 20))
    with pytest.raises(LogFormatError) as e:
        list(LogStream(str(p)).records())
    assert str(e.value) == f"{p}:2: a line longer than 1 MiB characters: not a text log"
    _one_line_error(_report("--input", str(p), "--out", str(tmp_path / "out")), "not a text log")


@pytest.mark.parametrize("rows", [100, 6000], ids=["row-by-row", "batched"])
def test_numbers_longer_than_python_converts_skip_their_rows(tmp_path, rows):
    """A GPU index or a timestamp's fraction of 5,000 digits, and a host of 5,000: Python's
    int() refuses more than 4,300 digits, and each once ended the report with a
    ValueError traceback. The rows are skipped as any other bad cell, and the real
    trace's GPUs are reported."""
    header, lines = _trace_lines()
    big = "9" * 5000
    out = [f"hostname, index, {header}"]
    for k, row in enumerate(lines[:rows]):
        g = str(k % 8)
        if k % 50 == 7:
            g = big
        elif k % 50 == 21:
            row = row.replace(".", "." + big, 1)
        out.append(f"{big if k % 50 == 33 else 'n1'}, {g}, {row}")
    log = tmp_path / "run.csv"
    log.write_text("\n".join(out) + "\n")
    p = _report("--input", str(log), "--out", str(tmp_path / "out"), "--quiet")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    import json
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    on_n1 = sorted((g["gpu"] for g in doc["gpus"] if g.get("node") == "n1"), key=int)
    assert on_n1 == [str(i) for i in range(8)], [(g.get("node", "")[:9], g["gpu"][:9]) for g in doc["gpus"]]
    assert all(len(g["gpu"]) <= 2 for g in doc["gpus"])     # no row of the long index was kept


def test_json_nested_3000_deep_is_one_line(tmp_path):
    p = tmp_path / "query.json"
    p.write_text("[" * 3000 + "]" * 3000)
    _one_line_error(_report("--input", str(p), "--out", str(tmp_path / "out")),
                    f"{p}: JSON nested too deeply to be a Prometheus API query response")


# ---------------------------------------------------------------- streaming

def test_stream_reads_as_it_is_consumed_and_holds_little(tmp_path, monkeypatch):
    # the trace's first 2,000 polls in read batches of 1,000 rows: the log, and the log
    # twice, span many batches as a long log spans batches of 32,768
    monkeypatch.setattr(smi_fast, "BATCH", 1000)
    header, rows = _trace_lines()
    rows = rows[:16_000]
    once, twice = tmp_path / "once.csv", tmp_path / "twice.csv"
    span = _stamp(rows[-1]) - _stamp(rows[0]) + 0.1          # the copy goes on where the log ends
    once.write_text(header + "\n" + "\n".join(rows) + "\n")
    twice.write_text(header + "\n" + "\n".join(rows) + "\n" + "\n".join(_shift(r, span) for r in rows) + "\n")
    stream = LogStream(str(twice))
    it = stream.records()
    for _ in range(100):
        next(it)
    assert stream.fraction < 0.5            # a read-ahead, not the file
    it.close()

    def peak(p) -> tuple[int, int]:
        tracemalloc.start()
        try:
            n = sum(1 for _ in LogStream(str(p)).records())
            return n, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    (n1, peak1), (n2, peak2) = peak(once), peak(twice)
    assert (n1, n2) == (len(rows), 2 * len(rows))
    # memory follows the read batch, not the file: twice the log, about the same peak
    # (all records held at once take ~20x the file and double with it: the break this
    # guards against)
    assert peak2 < 1.4 * peak1, (peak1, peak2)
    assert peak2 < 10 * twice.stat().st_size, (peak2, twice.stat().st_size)


def test_serve_replay_answers_while_the_log_is_still_being_read(tmp_path, gpulse_proc):
    header, rows = _trace_lines()
    p = tmp_path / "long.csv"
    with p.open("w") as fh:
        fh.write(header + "\n")
        for k in range(4):                   # ~46 min of 8 GPUs at 100 ms
            fh.write("\n".join(_shift(r, k * 700.0) for r in rows) + "\n")
    g = gpulse_proc("--source", "replay", "--replay.file", str(p), "--replay.speed", "0")

    def sampled(text):
        vals = [float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                if ln.startswith('gpulse_gpu_sampled_seconds_total{gpu="3"')]
        return vals[0] if vals else None

    first = sampled(g.metrics())
    assert first is None or first < 4 * 690          # ready before the log has been read
    g.wait_metrics(lambda t: (sampled(t) or 0) > 4 * 600, "the whole log replayed", timeout=120)


# ---------------------------------------------------------------- small cases

def test_serve_replay_of_dev_zero_is_one_line(tmp_path):
    from conftest import free_port
    link = tmp_path / "run.csv"
    link.symlink_to("/dev/zero")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    out = subprocess.run([sys.executable, "-m", "gpulse", "serve", "--source", "replay", "--replay.file", str(link),
                          "--web.listen-address", f"127.0.0.1:{free_port()}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout and "MemoryError" not in out.stderr
    assert f"{link}: is a device, not a recorded log" in out.stderr
