"""The report's three files: findings.json, report.html and heatmap.png, from one
Analysis and one binning of the picture.

All three are rendered in memory first, each written to a new temporary file in the
output directory (created exclusively, never through a symlink) and only then renamed
over the old ones: a run that dies half-way leaves the previous run's files as they
were, never a new findings.json beside an old report.html, and an output name that is
a symlink is replaced, not followed into the file it points at."""
from __future__ import annotations

import os
import tempfile

from ..safetext import dumps, finite
from .figure import PNG_MAX_WIDTH, render_png
from .findings import Analysis
from .render import MAX_COLUMNS, Picture, render_html


def write_outputs(a: Analysis, out_dir: str, max_cols: int = MAX_COLUMNS, order: str = "natural") -> dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    # strict JSON for findings.json and the page: a NaN or infinity that got this far is null
    doc = finite(a.as_json())
    p = Picture(a, max_cols, order, doc)
    files = {
        "findings.json": (dumps(doc, indent=2) + "\n").encode("utf-8"),
        "report.html": render_html(a, doc, picture=p).encode("utf-8"),
        # the same binning serves the PNG unless the page has more columns than it takes
        "heatmap.png": render_png(a, order=order, doc=doc, picture=p if p.cols <= PNG_MAX_WIDTH else None),
    }
    return replace_all(out_dir, files)


def replace_all(out_dir: str, files: dict[str, bytes]) -> dict[str, str]:
    """Each file's bytes into a temporary file beside it, then every one renamed into
    place; on any failure the temporary files are removed and nothing is replaced."""
    temps: dict[str, str] = {}
    try:
        for name, data in files.items():
            # mkstemp opens with O_CREAT | O_EXCL | O_NOFOLLOW: a fresh file, whatever is planted there
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), 0o644)
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        paths = {}
        for name, tmp in temps.items():
            paths[name] = os.path.join(out_dir, name)
            os.replace(tmp, paths[name])       # rename(2) replaces a symlink, never follows it
        return paths
    finally:
        for tmp in temps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
