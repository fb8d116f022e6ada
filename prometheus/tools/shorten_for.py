#!/usr/bin/env python3
"""Write a copy of rule files with every `for:` and `keep_firing_for:` scaled.

    python prometheus/tools/shorten_for.py --factor 0.01 --out DIR prometheus/rules/*.yml

The shipped alerts wait 10-30 minutes before firing; an end-to-end test against a
real Prometheus cannot. This is the only way the tests shorten them: expressions,
labels, annotations, record names and group settings are copied unchanged, and only
the two hold durations are multiplied (rounded to whole seconds, never below 1 s
when the original was non-zero). tests/integration/rules/test_rules_shorten.py checks exactly that.

Windows inside expressions (rate(...[5m])) are left alone on purpose: they are part
of what the rule means. rate() over a window longer than the data so far uses the
samples there are, so a short test still evaluates the same expression.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

HOLD_KEYS = ("for", "keep_firing_for")

_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")


def parse_duration(text: str) -> float:
    """A Prometheus duration ('1h30m', '90s', '500ms', '0s') in seconds."""
    s = str(text).strip()
    if s == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return total


def format_duration(seconds: float) -> str:
    """Whole seconds as a Prometheus duration: 3600 -> '1h', 90 -> '1m30s', 0 -> '0s'."""
    rest = int(round(seconds))
    if rest == 0:
        return "0s"
    out = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def scale(value: str, factor: float) -> str:
    secs = parse_duration(value)
    if secs == 0:
        return format_duration(0)
    return format_duration(max(1.0, round(secs * factor)))


def shorten(doc: dict, factor: float) -> dict:
    """A copy of a parsed rule file with the hold durations of every rule scaled."""
    out = {**doc, "groups": []}
    for group in doc.get("groups") or []:
        rules = []
        for rule in group.get("rules") or []:
            rule = dict(rule)
            for key in HOLD_KEYS:
                if key in rule:
                    rule[key] = scale(rule[key], factor)
            rules.append(rule)
        out["groups"].append({**group, "rules": rules})
    return out


def load_rule_file(src: Path) -> dict:
    doc = yaml.safe_load(src.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or "groups" not in doc:
        raise ValueError("not a rule file (no top-level groups)")
    return doc


def write_each(files: list[str], out_dir: Path, change, prog: str, dump=None) -> int:
    """Write change(parsed file) for every rule file into out_dir, under its own name;
    a file that is not a rule file stops it with one line on stderr and exit 1."""
    dump = dump or (lambda doc, src: yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in files:
        src = Path(name)
        try:
            text = dump(change(load_rule_file(src)), src)
        except (OSError, ValueError, KeyError, yaml.YAMLError) as e:
            print(f"{prog}: {src}: {e}".splitlines()[0], file=sys.stderr)
            return 1
        (out_dir / src.name).write_text(text, encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factor", type=float, required=True, help="multiply for/keep_firing_for by this (0 < f <= 1)")
    ap.add_argument("--out", required=True, help="directory to write the shortened files to")
    ap.add_argument("files", nargs="+", help="rule files")
    args = ap.parse_args(argv)
    if not 0 < args.factor <= 1:
        print(f"shorten_for: --factor must be in (0, 1], got {args.factor:g}", file=sys.stderr)
        return 2
    return write_each(args.files, Path(args.out), lambda doc: shorten(doc, args.factor), "shorten_for")

if __name__ == "__main__":
    sys.exit(main())
