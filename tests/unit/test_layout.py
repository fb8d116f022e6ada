"""The test layout holds: markers come from directories, and a unit test needs neither
a gpulse process nor an outside program (tests/README.md)."""
from __future__ import annotations

import ast
import re
import tomllib

from conftest import KINDS, ROOT

TESTS = ROOT / "tests"


def test_marker_follows_the_directory(request):
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None


def test_kinds_are_registered_and_have_a_directory():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.split(":")[0] for m in ini["markers"]}
    assert registered == set(KINDS)
    assert "--strict-markers" in ini["addopts"]
    for kind in KINDS:
        assert any((TESTS / kind).rglob("test_*.py")), kind


# what makes a test no unit test: a gpulse process, the in-process server, an outside program
HEAVY = re.compile(r"\bgpulse_proc\b|\bliveserver\b|\brequire_binary\b|\"-m\", \"gpulse\"|\bselenium\b")


def test_unit_tests_start_no_process_and_no_binary():
    heavy = {str(p.relative_to(TESTS)): sorted(set(HEAVY.findall(p.read_text())))
             for p in (TESTS / "unit").rglob("test_*.py") if p.name != "test_layout.py"}
    assert {k: v for k, v in heavy.items() if v} == {}


def test_make_targets():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-unit: .*\n\t\$\(PY\) -m pytest -q -m unit tests/unit$", make, re.M)
    # everything, in parallel workers that each take whole files
    assert re.search(r"^test: .*\n\t\$\(PY\) -m pytest -q -n \$\(PYTEST_WORKERS\) --dist loadfile --no-loadscope-reorder --durations=25$", make, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_test_file_names_are_unique():
    """Test directories are no packages (pytest imports each file by its name), so two
    files of one name in different directories would shadow each other."""
    names = [p.name for p in TESTS.rglob("test_*.py") if "fakenvml" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_imports_of(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("import a.b\nfrom c import d\ndef f():\n    from . import e\n    import test_g as h\n")
    assert imported_modules(p) == ["a.b", "c", "test_g"]


def imported_modules(path) -> list[str]:
    """Every absolute module a file imports, wherever the import sits."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return out


def test_no_test_module_imports_another():
    """What tests share lives in helper modules (tests/*.py beside conftest.py, testing/,
    bench/lib/), so a test file can move, split or go without breaking another; the
    benchmarks start the stacks of testing/, not a test module's."""
    tests = {p.stem for p in TESTS.rglob("test_*.py")}
    sources = [*TESTS.rglob("*.py"), *(ROOT / "testing").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    found = sorted(f"{p.relative_to(ROOT)}: {m}" for p in sources for m in imported_modules(p)
                   if m.split(".")[0] in tests)
    assert found == []


def test_tests_import_bench_as_a_package():
    """A test reaches a benchmark's code as `bench.<module>` or `bench.lib.<module>` (the
    repository root is on pytest's path), never by putting bench/ on sys.path."""
    found = sorted(str(p.relative_to(ROOT)) for p in TESTS.rglob("*.py")
                   if re.search(r"sys\.path.*[\"']bench[\"']", p.read_text()))
    assert found == []


def shared_private_imports(paths) -> list[str]:
    """`from bench.x import _name` (or testing.x, or relative) in a benchmark or a
    stand-in: what two of them share has a public home (bench/lib/, testing/)."""
    out = []
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in
                                                     ("bench", "testing")):
                out += [f"{p.name}:{node.lineno} {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_benchmarks_share_no_private_names(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from bench.cause_matrix import _finding_cause\nfrom .cases import _frame, LEAD\n")
    assert [s.split(" ", 1)[1] for s in shared_private_imports([bad])] == ["_finding_cause", "_frame"]
    assert shared_private_imports([*(ROOT / "bench").rglob("*.py"), *(ROOT / "testing").rglob("*.py")]) == []


def test_no_test_starts_a_process_through_preexec_fn():
    """A child started with preexec_fn runs Python between fork and exec, with the fork
    handlers of every library the test process loaded: gRPC's event engine (loaded by
    the attribution tests) aborted 2 of 40 such children in a reproduction, and three
    report tests failed that way in one CI run. testing.daemons.limited sets resource
    limits without it."""
    offenders = [f"{p.relative_to(ROOT)}:{n}" for folder in ("tests", "testing", "bench")
                 for p in sorted((ROOT / folder).rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"\bpreexec_fn\s*=", line)]
    assert offenders == []
