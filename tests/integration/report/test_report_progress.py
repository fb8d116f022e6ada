"""Progress of a long report: on a terminal (a real pty) one line rewritten in place,
with rows read, share done and time left; nothing with --quiet, nothing on a pipe.

The report reads a real trace; its clock is a counter that moves a second per look, so
the report "takes" as long as the test needs whatever the machine's speed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, require_data
from gpulse.report import inputs
from gpulse.report.progress import DELAY, Progress

TRACE = "traces/h100-8gpu/ckpt1000.csv"


class _Pty:
    """Both ends of a pseudo-terminal: the report writes to the slave, we read the master."""

    def __init__(self):
        self.master, slave = os.openpty()
        self.slave = os.fdopen(slave, "w")

    def read(self) -> str:
        self.slave.flush()
        out = b""
        os.set_blocking(self.master, False)
        try:
            while chunk := os.read(self.master, 1 << 16):
                out += chunk
        except BlockingIOError:
            pass
        return out.decode()

    def close(self):
        self.slave.close()
        os.close(self.master)


@pytest.fixture
def pty():
    p = _Pty()
    yield p
    p.close()


def _ticking():
    t = [0.0]

    def clock():
        t[0] += 1.0
        return t[0]
    return clock


def test_a_long_report_on_a_terminal_shows_rows_share_and_time_left(pty):
    progress = Progress(stream=pty.slave, clock=_ticking())
    assert progress.on                       # a pty is a terminal
    inputs.from_log(str(require_data(TRACE)), progress=progress)
    shown = pty.read()
    progress.done()
    lines = [ln for ln in shown.split("\r\x1b[K") if ln]
    assert len(lines) >= 3, shown
    assert all(ln.startswith("reading ckpt1000.csv: ") and " rows, " in ln for ln in lines), lines
    rows = [int(ln.split(": ")[1].split(" rows")[0].replace(",", "")) for ln in lines]
    shares = [int(ln.split(" rows, ")[1].split(" %")[0]) for ln in lines]
    assert rows == sorted(rows) and rows[-1] > 10_000
    assert shares == sorted(shares) and 0 < shares[-1] <= 100
    assert any(" left" in ln for ln in lines)
    assert pty.read() == "\r\x1b[K"           # done() clears the line


def test_nothing_before_the_delay_nothing_when_quiet(pty):
    t = [0.0]
    p = Progress(stream=pty.slave, clock=lambda: t[0])
    t[0] = DELAY - 0.1
    p("reading x", done=0.5, rows=10)
    assert pty.read() == ""
    t[0] = DELAY + 0.1
    p("reading x", done=0.5, rows=10)
    assert pty.read() == f"\r\x1b[Kreading x: 10 rows, 50 %, about {DELAY + 0.1:.0f} s left"
    q = Progress(quiet=True, stream=pty.slave, clock=lambda: 100.0)
    q("reading x", done=0.5, rows=10)
    q.done()
    assert pty.read() == ""


def _report(tmp_path, stderr, *flags) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "exporter"), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(require_data(TRACE)),
                           "--out", str(tmp_path / "out"), *flags], env=env, stdout=subprocess.PIPE,
                          stderr=stderr, timeout=600)


def test_a_pipe_gets_no_progress(tmp_path):
    p = _report(tmp_path, subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode()
    assert "\r" not in err and "reading" not in err and " rows" not in err
    assert err.startswith("wrote ")           # the one line that says where the report is


def test_quiet_on_a_terminal_writes_nothing_to_it(tmp_path, pty):
    p = _report(tmp_path, pty.slave, "--quiet")
    assert p.returncode == 0
    assert pty.read() == ""
