"""What the detection benchmarks read a verdict from, written once: the cause
findings.json gives a straggler (or an imbalance), and the text of a series as the
live gauges and the shipped rules are compared by."""
from __future__ import annotations

NONE = "none"               # no straggler (or imbalance) finding for the case at all


def finding_cause(doc: dict, gpu: str) -> str:
    """The cause findings.json gives the case's straggler (or, gpu "", its imbalance)."""
    if not gpu:
        return next((f.get("cause", NONE) for f in doc["findings"] if f["kind"] == "imbalance"), NONE)
    for s in doc.get("stragglers", []):
        if str(s.get("gpu")) == gpu and s.get("cause"):
            return s["cause"]
    for f in doc["findings"]:
        if f["kind"] != "straggler":
            continue
        gpus = {str(g) for g in f.get("gpus", [])} | ({str(f["gpu"])} if "gpu" in f else set())
        if gpu in gpus or (not gpus and f["text"].startswith(f"GPU {gpu} ")):
            return f.get("cause", NONE)
    return NONE


def series_key(name: str, labels: dict) -> str:
    """`name{a="x",b="y"}`, labels sorted: one series' key, however it was read."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
