"""bench/ruler_live.py's fleet: what its shard targets serve at each 15 s step is the
cluster model's scrape of that step (the same series, labels and values that
bench/fleet.py backfills), every series once, so the live ruler's cost is measured on
the series the backfilled figures were; and the rule sets it runs (--groups, --unit)."""
from __future__ import annotations

import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.lib.dashboards_data import STEP_S, Cluster
from bench.ruler_live import PATTERNS, Fleet
from conftest import require_binary


def test_pattern_values_are_the_series_values_step_after_step():
    whole, patterns = Cluster(40, patterns=PATTERNS), Cluster(40, patterns=PATTERNS)
    t = 1_800_000_000
    for step in range(3):
        want = {key: values for _n, _l, values, key in whole.series(t + step * STEP_S, t + (step + 2) * STEP_S)}
        assert patterns.pattern_values(t + step * STEP_S, t + (step + 2) * STEP_S) == want


def test_the_shards_serve_every_series_of_the_step_once():
    fleet = Fleet(40 * 8)
    model = Cluster(40, patterns=PATTERNS)
    want = {f"{name}{{{labels}}}": values[0]
            for name, labels, values, _ in model.series(fleet.step, fleet.step + STEP_S)}
    got: dict[str, float] = {}
    for body in fleet.bodies:
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                key = s.name + "{" + ",".join(f'{k}="{v}"' for k, v in s.labels.items()) + "}"
                assert key not in got
                got[key] = s.value
    assert len(got) == len(want) == fleet.series
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) <= 1e-5 * max(1.0, abs(want[k])) for k in want)


def test_rule_sets_keep_only_the_chosen_groups_and_the_unit_is_one_valid_rule(tmp_path):
    """--groups copies only the groups it names (a group of the same file that does
    not match is left out) and --unit is a rule set Prometheus' own check accepts."""
    from bench.ruler_live import RULES, UNIT_RECORD, rule_sets
    sets = rule_sets([RULES], "cells15s$", True, tmp_path)
    (chosen, folder), (unit_name, unit) = sets.items()
    assert chosen == "prometheus/rules-prometheus [groups cells15s$]" and unit_name.startswith("unit:")
    groups = [g["name"] for p in sorted(folder.glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]
    assert groups == ["gpulse.gpu.cells15s"]
    rules = [r for p in unit.glob("*.yml") for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]
    assert [r["record"] for r in rules] == [UNIT_RECORD]
    promtool = require_binary("promtool")
    for f in (folder, unit):
        r = subprocess.run([promtool, "check", "rules", *map(str, sorted(f.glob("*.yml")))],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    with pytest.raises(SystemExit, match="no group of .* matches"):
        rule_sets([RULES], "no-such-group", False, tmp_path / "none")
