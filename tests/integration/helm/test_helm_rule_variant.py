"""prometheusRule.variant: the chart ships the rule files the cluster's ruler loads,
the generated prometheus/rules-prometheus (the default), prometheus/rules or the
generated prometheus/rules-vmalert, from the packaged chart."""
from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT
from helmchart import OPERATOR_API, chart, docs, helm, render, rules_by_source, rules_with  # noqa: F401 (chart: a fixture)

# prometheusRule.variant -> the folder of rule files it renders equal to
FOLDERS = {"prometheus": "rules-prometheus", "source": "rules", "vmalert": "rules-vmalert"}


def expected_groups(folder: str) -> dict[str, list]:
    return {f"prometheus/{folder}/{f.name}": yaml.safe_load(f.read_text())["groups"]
            for f in sorted((ROOT / "prometheus" / folder).glob("*.yml"))}


@pytest.mark.parametrize("variant", sorted(FOLDERS))
def test_each_variant_renders_its_generated_files(chart, variant):  # noqa: F811
    manifests = docs(render(chart, {"prometheusRule": {"variant": variant}}, api_versions=OPERATOR_API))
    assert rules_by_source(manifests) == expected_groups(FOLDERS[variant])


def test_default_variant_is_the_prometheus_ordered_one(chart):  # noqa: F811
    """What the ruler evaluates cheapest: the cell sums read the per-GPU records of
    their group, and the holds stay keep_firing_for."""
    rendered = rules_by_source(docs(render(chart, api_versions=OPERATOR_API)))
    assert rendered == expected_groups("rules-prometheus") != expected_groups("rules")
    assert "keep_firing_for" in yaml.safe_dump(rendered)
    assert "keep_firing_for" not in yaml.safe_dump(expected_groups("rules-vmalert"))


@pytest.mark.parametrize("variant", ["prometheus", "source"])
def test_thresholds_by_name_on_the_keep_firing_for_variants(chart, variant):  # noqa: F811
    """A threshold set by name renders what the generator and variants.py write with
    the table so changed, in the ordered variant too (a record-reading sum keeps its
    threshold where the record's expression had it)."""
    changed = {"z_mad_floor": 0.02, "straggler_min_gpus": 4, "imbalance_alert_ratio": 0.4}
    values = {"prometheusRule": {"variant": variant, "thresholds": changed}}
    rules = [r for gs in rules_by_source(docs(render(chart, values, api_versions=OPERATOR_API))).values()
             for g in gs for r in g["rules"]]
    assert rules == rules_with(variant, **changed) != rules_with(variant)


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
    """Each prometheusRule.variant ships one of the rule folders, with the thresholds
    the chart sets left to it (prometheus/chart/<variant>, written by prometheus/generate.py):
    prometheus the Prometheus-ordered variant (sums reading their group's records),
    source prometheus/rules itself, vmalert its vmalert variant."""
    import json
    import sys
    sys.path.insert(0, str(ROOT / "prometheus" / "tools"))
    import variants
    schema = json.loads((ROOT / "helm" / "gpulse" / "values.schema.json").read_text())
    enum = schema["properties"]["prometheusRule"]["properties"]["variant"]["enum"]
    shipped = {"prometheus": variants.VARIANTS["prometheus"], "source": variants.SOURCE,
               "vmalert": variants.VARIANTS["vmalert"]}
    assert sorted(enum) == sorted(shipped) == sorted(FOLDERS)
    assert {n: ROOT / "prometheus" / f for n, f in FOLDERS.items()} == shipped
    chart_rules = ROOT / "prometheus" / "chart"
    link = ROOT / "helm" / "gpulse" / "files" / "rules"
    assert link.is_symlink() and link.resolve() == chart_rules.resolve()
    assert sorted(p.name for p in chart_rules.iterdir() if p.is_dir()) == sorted(shipped)
    for name, folder in shipped.items():
        assert sorted(p.name for p in (chart_rules / name).glob("*.yml")) == \
            sorted(p.name for p in folder.glob("*.yml")), name
