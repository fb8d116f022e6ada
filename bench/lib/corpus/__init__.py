"""An evaluation corpus for gpulse's detection, built from real recordings.

    .venv/bin/python -m bench.lib.corpus --out bench/out/corpus [--quick]

writes one nvidia-smi CSV log per case and `labels.json` (the ground truth of every
case, see cases.py). The generators read ../shared/data at run time; nothing of it
is copied into the repository. The same command writes the same files.

    .venv/bin/python -m bench.lib.corpus --causes --out bench/out/causes [--quick]

writes the straggler-cause cases instead (causes.py: logs with clock, throttle,
temperature and health columns, and `causes.json` with each case's cause).
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "exporter"))

from .cases import DATA, Case, cases, levels  # noqa: E402
from .smi import write_log  # noqa: E402


def build(out: Path, quick: bool = False, select: str | None = None) -> list[tuple[Case, Path]]:
    """Write every case's log under `out` (only those whose name matches the regular
    expression `select`, when given); returns (case, path) pairs."""
    if not (DATA / "traces").is_dir():
        raise SystemExit(f"corpus: the recorded data is missing: {DATA}/traces (see its README.md)")
    out.mkdir(parents=True, exist_ok=True)
    lv = levels()
    built, labels = [], {}
    for c in cases(quick, select):
        if c.source is not None:
            path = c.source
        else:
            path = out / (c.name.replace("/", "_") + ".csv")
            write_log(str(path), c.timeline, lv, c.fmt, c.seed)
        built.append((c, path))
        labels[c.name] = {"path": str(path), "format": c.fmt, **asdict(c.truth), "params": c.params}
    (out / "labels.json").write_text(json.dumps({"levels": asdict(lv), "cases": labels}, indent=1),
                                     encoding="utf-8")
    return built
