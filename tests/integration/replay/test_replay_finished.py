"""A replay that reaches the end of its log reads as stale, as the metric's HELP says
("1 when no poll of the source has succeeded for --stale-after"): the final values
stay on /metrics, /readyz turns 503, /healthz stays ok. On the way, progress is
logged. Run on a real 8×H100 nvidia-smi trace, replayed 100× faster than recorded."""
from __future__ import annotations

import re
import time

import requests

from conftest import Gpulse, require_data


def value(text: str, name: str) -> float:
    m = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def help_of(text: str, name: str) -> str:
    m = re.search(rf"^# HELP {name} (.*)$", text, re.M)
    assert m, f"no HELP for {name}"
    return m.group(1)


def test_finished_replay_turns_stale_and_not_ready():
    trace = require_data("traces/h100-8gpu/ckpt1.csv")     # 11.6 min recorded -> ~7 s at 100x
    g = Gpulse("--source", "replay", "--replay.file", str(trace), "--replay.speed", "100",
               "--stale-after", "2s", ready=False, timeout=60)
    lines = g.lines
    try:
        ready_seen = False
        deadline = time.monotonic() + 120
        while True:      # ready while the replay runs, then stale once it is over
            assert time.monotonic() < deadline, "never went stale:\n" + "\n".join(lines[-20:])
            try:
                r = requests.get(g.url + "/readyz", timeout=5)
            except requests.ConnectionError:     # still reading the log
                assert g.proc.poll() is None, "\n".join(lines)
                time.sleep(0.1)
                continue
            if r.status_code == 200:
                ready_seen = True
            elif ready_seen:
                break
            time.sleep(0.1)
        assert r.status_code == 503 and "stale" in r.text and "finished" in r.text, r.text
        text = requests.get(g.url + "/metrics", timeout=5).text
        assert value(text, "gpulse_exporter_stale") == 1
        assert value(text, "gpulse_exporter_seconds_since_last_sample") > 2
        assert "--stale-after" in help_of(text, "gpulse_exporter_stale")
        busy = re.findall(r'^gpulse_gpu_busy_seconds_total\{[^}]*gpu="(\d+)"[^}]*\} (\S+)$', text, re.M)
        assert len(busy) == 8 and all(float(v) > 0 for _, v in busy), busy    # the final values stay
        assert requests.get(g.url + "/healthz", timeout=5).status_code == 200
        time.sleep(0.5)
        again = requests.get(g.url + "/metrics", timeout=5).text
        assert value(again, "gpulse_exporter_seconds_since_last_sample") > value(
            text, "gpulse_exporter_seconds_since_last_sample")
        assert requests.get(g.url + "/readyz", timeout=5).status_code == 503
    finally:
        g.output()          # stops it and reads the rest of its output into `lines`
    progress = [int(m.group(1)) for ln in lines if (m := re.search(r"source replay: (\d+)% done", ln))]
    assert len(progress) >= 3 and progress == sorted(progress) and progress[-1] >= 50, lines
    assert len(progress) <= 10, progress         # at most a line per tenth, not per poll
    assert any("source replay finished" in ln for ln in lines), lines
    assert not any("Traceback" in ln for ln in lines)


def test_looping_replay_stays_fresh(tmp_path):
    """--replay.loop never ends, so it never goes stale: the head of a real trace
    (~2.5 s recorded) looped at 10x wraps many times while it is watched."""
    head = tmp_path / "head.csv"
    with open(require_data("traces/h100-8gpu/ckpt10.csv"), encoding="utf-8") as fh:
        head.write_text("".join(fh.readline() for _ in range(201)), encoding="utf-8")
    g = Gpulse("--source", "replay", "--replay.file", str(head), "--replay.speed", "10", "--replay.loop",
               "--stale-after", "1s", timeout=60)
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            text = g.metrics()
            assert value(text, "gpulse_exporter_stale") == 0
            assert requests.get(g.url + "/readyz", timeout=5).status_code == 200
            time.sleep(0.25)
    finally:
        out = g.output()
    assert "finished" not in out and "Traceback" not in out, out
    progress = [ln for ln in out.splitlines() if "% done" in ln]
    assert len(progress) <= 6, progress          # many passes, but at most a line a second
