"""The chart as users get it: packaged once per test session by helm/package_chart.py
(Helm's own package action), so the tests render and lint the .tgz, not the
folder with its links into prometheus/rules and grafana/dashboards."""
from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "helm"))

import package_chart  # noqa: E402


@functools.lru_cache(maxsize=None)
def packaged() -> Path:
    """Path of the packaged chart; checked self-contained before it is handed out."""
    return package_chart.package(Path(tempfile.mkdtemp(prefix="gpulse-chart-")))
