"""findings.json: a judged run (report/judge.py) and its findings in words
(report/words.py) as the document its schema (SCHEMA_ID) describes.

Spans
    Every finding says when: `spans`, a list of {start, end} in the input's own time
    (Unix seconds when it recorded a clock).
"""
from __future__ import annotations

import time
from typing import Any

from .judge import Judgement
from .words import Finding, secs

SCHEMA_ID = "gpulse-findings/3"


def as_json(j: Judgement, findings: list[Finding], headline: str) -> dict[str, Any]:
    rec = j.rec
    end = rec.times[-1] if rec.ticks else j.t0
    work = j.work_seconds()
    stalled = sum(e.stalled for e in j.episodes)
    start_iso = _time(j, j.t0)[1]
    doc: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "source": rec.source,
        "run": {
            "start_time": start_iso,
            "end_time": _time(j, end)[1],
            "duration_seconds": round(end - j.t0, 3),
            "work_seconds": round(work, 3),
            "tick_seconds": rec.interval,
            "activity": rec.activity,
            "idle_threshold": rec.idle_threshold,
            "gpus": len(rec.gpus),
        },
        "gpus": [],
        "phases": [],
        "gaps": [],
        "stall_episodes": [],
        "stall_fraction": _stall_fraction(j, stalled, work),
        "stall_period_seconds": None,
        "stall_patterns": [],
        "stragglers": [],
        "straggler_nodes": [],
        "lost": {**{k: (round(v, 3) if isinstance(v, float) else v) for k, v in j.lost.items()
                    if k != "by_reason"},
                 "by_reason": [{**i, "gpu_seconds": round(i["gpu_seconds"], 3)} for i in j.lost["by_reason"]],
                 "headline": headline},
        "imbalance": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in j.imbalance.items()},
        "findings": [{"kind": f.kind, "severity": f.severity, "text": f.text, "remedy": f.remedy,
                      "spans": _spans(f.spans),
                      **({"cause": f.cause.cause, "evidence": list(f.cause.evidence),
                          "missing": list(f.cause.missing)} if f.cause is not None else {})}
                     for f in findings],
        "recommendations": [],
        "notes": list(rec.notes) + [
            f"The record ends inside a sync stall of {j.labels(e.gpus)}, {secs(e.duration)} long so far, "
            "with memory still held: it counts as an open episode, its length a lower bound."
            for e in j.episodes if e.open],
    }
    if rec.clocks is not None:
        doc["clocks"] = rec.clocks
    for g in rec.ordered_gpus():
        st = j.gpu_stats.get(g.key, {})
        doc["gpus"].append({"node": g.node, "gpu": g.gpu, "workload": g.workload,
                            **{k: (round(v, 6) if v is not None else None) for k, v in st.items()}})
    for s in sorted(j.spans, key=lambda s: (s.a, s.workload)):
        start, iso = _time(j, j.tick_start(s.a))
        item = {"kind": s.kind, "start": start, "start_time": iso,
                "duration_seconds": round(j.tick_end(s.b) - j.tick_start(s.a), 3), "workload": s.workload}
        doc["phases"].append(item)
        if s.kind in ("no_job", "no_data"):
            doc["gaps"].append({**item, "restart": bool(s.restart)})
    for e in sorted(j.episodes, key=lambda e: e.start):
        start, iso = _time(j, e.start)
        doc["stall_episodes"].append({
            "start": start, "start_time": iso, "duration_seconds": round(e.duration, 3),
            "stalled_seconds": round(e.stalled, 3), "workload": e.workload,
            "gpus": [_gpu_ref(j, k) for k in e.gpus],
            "waiting_gpus": [_gpu_ref(j, k) for k in e.waiting],
            "off_gpu": [_gpu_ref(j, k) for k in e.off],
            "open": e.open,
        })
    for p in j.patterns:
        doc["stall_patterns"].append({
            "count": p["count"], "duration_seconds": round(p["duration_seconds"], 3),
            "stalled_seconds": round(p["stalled_seconds"], 3),
            "span_share": round(p["span_share"], 6) if p["span_share"] is not None else None,
            "period_seconds": round(p["period_seconds"], 3) if p["period_seconds"] is not None else None,
            "off_gpu": [_gpu_ref(j, k) for k in p["off_gpu"]], "workloads": p["workloads"],
            "spans": _spans(p["spans"]),
        })
    recurring = [p for p in j.patterns if p["period_seconds"] is not None]
    if recurring:   # the headline: the rhythm with the most stalls (two long ones are weak evidence)
        head = max(recurring, key=lambda p: (p["count"], p["stalled_seconds"]))
        doc["stall_period_seconds"] = round(head["period_seconds"], 3)
    for st in sorted(j.stragglers, key=lambda s: -s["cost"]):
        doc["stragglers"].append({k: (round(v, 6) if isinstance(v, float) else _spans(v) if k == "spans" else v)
                                  for k, v in st.items() if k not in ("key", "stats", "cause", "verdict", "idle_power")})
    for nd in sorted(j.straggler_nodes, key=lambda d: -d["cost"]):
        doc["straggler_nodes"].append({k: (round(v, 6) if isinstance(v, float) else _spans(v) if k == "spans" else v)
                                       for k, v in nd.items() if k not in ("keys", "others", "cause", "verdict", "signal")})
    seen = set()
    for f in findings:
        if f.remedy and f.remedy not in seen:
            seen.add(f.remedy)
            doc["recommendations"].append(f.remedy)
    return doc


def _gpu_ref(j: Judgement, key: str) -> dict[str, str]:
    g = j.rec.gpus.get(key)
    return {"node": g.node if g else "", "gpu": g.gpu if g else key}


def _stall_fraction(j: Judgement, stalled: float, work: float) -> float | None:
    """The share of the work time every GPU of a group was stalled: from Prometheus,
    the exporter's GPU-seconds lost to sync stalls over the GPUs' work time (its count
    holds the stalls shorter than a step, which no step's mean shows)."""
    if j.rec.exporter_counts is not None:
        gpu_work = j.lost["work_gpu_seconds"]
        # the judged figure: across nodes, a stall the other nodes counted that was
        # their GPUs waiting for a straggler is the straggler's (Judgement._from_exporter)
        lost = sum(x["gpu_seconds"] for x in j.lost["by_reason"] if x["reason"] == "sync_stall")
        return round(lost / gpu_work, 6) if gpu_work > 0 else None
    return round(stalled / work, 6) if work > 0 else None


def _time(j: Judgement, t: float) -> tuple[float, str | None]:
    iso = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
           if j.rec.epoch else None)
    return round(t - j.t0, 3), iso


def _spans(spans: list[tuple[float, float]]) -> list[dict[str, float]]:
    return [{"start": round(a, 3), "end": round(b, 3)} for a, b in spans]
