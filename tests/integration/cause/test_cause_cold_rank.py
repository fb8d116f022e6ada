"""The cold rank of Alibaba PAI job 1 (bench/lib/corpus/causes.py: worker 6 off the GPU
35-45 % of its slow steps while its peers read 100 % busy and spin-wait for it) in a
log with nvidia-smi's power.draw.instant, through the real CLI (`python -m gpulse
report`): the cause is off_gpu, the straggler sentence says so too (one verdict
chooses both), and power is not taken for an average although the only utilisation
steps in the log are the straggler's own, half of them into a spin-wait that moves
no power."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, require_data

import bench.lib.corpus.causes as causes  # noqa: E402
from bench.lib.corpus.cases import levels  # noqa: E402
from bench.lib.corpus.smi import write_log  # noqa: E402


def test_instant_power_cold_rank_is_off_gpu_in_text_and_cause(tmp_path):
    for rel in ("traces/alibaba-minibatch/job_1_norm.csv", "traces/h100-8gpu/ckpt1000.csv"):
        require_data(rel)
    tl, _ = causes.pai_window(cold=True)
    log = tmp_path / "cold-instant.csv"
    write_log(str(log), tl, levels(), "instant", 3111)
    assert "power.draw.instant" in log.read_text(encoding="utf-8").splitlines()[0]
    r = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(tmp_path),
                        "--quiet"], capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "findings.json").read_text(encoding="utf-8"))
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert f["text"].startswith(f"GPU {causes.SLOW_WORKER} was idle")
    assert f["cause"] == "off_gpu", (f["cause"], f["evidence"], f["missing"])
    assert "its work is off the GPU" in f["text"] and "too little work" not in f["text"]
    assert any(e.startswith("they wait ") for e in f["evidence"]), f["evidence"]
    # instantaneous power is recognised as such: no note that power lags utilisation
    assert not [x for x in doc["findings"] if x["kind"] == "input_limit"], doc["findings"]
