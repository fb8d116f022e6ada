"""Every value the rules judge by is written once.

Thresholds, hardware limits, hold durations, the critical XID codes and the
exporter's job pattern live in exporter/gpulse/analysis/thresholds.py, the
recording rules' names in exporter/gpulse/rulenames.py. The rule templates, the
dashboards' generator and the Helm chart name them; none spells one out, and every
committed rule file is what prometheus/generate.py writes from a template.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re

import pytest
import yaml

from conftest import ROOT

from gpulse import rulenames
from gpulse.analysis import thresholds

# prometheus/generate.py, loaded by path: grafana/generate.py has the same module name
_spec = importlib.util.spec_from_file_location("prometheus_generate", ROOT / "prometheus" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

TEMPLATES = sorted((ROOT / "prometheus" / "templates").glob("*.yml"))
# what the rules, the dashboards and the chart are written in (their generated output aside)
SOURCES = sorted([*TEMPLATES, ROOT / "prometheus" / "generate.py", *(ROOT / "prometheus" / "tools").glob("*.py"),
                  *(ROOT / "grafana" / "gpulse_dashboards").glob("*.py"), ROOT / "grafana" / "generate.py",
                  *(ROOT / "helm" / "gpulse" / "templates").rglob("*.*"), ROOT / "helm" / "gpulse" / "values.yaml"])
# level:metric:operations, as a whole word
RECORD_NAME = re.compile(r"(?<![\w:])[a-z_]+:gpulse_[a-z0-9_]+:[a-z0-9_]+(?![\w:])")


def _shown(path) -> str:
    return str(path.relative_to(ROOT))


def record_names_spelled(text: str) -> list[str]:
    return RECORD_NAME.findall(text)


def matchers_spelled(text: str) -> list[str]:
    """The table's codes and patterns where a source writes them itself."""
    out = []
    for t in thresholds.THRESHOLDS.values():
        if not isinstance(t.value, (int, float)):
            written = generate.FORMATS[None](t.value)
            out += [f"{t.name} ({written})"] * text.count(written)
    # a code list need not be the whole list to be a copy
    out += [f"XID codes ({m})" for m in re.findall(r'xid[!=]~"([0-9|]+)"', text)]
    return out


@pytest.mark.parametrize("path", SOURCES, ids=_shown)
def test_no_source_spells_out_a_record_name_or_a_matcher(path):
    text = path.read_text(encoding="utf-8")
    found = record_names_spelled(text) + matchers_spelled(text)
    assert found == [], (f"{_shown(path)} writes {sorted(set(found))}: name it from gpulse.rulenames "
                         "or analysis/thresholds.py (a template: @{NAME})")


def test_the_check_sees_a_copy():
    assert record_names_spelled("rate(x[1m]) / node_gpu:gpulse_gpu_busy:ratio_rate1m{node=\"a\"}") \
        == ["node_gpu:gpulse_gpu_busy:ratio_rate1m"]
    assert record_names_spelled("@{GPU_BUSY_1M} and gpulse_gpu_busy_seconds_total") == []
    assert matchers_spelled('up{job=~".*gpulse.*"}') == ["exporter_job_regex (.*gpulse.*)"]
    assert matchers_spelled('x{xid=~"48|79"}') == ["XID codes (48|79)"]
    assert matchers_spelled('x{xid=~"@{xid_critical_codes}"}') == []


def test_every_record_is_named_in_the_table_and_recorded_once():
    recorded = []
    for t in TEMPLATES:
        for line in t.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*- record:\s*(\S+)\s*$", line)
            if m:
                recorded.append(m.group(1))
    assert recorded, "the templates record nothing"
    spelled = [r for r in recorded if not re.fullmatch(r"@\{[A-Z0-9_]+\}", r)]
    assert spelled == [], f"records named outside gpulse.rulenames: {spelled}"
    keys = [r[2:-1] for r in recorded]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    assert twice == [], f"recorded more than once: {twice}"
    assert sorted(set(rulenames.RECORDS) - set(keys)) == [], "names in gpulse.rulenames that no rule records"
    assert len(set(rulenames.RECORDS.values())) == len(rulenames.RECORDS), "two constants with one name"
    # what the generated files record is exactly the table
    generated = {r["record"] for text in generate.generate().values()
                 for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "record" in r}
    assert generated == set(rulenames.RECORDS.values())


def test_every_rule_file_is_the_generators_output():
    """prometheus/rules/ and the Helm chart's forms of it (prometheus/chart/); the
    variants derived from rules/ are checked by tests/integration/rules/test_rule_variants.py."""
    rules = {p.name for p in (ROOT / "prometheus" / "rules").glob("*.y*ml")}
    assert rules == {t.name for t in TEMPLATES}, "a rule file without a template is written by hand"
    files = {**generate.generate(), **generate.chart_forms()}
    chart = {p for p in generate.CHART.rglob("*") if p.is_file()}
    assert chart == {p for p in files if p.is_relative_to(generate.CHART)}, "prometheus/chart holds other files"
    for path, text in files.items():
        assert path.read_text(encoding="utf-8") == text, f"{_shown(path)} is stale: run `make rules`"


def test_the_chart_sets_only_what_the_rules_read_as_numbers():
    """prometheus/chart/thresholds.yaml: the table's values of every threshold the
    chart's rule files leave to it, and those files hold no other placeholder."""
    defaults = yaml.safe_load((generate.CHART / "thresholds.yaml").read_text(encoding="utf-8"))
    assert defaults and all(thresholds.value(n) == v for n, v in defaults.items())
    for path in sorted(generate.CHART.glob("*/*.yml")):
        body = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True)
                       if not line.startswith("#"))
        left = {m.group(1) for m in generate.PLACEHOLDER.finditer(body)}
        assert left <= set(defaults), f"{_shown(path)}: {sorted(left - set(defaults))}"
        assert all(m.group(2) in generate.CHART_FORMATS for m in generate.PLACEHOLDER.finditer(body))


def _moved(i: int, t: thresholds.Threshold) -> thresholds.Threshold:
    """The same entry at a value no source would write by chance and no other entry
    takes: whole seconds stay whole (a duration), so a duration written out as well
    as named shows."""
    if not isinstance(t.value, (int, float)):
        return t
    # durations: 10,000 s apart by position (above any entry's own), so no two coincide
    step = 7 + 10_000 * (i + 1) if t.unit == "seconds" and t.value >= 60 else 0.0123 + i / 10_000
    return dataclasses.replace(t, value=round(t.value + step, 4))


def _formats() -> dict[str, set]:
    """name -> the formats the templates write it in (None: as PromQL reads it)."""
    out: dict[str, set] = {}
    for t in TEMPLATES:
        for m in generate.PLACEHOLDER.finditer(t.read_text(encoding="utf-8")):
            out.setdefault(m.group(1), {None}).add(m.group(2))
    return out


def _spoken(v: float, formats: set) -> set[str]:
    """Every way the rule files write an entry of value v: as PromQL reads it, and
    in each format the templates give it (a percentage, a duration, words)."""
    return {generate.FORMATS[f](v) for f in formats}


def _said(text: str, written: str) -> bool:
    """Whether `written` stands in `text` as a whole (0.1 is not in 0.15 or x0.1)."""
    return re.search(rf"(?<![\w.]){re.escape(written)}(?![\w.])", text) is not None


def _rules(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_a_rule_that_names_a_value_does_not_also_write_it_out():
    """Render every template with each number moved: a rule that reads an entry (its
    moved value shows) must not carry the entry's real value as well, in its
    expression, hold durations or texts (`> 85` beside `@{gpu_temperature_celsius}`,
    "threshold 10 %" beside `> @{thermal_throttle_ratio}`)."""
    moved = {n: _moved(i, t) for i, (n, t) in enumerate(thresholds.THRESHOLDS.items())}
    assert len({m.value for m in moved.values()}) == len(moved)
    formats = _formats()
    checked = 0
    for t in TEMPLATES:
        for rule in _rules(generate.render(t.read_text(encoding="utf-8"), moved, t.name)):
            # windows are part of what an expression means, not values of the table
            # (`rate(x[5m])` beside `for: @{power_brake_seconds:duration}`, and the texts'
            # "of the last 5 minutes")
            text = re.sub(r"\[[^]]*\]|last [0-9]+ \w+", "", yaml.safe_dump(rule, allow_unicode=True, width=10_000))
            for name, entry in thresholds.THRESHOLDS.items():
                if not isinstance(entry.value, (int, float)) or entry.value in (0, 1) or name not in formats:
                    continue
                if not any(_said(text, s) for s in _spoken(moved[name].value, formats[name])):
                    continue
                checked += 1
                for real in _spoken(entry.value, formats[name]):
                    assert not _said(text, real), \
                        f"{t.name}: {rule.get('alert') or rule.get('record')} reads {name} and writes {real!r} too"
    assert checked > 30, "the moved values were not found in the rendered rules"
