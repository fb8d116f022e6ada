"""Write the values table of helm/gpulse/README.md from the comments in values.yaml.

values.yaml documents each value in a `# -- ` comment right above it (continued
on the following `#` lines); the table lists every such value with its type and
default, so the README cannot drift from the values the chart really has.
tests/integration/helm/test_helm_readme.py runs `--check`.

    python helm/values_readme.py          # rewrite the table
    python helm/values_readme.py --check  # exit 1 when it is out of date
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated import write_or_check  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "gpulse"
VALUES = CHART / "values.yaml"
README = CHART / "README.md"
BEGIN = "<!-- values table: written by helm/values_readme.py from values.yaml, do not edit -->"
END = "<!-- end of values table -->"

_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.-]*):(?:\s|$)")


@dataclass(frozen=True)
class Value:
    key: str          # dotted path, e.g. image.repository
    default: object
    doc: str


def documented_values(text: str) -> list[Value]:
    """Every key of values.yaml with a `# --` comment, in file order."""
    defaults = yaml.safe_load(text)
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    out = []
    for i, line in enumerate(lines):
        m = _KEY.match(line)
        if not m or line.lstrip().startswith("-"):
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        stack.append((indent, key))
        node = defaults
        for part in path:
            if not isinstance(node, dict) or part not in node:
                node = None   # inside a list item or an example: not a value of its own
                break
            node = node[part]
        else:
            doc = _comment_above(lines, i)
            if doc is not None:
                out.append(Value(".".join(path), node, doc))
    return out


def _comment_above(lines: list[str], i: int) -> str | None:
    """The `# -- ...` block directly above line i, joined into one line (a table
    cell); None when there is none."""
    block: list[str] = []
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("#"):
        block.insert(0, lines[j].strip()[1:])
        if block[0].startswith(" -- "):
            text = " ".join(part.strip() for part in [block[0][4:], *block[1:]])
            return re.sub(r"\s+", " ", text).strip()
        j -= 1
    return None


def _type(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


def _cell(s: str) -> str:
    return s.replace("|", "\\|")


def table(values: list[Value]) -> str:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for v in values:
        default = json.dumps(v.default, separators=(", ", ": ")) if not isinstance(v.default, str) \
            else json.dumps(v.default)
        rows.append(f"| `{v.key}` | {_type(v.default)} | `{_cell(default)}` | {_cell(v.doc)} |")
    return "\n".join(rows) + "\n"


def render(readme: str, values_text: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"{README.relative_to(ROOT)}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(documented_values(values_text))}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether the README is up to date")
    args = ap.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    return write_or_check(README, current, render(current, VALUES.read_text(encoding="utf-8")), args.check,
                          f"{README.relative_to(ROOT)}: the values table is out of date with values.yaml: "
                          f"run python helm/values_readme.py")


if __name__ == "__main__":
    raise SystemExit(main())
