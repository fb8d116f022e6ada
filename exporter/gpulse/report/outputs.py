"""The report's three files: findings.json, report.html and heatmap.png, from one
Analysis and one binning of the picture."""
from __future__ import annotations

import json
import os

from .figure import PNG_MAX_WIDTH, render_png
from .findings import Analysis
from .render import MAX_COLUMNS, Picture, render_html


def write_outputs(a: Analysis, out_dir: str, max_cols: int = MAX_COLUMNS, order: str = "natural") -> dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    doc = a.as_json()
    paths = {name: os.path.join(out_dir, name) for name in ("report.html", "heatmap.png", "findings.json")}
    with open(paths["findings.json"], "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    p = Picture(a, max_cols, order, doc)
    with open(paths["report.html"], "w", encoding="utf-8") as fh:
        fh.write(render_html(a, doc, picture=p))
    with open(paths["heatmap.png"], "wb") as fh:
        # the same binning serves the PNG unless the page has more columns than it takes
        fh.write(render_png(a, order=order, doc=doc, picture=p if p.cols <= PNG_MAX_WIDTH else None))
    return paths
