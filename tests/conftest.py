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


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        try:
            top = Path(str(item.path)).resolve().relative_to(tests).parts[0]
        except ValueError:
            continue
        if top in KINDS:
            item.add_marker(top)
