"""A stall still in progress when a log ends: cut by the record, not ended by the job.

The record stopping while every GPU still holds its memory and the group sits in a
stall is a stall of the running job (an open episode in findings.json); a job that
released its memory, or GPUs idle with memory held for longer than a stall lasts
(stall_open_max_seconds), is the job's end. The report and the live exporter over the
same log must say the same.
"""
from __future__ import annotations

import calendar
import json
import time

import jsonschema
import pytest

import reportutil
from conftest import require_data
from realtrace import START, real_levels, stall_schedule, training, write_smi_log

from gpulse.analysis.thresholds import value
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log
from gpulse.report.render import web_asset

SCHEMA = json.loads(web_asset("findings.schema.json"))


def report(path):
    doc = analyse(from_log(str(path))).as_json()
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)
    return doc


def report_and_live(path):
    """The report, and the group of the engine's last snapshot over the log as the
    exporter replays it, from the report's own engine run (reportutil.report_and_live)."""
    last: dict = {}
    doc = reportutil.report_and_live(path, lambda snap: last.update(snap=snap))
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)
    (group,) = last["snap"].groups
    return doc, group


def _unix(line: str) -> float:
    stamp = line.split(",")[0]
    whole, ms = stamp.split(".")
    return calendar.timegm(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + int(ms) / 1000


def cut_log(src, dst, until: float):
    """The log `src` up to `until` (Unix seconds): logging stopped there."""
    lines = src.read_text().splitlines()
    dst.write_text("\n".join([lines[0]] + [ln for ln in lines[1:] if _unix(ln) <= until]) + "\n")
    return dst


def epoch(doc, e) -> float:
    """An episode's start in Unix seconds (findings.json gives it from the run start)."""
    run_start = calendar.timegm(time.strptime(doc["run"]["start_time"][:19], "%Y-%m-%dT%H:%M:%S"))
    return run_start + float(doc["run"]["start_time"][20:23]) / 1000 + e["start"]


def phase_kinds(doc):
    return [p["kind"] for p in doc["phases"]]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    real_levels()   # skips the module without ../shared/data
    return tmp_path_factory.mktemp("logend")


@pytest.fixture(scope="module")
def ckpt50():
    path = require_data("traces/h100-8gpu/ckpt50.csv")
    return path, report(path)


def test_real_log_cut_inside_a_checkpoint_stall_counts_it_open(tmp, ckpt50):
    # ckpt50 as recorded, stopped in the middle of its last full checkpoint stall
    # (rank 0 off the GPU, GPUs 1-7 spin-waiting, memory held everywhere)
    full_path, full = ckpt50
    eps = full["stall_episodes"]
    assert not any(e["open"] for e in eps)          # the whole log ends with memory released
    last = [e for e in eps if 12 <= e["duration_seconds"] <= 20][-1]
    t0 = epoch(full, last)
    path = cut_log(full_path, tmp / "ckpt50-cut.csv", t0 + last["duration_seconds"] / 2)
    doc, group = report_and_live(path)
    before = [e for e in eps if epoch(full, e) < t0]
    assert len(doc["stall_episodes"]) == len(before) + 1
    tail = doc["stall_episodes"][-1]
    assert tail["open"] is True and not any(e["open"] for e in doc["stall_episodes"][:-1])
    assert epoch(doc, tail) == pytest.approx(t0, abs=0.5)
    assert 0.4 * last["duration_seconds"] <= tail["duration_seconds"] <= 0.6 * last["duration_seconds"]
    assert [g["gpu"] for g in tail["off_gpu"]] == ["0"]
    assert phase_kinds(doc)[-1] == "work"            # cut while working: no exit seen
    assert [n for n in doc["notes"] if "ends inside a sync stall of GPUs 0–7" in n]
    assert doc["stall_period_seconds"] == pytest.approx(full["stall_period_seconds"], rel=0.05)
    # the live exporter: in the same stall since the same moment, the same stalled
    # seconds; its counter holds every episode but the open one (and those that
    # could still merge with it), which the report closes at the end of the record
    assert group.in_stall and group.open_since == pytest.approx(epoch(doc, tail), abs=0.5)
    assert group.stall_seconds == pytest.approx(sum(e["stalled_seconds"] for e in doc["stall_episodes"]), abs=0.5)
    assert group.stalls_total <= len(doc["stall_episodes"]) - 1
    assert group.stalls_total >= len([e for e in before if epoch(full, e) < t0 - value("stall_pending_seconds")])


STARTUP = 20.0


def idle_stalls_log(tmp, name, cut_after_last_start: float, exits: bool, held_tail: float = 0.0):
    """8 GPUs with real levels, all idle together for 12 s every 40 s (a checkpoint
    written by a host thread); the log stops `cut_after_last_start` into the last stall,
    or, with `held_tail`, after the last work with memory held that long."""
    work_end = STARTUP + 300.0
    stalls = stall_schedule(40.0, 12.0, STARTUP + 30.0, work_end)
    base = training(stalls, STARTUP, work_end)
    if held_tail:
        work_end = stalls[-1][1]

        def state(g, t):
            return base(g, t) if t < work_end else "idle"
        seconds = work_end + held_tail + 1.0
    else:
        state = base
        seconds = (work_end + 15.0) if exits else stalls[-1][0] + cut_after_last_start + 1.0
    return write_smi_log(tmp / name, 8, seconds, state), stalls


def test_log_cut_inside_an_all_idle_stall_counts_it_open(tmp):
    # every GPU reads idle in the stall, so the ticks after its start are no work:
    # the phase rule alone would file them as the exit
    path, stalls = idle_stalls_log(tmp, "idle-cut.csv", 6.0, exits=False)
    doc, group = report_and_live(path)
    tail = doc["stall_episodes"][-1]
    assert tail["open"] is True
    assert epoch(doc, tail) == pytest.approx(START + stalls[-1][0], abs=0.6)
    assert 5.0 <= tail["duration_seconds"] <= 7.0
    assert len(doc["stall_episodes"]) == len(stalls)
    assert "exit" not in phase_kinds(doc) and phase_kinds(doc)[-1] == "work"
    assert doc["stall_period_seconds"] == pytest.approx(40.0, rel=0.05)
    assert group.in_stall
    assert group.stall_seconds == pytest.approx(sum(e["stalled_seconds"] for e in doc["stall_episodes"]), abs=0.5)


def test_job_that_releases_its_memory_has_no_open_stall(tmp):
    path, stalls = idle_stalls_log(tmp, "idle-exit.csv", 0.0, exits=True)
    doc, group = report_and_live(path)
    assert not any(e["open"] for e in doc["stall_episodes"])
    assert len(doc["stall_episodes"]) == len(stalls)
    assert not group.in_stall


def test_gpus_idle_with_memory_held_longer_than_a_stall_are_the_exit(tmp):
    # the job finished its last step and then sat idle with its memory held for
    # longer than any stall lasts before the log stopped: done (or hung), not a stall
    held = value("stall_open_max_seconds") + 30.0
    path, stalls = idle_stalls_log(tmp, "idle-held.csv", 0.0, exits=False, held_tail=held)
    doc = report(path)
    assert not any(e["open"] for e in doc["stall_episodes"])
    assert not [n for n in doc["notes"] if "ends inside a sync stall" in n]
    assert phase_kinds(doc)[-1] == "exit"
    assert len(doc["stall_episodes"]) == len(stalls) - 1    # the last "stall" never ended: it is the exit
