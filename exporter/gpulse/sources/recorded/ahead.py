"""A log, or a job's logs, read in a process of its own while the analysis runs.

    stream = ReadAhead(functools.partial(LogStream, "big.csv"))   # or a JobStream's
    for item in stream.items(): ...     # the stream's items, in its order
    Call(fn, *args).result()            # fn(*args) over there (a job's clock scan)

A report or export of a long log does two things at the speed of Python: reading the
log (its CSV, each row's values, a job's merge of its nodes' logs), about half of the
work, and the analysis. ReadAhead runs the reading in a process of its own (the
machine's second core: the same Python, sent the stream's maker pickled over a socket)
and hands the stream's items on in the same order. Each item comes with what the
stream had learnt when it yielded it (the GPUs found, how far it has read, its
problems), so whoever reads the stream sees at every item what reading it in process
shows, and the report made of it is the same to the bit
(tests/unit/sources/test_read_ahead.py). Two things are kept as they are read only in
part: of the problems, the first ERRORS_AS_READ (what a replay shows one by one as
they come); all of them, and the timestamp warnings, come once the stream has ended.

The reading process runs at most one message ahead: it makes the next CHUNK_ROWS rows
while the socket holds the last, and blocks in send until that is taken, so memory
stays that of the stream plus two messages, whatever the log's size. Closing the
stream, or the reading process ending, stops the other side. A stream that cannot be
opened raises its one-line LogFormatError from the constructor, as it does in process;
where no process can be had, NoProcess, and the caller reads in process.

Only worth it for a log that takes seconds (a process and its imports cost ~0.5 s of
the other core) and where a second core is there to run it: `worth()`.
"""
from __future__ import annotations

import gc
import os
import pickle
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator

from ...model import DeviceInfo
from ..base import SourceError
from .records import LogError, Problems, Record, Rows, RunFacts

# Logs this large or larger (all of a job's together) are read in a process of their own.
AHEAD_MIN_BYTES = 32 << 20
# Rows a message carries: the pipe's cost per message is paid once per this many rows,
# and two such messages (~8 MB of a 22-column log's rows) are what the reading adds.
CHUNK_ROWS = 16384
# ... or this many items (a log read row by row: a Record per row)
CHUNK_ITEMS = 4096
# Problems passed on as they are read: a replay logs the first 10 one per line as they
# come (replay.SHOW_ERRORS); all of them come at the end.
ERRORS_AS_READ = 16


# Where a container's CPU quota is read (cgroup v2, then v1), as the container sees it.
CPU_MAX = "/sys/fs/cgroup/cpu.max"
CFS_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
CFS_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"


def cpus() -> int:
    """CPUs this process may run on: its affinity, and a container's CPU quota (a pod's
    CPU limit) rounded down, at least one: two processes under a one-CPU limit take
    turns, and the second only costs."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = cpu_quota()
    return n if quota is None else max(1, min(n, int(quota)))


def cpu_quota() -> float | None:
    """CPUs' worth of time the container may use (None: no limit, or none to be read)."""
    try:
        with open(CPU_MAX) as f:
            limit, _, period = f.read().partition(" ")
        return None if limit.strip() == "max" else int(limit) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        with open(CFS_QUOTA) as f, open(CFS_PERIOD) as g:
            quota, period = int(f.read()), int(g.read())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def worth(size: int) -> bool:
    """Whether a log (or logs) of `size` bytes is read faster in a process of its own
    (and there is a Python to run it: not so in an embedding interpreter)."""
    return size >= AHEAD_MIN_BYTES and cpus() >= 2 and bool(sys.executable)


class NoProcess(SourceError):
    """The process of its own could not be started, or ended before it began to read
    (a limit on processes, a Python that cannot import gpulse): the caller reads in
    process instead."""


class _Aside:
    """A process of its own, told what to do by one message (see _serve), and the end of
    the socket its answers come from.

    Not multiprocessing's: its spawn runs the caller's main script again in the child,
    which a script without a __main__ guard cannot take."""

    def __init__(self, task: tuple[Any, ...]):
        mine, theirs = socket.socketpair()
        self._conn = Connection(mine.detach())
        with theirs:
            try:
                self._proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno())],
                                              pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL)
            except OSError as e:
                self._conn.close()
                raise NoProcess(f"cannot start a process to read in: {e}") from None
        try:
            self._conn.send(sys.path)
            self._conn.send((*task, gc.get_threshold()))
        except OSError:
            pass                 # it has gone already: its exit is read below

    def close(self) -> None:
        self._conn.close()
        proc = self._proc
        if proc.poll() is None:
            proc.terminate()
        proc.wait()

    def _recv(self) -> Any:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._proc.wait()
            raise SourceError(f"the process reading the log ended (exit code {code}) before the log did") from None


class Call(_Aside):
    """fn(*args) in a process of its own (a picklable function and arguments, and a
    picklable result); result() waits for it and returns it, or raises what it raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        super().__init__(("call", fn, args))

    def result(self) -> Any:
        """Raises NoProcess where the process ended without an answer."""
        try:
            kind, value = self._recv()
        except SourceError as e:
            raise NoProcess(str(e)) from None
        finally:
            self.close()
        if kind == "failed":
            raise value
        return value


class ReadAhead(_Aside):
    """A stream (LogStream, JobStream) read in a process of its own, with LogStream's
    interface (see module doc). `make` builds the stream there: a picklable callable."""

    def __init__(self, make: Callable[[], Any]):
        """Raises NoProcess where the process cannot be had, and what make() raised
        there (the log's one-line LogFormatError) where it could not be opened."""
        super().__init__(("stream", make))
        self._ended = False
        self.err = Problems("")     # its items and count as the reading process passes them on
        self.facts = RunFacts()
        self.devices: list[DeviceInfo] = []
        self.nodes: tuple[str, ...] = ()
        self.lines_read = self.chars_read = 0
        self.fraction = 0.0
        self.start: float | None = None
        self.end: float | None = None
        self.done = False
        self._errors: list[LogError] | None = None
        self._warnings: list[str] = []
        try:
            try:
                msg = self._recv()
            except SourceError as e:
                raise NoProcess(str(e)) from None
            if msg[0] == "failed":
                raise msg[1]
            _, (self.path, self.format, self.size), learnt = msg
            self._learn(learnt)
        except BaseException:
            self.close()
            raise

    # -- what has been learnt so far (LogStream's interface)

    @property
    def error_count(self) -> int:
        return self.err.count

    @property
    def errors(self) -> list[LogError]:
        """The stream's problems: all of them once it has ended (before: the first read)."""
        if self._errors is not None:
            return list(self._errors)
        return sorted(self.err.items, key=lambda e: e.line)

    def warnings(self) -> list[str]:
        """The stream's warnings, once it has ended."""
        return list(self._warnings)

    def consumed_through(self, line: int) -> None:
        """The reading process counts what it has handed on (`fraction`)."""

    def close(self) -> None:
        self._ended = True
        super().close()

    # -- reading

    def items(self) -> Iterator[Record | Rows]:
        """The stream's items(), in its order."""
        try:
            while not self._ended:
                msg = self._recv()
                if msg[0] == "items":
                    for item, learnt in msg[1]:
                        self._learn(learnt)
                        yield item
                    continue
                _, error, (learnt, self._errors, self._warnings) = msg
                self._learn(learnt)
                self._ended = True
                if error is not None:
                    raise error
        finally:
            self.close()

    def _learn(self, learnt: tuple[Any, ...]) -> None:
        (self.lines_read, self.chars_read, self.fraction, self.err.count, self.start, self.end, self.done,
         seen, errors) = learnt
        if seen is not None:
            self.facts, self.devices, self.nodes = seen
        if errors is not None:
            self.err.items = errors


# -- the reading process

# What the reading process runs: the reader's module path first (a test's, a checkout's),
# since unpickling what it is sent imports gpulse. Ctrl-C on a terminal reaches the whole
# process group: the reader stops this one.
_BOOT = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "from multiprocessing.connection import Connection; "
         "conn = Connection(int(sys.argv[1])); sys.path[:] = conn.recv(); "
         "from gpulse.sources.recorded.ahead import _serve; _serve(conn)")


def _serve(conn: Any) -> None:
    """What the process is told: a call (Call) or a stream to read (ReadAhead)."""
    try:
        try:
            task = conn.recv()
            gc.set_threshold(*task[-1])      # the caller's (cli.BATCH_GC_THRESHOLDS): this makes as many objects
            if task[0] == "call":
                conn.send(("result", task[1](*task[2])))
                return
            stream = task[1]()
        except Exception as e:
            conn.send(("failed", _portable(e)))
            return
        _send_items(conn, stream)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass                            # the caller has gone
    finally:
        conn.close()


def _send_items(conn: Any, stream: Any) -> None:
    """Send the stream's items, each with what it had learnt (see _learnt), CHUNK_ROWS
    rows a message, then the end: its error, if it failed, and its final problems and
    warnings."""
    seen: list[Any] = [None, 0]
    conn.send(("opened", (stream.path, stream.format, stream.size), _learnt(stream, seen)))
    error = None
    chunk: list[tuple[Any, tuple[Any, ...]]] = []
    rows = 0
    items = stream.items()
    while True:
        try:
            item = next(items)
        except StopIteration:
            break
        except Exception as e:       # the stream's own error (a cap hit), raised where it was met
            error = _portable(e)
            break
        if type(item) is Rows:
            # handed on whole: it counts as taken (what a replay says as it takes rows)
            stream.consumed_through(item.line[-1])
            rows += len(item)
        else:
            rows += 1
        chunk.append((item, _learnt(stream, seen)))
        if rows >= CHUNK_ROWS or len(chunk) >= CHUNK_ITEMS:
            conn.send(("items", chunk))
            chunk, rows = [], 0
    if chunk:
        conn.send(("items", chunk))
    final = (_learnt(stream, [None, -1]), stream.errors, stream.warnings())
    stream.close()
    conn.send(("end", error, final))


def _learnt(stream: Any, seen: list[Any]) -> tuple[Any, ...]:
    """What the stream has learnt, as the reader's ReadAhead keeps it: its counts every
    item; the facts, devices and nodes, and its first problems, only when they changed
    since `seen` (the last sent; updated here)."""
    facts = stream.facts
    found = facts.found
    key = (len(found), next(reversed(found), None), facts.timed, facts.has_sm_active, facts.power_averaged,
           len(facts.nodes_found))
    news = None
    if key != seen[0]:
        seen[0] = key
        news = (facts, stream.devices, tuple(stream.nodes))
    errors = None
    count = stream.err.count
    if count != seen[1]:
        # a job's problems are its logs' in turn: a new one may come before the first
        seen[1] = count
        errors = stream.err.items[:ERRORS_AS_READ]
    return (stream.lines_read, stream.chars_read, stream.fraction, count, stream.start, stream.end,
            stream.done, news, errors)


def _portable(e: BaseException) -> BaseException:
    """The exception as the reader can raise it: itself where it pickles (a
    LogFormatError's one line), else a RuntimeError with its traceback's text."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        text = "".join(traceback.format_exception(e)).rstrip()
        return RuntimeError(f"reading the log failed: {type(e).__name__}: {e}\n{text}")


__all__ = ["AHEAD_MIN_BYTES", "Call", "NoProcess", "ReadAhead", "cpus", "worth"]
