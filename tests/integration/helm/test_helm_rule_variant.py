"""prometheusRule.variant: the chart ships the rule files the cluster's ruler loads,
prometheus/rules or the generated prometheus/rules-vmalert, from the packaged chart."""
from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT
from helmchart import OPERATOR_API, chart, docs, helm, render, rules_by_source, rules_with  # noqa: F401 (chart: a fixture)

VARIANT_RULES = ROOT / "prometheus" / "rules-vmalert"


def test_vmalert_variant_renders_the_generated_files(chart):  # noqa: F811
    manifests = docs(render(chart, {"prometheusRule": {"variant": "vmalert"}}, api_versions=OPERATOR_API))
    rendered = rules_by_source(manifests)
    expected = {f"prometheus/rules-vmalert/{f.name}": yaml.safe_load(f.read_text())["groups"]
                for f in sorted(VARIANT_RULES.glob("*.yml"))}
    assert rendered == expected
    assert "keep_firing_for" not in yaml.safe_dump(rendered)


def test_default_variant_keeps_keep_firing_for(chart):  # noqa: F811
    rendered = rules_by_source(docs(render(chart, api_versions=OPERATOR_API)))
    assert all(k.startswith("prometheus/rules/") for k in rendered)
    assert "keep_firing_for" in yaml.safe_dump(rendered)


def test_vmalert_variant_tunes_thresholds_in_both_arms(chart):  # noqa: F811
    values = {"prometheusRule": {"variant": "vmalert", "thresholds": {"imbalance_alert_ratio": 0.4}}}
    rules = [r for gs in rules_by_source(docs(render(chart, values, api_versions=OPERATOR_API))).values()
             for g in gs for r in g["rules"]]
    assert rules == rules_with("vmalert", imbalance_alert_ratio=0.4)
    (rule,) = [r for r in rules if r.get("alert") == "GpulseWorkloadImbalance"]
    assert "> 0.3" not in rule["expr"] and rule["expr"].count("> 0.4") >= 2


def test_keep_firing_for_override_on_the_vmalert_variant_fails(chart):  # noqa: F811
    values = {"prometheusRule": {"variant": "vmalert", "alerts": {"GpulseSyncStalls": {"keep_firing_for": "10m"}}}}
    with pytest.raises(helm.HelmError, match=re.escape("prometheusRule.alerts.GpulseSyncStalls.keep_firing_for")):
        render(chart, values, api_versions=OPERATOR_API)


def test_unknown_variant_is_refused(chart):  # noqa: F811
    with pytest.raises(helm.HelmError, match="variant"):
        render(chart, {"prometheusRule": {"variant": "thanos"}}, api_versions=OPERATOR_API)


def test_chart_offers_exactly_the_variants_the_tool_makes():
    """The chart's prometheus variant ships prometheus/rules itself (any ruler with
    keep_firing_for), its vmalert variant the tool's, each with the thresholds the
    chart sets left to it (prometheus/chart/<variant>, written by prometheus/generate.py);
    the Prometheus-ordered variant (prometheus/rules-prometheus, sums reading their
    group's records) is for a Prometheus loading the files directly and is not in the chart."""
    import json
    import sys
    sys.path.insert(0, str(ROOT / "prometheus" / "tools"))
    import variants
    schema = json.loads((ROOT / "helm" / "gpulse" / "values.schema.json").read_text())
    enum = schema["properties"]["prometheusRule"]["properties"]["variant"]["enum"]
    shipped = {"prometheus": variants.SOURCE, "vmalert": variants.VARIANTS["vmalert"]}
    assert sorted(enum) == sorted(shipped)
    chart_rules = ROOT / "prometheus" / "chart"
    link = ROOT / "helm" / "gpulse" / "files" / "rules"
    assert link.is_symlink() and link.resolve() == chart_rules.resolve()
    for name, folder in shipped.items():
        assert sorted(p.name for p in (chart_rules / name).glob("*.yml")) == \
            sorted(p.name for p in folder.glob("*.yml")), name