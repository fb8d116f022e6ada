"""Shared test plumbing: real binaries, free ports, a running gpulse (testing/daemons.py), the
`gpulse_proc` fixture, and the markers that follow the directories."""
from __future__ import annotations

import gc
import itertools
from pathlib import Path

import pytest

# the harness lives in testing/ (benchmarks start it too); tests import it from here
from testing import ROOT  # noqa: F401
from testing.daemons import (IN_CI, SHARED_DATA, Gpulse, free_port, limited, require_binary,  # noqa: F401
                             require_data, wait_http)


# Real-trace replays, reports and promtool runs over them are CPU-bound, not waiting:
# on two cores shared by four workers and other load they take 2-4x their idle time
# (a module's fixture and its first test together), past the suite's 300 s hang guard
# (pyproject's addopts). Their modules carry this longer guard instead:
# `pytestmark = CPU_BOUND`.
CPU_BOUND = pytest.mark.timeout(900)


def pytest_configure(config):
    # A test worker is a batch process, as `gpulse report` is: the corpora, logs and
    # engine states it builds live for a module and make few reference cycles, and at
    # the default thresholds the collector walked them thousands of times (4.2 of the
    # 41.6 s of CPU of the real-data detection, spelling-corpus and job-reader modules in
    # one process, measured with gc.callbacks; 0.4 s with these). The report's
    # thresholds, and what imports and collection made frozen out of the collector's view.
    from gpulse.cli import BATCH_GC_THRESHOLDS
    gc.set_threshold(*BATCH_GC_THRESHOLDS)


def pytest_collection_finish(session):
    gc.freeze()


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
        top = _kind(item.path, tests)
        if top in KINDS:
            item.add_marker(top)
    # The workers take files in this order (make test: --dist loadfile
    # --no-loadscope-reorder). xdist's own order hands out the files with the most tests
    # first, so the long files of a test or two (the end-to-end ones, minutes waiting
    # on the daemons they start, and the CPU-bound ones) came last, and the run ended
    # with one of them on one worker while the others stood idle. Here the long files
    # go first, a waiting one beside a working one, so that the CPU-bound files mostly
    # run beside files that wait (all of them at once stretched them toward their guard
    # on a loaded machine); the rest follow in xdist's order, many short files at the end.
    # A sort keeps each file's tests together and in their order.
    count: dict[Path, int] = {}
    bound: set[Path] = set()
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
        if any(m.args == CPU_BOUND.args for m in item.iter_markers("timeout")):
            bound.add(item.path)
    waits = [f for f in count if _kind(f, tests) == "e2e"]
    works = [f for f in count if f in bound and f not in waits]
    rest = sorted((f for f in count if f not in bound and f not in waits), key=lambda f: -count[f])
    first = [f for pair in itertools.zip_longest(waits, works) for f in pair if f is not None]
    place = {f: i for i, f in enumerate(first + rest)}
    items.sort(key=lambda item: place[item.path])


def _kind(path: Path, tests: Path) -> str | None:
    try:
        return Path(str(path)).resolve().relative_to(tests).parts[0]
    except ValueError:
        return None
