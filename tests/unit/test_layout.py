"""The test layout holds: markers come from directories, and a unit test needs neither
a gpulse process nor an outside program (tests/README.md)."""
from __future__ import annotations

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
    assert re.search(r"^test: .*\n\t\$\(PY\) -m pytest -q -n \$\(PYTEST_WORKERS\) --dist loadfile$", make, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_test_file_names_are_unique():
    """Test directories are no packages (modules import each other by name), so two
    files of one name in different directories would shadow each other."""
    names = [p.name for p in TESTS.rglob("test_*.py") if "fakenvml" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
