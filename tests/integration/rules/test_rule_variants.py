"""prometheus/tools/variants.py: each ruler gets rules it loads, with the same meaning.

- drift: the committed prometheus/rules-vmalert/ and prometheus/rules-prometheus/
  are exactly what the tool makes of prometheus/rules/ now;
- the real rulers' own checks accept them (promtool, vmalert -dryRun);
- the shipped promtool unit tests whose checks read a rule the variant changes, or
  anything computed from one, pass on it unchanged (the others' checks see the same
  values as the source's run: test_rules.py). The vmalert variant fires,
  resolves and keeps firing at the same evaluations as the source with
  keep_firing_for. Dropping the field without the construction fails them, so
  those tests do see the difference;
- the shipped promtool unit tests pass on the Prometheus variant too, and the records
  it reads from the group's earlier records equal the source's at every evaluation
  of a run with a counter reset and a GPU without a workload.
"""
from __future__ import annotations

import re

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, require_binary

from gpulse.rulenames import HELD_ACTIVE_5M
from testing import rulegraph

TOOL = ROOT / "prometheus" / "tools" / "variants.py"
SOURCE = ROOT / "prometheus" / "rules"
VMALERT_RULES = ROOT / "prometheus" / "rules-vmalert"
PROMETHEUS_RULES = ROOT / "prometheus" / "rules-prometheus"
UNIT_TESTS = sorted((ROOT / "prometheus" / "tests").glob("*.yml"))

sys.path.insert(0, str(TOOL.parent))
import variants  # noqa: E402


def _words(expr: str) -> str:
    return " ".join(expr.split())


def _tool(*args, timeout=60):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("variant, folder", [("vmalert", VMALERT_RULES), ("prometheus", PROMETHEUS_RULES)])
def test_committed_variant_is_what_the_source_gives(tmp_path, variant, folder):
    r = _tool("--check")
    assert r.returncode == 0, r.stderr
    r = _tool("--variant", variant, "--out", tmp_path, *sorted(SOURCE.glob("*.yml")))
    assert r.returncode == 0, r.stderr
    made = {p.name: p.read_text() for p in tmp_path.glob("*.yml")}
    committed = {p.name: p.read_text() for p in folder.glob("*.yml")}
    assert made == committed


def test_check_names_a_stale_file(tmp_path, monkeypatch):
    folder = tmp_path / "rules-vmalert"
    assert _tool("--variant", "vmalert", "--out", folder, *sorted(SOURCE.glob("*.yml"))).returncode == 0
    stale = folder / "gpulse-training.rules.yml"
    text = stale.read_text()
    assert re.search(r"\bfor: \S+", text)
    stale.write_text(re.sub(r"\bfor: \S+", "for: 99m", text, count=1))   # whatever the rules hold today
    (folder / "gone.rules.yml").write_text("groups: []\n")
    monkeypatch.setitem(variants.VARIANTS, "vmalert", folder)
    problems = variants.check()
    assert any("gpulse-training.rules.yml differs" in p for p in problems), problems
    assert any("gone.rules.yml has no source" in p for p in problems), problems


def test_vmalert_variant_has_no_keep_firing_for_and_keeps_every_rule():
    for src in sorted(SOURCE.glob("*.yml")):
        a = yaml.safe_load(src.read_text())
        b = yaml.safe_load((VMALERT_RULES / src.name).read_text())
        assert "keep_firing_for" not in (VMALERT_RULES / src.name).read_text()
        for ga, gb in zip(a["groups"], b["groups"], strict=True):
            assert {k: v for k, v in ga.items() if k != "rules"} == {k: v for k, v in gb.items() if k != "rules"}
            for ra, rb in zip(ga["rules"], gb["rules"], strict=True):
                # everything but the expression (and the dropped field) as in the source
                assert {k: v for k, v in ra.items() if k not in ("expr", "keep_firing_for")} == \
                       {k: v for k, v in rb.items() if k != "expr"}
                if "keep_firing_for" in ra and variants.parse_duration(ra["keep_firing_for"]) > 0:
                    assert _words(ra["expr"]) in _words(rb["expr"])
                    assert f'ALERTS{{alertname="{ra["alert"]}", alertstate="firing"}}' in rb["expr"]
                else:
                    assert ra["expr"].strip() == rb["expr"].strip()


def test_hold_expression_window_and_step():
    rule = {"alert": "X", "expr": "up == 0\n", "keep_firing_for": "5m", "labels": {"team": "a", "severity": "x"}}
    expr = variants.hold_expression(rule)
    assert ")[5m:]" in expr          # stepped at the ruler's evaluation interval
    assert "ignoring(alertname, alertstate, alertgroup, severity, team)" in expr
    assert variants.hold_expression({**rule, "keep_firing_for": "5s"}).count("[5s:]") == 1
    assert variants.hold_expression({**rule, "keep_firing_for": "0s"}).strip() == "up == 0"


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("just: text\n")
    r = _tool("--variant", "vmalert", "--out", tmp_path / "out", bad)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "not a rule file" in r.stderr
    assert _tool("--variant", "vmalert").returncode == 2


def test_vmalert_dry_run_accepts_the_vmalert_variant():
    vmalert = require_binary("vmalert")
    r = subprocess.run([vmalert, "-dryRun", "-rule.validateTemplates", f"-rule={VMALERT_RULES}/*.yml"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


@pytest.mark.parametrize("folder", [SOURCE, VMALERT_RULES, PROMETHEUS_RULES],
                         ids=["source", "vmalert", "prometheus"])
def test_promtool_accepts_the_variant(folder):
    promtool = require_binary("promtool")
    r = subprocess.run([promtool, "check", "rules", *map(str, sorted(folder.glob("*.yml")))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _unit_tests_against(rules: Path, dest: Path, tests: list[Path] = UNIT_TESTS) -> subprocess.CompletedProcess:
    """The shipped promtool unit tests (or some of them), reading their rule files from
    `rules`, each over the rules its checks can see (testing/rulegraph.py)."""
    promtool = require_binary("promtool")
    made = [rulegraph.pruned(t, dest / t.stem, rules) for t in tests]
    return subprocess.run([promtool, "test", "rules", *map(str, made)], capture_output=True, text=True, timeout=840)


def _changed_by(folder: Path) -> tuple[set[str], list[Path]]:
    """The rules the variant writes otherwise than the source (by name), and the shipped
    unit tests whose checks can see one of them (testing/rulegraph.py: they read it or
    anything computed from it, however many rules away). The other tests' checks see
    only rules that are the same in both, so they give the same answer as the source's
    run, which is test_rules.py's."""
    src = rulegraph.Rules(sorted(SOURCE.glob("*.yml")))
    var = rulegraph.Rules(sorted(folder.glob("*.yml")))
    assert src.by_name.keys() == var.by_name.keys(), "a variant keeps every rule, by name"
    changed = {n for n in src.by_name if src.by_name[n] != var.by_name[n]}
    tests = [t for t in UNIT_TESTS if any(rules.closure(rules.checked(yaml.safe_load(t.read_text()))) & changed
                                          for rules in (src, var))]
    return changed, tests


# CPU-bound, not waiting: promtool evaluates the test files (~35 s of CPU on an idle
# core for all of them over the whole rule files; ~5 s over the rules their checks can
# see), which four workers on two loaded cores stretch 2-4x.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("folder, rewrites", [(VMALERT_RULES, "GpulseThermalThrottling"),
                                              (PROMETHEUS_RULES, "node_gpu:gpulse_gpu_cell_ratio:increase15s")],
                         ids=["vmalert", "prometheus"])
def test_shipped_unit_tests_pass_on_the_variant(tmp_path, folder, rewrites):
    changed, tests = _changed_by(folder)
    # a rule each variant is made to rewrite is seen as changed (any other it comes to
    # change brings its tests along)
    assert rewrites in changed and tests, (changed, tests)
    r = _unit_tests_against(folder, tmp_path / "tests", tests)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_the_tests_run_on_a_variant_are_those_that_read_what_it_changes(tmp_path):
    """A change deep in the recording rules reaches the alerts computed from it, and
    their tests; a change to one alert selects its tests alone."""
    def changed(name: str, expr: str) -> tuple[set[str], set[str]]:
        folder = tmp_path / name.replace(":", "_")
        folder.mkdir()
        for f in SOURCE.glob("*.yml"):
            doc = yaml.safe_load(f.read_text())
            for g in doc["groups"]:
                for r in g["rules"]:
                    if name in (r.get("record"), r.get("alert")):
                        r["expr"] = expr
            (folder / f.name).write_text(yaml.safe_dump(doc, sort_keys=False))
        names, tests = _changed_by(folder)
        return names, {t.name for t in tests}

    # the per-GPU active share over 5 minutes while the GPU held a workload, which the
    # peer records read, and the straggler and imbalance alerts read those
    base = HELD_ACTIVE_5M
    names, tests = changed(base, "vector(0)")
    assert names == {base}
    assert {"training-balance.test.yml", "training-cost.test.yml"} <= tests, tests
    names, tests = changed("GpulseHighTemperature", "vector(0)")
    assert names == {"GpulseHighTemperature"} and tests == {"gpu-health.test.yml"}, tests
    names, tests = changed("no such rule", "vector(0)")
    assert names == set() and tests == set()


def test_prometheus_variant_sums_the_records_of_its_group():
    doc = yaml.safe_load((PROMETHEUS_RULES / "gpulse-recording.rules.yml").read_text())
    cells = next(g for g in doc["groups"] if g["name"] == "gpulse.gpu.cells15s")
    exprs = {r["record"]: _words(r["expr"]) for r in cells["rules"]}
    gpu = "node_gpu:gpulse_gpu_cell_seconds:increase15s"
    assert exprs["node:gpulse_gpu_cell_seconds:increase15s"] == f"sum by (cluster, node, signal) ({gpu})"
    assert exprs["workload:gpulse_gpu_cell_seconds:increase15s"] == \
        f"sum by (cluster, workload, signal) ({gpu}) unless on (workload) vector(1)"
    # the shares divide the work and sampled increments of one record, read back
    # with a matcher each
    assert exprs["node_gpu:gpulse_gpu_cell_ratio:increase15s"] == (
        f'({gpu}{{signal!="sampled"}}) / ignoring (signal) group_left () ({gpu}{{signal="sampled"}})')
    assert "offset" in exprs[gpu]


def test_read_records_needs_the_whole_expression_of_an_earlier_record():
    rules = [{"record": "b:x", "expr": "sum(a)"}, {"record": "c:x", "expr": "max(\n  sum(a)\n)"},
             {"record": "d:x", "expr": "max(sum(a) + 1)"}, {"record": "e:x", "expr": "min(max(sum(a)))"}]
    got = [r["expr"].strip() for r in variants.read_records(rules)]
    # c repeats b whole; d holds more than b inside its parentheses; e repeats c, the longer one
    assert got == ["sum(a)", "max(b:x)", "max(sum(a) + 1)", "min(c:x)"]
    # a string's own spaces are part of the expression: no match across them, none changed
    rules = [{"record": "b:x", "expr": 'label_replace(a, "l", "( $1 )", "m", "(.*)")'},
             {"record": "c:x", "expr": 'max(\n  label_replace(a, "l", "( $1 )", "m", "(.*)")\n) + on ( l )  x{l="( y )"}'},
             {"record": "d:x", "expr": 'max(label_replace(a, "l", "($1)", "m", "(.*)"))'}]
    got = [r["expr"].strip() for r in variants.read_records(rules)]
    assert got[1:] == ['max(b:x) + on (l) x{l="( y )"}', 'max(label_replace(a, "l", "($1)", "m", "(.*)"))']


def test_read_records_filters_a_record_read_back_with_a_matcher():
    sampled = 'label_replace(vector(1), "signal", "sampled", "", "")'
    rules = [{"record": "b:x", "expr": "sum by (signal) (a)"},
             {"record": "c:x", "expr": f"(sum by (signal) (a)) and on (signal) {sampled}"},
             {"record": "d:x", "expr": f"((\n  sum by (signal) (a)\n) unless on (signal) {sampled}) + 1"},
             # another label than the one matched on, no record read back, or an operator
             # that binds tighter on either side (the filter is then of more than the
             # record): left as written
             {"record": "e:x", "expr": f"(sum by (signal) (a)) and on (other) {sampled}"},
             {"record": "f:x", "expr": f"(sum(a)) and on (signal) {sampled}"},
             {"record": "g:x", "expr": f"(sum by (signal) (a)) unless on (signal) {sampled} + 1"},
             {"record": "h:x", "expr": f"y / (sum by (signal) (a)) and on (signal) {sampled}"}]
    got = [r["expr"].strip() for r in variants.read_records(rules)]
    assert got[1:] == ['b:x{signal="sampled"}', '(b:x{signal!="sampled"}) + 1',
                       f"(b:x) and on (other) {sampled}", f"(sum(a)) and on (signal) {sampled}",
                       f"(b:x) unless on (signal) {sampled} + 1", f"y / (b:x) and on (signal) {sampled}"]


def test_prometheus_variant_records_what_the_source_records(tmp_path):
    """The source's recording groups and the variant's changed ones, its records
    renamed, in one promtool run over the input of prometheus/tests/cells15s.test.yml
    (a counter reset, two clusters, a GPU without a workload) for the heatmap cells and
    of the slow node of prometheus/tests/training-cost.test.yml for the lost time of
    the other nodes: at every evaluation each record the variant computes differently
    has the same series and values."""
    promtool = require_binary("promtool")
    src = yaml.safe_load((SOURCE / "gpulse-recording.rules.yml").read_text())
    var = yaml.safe_load((PROMETHEUS_RULES / "gpulse-recording.rules.yml").read_text())
    changed, groups = [], []
    for gs, gv in zip(src["groups"], var["groups"], strict=True):
        if gs == gv:
            continue
        names = {r["record"]: r["record"] + "_ordered" for r in gv["rules"] if "record" in r}
        rules = []
        for rs, rv in zip(gs["rules"], gv["rules"], strict=True):
            expr = rv["expr"]
            for old, new in names.items():
                expr = re.sub(rf"(?<![\w:]){re.escape(old)}(?![\w:])", new, expr)
            rules.append({**rv, "record": names[rv["record"]], "expr": expr})
            if rs["expr"] != rv["expr"]:
                changed.append(rv["record"])
        groups.append({**gv, "name": gv["name"] + ".ordered", "rules": rules})
    # record -> (the test file whose first case is its input, the first check, when it
    # holds, the last check); the lost time's gate reads a record of another group,
    # which promtool may evaluate after this one at an instant: compared from when
    # that record is there at every order
    inputs = {"node:gpulse_gpu_cell_seconds:increase15s": ("cells15s", 15, 60, 300),
              "workload:gpulse_gpu_cell_seconds:increase15s": ("cells15s", 15, 60, 300),
              "node_gpu:gpulse_gpu_cell_ratio:increase15s": ("cells15s", 15, 60, 300),
              "workload_node:gpulse_other_nodes_lost_seconds:rate5m": ("training-cost", 60, 360, 840)}
    assert changed == list(inputs)
    rules = tmp_path / "both.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": src["groups"] + groups}, sort_keys=False))
    cases = []
    for name in dict.fromkeys(v[0] for v in inputs.values()):
        doc = yaml.safe_load((ROOT / "prometheus" / "tests" / f"{name}.test.yml").read_text())
        checks = []
        for record in (r for r, v in inputs.items() if v[0] == name):
            _, start, first, last = inputs[record]
            a, b = record, record + "_ordered"
            checks.append({"expr": f"count({b}) > bool 0", "eval_time": f"{first}s",
                           "exp_samples": [{"labels": "{}", "value": 1}]})
            checks += [{"expr": f"({a} != {b}) or ({a} unless {b}) or ({b} unless {a})", "eval_time": f"{s}s",
                        "exp_samples": []} for s in range(start, last + 1, 15)]
        cases.append({"interval": "15s", "input_series": doc["tests"][0]["input_series"], "promql_expr_test": checks})
    test = tmp_path / "same.test.yml"
    test.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "15s", "tests": cases},
                                   sort_keys=False))
    r = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_unit_tests_notice_a_variant_that_only_drops_keep_firing_for(tmp_path):
    dropped = tmp_path / "dropped"
    dropped.mkdir()
    for src in sorted(SOURCE.glob("*.yml")):
        doc = yaml.safe_load(src.read_text())
        for g in doc["groups"]:
            for rule in g["rules"]:
                rule.pop("keep_firing_for", None)
        (dropped / src.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    # one shipped test file at a time until one fails (the whole set fails with it): first
    # the tests of the rule files that hold keep_firing_for, smallest first
    holders = [src.name for src in SOURCE.glob("*.yml") if "keep_firing_for" in src.read_text()]

    def first(t: Path) -> tuple[bool, int]:
        return not any(t.name.removesuffix(".test.yml") in h for h in holders), t.stat().st_size
    for k, t in enumerate(sorted(UNIT_TESTS, key=first)):
        r = _unit_tests_against(dropped, tmp_path / f"tests{k}", [t])
        if r.returncode != 0:
            break
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "FAILED" in out, out[-2000:]
