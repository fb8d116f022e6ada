"""Turn a recorded log or a Prometheus range into a Recording, through the Engine.

Both paths build an ordinary gpulse Config (so the analysis settings mean what they
mean for `gpulse serve`), open a Source, and let drive.run_offline drive it in
virtual time; collect.py keeps the per-tick results.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from ..config import ConfigError, load_config
from ..drive import run_offline
from ..safetext import clean
from ..sources.base import SourceError
from ..sources import prom
from .collect import Recording, collect
from .errors import ReportError, UsageError

# report.progress.Progress: a step as words, or a share of the input read
Progress = Callable[..., None]

# analysis settings a report may override, as config keys
ANALYSIS_KEYS = ("idle_threshold", "min_stall", "activity", "power_gate", "analysis_window")


def _config(overrides: dict[str, Any]) -> Any:
    try:
        return load_config(overrides={k: v for k, v in overrides.items() if v is not None}, environ={})
    except ConfigError as e:
        raise UsageError(str(e)) from None


def from_log(path: str, fmt: str = "auto", node_name: str = "", analysis: dict[str, Any] | None = None,
             progress: Progress | None = None) -> Recording:
    """Any log `gpulse serve --source replay` reads, replayed as fast as the CPU allows."""
    from ..sources.replay import ReplaySource
    if not os.path.exists(path):
        raise ReportError(f"{path}: no such file")
    cfg = _config({"source": "replay", "replay.file": path, "replay.format": fmt, "replay.speed": 0,
                   "history": 10, **(analysis or {})})
    source = ReplaySource(cfg)
    source.read_ahead = True      # a long log is read on a core of its own (sources/recorded/ahead.py)
    # the name as shown: Python keeps undecodable bytes of a file name as lone surrogates,
    # which no UTF-8 output can hold (the path itself still opens the file)
    shown = clean(os.path.basename(path))
    rec = Recording(source=shown, interval=cfg.analysis_interval,
                    idle_threshold=cfg.idle_threshold, activity=cfg.activity, window=cfg.analysis_window)

    def node_and_gpu(key: str) -> tuple[str, str]:
        run = source.run
        if ":" in key:
            node, _, gpu = key.rpartition(":")
            return node, gpu
        return node_name or (run.nodes[0] if run is not None and run.nodes else ""), key

    def tick(t: float) -> None:
        # the log is streamed: how far is how much of the file has been read
        if progress is None or source.run is None:
            return
        progress(f"reading {rec.source}", done=source.run.fraction, rows=source.run.lines_read)

    try:
        pairs = run_offline(source, cfg)
        collect((snap for _, snap in pairs), rec, node_and_gpu, tick)
    except SourceError as e:
        raise ReportError(str(e)) from None
    _require_time(rec, f"{path}: {_gpus(rec)} but no time between two readings of any GPU (a single snapshot, "
                       "such as one scrape of an exporter, has no interval to analyse): record at least two "
                       "collections, a few minutes apart or more")
    run = source.run
    if run is not None:
        rec.source = f"{shown} ({run.format})"
        rec.log_format = run.format
        rec.epoch = run.facts.timed and (run.start or 0) > 1e8
        if run.error_count:
            first = f" (first: {run.errors[0]})" if run.errors else ""
            rec.notes.append(clean(f"{run.error_count} unusable line(s) or value(s) in {shown} "
                                   f"were skipped{first}"))
        rec.notes.extend(clean(w) for w in run.warnings())
    rec.activity = _engine_activity(cfg, getattr(source, "has_sm_active", False))
    return rec


def from_logs(inputs_: list[str], fmt: str = "auto", names: list[str] | None = None,
              analysis: dict[str, Any] | None = None, progress: Progress | None = None) -> Recording:
    """Logs and glob patterns: one log is from_log's; several are one job, a log per
    node (sources/recorded/job.py), its nodes' clocks aligned, judged as one workload."""
    from ..sources.recorded import job
    try:
        paths = job.expand(inputs_)
    except SourceError as e:
        raise ReportError(str(e)) from None
    names = names or []
    if len(paths) == 1 and len(names) <= 1:
        return from_log(paths[0], fmt, names[0] if names else "", analysis, progress)
    cfg = _config({"source": "replay", "replay.file": paths[0], "replay.format": fmt, "replay.speed": 0,
                   "history": 10, **(analysis or {})})
    shown = [clean(os.path.basename(p)) for p in paths]
    try:
        if progress is not None:
            progress(f"aligning the clocks of {len(paths)} nodes")
        aligned = job.job_logs(paths, names, fmt, cfg.idle_threshold, cfg.power_gate)
        workload = job.job_name([lg.node for lg in aligned.logs])
        source = job.JobReplay(cfg, aligned.logs, workload)
        source.read_ahead = True
        rec = Recording(source=f"{len(paths)} logs", interval=cfg.analysis_interval,
                        idle_threshold=cfg.idle_threshold, activity=cfg.activity, window=cfg.analysis_window)

        def tick(t: float) -> None:
            if progress is not None and source.run is not None:
                progress(f"analysed {100.0 * source.run.fraction:.0f} % of {len(paths)} logs")

        collect((snap for _, snap in run_offline(source, cfg)), rec, _node_and_gpu, tick)
    except SourceError as e:
        raise ReportError(str(e)) from None
    _require_time(rec, f"{', '.join(shown)}: {_gpus(rec)} but no time between two readings of any GPU")
    run = source.run
    rec.source = f"{len(paths)} logs of workload {workload} ({run.format}): {', '.join(shown)}"
    rec.log_format = run.format
    rec.epoch = run.facts.timed and (run.start or 0) > 1e8
    rec.clocks = {"reference": aligned.reference or None,
                  "nodes": [{"node": lg.node, "log": clean(p), "offset_seconds": round(lg.offset, 3),
                             "aligned": lg.aligned,
                             "edges": aligned.edges.get(lg.node, 0)}
                            for lg, p in zip(aligned.logs, shown)]}
    if aligned.applied():
        rec.notes.append(clean(aligned.applied()))
    rec.notes.extend(clean(n) for n in aligned.notes)
    if run.error_count:
        first = f" (first: {run.errors[0]})" if run.errors else ""
        rec.notes.append(clean(f"{run.error_count} unusable line(s) or value(s) in the logs were skipped{first}"))
    rec.notes.extend(clean(w) for w in run.warnings())
    rec.activity = _engine_activity(cfg, getattr(source, "has_sm_active", False))
    return rec


def _node_and_gpu(key: str) -> tuple[str, str]:
    node, _, gpu = key.rpartition(":")
    return node, gpu


def _engine_activity(cfg: Any, has_sm: bool) -> str:
    if cfg.activity != "auto":
        return cfg.activity
    return "sm_active" if has_sm else "power-gated"


def from_source(source: Any, cfg: Any, label: str, until: float | None = None) -> Recording:
    """Any Source (the simulator, a test double of a live node) for `until` virtual seconds."""
    rec = Recording(source=label, interval=cfg.analysis_interval, idle_threshold=cfg.idle_threshold,
                    activity=_engine_activity(cfg, getattr(source, "has_sm_active", False)),
                    window=cfg.analysis_window)
    rec.epoch = False
    collect((snap for _, snap in run_offline(source, cfg, until=until)), rec, lambda k: (cfg.node_name, k))
    return rec


def from_prometheus(url: str, start: float, end: float, sel: str, auth: prom.Auth = prom.Auth(),
                    step: float | None = None, max_points: int = prom.PROM_MAX_POINTS,
                    analysis: dict[str, Any] | None = None, timeout: float = 30.0,
                    progress: Progress | None = None) -> Recording:
    try:
        return _from_prometheus(url, start, end, sel, auth, step, max_points, analysis, timeout, progress)
    except SourceError as e:      # the Prometheus client's one-line message, as the report's
        raise ReportError(str(e)) from None


def _from_prometheus(url: str, start: float, end: float, sel: str, auth: prom.Auth, step: float | None,
                     max_points: int, analysis: dict[str, Any] | None, timeout: float,
                     progress: Progress | None) -> Recording:
    if end <= start:
        raise ReportError(f"empty time range: the start {_iso(start)} is not before the end {_iso(end)}")
    client = prom.PromClient(url, auth, timeout)
    if step is None:
        step = prom.choose_step(start, end, prom.scrape_interval(client, sel, start, end))
    if step > 60:
        raise ReportError(f"--step {step:g}s is too coarse (at most 60s; long ranges are split instead)")
    data = prom.fetch(client, sel, start, end, step, max_points, progress)
    if not data.get("sampled"):
        raise ReportError(f"no gpulse series match {sel} between {_iso(start)} and {_iso(end)} "
                          f"at {url}: check --node/--workload/--selector and that Prometheus scrapes gpulse")
    window = max(30.0, 2 * step)
    cfg = _config({"source": "sim", "sample_interval": step, "analysis_interval": step, "history": 10,
                   "analysis_window": window, **(analysis or {})})
    source = prom.PromRangeSource(data, start, end, step)
    # the report's title: the server, and the matchers when there are any
    rec = Recording(source=url if sel == "{}" else f"{url} {sel}", interval=step, idle_threshold=cfg.idle_threshold,
                    activity=_engine_activity(cfg, True), window=cfg.analysis_window)
    collect((snap for _, snap in run_offline(source, cfg)), rec, source.node_and_gpu)
    _require_time(rec, f"the gpulse series matching {sel} have fewer than two scrapes between "
                       f"{_iso(start)} and {_iso(end)}: nothing to analyse")
    ex = _exporter_counts(prom.group_totals(client, sel, start, end, step, max_points), data)
    if ex is not None:
        rec.exporter_counts = ex
        # said where the exporter saw stall time the steps do not show
        drawn = sum(gr.lost.get(("sync_stall", ""), 0.0) for gr in rec.groups.values())
        if ex["held_seconds"] > 0 and ex.get(("lost", "sync_stall", ""), 0.0) > 1.05 * drawn + 1.0:
            rec.notes.append(
                f"Sync stalls and lost time are the exporter's own counters, at its sampling rate "
                f"(gpulse_group_sync_stall_seconds_total, gpulse_group_lost_seconds_total): {ex['stalls']:.0f} "
                f"stall episode(s), {ex['stall_seconds']:.1f} s stalled in {ex['held_seconds']:.0f} s held "
                f"({ex['stall_seconds'] / ex['held_seconds']:.1%}). At this {step:g} s step only a stall that "
                "fills a whole step shows, so the stall episodes drawn here may be fewer")
    # what a straggler's cause would need and Prometheus does not hold: said where the
    # data is missing (the exporter's source), not as log columns to record
    absent = [prom.CAUSE_SERIES[k][0] for k, held in (("throttle_seconds_total", prom.THROTTLE_KNOWN),
                                                      ("sm_clock_hertz", "sm_clock_hertz")) if not data.get(held)]
    if absent:
        rec.notes.append(f"Prometheus holds no {' or '.join(absent)} for these GPUs, so a straggler's cause "
                         "cannot be read from them: the exporter's source did not report them (with --source "
                         "dcgm, enable them in dcgm-exporter: docs/migrating-from-dcgm-exporter.md, \"What to "
                         "enable\")")
    return rec


def _exporter_counts(groups: dict[tuple[str, str], dict[Any, float]], data: dict[str, Any]) -> dict[Any, float] | None:
    """The exporter's group counters summed over the selected GPUs' peer groups
    (GROUP_SERIES keys; the lost time as ("lost", reason, cause)), and each group's own
    lost time and GPUs as ("lost_at", node, workload, reason, cause) and ("gpus_at",
    node, workload), which a workload across nodes needs (Judgement._from_exporter);
    or None unless the selection is made of whole groups that all have them (a
    selector on a GPU's own labels picks part of a group, whose stalls are not its)."""
    chosen: dict[tuple[str, str], int] = {}
    for (node, _gpu), slot in data.get("sampled", {}).items():
        key = (node, slot.get("workload", ""))
        chosen[key] = chosen.get(key, 0) + 1
    totals: dict[Any, float] = {}
    for key, n in chosen.items():
        g = groups.get(key)
        if g is None or g.get("gpus") != n or any(k not in g for k in ("stall_seconds", "stalls", "held_seconds")):
            return None
        totals[("gpus_at", *key)] = n
        for k, v in g.items():
            if k != "gpus":
                totals[k] = totals.get(k, 0.0) + v
            if isinstance(k, tuple) and k[0] == "lost":
                totals[("lost_at", *key, *k[1:])] = v
    return totals if chosen else None


def _require_time(rec: Recording, message: str) -> None:
    """Too little input for any verdict: no GPU has time between two of its readings,
    so every share would be 0 of 0 (a report would call such GPUs idle)."""
    if not any(any(x > 0 for x in g.sampled) for g in rec.gpus.values()):
        raise ReportError(message)


def _gpus(rec: Recording) -> str:
    n = len(rec.gpus)
    return f"{n} GPU{'' if n == 1 else 's'}"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
