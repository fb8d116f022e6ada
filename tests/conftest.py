"""Shared test plumbing: real binaries, free ports, a running gpulse (testing/daemons.py), the
`gpulse_proc` fixture, and the markers that follow the directories."""
from __future__ import annotations

from pathlib import Path

import pytest

# the harness lives in testing/ (benchmarks start it too); tests import it from here
from testing import ROOT  # noqa: F401
from testing.daemons import (IN_CI, SHARED_DATA, Gpulse, free_port, require_binary,  # noqa: F401
                             require_data, wait_http)


# Real-trace replays, reports and promtool runs over them are CPU-bound, not waiting:
# on two cores shared by four workers and other load they take 2-4x their idle time
# (a module's fixture and its first test together), past the suite's 300 s hang guard
# (pyproject's addopts). Their modules carry this longer guard instead:
# `pytestmark = CPU_BOUND`.
CPU_BOUND = pytest.mark.timeout(900)


@pytest.fixture
def gpulse_proc():
    """Factory: gpulse_proc('--source', 'sim', ...) -> Gpulse; stopped after the test."""
    started: list[Gpulse] = []

    def start(*args: str, **kw) -> Gpulse:
        g = Gpulse(*args, **kw)
        started.append(g)
        return g

    yield start
    for g in started:
        g.stop()


@pytest.fixture(scope="module")
def cause_corpus(tmp_path_factory):
    """The labelled cause cases a test module asks for, each built and reported once
    (tests/causecorpus.py)."""
    from causecorpus import Corpus
    return Corpus(tmp_path_factory.mktemp("causes"))


# The directory a test file lives in is its kind (tests/README.md); the marker follows,
# so `pytest -m unit` selects by directory and a new file needs no marker of its own.
KINDS = ("unit", "integration", "e2e")


# The order files are handed to the workers (make test runs xdist with
# --no-loadscope-reorder, so this order is the schedule): the longest first, so that the
# short ones fill the cores at the end instead of a long file running alone. xdist's own
# order (files with the most tests first) started the 200 s two-test files last, and the
# suite's last minutes ran on one core. A file's length is read from what it declares:
# a module with a longer hang guard than the suite's (CPU_BOUND, or a test's own
# timeout mark) is CPU-bound on real traces; end-to-end files wait on real stacks;
# unit files are short.
def _file_rank(item, top: str) -> tuple[int, int]:
    mark = item.get_closest_marker("timeout")
    guard = mark.args[0] if mark is not None and mark.args else 0
    return (0 if guard > 300 else 1, {"e2e": 0, "integration": 1, "unit": 2}.get(top, 1))


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    rank: dict[Path, tuple[int, int]] = {}
    for item in items:
        try:
            top = Path(str(item.path)).resolve().relative_to(tests).parts[0]
        except ValueError:
            continue
        if top in KINDS:
            item.add_marker(top)
        r = _file_rank(item, top)
        rank[item.path] = min(rank.get(item.path, r), r)
    # a stable sort: a file's tests stay together and in their own order
    items.sort(key=lambda item: rank.get(item.path, (1, 1)))
