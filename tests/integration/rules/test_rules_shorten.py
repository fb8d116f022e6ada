"""prometheus/tools/shorten_for.py changes hold durations and nothing else."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, require_binary

TOOL = ROOT / "prometheus" / "tools" / "shorten_for.py"
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))

sys.path.insert(0, str(TOOL.parent))
import shorten_for  # noqa: E402


@pytest.mark.parametrize("text,seconds", [
    ("0s", 0), ("0", 0), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("2d", 172800),
])
def test_parse_duration(text, seconds):
    assert shorten_for.parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "10", "5 m", "1.5m", "m", "10x"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        shorten_for.parse_duration(bad)


@pytest.mark.parametrize("value,factor,expected", [
    ("10m", 0.01, "6s"), ("15m", 0.01, "9s"), ("1m", 0.01, "1s"), ("0s", 0.01, "0s"),
    ("30m", 0.5, "15m"), ("1h", 1, "1h"), ("5m", 0.3, "1m30s"),
])
def test_scale(value, factor, expected):
    assert shorten_for.scale(value, factor) == expected


def _run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)


def test_shortened_files_differ_only_in_hold_durations(tmp_path):
    r = _run("--factor", "0.01", "--out", str(tmp_path), *map(str, RULE_FILES))
    assert r.returncode == 0, r.stderr
    changed = 0
    for src in RULE_FILES:
        a = yaml.safe_load(src.read_text(encoding="utf-8"))
        b = yaml.safe_load((tmp_path / src.name).read_text(encoding="utf-8"))
        assert len(a["groups"]) == len(b["groups"])
        for ga, gb in zip(a["groups"], b["groups"]):
            assert {k: v for k, v in ga.items() if k != "rules"} == {k: v for k, v in gb.items() if k != "rules"}
            assert len(ga["rules"]) == len(gb["rules"])
            for ra, rb in zip(ga["rules"], gb["rules"]):
                strip = lambda r: {k: v for k, v in r.items() if k not in shorten_for.HOLD_KEYS}  # noqa: E731
                assert strip(ra) == strip(rb)          # expr, labels, annotations byte-identical
                assert set(ra) == set(rb)              # no hold key added or dropped
                for key in shorten_for.HOLD_KEYS:
                    if key in ra:
                        want = max(1, round(shorten_for.parse_duration(ra[key]) * 0.01))
                        assert shorten_for.parse_duration(rb[key]) == want, (ra.get("alert"), key)
                        changed += ra[key] != rb[key]
    assert changed > 0


def test_shortened_files_pass_promtool(tmp_path):
    promtool = require_binary("promtool")
    assert _run("--factor", "0.02", "--out", str(tmp_path), *map(str, RULE_FILES)).returncode == 0
    r = subprocess.run([promtool, "check", "rules", *map(str, sorted(tmp_path.glob("*.yml")))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("groups: [\n", encoding="utf-8")
    r = _run("--factor", "0.1", "--out", str(tmp_path / "o"), str(bad))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "bad.yml" in r.stderr
    r = _run("--factor", "3", "--out", str(tmp_path / "o"), str(RULE_FILES[0]))
    assert r.returncode == 2 and "--factor" in r.stderr and "Traceback" not in r.stderr
    r = _run("--factor", "0.1", "--out", str(tmp_path / "o"), str(tmp_path / "missing.yml"))
    assert r.returncode == 1 and "missing.yml" in r.stderr and "Traceback" not in r.stderr
