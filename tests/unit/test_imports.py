"""The package's import graph: no circle, and the HTTP server library imported only by
gpulse/http/. Read from the source (ast), so a deferred import inside a function, or
one under `if TYPE_CHECKING:`, counts as much as one at the top: a circle hidden in a
function or in the annotations is still a circle (the modules still need each other)."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from conftest import ROOT

PKG = ROOT / "exporter" / "gpulse"


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = ("gpulse",) + p.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


@functools.lru_cache(maxsize=None)
def _imports(name: str, path: Path) -> tuple[tuple[str, int], ...]:
    """(imported name, line) for every import in the module, wherever it sits,
    relative ones resolved (parsed once per module for every test here)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in MODULES else base, node.lineno))
    return tuple(out)


def graph() -> dict[str, set[str]]:
    return {m: {dep for dep, _ in _imports(m, p) if dep in MODULES and dep != m} for m, p in MODULES.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}      # 1 on the path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_finder_sees_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_sees_relative_and_deferred_imports():
    g = graph()
    assert "gpulse.sources.dcgm.fields" in g["gpulse.sources.recorded.dcgm"]      # from ..dcgm.fields import
    assert "gpulse.sources.recorded.dcgm" in g["gpulse.sources.recorded.formats"]  # from . import dcgm
    assert "gpulse.attribution" in g["gpulse.runtime"]                 # inside a function
    assert len(g) > 50


def test_imports_under_type_checking_count(tmp_path):
    p = tmp_path / "stream.py"
    p.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .formats import Format\n"
                 "def f():\n    from ..cells import CellError\n")
    assert list(_imports("gpulse.sources.recorded.stream", p)) == [
        ("typing", 1), ("gpulse.sources.recorded.formats", 3), ("gpulse.sources.cells", 5)]


def test_no_import_circle():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


# (lower, upper): nothing in the lower layer imports the upper one. A source reports its
# problems as sources.base.SourceError and the report turns them into its own messages;
# the pure analysis knows no source, route or engine.
LAYERS = [
    ("gpulse.sources", "gpulse.report"),
    ("gpulse.sources", "gpulse.http"),
    ("gpulse.sources", "gpulse.engine"),
    ("gpulse.analysis", "gpulse.sources"),
    ("gpulse.analysis", "gpulse.report"),
    ("gpulse.analysis", "gpulse.engine"),
    ("gpulse.http", "gpulse.report"),    # the live page shares gpulse.pages with the report
]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_breaks(g: dict[str, set[str]], lower: str, upper: str) -> list[str]:
    return sorted(f"{m} -> {d}" for m in g if _within(m, lower) for d in g[m] if _within(d, upper))


def test_layer_check_sees_a_break():
    g = {"gpulse.sources.prom": {"gpulse.report.errors", "gpulse.sources.base"}, "gpulse.report": {"gpulse.sources"}}
    assert layer_breaks(g, "gpulse.sources", "gpulse.report") == ["gpulse.sources.prom -> gpulse.report.errors"]
    assert layer_breaks(g, "gpulse.report", "gpulse.sources") == ["gpulse.report -> gpulse.sources"]


@pytest.mark.parametrize("lower, upper", LAYERS)
def test_lower_layer_does_not_import_upper(lower, upper):
    assert any(_within(m, lower) for m in MODULES) and any(_within(m, upper) for m in MODULES)
    assert layer_breaks(graph(), lower, upper) == []


@pytest.mark.parametrize("library", ["tornado"])
def test_server_library_only_in_http(library):
    outside = [f"{p.relative_to(PKG)}:{line}" for m, p in MODULES.items() if not m.startswith("gpulse.http")
               for dep, line in _imports(m, p) if dep == library or dep.startswith(library + ".")]
    assert outside == []
    assert any(dep.startswith(library) for m, p in MODULES.items() if m.startswith("gpulse.http")
               for dep, _ in _imports(m, p)), f"gpulse/http/ no longer imports {library}: update this test"


def private_imports() -> list[str]:
    """`from gpulse.x import _name` in another module: reading another's internals."""
    out = []
    for m, p in MODULES.items():
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("gpulse")):
                out += [f"{p.relative_to(PKG)}:{node.lineno} {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_module_imports_another_s_private_names():
    assert private_imports() == []


def test_test_support_stays_out_of_the_wheel():
    """testing/ (fake kubelet, fake API server, the tests' Config) is found by the
    tests, not by the wheel's package discovery, and nothing in gpulse needs it."""
    import tomllib

    from setuptools import find_packages
    root = PKG.parents[1]
    find = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = find_packages(str(root / find["where"][0]))
    assert "gpulse" in shipped and "gpulse.attribution" in shipped
    assert [p for p in shipped if not p.startswith("gpulse")] == []
    assert (root / "testing" / "fakekube.py").exists() and (root / "testing" / "config.py").exists()
    uses = [f"{p.relative_to(PKG)}:{line}" for m, p in MODULES.items()
            for dep, line in _imports(m, p) if dep.split(".")[0] in ("testing", "tests", "conftest")]
    assert uses == []
    # nor does the wheel carry test helpers itself (a test_config beside load_config)
    helpers = [f"{p.relative_to(PKG)}:{n.lineno} {n.name}" for m, p in MODULES.items()
               for n in ast.parse(p.read_text()).body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.lower().startswith(("test", "fake"))]
    assert helpers == []


def test_routes_read_only_what_the_sampler_publishes():
    """The HTTP layer and the exposition read the Snapshot and health(), never the
    sampler's engine, lock or the engine's trackers."""
    private = {"engine", "lock", "trackers"}
    reach = [f"{p.relative_to(PKG)}:{n.lineno} .{n.attr}" for m, p in MODULES.items()
             if m.startswith("gpulse.http") or m == "gpulse.collector"
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Attribute) and n.attr in private]
    assert reach == []


# What the engine publishes: the Snapshot and its views, and the driver that yields them.
ENGINE_PUBLISHES = {"run_offline", "Snapshot", "GpuView", "GroupView"}
ENGINE_STATE = {"trackers", "signals", "ingest", "analyze", "power_averaged"}


def engine_reaches(modules: dict[str, Path]) -> list[str]:
    """Places in `modules` that take anything from gpulse.engine besides what it
    publishes, or name an engine (or call its methods) rather than a snapshot."""
    out = []
    for m, p in modules.items():
        tree = ast.parse(p.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.module or "").rpartition(".")[2] == "engine":
                out += [f"{p.name}:{n.lineno} imports {a.name}" for a in n.names if a.name not in ENGINE_PUBLISHES]
            elif isinstance(n, ast.Name) and n.id in ("engine", "Engine"):
                out.append(f"{p.name}:{n.lineno} names {n.id}")
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ENGINE_STATE) or (
                    isinstance(n, ast.Attribute) and n.attr == "trackers"):
                out.append(f"{p.name}:{n.lineno} .{getattr(n, 'attr', None) or n.func.attr}")
    return sorted(out)


def test_engine_reach_check_sees_a_reach(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..engine import Engine, Snapshot\n"
                   "def f(pairs):\n"
                   "    for engine, snap in pairs:\n"
                   "        engine.trackers\n"
                   "        x.signals('0')\n")
    assert engine_reaches({"bad": bad}) == ["bad.py:1 imports Engine", "bad.py:3 names engine",
                                            "bad.py:4 .trackers", "bad.py:4 names engine", "bad.py:5 .signals"]


def test_report_reads_only_what_the_snapshot_publishes():
    """The report takes the engine's Snapshots from the driver and nothing else of it:
    no engine object, none of its trackers or running sums."""
    assert engine_reaches({m: p for m, p in MODULES.items() if _within(m, "gpulse.report")}) == []
