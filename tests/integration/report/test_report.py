"""`gpulse report` on the real 8×H100 traces, the simulator and bad input."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, require_binary, require_data

from testing.config import test_config
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log, from_source
from gpulse.report.png import decode_png_rgb, encode_png
from gpulse.sources.sim import SimSource
from reportutil import validate

TRACES = "traces/h100-8gpu/"


_cache = {}


def trace(name):
    """findings.json of one trace (each file is read once per test session)."""
    if name not in _cache:
        path = require_data(TRACES + name)
        _cache[name] = analyse(from_log(str(path))).as_json()
    return _cache[name]


def sim(scenario, seconds=240, gpus=8):
    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=gpus, node_name="n1")
    return analyse(from_source(SimSource(cfg), cfg, f"sim {scenario}", until=seconds)).as_json()


def kinds(doc, kind):
    return [f for f in doc["findings"] if f["kind"] == kind]


def in_work(doc, t):
    return any(p["kind"] == "work" and p["start"] <= t < p["start"] + p["duration_seconds"] for p in doc["phases"])


# ------------------------------------------------------------------ real traces

def test_ckpt1_names_gpu0_as_the_rank_the_others_wait_for():
    doc = trace("ckpt1.csv")
    validate(doc)
    assert [(s["gpu"], s["direction"]) for s in doc["stragglers"]] == [("0", "idler")]
    st = doc["stragglers"][0]
    assert st["gap"] > 0.8 and st["persistence"] > 0.9
    [f] = kinds(doc, "straggler")
    assert f["severity"] == "high"
    assert f["text"].startswith("GPU 0 was idle")
    assert "GPUs 1–7" in f["text"] and "rank 0 is the bottleneck" in f["text"]
    assert "off the critical path" in f["remedy"]
    gpus = {g["gpu"]: g for g in doc["gpus"]}
    assert gpus["0"]["busy_fraction"] < 0.1
    assert all(gpus[str(i)]["busy_fraction"] > 0.9 for i in range(1, 8))


def test_ckpt1000_periodic_checkpoint_stalls_and_the_rank_that_causes_them():
    doc = trace("ckpt1000.csv")
    validate(doc)
    # rank 0 off the GPU ~16 s every ~250 s while GPUs 1-7 spin-wait: over 5 % of
    # each 5 minutes, in deviating runs that recur (analysis.verdict)
    [s] = doc["stragglers"]
    assert s["gpu"] == "0" and s["direction"] == "idler" and not s["whole_run"]
    [sp] = s["spans"]
    assert 230 <= sp["end"] - sp["start"] <= 330
    assert 230 <= doc["stall_period_seconds"] <= 270
    pattern = next(p for p in doc["stall_patterns"] if p["period_seconds"])
    assert pattern["count"] == 2 and 14 <= pattern["duration_seconds"] <= 20
    assert pattern["off_gpu"] == [{"node": "", "gpu": "0"}]
    long_eps = [e for e in doc["stall_episodes"] if e["duration_seconds"] >= 10]
    assert len(long_eps) == 2
    for e in long_eps:
        assert [g["gpu"] for g in e["off_gpu"]] == ["0"]
        assert [g["gpu"] for g in e["waiting_gpus"]] == [str(i) for i in range(1, 8)]
        assert len(e["gpus"]) == 8
    # one cause, one finding: the straggler names the stall pattern it causes
    [f] = kinds(doc, "straggler")
    assert f["cause"] == "off_gpu" and f["text"].startswith("GPU 0 was idle")
    assert "~17 s every ~252 s" in f["text"].split("The same cause")[1]
    assert not [f for f in kinds(doc, "sync_stall") if "every" in f["text"]]
    assert "asynchronous" in f["remedy"]
    assert not kinds(doc, "imbalance")


def test_ckpt500_restart_is_a_gap_and_startup_is_not_a_stall():
    doc = trace("ckpt500.csv")
    validate(doc)
    [gap] = [g for g in doc["gaps"] if g["restart"]]
    assert gap["kind"] == "no_job"
    assert 380 <= gap["start"] <= 420 and 90 <= gap["duration_seconds"] <= 150
    [f] = kinds(doc, "gap")
    assert "restart" in f["text"] and "not as a sync stall" in f["text"]
    startups = [p for p in doc["phases"] if p["kind"] == "startup"]
    assert len(startups) == 2       # the first run and the restarted one
    for e in doc["stall_episodes"]:
        assert in_work(doc, e["start"]), e
        assert not (gap["start"] <= e["start"] < gap["start"] + gap["duration_seconds"])
    for f in kinds(doc, "sync_stall"):
        assert "start-up" not in f["text"]
    assert [f["kind"] for f in kinds(doc, "startup")] == ["startup", "startup"]


# ------------------------------------------------------------------ simulator

def test_sim_imbalance_names_both_halves():
    doc = sim("imbalance", gpus=4)
    validate(doc)
    [f] = kinds(doc, "imbalance")
    assert f["text"].startswith("GPUs 0 and 1 at 9") and "GPUs 2 and 3 under 1" in f["text"]
    assert "more GPUs or overclocking will not help" in f["remedy"]
    assert doc["imbalance"]["whole_run"] > 0.8


def test_sim_straggler_is_busier():
    doc = sim("straggler")
    assert [(s["gpu"], s["direction"]) for s in doc["stragglers"]] == [("1", "busier")]
    assert "GPU 1 worked" in kinds(doc, "straggler")[0]["text"]


def test_sim_sync_stall_period_and_balanced_run_is_healthy():
    doc = sim("sync-stall", seconds=120)
    assert doc["stall_period_seconds"] == pytest.approx(2.0, abs=0.1)
    assert doc["stall_fraction"] > 0.08
    assert kinds(doc, "sync_stall")[0]["severity"] == "high"
    ok = sim("balanced", seconds=120)
    assert [f["kind"] for f in ok["findings"]] == ["healthy"]
    assert ok["stall_episodes"] == [] and ok["stall_period_seconds"] is None


def test_sim_lost_gpu_is_named():
    doc = sim("gpu-lost", seconds=60)
    validate(doc)
    [f] = kinds(doc, "gpu_missing")
    assert f["severity"] == "high" and f["text"].startswith("GPU 7 stopped reporting at 1") and "s into the recording" in f["text"]
    assert "never came back" in f["text"] and "XID" in f["remedy"]
    lost = doc["gpus"][7]
    assert lost["sampled_seconds"] < doc["gpus"][0]["sampled_seconds"] / 2


# ------------------------------------------------------------------ the command

def run_cli(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    return subprocess.run([sys.executable, "-m", "gpulse", "report", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_writes_three_outputs(tmp_path):
    src = require_data(TRACES + "ckpt1000.csv")
    p = run_cli("--input", str(src), "--out", str(tmp_path), "--quiet")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    # the headline first: what the run lost and to what, then the findings
    lines = p.stdout.splitlines()
    assert lines[0].startswith("This run lost ") and "to sync stalls" in lines[0]
    # rank 0's recurring checkpoints: one finding, the straggler with the stalls it causes
    assert lines[1].startswith("[high] GPU 0 was idle") and "~17 s every ~252 s" in lines[1]
    doc = json.loads((tmp_path / "findings.json").read_text())
    validate(doc)
    page = (tmp_path / "report.html").read_text()
    assert "GPU 7" in page and "every ~25" in page
    assert "http://" not in page.replace("http-equiv", "") and "https://" not in page
    w, h, rows = decode_png_rgb((tmp_path / "heatmap.png").read_bytes())
    assert w >= 699 and h > 8 * 10          # at least one column per tick, one band per GPU
    colours = {rows[y][x * 3:x * 3 + 3] for y in range(0, h, 3) for x in range(0, w, 7)}
    assert len(colours) > 20          # a picture, not a blank


@pytest.mark.parametrize("args, code, message", [
    ((), 2, "gpulse: give one input: --input FILE or --prometheus URL"),
    (("--input", "/nonexistent/run.csv"), 1, "gpulse: /nonexistent/run.csv: no such file"),
    (("--prometheus", "http://127.0.0.1:9"), 2, "gpulse: with --prometheus, give the range: --last 4h, or --start (and --end)"),
    (("--prometheus", "http://127.0.0.1:9", "--last", "soon"), 2, "gpulse: --last: expected a duration like 30s, 15m or 4h, got 'soon'"),
    (("--input", str(ROOT / "README.md"), "--idle-threshold", "abc"), 2, "gpulse: idle_threshold: expected a number, got 'abc'"),
])
def test_cli_errors_are_one_line(tmp_path, args, code, message):
    p = run_cli(*args, "--out", str(tmp_path))
    assert p.returncode == code
    assert p.stderr.strip().splitlines() == [message]


def test_cli_unreadable_log_is_one_line(tmp_path):
    bad = tmp_path / "run.csv"
    bad.write_text("this is not a GPU log\nat all\n")
    p = run_cli("--input", str(bad), "--out", str(tmp_path / "out"))
    assert p.returncode == 1
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"gpulse: {bad}:1: unknown header")


def test_cli_reports_a_gzipped_log_as_the_log(tmp_path):
    """A gzipped log (long 100 ms logs are often kept so) gives the report the log
    gives, its zone note included; one cut short by a killed logger gives a report of
    its rows up to the cut, with the cut in its notes; a binary file is one line
    saying so, not its first bytes quoted as a header."""
    import gzip
    real = require_data(ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu" / "ckpt1.csv")
    text = b"".join(real.read_bytes().splitlines(keepends=True)[:16000])    # 8 GPUs, 200 s
    plain, packed, cut = tmp_path / "node.csv", tmp_path / "node.csv.gz", tmp_path / "cut.csv.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    cut.write_bytes(packed.read_bytes()[:packed.stat().st_size * 3 // 4])
    docs = {}
    for path in (plain, packed, cut):
        p = run_cli("--input", str(path), "--out", str(tmp_path / f"out-{path.name}"), "--quiet")
        assert p.returncode == 0, p.stderr
        docs[path] = json.loads((tmp_path / f"out-{path.name}" / "findings.json").read_text())
        docs[path].pop("source")
    assert docs[plain] == docs[packed]
    assert any("carry no time zone" in n for n in docs[packed]["notes"])
    [note] = [n for n in docs[cut]["notes"] if "gzip stream" in n]
    assert note.startswith(f"{cut}: its gzip stream ends before its end (cut short) after line "), note
    junk = tmp_path / "junk.csv"
    junk.write_bytes(bytes(range(256)) * 4)
    p = run_cli("--input", str(junk), "--out", str(tmp_path / "out"))
    assert p.returncode == 1, p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"gpulse: {junk}:1: binary data, not a text log"), line


def test_cli_names_a_zstd_log(tmp_path):
    """zstd has no reader in this Python's standard library: a log the real zstd wrote
    is one line asking for it decompressed, known by its magic, not its name."""
    real = require_data(ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu" / "ckpt1.csv")
    out = tmp_path / "node.log"
    subprocess.run([require_binary("zstd"), "-q", "-o", str(out), str(real)], check=True)
    p = run_cli("--input", str(out), "--out", str(tmp_path / "out"))
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines() == [f"gpulse: {out}:1: zstd-compressed: decompress it first (zstdcat)"]


@pytest.mark.parametrize("capture, gpus", [("l4-gpu-operator.prom", "1 GPU"), ("h100x8-eks-aicr-sampled.prom", "8 GPUs")])
def test_a_single_snapshot_is_too_little_input(tmp_path, capture, gpus):
    """One scrape of dcgm-exporter holds no interval: one line and status 1, never
    a verdict (it would call the GPUs idle over 0 s) nor an output."""
    src = require_data("captures/dcgm-exporter/" + capture)
    p = run_cli("--input", str(src), "--out", str(tmp_path / "out"))
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"gpulse: {src}: {gpus} but no time between two readings of any GPU (a single snapshot, such as one "
        "scrape of an exporter, has no interval to analyse): record at least two collections, a few minutes "
        "apart or more"]
    assert not (tmp_path / "out").exists()


def test_png_round_trip_and_bad_rows():
    rows = [bytes([x, y, 7]) * 1 for y in range(3) for x in [0]]
    png = encode_png(1, 3, rows)
    assert decode_png_rgb(png) == (1, 3, rows)
    with pytest.raises(ValueError):
        encode_png(2, 1, [b"\0\0\0"])
