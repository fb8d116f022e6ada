"""A /metrics text read back: one metric's samples by their labels."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def series(text: str, name: str) -> dict[tuple, float]:
    """{sorted label items: value} of one metric's samples."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def per_gpu(text: str, name: str) -> dict[str, float]:
    return {dict(k)["gpu"]: v for k, v in series(text, name).items()}


def one(text: str, name: str) -> float | None:
    vals = list(series(text, name).values())
    return vals[0] if vals else None
