"""sources/recorded/ahead.py: a log read in a process of its own hands on what the
same stream read in process hands on, item by item, with what it had learnt at each;
it fails where and as that fails, and it stops when its reader goes."""
from __future__ import annotations

import functools
import signal

import pytest

from conftest import require_data
from gpulse.sources.base import SourceError
from gpulse.sources.recorded import LogFormatError, Rows
from gpulse.sources.recorded import ahead
from gpulse.sources.recorded.stream import MAX_LINE, LogStream

# a real 8 x H100 trace (100 ms polls, a row per GPU a few ms apart): its rows as the
# vectorised reader and the row-by-row one read them
TRACE = "traces/h100-8gpu/ckpt10.csv"


def _trace_with_trouble(tmp_path, tail: str = "") -> str:
    """The trace with problems among its rows (a value in another unit, a row short of
    a field, 30 rows without a number), `tail` after its rows."""
    lines = require_data(TRACE).read_text().splitlines()
    lines[300] = lines[300].replace(" W,", " Wx,", 1)
    lines[5000] = lines[5000].rsplit(",", 1)[0]
    for k in range(9000, 9030):
        lines[k] = lines[k].replace(" %,", " oops %,", 1)
    p = tmp_path / "trace.csv"
    p.write_text("\n".join(lines) + "\n" + tail)
    return str(p)


def _state(s) -> tuple:
    """What a reader of a stream may ask of it as it reads."""
    return (s.facts, s.devices, tuple(s.nodes), s.lines_read, s.chars_read, s.fraction, s.error_count,
            s.err.items[:ahead.ERRORS_AS_READ], s.start, s.end, s.done)


def _records(item) -> list:
    return list(item.records()) if type(item) is Rows else [item]


def _in_process(path: str):
    """The stream read here, as the reading process reads it: (each item's records, the
    state after it); then (the error it failed with or None, errors, warnings)."""
    s = LogStream(path)
    got, error = [], None
    try:
        for item in s.items():
            if type(item) is Rows:
                s.consumed_through(item.line[-1])
            got.append((_records(item), _state(s)))
    except LogFormatError as e:
        error = str(e)
    return got, (error, s.errors, s.warnings())


def _read_ahead(path: str):
    s = ahead.ReadAhead(functools.partial(LogStream, path))
    got, error = [], None
    try:
        for item in s.items():
            got.append((_records(item), _state(s)))
    except LogFormatError as e:
        error = str(e)
    return got, (error, s.errors, s.warnings())


def test_a_log_read_ahead_hands_on_what_it_reads_in_process(tmp_path):
    """Every item, with the GPUs, counts, problems and times learnt when it came, and
    at the end every problem and warning: those of the same log read in process."""
    pytest.importorskip("pyarrow")
    path = _trace_with_trouble(tmp_path)
    here, ended_here = _in_process(path)
    there, ended_there = _read_ahead(path)
    assert len(there) == len(here) > 10
    assert sum(len(recs) for recs, _ in here) > 2 * ahead.CHUNK_ROWS      # several messages' worth
    for k, (a, b) in enumerate(zip(there, here)):
        assert a == b, k
    assert ended_there == ended_here
    error, errors, _ = ended_here
    assert error is None and len(errors) >= 30


def test_a_log_that_fails_further_on_fails_alike_after_the_same_items(tmp_path):
    """A line no text log has, after the trace's rows: the same rows come first, then
    the same one-line error; the problems and warnings so far are the same."""
    pytest.importorskip("pyarrow")
    path = _trace_with_trouble(tmp_path, tail="x" * (MAX_LINE + 10))
    here, ended_here = _in_process(path)
    there, ended_there = _read_ahead(path)
    assert there == here and ended_there == ended_here
    assert "a line longer than" in ended_here[0]


@pytest.mark.parametrize("content", [None, "", "what,is,this\n1,2,3\n"])
def test_a_log_that_cannot_be_opened_fails_as_it_does_in_process(tmp_path, content):
    path = tmp_path / "log.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(LogFormatError) as here:
        LogStream(str(path))
    with pytest.raises(LogFormatError) as there:
        ahead.ReadAhead(functools.partial(LogStream, str(path)))
    assert str(there.value) == str(here.value) and "\n" not in str(here.value)


def test_a_reader_that_stops_early_stops_the_reading_process():
    path = str(require_data(TRACE))
    s = ahead.ReadAhead(functools.partial(LogStream, path))
    for n, _ in enumerate(s.items()):
        if n == 2:
            break                   # the generator is closed: so is the stream
    assert s._proc.poll() is not None
    s = ahead.ReadAhead(functools.partial(LogStream, path))
    s.close()
    assert s._proc.poll() is not None


def test_a_reading_process_gone_is_a_one_line_error():
    """The reading process killed under the reader (the OOM killer): the reader says
    so in one line, after the items it had already been sent."""
    pytest.importorskip("pyarrow")
    s = ahead.ReadAhead(functools.partial(LogStream, str(require_data(TRACE))))
    items = s.items()
    next(items)
    s._proc.send_signal(signal.SIGKILL)
    with pytest.raises(SourceError, match=r"^the process reading the log ended \(exit code -9\) before the log did$"):
        for _ in items:
            pass


def test_worth_it_only_for_a_long_log_with_a_second_core(monkeypatch):
    monkeypatch.setattr(ahead, "cpus", lambda: 2)
    assert ahead.worth(ahead.AHEAD_MIN_BYTES) and not ahead.worth(ahead.AHEAD_MIN_BYTES - 1)
    monkeypatch.setattr(ahead, "cpus", lambda: 1)
    assert not ahead.worth(10 * ahead.AHEAD_MIN_BYTES)


def test_rows_cross_as_the_same_rows():
    """Rows pickle their samples as columns (a named tuple's pickling costs a Python call
    a row each way): the rows made again are the same, None fields, and no rows, too."""
    import pickle
    from gpulse.model import Sample
    rows = Rows([1.0, 1.1], ["0", "1"], [2, 3], [Sample(1.0, 0.5, 300.0), Sample(1.1, None, None, 2.0, 0.25, 0.5)],
                [{"power_watts": 300.0}, {}], [{}, {"x": {("a",): 1.0}}], False, {"workload": "w"})
    back = pickle.loads(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))
    assert list(back.records()) == list(rows.records())
    assert all(type(s) is Sample for s in back.samples)
    none = pickle.loads(pickle.dumps(Rows([], [], [], [], []), protocol=pickle.HIGHEST_PROTOCOL))
    assert len(none) == 0 and none.samples == [] and none.counters is None


@pytest.mark.parametrize("python", ["/nonexistent/python3", "/bin/false"])
def test_without_a_process_to_read_in_the_log_is_read_here(tmp_path, monkeypatch, caplog, python):
    """No process to be had (a Python that is not there, one that ends at once: a
    limit on processes, an interpreter that cannot import gpulse): the report reads
    the log, and the job's scan its logs, in its own process, with a warning, to the
    same result."""
    import shutil
    import sys
    from gpulse.report import inputs
    from gpulse.sources.recorded import job
    trace = require_data(TRACE)
    logs = [shutil.copy(trace, tmp_path / f"n{k}.csv") for k in range(2)]
    here = inputs.from_logs([str(trace)])
    scanned = job.job_logs([str(p) for p in logs], [])
    monkeypatch.setattr(ahead, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(ahead, "cpus", lambda: 2)
    monkeypatch.setattr(sys, "executable", python)
    with caplog.at_level("WARNING", logger="gpulse.replay"):
        there = inputs.from_logs([str(trace)])
    assert [r.message for r in caplog.records if "reading the log in this process" in r.message]
    assert (bytes(there.times), there.notes) == (bytes(here.times), here.notes)
    assert {k: bytes(g.busy) for k, g in there.gpus.items()} == {k: bytes(g.busy) for k, g in here.gpus.items()}
    again = job.job_logs([str(p) for p in logs], [])
    assert (again.logs, again.edges, again.notes) == (scanned.logs, scanned.edges, scanned.notes)


@pytest.mark.parametrize("files, quota, n", [
    ({"v2": "max 100000\n"}, None, 2),
    ({"v2": "100000 100000\n"}, 1.0, 1),          # a pod limited to one CPU: read here
    ({"v2": "150000 100000\n"}, 1.5, 1),
    ({"v2": "400000 100000\n"}, 4.0, 2),          # no more than the CPUs it may run on
    ({"quota": "-1\n", "period": "100000\n"}, None, 2),
    ({"quota": "50000\n", "period": "100000\n"}, 0.5, 1),
    ({"v2": "garbage"}, None, 2),
    ({}, None, 2),
])
def test_a_containers_cpu_limit_counts_as_fewer_cpus(tmp_path, monkeypatch, files, quota, n):
    paths = {"v2": "CPU_MAX", "quota": "CFS_QUOTA", "period": "CFS_PERIOD"}
    for key, name in paths.items():
        p = tmp_path / key
        if key in files:
            p.write_text(files[key])
        monkeypatch.setattr(ahead, name, str(p))
    monkeypatch.setattr(ahead.os, "sched_getaffinity", lambda pid: {0, 1})
    assert ahead.cpu_quota() == quota and ahead.cpus() == n
    assert ahead.worth(ahead.AHEAD_MIN_BYTES) == (n >= 2)
