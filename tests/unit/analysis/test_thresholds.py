"""The threshold table is the only place a detection number is written down.

Python modules that detect (analysis/, the engine, the collector, the report's
findings, the live page) must take every threshold from analysis/thresholds.py: a
module-level number, a default argument or a comparison with a literal other than
0 and 1 in them is a copy that can drift, and fails here.
"""
import ast
import pathlib

import pytest

from conftest import ROOT

from gpulse.analysis import thresholds
from gpulse.analysis.verdict import deviating

PKG = ROOT / "exporter" / "gpulse"
DETECTION = sorted(PKG.glob("analysis/*.py")) + [PKG / n for n in (
    "engine.py", "collector.py", "http/livepage.py", "report/findings.py")]
TABLE = PKG / "analysis" / "thresholds.py"
# numbers that are not thresholds: constants of nature, of formatting, of smoothing
ALLOWED = {
    ("balance.py", "MAD_TO_SIGMA"),          # 1.4826: MAD → standard deviation for normal data
    ("livepage.py", "DEFAULT_MINUTES"),      # how much history the page shows first
    ("collector.py", "PROCESS_MAX_AGE"),     # how old the served process_* may be: a cache age
}
# comparisons with small whole numbers are about counts (len(xs) < 2), not thresholds
STRUCTURAL = (0, 1, 2, 3)
# functions whose literals format numbers for people (units, rounding), not verdicts
FORMATTING = {("findings.py", "_secs"), ("findings.py", "_time"), ("findings.py", "_imbalance_words"),
              ("collector.py", "collect")}


def _is_number(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool))


def _literal(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if _is_number(node):
        return node.value
    if isinstance(node, ast.BinOp) and _is_number(node.left) and _is_number(node.right):
        return "expr"
    return None


def copies(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    name = path.name
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _literal(node.value) is not None:
                for t in targets:
                    if isinstance(t, ast.Name) and (name, t.id) not in ALLOWED:
                        out.append(f"{name}:{node.lineno}: {t.id} = {ast.unparse(node.value)}")
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in fn.args.defaults + [d for d in fn.args.kw_defaults if d is not None]:
            v = _literal(d)
            if v is not None and not isinstance(v, int) and v not in (0, 1):   # int: sizes, counts
                out.append(f"{name}:{d.lineno}: default {ast.unparse(d)} in {fn.name}()")
        if (name, fn.name) in FORMATTING:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare):
                for c in [node.left, *node.comparators]:
                    v = _literal(c)
                    if v is not None and v not in (0, 1) and not (isinstance(v, int) and v in STRUCTURAL):
                        out.append(f"{name}:{node.lineno}: compares with {ast.unparse(c)} in {fn.name}()")
    return out


def test_no_detection_module_carries_its_own_threshold():
    found = [c for p in DETECTION if p != TABLE for c in copies(p)]
    assert found == [], "take these from analysis/thresholds.py:\n" + "\n".join(found)


def test_the_check_catches_a_copy(tmp_path):
    bad = tmp_path / "findings.py"
    bad.write_text("Z = 3.0\n\ndef f(x, floor=0.05):\n    return abs(x) >= 3.5\n")
    assert len(copies(bad)) == 3
    assert copies(tmp_path / "findings.py") and not copies(TABLE.parent / "verdict.py")


def test_every_threshold_is_documented():
    doc = (ROOT / "docs" / "activity.md").read_text()
    missing = [n for n in thresholds.THRESHOLDS if f"`{n}`" not in doc]
    assert missing == []
    for t in thresholds.THRESHOLDS.values():
        assert t.doc and t.unit in ("ratio", "seconds", "z", "count", "watts_ratio", "bytes", "factor",
                                    "celsius", "codes", "regex")
        # a number, or what a rule matches: codes as a tuple, a pattern as a string
        assert isinstance(t.value, {"codes": tuple, "regex": str}.get(t.unit, (int, float))), t.name


def test_a_straggler_is_judged_by_its_cost_beyond_the_measured_noise():
    # one straggler definition: its peers wait straggler_cost_ratio of their time for
    # it, and that gap stands out of the group's measured spread by straggler_z
    v = thresholds.value
    z, cost = v("straggler_z"), v("straggler_cost_ratio")
    assert deviating(z, cost) and not deviating(z * 0.99, cost) and not deviating(z, cost * 0.99)
    assert not deviating(-z, cost) and not deviating(z, -cost)     # waiting peers make both positive
    assert not deviating(float("nan"), cost) and not deviating(None, cost)
    # the floor of the spread is the measurement's resolution, not a gap of its own:
    # a tight group's 5 % straggler clears straggler_z
    assert cost / v("z_mad_floor") >= z


def test_unknown_threshold_is_named():
    with pytest.raises(KeyError, match="no_such"):
        thresholds.value("no_such")


def test_every_threshold_is_used():
    """A table entry nobody reads is a number that looks like a verdict but is none."""
    readers = [p for p in sorted(PKG.rglob("*.py")) if p != TABLE]
    readers += sorted((ROOT / "prometheus" / "templates").glob("*.yml"))
    readers += sorted((ROOT / "grafana" / "gpulse_dashboards").glob("*.py"))
    text = "\n".join(p.read_text(encoding="utf-8") for p in readers)
    unused = [n for n in thresholds.THRESHOLDS if n not in text]
    assert unused == []
