"""The report's Prometheus path at fleet size keeps each series as one array on the
step grid and hands the engine one step per poll, making samples only as the
engine reaches them. Here, on real traces exported as a Prometheus scraping
gpulse every 15 s would have stored them, that path must give exactly the
recording the plain arrangement gives: every series a {t: v} mapping, every
sample made up front, many steps per poll."""
from __future__ import annotations

import io
import math

import pytest

from conftest import require_data

STEP = 15.0
NAMES = {"gpulse_gpu_busy_seconds_total": "busy", "gpulse_gpu_active_seconds_total": "active",
         "gpulse_gpu_sampled_seconds_total": "sampled", "gpulse_gpu_memory_used_bytes": "memory"}


def exported(trace: str, node: str) -> dict[str, dict[tuple[str, str], dict[float, float]]]:
    """{name: {(node, gpu): {t: v}}} of `gpulse export` of a real trace, with its
    times moved to start at 0 (two traces recorded on different days then share a
    grid)."""
    from gpulse.export import export, replay_config
    buf = io.BytesIO()
    export(replay_config(str(require_data(f"traces/h100-8gpu/{trace}.csv")), node=node), STEP, buf)
    out: dict[str, dict[tuple[str, str], dict[float, float]]] = {n: {} for n in NAMES.values()}
    t0 = None
    for line in buf.getvalue().decode().splitlines():
        if line.startswith("#"):
            continue
        head, _, rest = line.partition("} ")
        metric, _, labels = head.partition("{")
        if metric not in NAMES:
            continue
        gpu = labels.split('gpu="', 1)[1].split('"', 1)[0]
        value, ts = rest.split()
        t0 = float(ts) if t0 is None else min(t0, float(ts))
        out[NAMES[metric]].setdefault((node, gpu), {})[float(ts)] = float(value)
    for per in out.values():
        for key, pts in per.items():
            per[key] = {round(t - t0, 3): v for t, v in pts.items()}
    return out


@pytest.fixture(scope="module")
def job():
    """Two nodes of one job (ckpt50 and ckpt1), with what a real range answer has:
    scrapes missing for one GPU and an exporter restart (counters from 0) on another."""
    data: dict[str, dict] = {n: {} for n in NAMES.values()}
    for trace, node in (("ckpt50", "node-a"), ("ckpt1", "node-b")):
        for name, per in exported(trace, node).items():
            data[name].update(per)
    end = min(max(p) for per in data.values() for p in per.values())
    for name in ("busy", "active", "sampled"):
        missing = data[name][("node-a", "3")]
        for t in [t for t in missing if 300 <= t < 360]:
            del missing[t]
        restarted = data[name][("node-b", "5")]
        base = restarted.get(450.0, 0.0)
        for t in restarted:
            if t > 450:
                restarted[t] -= base
    return data, end


def recording(source, step):
    from testing.config import test_config
    from gpulse.drive import run_offline
    from gpulse.report.collect import Recording, collect
    cfg = test_config(source="sim", sample_interval=step, analysis_interval=step, history=10,
                      analysis_window=max(30.0, 2 * step))
    rec = Recording("test", step, cfg.idle_threshold, "sm_active", cfg.analysis_window)
    return collect((snap for _, snap in run_offline(source, cfg)), rec, source.node_and_gpu)


def as_grids(data, start, end):
    from gpulse.sources.prom import Grid, steps
    out = {}
    for name, per in data.items():
        out[name] = {}
        for key, pts in per.items():
            g = Grid(start, STEP, steps(start, end, STEP))
            g.put_all([[t, str(v)] for t, v in pts.items()])
            out[name][key] = {"points": g, "workload": "train"}
    return out


def as_mappings(data):
    return {name: {key: {"points": dict(pts), "workload": "train"} for key, pts in per.items()}
            for name, per in data.items()}


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_grid_path_equals_the_plain_path_on_real_traces(job, monkeypatch):
    from gpulse.report.findings import analyse
    from gpulse.sources.prom import PromRangeSource
    data, end = job
    fleet = recording(PromRangeSource(as_grids(data, 0.0, end), 0.0, end, STEP), STEP)

    plain_src = PromRangeSource(as_mappings(data), 0.0, end, STEP)
    monkeypatch.setattr(plain_src, "STEPS_PER_POLL", 64)      # a poll splits into many ticks
    plain = recording(plain_src, STEP)

    assert fleet.ticks == plain.ticks > 40
    assert list(fleet.times) == list(plain.times)
    assert sorted(fleet.gpus) == sorted(plain.gpus) and len(fleet.gpus) == 16
    for k, g in fleet.gpus.items():
        p = plain.gpus[k]
        assert (g.node, g.gpu, g.workload) == (p.node, p.gpu, p.workload)
        for name in ("busy", "active", "spin_wait", "idle", "sampled", "dev_busy", "dev_active"):
            a, b = getattr(g, name), getattr(p, name)
            assert len(a) == len(b) and all(same(x, y) for x, y in zip(a, b)), (k, name)
    for w, gr in fleet.groups.items():
        pr = plain.groups[w]
        assert gr.gpus == pr.gpus and gr.holding == pr.holding
        assert all(same(x, y) for x, y in zip(gr.stall, pr.stall))
        assert gr.episodes == pr.episodes
    # the real checkpoint stalls are there to compare, and so is the missing stretch
    assert sum(len(gr.episodes) for gr in fleet.groups.values()) > 0
    a3 = fleet.gpus["3"].sampled if "3" in fleet.gpus else None
    assert a3 is not None and any(x == 0 or math.isnan(x) for x in a3)
    assert analyse(fleet).as_json() == analyse(plain).as_json()
