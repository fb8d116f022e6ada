"""helm/gpulse/README.md: its values table is generated from the commented
values.yaml (drift fails here), and its first screen tells GitOps users how to get
the Prometheus Operator objects out of `helm template`."""
from __future__ import annotations

import re
import subprocess
import sys

import yaml

from conftest import ROOT
from helmchart import by_kind, chart, docs, helm, render  # noqa: F401 (chart: a fixture)

sys.path.insert(0, str(ROOT / "helm"))
import values_readme  # noqa: E402

README = ROOT / "helm" / "gpulse" / "README.md"


def test_values_table_is_up_to_date():
    p = subprocess.run([sys.executable, str(ROOT / "helm" / "values_readme.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_a_changed_comment_or_default_shows_as_drift():
    readme, values = README.read_text(), values_readme.VALUES.read_text()
    assert values_readme.render(readme, values) == readme
    changed = values.replace("revisionHistoryLimit: 10", "revisionHistoryLimit: 5", 1)
    assert "| `revisionHistoryLimit` | int | `5` |" in values_readme.render(readme, changed)
    recommented = values.replace("# -- Old DaemonSet revisions kept", "# -- DaemonSet revisions kept", 1)
    assert values_readme.render(readme, recommented) != readme


def test_every_value_the_chart_reads_is_in_the_table():
    """Each leaf of values.yaml (outside free-form objects) has a row, or its
    parent has one (objects documented whole, like resources)."""
    rows = set(re.findall(r"^\| `([^`]+)` \|", README.read_text(), re.M))
    values = yaml.safe_load(values_readme.VALUES.read_text())

    def leaves(node, prefix=""):
        for k, v in node.items():
            key = prefix + k
            if isinstance(v, dict) and v:
                yield from ([key] if key in rows else leaves(v, key + "."))
            else:
                yield key

    missing = [k for k in leaves(values) if k not in rows]
    assert not missing, missing


def test_first_screen_says_how_gitops_gets_the_operator_objects(chart):
    first = "\n".join(README.read_text().splitlines()[:25])
    assert "helm template" in first and "force" in first
    sets = re.findall(r"--set (\S+\.force=true)", first)
    assert sorted(sets) == ["prometheusRule.force=true", "serviceMonitor.force=true"]
    values: dict = {}
    for s in sets:
        values = {**values, **helm.parse_set_string(s)}
    chart.validate_schema(values)
    kinds = lambda v: {d["kind"] for d in docs(render(chart, v))}  # noqa: E731  (no cluster API: helm template)
    assert not kinds({}) & {"ServiceMonitor", "PrometheusRule"}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(values)
