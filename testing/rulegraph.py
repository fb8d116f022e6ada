"""Which rules a promtool unit test can see, so that it is evaluated over those alone.

promtool evaluates every rule of a test's rule files at every step of every case,
whatever its checks read. A check's answer depends only on the rules it names, the
rules those read, and so on: an expression, a label or an annotation template that
names a record, an `ALERTS` selector that names an alert (one that names none reads
every alert). Evaluated over that closure, in the files' own groups and order, a test
answers exactly as over the whole files, in a fraction of the time
(training-balance.test.yml: 9.2 -> 3.3 s of CPU); `promtool check rules` still reads
the whole files (tests/integration/rules/test_rules.py).

The same graph tells which tests a rule change can reach (a rule variant:
tests/integration/rules/test_rule_variants.py).
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
ALERTS = re.compile(r"\bALERTS(?:_FOR_STATE)?\b(\{[^}]*\})?")
ALERT_NAMED = re.compile(r'alertname\s*=\s*"([^"]+)"')


def rule_name(rule: dict) -> str:
    return rule.get("record") or rule["alert"]


def names(text: str, alerts: set[str]) -> set[str]:
    """The record and alert names a PromQL expression or a template may read; an
    `ALERTS` selector that names no alert reads all of `alerts`."""
    got = set(NAME.findall(text))
    for m in ALERTS.finditer(text):
        named = ALERT_NAMED.findall(m.group(1) or "")
        got |= set(named) if named else alerts
    return got


def _text(value: object) -> str:
    """Every string in a rule's fields, keys and values, one per line."""
    if isinstance(value, dict):
        return "\n".join(f"{k}\n{_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    return str(value)


class Rules:
    """The rules of some rule files by name (`by_name`: a name's rules), and what each
    name's rules read (`reads`: everything but the rule's own name, its expression,
    labels and annotations)."""

    def __init__(self, files: list[Path]) -> None:
        self.docs = [(f, yaml.safe_load(f.read_text(encoding="utf-8"))) for f in files]
        self.by_name: dict[str, list[dict]] = {}
        for _, doc in self.docs:
            for g in doc["groups"]:
                for r in g["rules"]:
                    self.by_name.setdefault(rule_name(r), []).append(r)
        self.alerts = {n for n, rs in self.by_name.items() if "alert" in rs[0]}
        self.reads = {n: set().union(*(names(_text({k: v for k, v in r.items() if k not in ("record", "alert")}),
                                             self.alerts) for r in rs)) & self.by_name.keys()
                      for n, rs in self.by_name.items()}

    def closure(self, start: set[str]) -> set[str]:
        """The rules named in `start` and every rule they read, however many rules away."""
        need: set[str] = set()
        todo = start & self.by_name.keys()
        while todo:
            need |= todo
            todo = set().union(*(self.reads[n] for n in todo)) - need
        return need

    def checked(self, test: dict) -> set[str]:
        """The names a promtool test file's checks read: its alerts and expressions."""
        got: set[str] = set()
        for case in test["tests"]:
            got |= {a["alertname"] for a in case.get("alert_rule_test", [])}
            for e in case.get("promql_expr_test", []):
                got |= names(e["expr"], self.alerts)
        return got


def rule_files(test_path: Path, rules_dir: Path | None = None, test: dict | None = None) -> list[Path]:
    """The rule files a test file (already read: `test`) loads, from `rules_dir`
    instead, by file name."""
    test = test if test is not None else yaml.safe_load(test_path.read_text(encoding="utf-8"))
    return [(rules_dir / Path(f).name) if rules_dir else (test_path.parent / f) for f in test["rule_files"]]


def seen_by(files: list[Path], checks: set[str] | list[str], out: Path) -> list[Path]:
    """Copies in `out` of the rule files, holding only the rules that `checks` (alert
    names, PromQL expressions) can see, in their groups and order (for a test file a
    caller writes: no need to read it back)."""
    rules = Rules(files)
    return _write(rules, rules.closure(set().union(*(names(c, rules.alerts) for c in checks))), out)


def pruned(test_path: Path, out: Path, rules_dir: Path | None = None) -> Path:
    """A copy of the test file in `out` that loads copies of its rule files (from
    `rules_dir` instead, by file name) holding only the rules its checks can see, in
    their groups and order; its path."""
    test = yaml.safe_load(test_path.read_text(encoding="utf-8"))
    rules = Rules(rule_files(test_path, rules_dir, test))
    need = rules.closure(rules.checked(test))
    test["rule_files"] = [str(f) for f in _write(rules, need, out)]
    if "group_eval_order" in test:
        kept = {g["name"] for _, doc in rules.docs for g in doc["groups"]
                if any(rule_name(r) in need for r in g["rules"])}
        test["group_eval_order"] = [g for g in test["group_eval_order"] if g in kept]
    path = out / test_path.name
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    return path


def _write(rules: Rules, need: set[str], out: Path) -> list[Path]:
    """The rule files of `rules` as copies in `out` holding the rules named in `need`."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for f, doc in rules.docs:
        groups = [{**g, "rules": kept} for g in doc["groups"]
                  if (kept := [r for r in g["rules"] if rule_name(r) in need])]
        made.append(out / f.name)
        made[-1].write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    return made
