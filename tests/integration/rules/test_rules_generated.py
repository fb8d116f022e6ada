"""Rules and dashboards take their thresholds from analysis/thresholds.py.

prometheus/rules/ is generated from prometheus/templates/ (prometheus/generate.py);
these tests fail when a committed rule file differs from what the generator
writes, when a template spells out a threshold instead of naming it, and when the
dashboards' straggler criterion does not come from the table.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, require_binary

sys.path.insert(0, str(ROOT / "grafana"))
# prometheus/generate.py, loaded by path: grafana/generate.py has the same module name
_spec = importlib.util.spec_from_file_location("prometheus_generate", ROOT / "prometheus" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

from gpulse.analysis import thresholds  # noqa: E402

TEMPLATES = sorted((ROOT / "prometheus" / "templates").glob("*.yml"))


def test_committed_rules_are_what_the_generator_writes():
    r = subprocess.run([sys.executable, str(ROOT / "prometheus" / "generate.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for path, text in generate.generate().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run `make rules`"


def test_every_template_uses_the_table_and_becomes_a_rule_file():
    assert TEMPLATES, "prometheus/templates has no .yml files"
    used = set()
    for t in TEMPLATES:
        names = {m.group(1) for m in generate.PLACEHOLDER.finditer(t.read_text(encoding="utf-8"))}
        assert names, f"{t.name} names no threshold: it needs no template"
        used |= names
    # every threshold the alerts page on is named in a template
    for name in ("stall_page_ratio", "stall_recurring_episodes", "pause_page_seconds", "straggler_z",
                 "straggler_cost_ratio", "z_mad_floor", "imbalance_alert_ratio", "imbalance_min_active_ratio",
                 "straggler_min_gpus"):
        assert name in used, f"no template reads {name}"


def _numbers_in_conditions(doc: dict) -> list[tuple[str, str]]:
    """(rule, number) for every number a comparison or clamp compares against."""
    out = []
    for g in doc["groups"]:
        for r in g["rules"]:
            expr = r["expr"]
            for m in re.finditer(r"(?:[<>]=?|==|clamp_min\([^()]*(?:\([^()]*\))*[^()]*,)\s*(?:bool\s+)?([0-9.]+)", expr):
                out.append((r.get("alert") or r["record"], m.group(1)))
    return out


def test_a_threshold_changed_in_the_table_changes_every_rule_that_uses_it():
    """Render with every threshold moved to an unlikely value: no comparison in the
    generated training and balance rules may keep a number the table did not give."""
    odd = {name: dataclasses.replace(t, value=round(t.value + 0.0123, 4)) if isinstance(t.value, (int, float)) else t
           for name, t in thresholds.THRESHOLDS.items()}
    allowed = {generate.FORMATS[None](t.value) for t in odd.values()}
    allowed |= {"0", "1"}   # presence tests: `> 0`, `== 1` (group holds a workload)
    for t in TEMPLATES:
        text = generate.render(t.read_text(encoding="utf-8"), odd, t.name)
        doc = yaml.safe_load(text)
        for rule, number in _numbers_in_conditions(doc):
            assert number in allowed, f"{t.name}: {rule} compares with {number}, not from the table"
        for name in ("stall_page_ratio", "straggler_cost_ratio", "imbalance_alert_ratio"):
            if f"@{{{name}:percent}}" in t.read_text(encoding="utf-8"):
                assert generate.FORMATS["percent"](odd[name].value) in text


def test_unknown_placeholder_is_one_line_naming_it():
    with pytest.raises(generate.TemplateError, match=r"x.yml: unknown threshold @\{no_such_threshold\}"):
        generate.render("expr: a > @{no_such_threshold}", thresholds.THRESHOLDS, "x.yml")
    with pytest.raises(generate.TemplateError, match="unknown format ':bogus'"):
        generate.render("expr: a > @{straggler_z:bogus}", thresholds.THRESHOLDS, "x.yml")


def test_number_formats():
    fmt = generate.FORMATS
    assert fmt[None](0.1) == "0.1" and fmt[None](3.5) == "3.5" and fmt[None](60) == "60"
    assert fmt["percent"](0.1) == "10 %" and fmt["percent"](0.3) == "30 %" and fmt["percent"](0.025) == "2.5 %"
    assert [fmt["duration"](s) for s in (90, 60, 600, 1800, 3600, 5400)] == ["90s", "1m", "10m", "30m", "1h", "90m"]
    assert [fmt["words"](s) for s in (60, 90, 300, 3600)] == ["a minute", "90 seconds", "5 minutes", "an hour"]
    assert fmt[None]((48, 79)) == "48|79" and fmt[None](".*gpulse.*") == ".*gpulse.*"


def test_generated_rules_are_promtool_clean():
    promtool = require_binary("promtool")
    for path in generate.generate():
        r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_dashboards_read_the_straggler_criterion_from_the_table():
    from gpulse_dashboards import queries
    assert queries.OUTLIER_Z == thresholds.value("straggler_z")
    assert queries.OUTLIER_COST == thresholds.value("straggler_cost_ratio")
    # and by name, not by a copy that happens to be equal today
    tree = ast.parse((ROOT / "grafana" / "gpulse_dashboards" / "queries.py").read_text(encoding="utf-8"))
    assigned = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
    for const, name in (("OUTLIER_Z", "straggler_z"), ("OUTLIER_COST", "straggler_cost_ratio")):
        v = assigned[const]
        assert (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "value"
                and [a.value for a in v.args if isinstance(a, ast.Constant)] == [name]), \
            f"queries.{const} must be value({name!r})"


def test_runbooks_quote_the_table():
    """The paging runbooks state the thresholds the alerts use."""
    pct = generate.FORMATS["percent"]
    runbooks = ROOT / "docs" / "runbooks"
    for page, names in (("GpulseSyncStalls.md", ("stall_page_ratio",)),
                        ("GpulseStragglerGPU.md", ("straggler_cost_ratio",)),
                        ("GpulseStragglerGPURecurring.md", ("straggler_cost_ratio",)),
                        ("GpulseStragglerNode.md", ("straggler_cost_ratio",)),
                        ("GpulseWorkloadImbalance.md", ("imbalance_alert_ratio", "imbalance_min_active_ratio"))):
        text = (runbooks / page).read_text(encoding="utf-8")
        for name in names:
            assert pct(thresholds.value(name)) in text, f"{page} does not quote {name} ({pct(thresholds.value(name))})"
