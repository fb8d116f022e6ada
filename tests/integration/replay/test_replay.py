"""ReplaySource on a whole real trace, and `gpulse serve --source replay` as a process
(the source's own behaviour, in the test process: tests/unit/sources/test_replay_source.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, free_port, require_data
from hostilelogs import replay_source, small_log, small_rows


def test_real_trace_replays_whole(tmp_path):
    path = str(require_data("traces/h100-8gpu/ckpt1000.csv"))
    src = replay_source(path, speed=0)
    assert len(src.open()) == 8
    counts = {str(g): 0 for g in range(8)}
    last = {}
    while not src.finished:
        for r in src.poll(0.0).readings:
            counts[r.gpu] += len(r.samples)
            for s in r.samples:
                assert s.t > last.get(r.gpu, 0.0)
                last[r.gpu] = s.t
    assert counts == {str(g): 6842 for g in range(8)}


# ---------------------------------------------------------------- gpulse serve --source replay

def test_serve_replay(tmp_path, gpulse_proc):
    g = gpulse_proc("--source", "replay", "--replay.file", small_log(tmp_path, small_rows(20)), "--replay.speed", "0")
    deadline = time.monotonic() + 20
    sampled = None
    while time.monotonic() < deadline and sampled != pytest.approx(19.0):
        text = g.metrics()
        lines = [ln for ln in text.splitlines() if ln.startswith('gpulse_gpu_sampled_seconds_total{gpu="1"')]
        sampled = float(lines[0].rsplit(" ", 1)[1]) if lines else None
        time.sleep(0.1)
    assert sampled == pytest.approx(19.0)      # 20 samples 1 s apart, all replayed
    assert 'gpulse_gpu_power_watts{gpu="0",node=' in text


def test_serve_replay_unusable_file_one_line(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("time, watts\n1, 2\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    out = subprocess.run([sys.executable, "-m", "gpulse", "serve", "--source", "replay", "--replay.file", str(p),
                          "--web.listen-address", f"127.0.0.1:{free_port()}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    assert f"{p}:1: unknown header 'time, watts'" in out.stderr + out.stdout
