"""Outside programs for tests and benchmarks: the binary a check needs and the recorded
data (missing: a skip on a laptop, a failure in CI), a command under resource limits,
a free loopback port, waiting for an HTTP endpoint, a daemon with its log, and a
`gpulse serve` process."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from testing import ROOT

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str) -> str:
    """Path of a binary the test needs. Missing: skip on a laptop, fail loudly in CI."""
    import pytest       # here, not at the top: benchmarks import this module without the test extra
    path = shutil.which(name)
    if path is None:
        msg = f"required binary {name!r} not found on PATH"
        if IN_CI:
            pytest.fail(msg + " (CI=true: .ci/run must install it)")
        pytest.skip(msg)
    return path


def limited(argv: list[str], *, address_space: int | None = None,
            open_files: tuple[int, int] | None = None) -> list[str]:
    """argv run under resource limits: prlimit(1) (util-linux) sets them on itself and
    executes argv, so the process, its pid and its exit status are argv's. Not
    subprocess's preexec_fn: that forks and runs Python in the child before the exec,
    where the fork handlers of a library another test loaded in the same process run
    too, and gRPC's event engine aborted such children (SIGABRT, "epoll_wait error:
    Bad file descriptor") once they had closed its descriptors."""
    opts = []
    if address_space is not None:
        opts.append(f"--as={address_space}:{address_space}")
    if open_files is not None:
        opts.append(f"--nofile={open_files[0]}:{open_files[1]}")
    return [require_binary("prlimit"), *opts, "--", *argv]


# Every port free_port() hands out, held for the life of this process (see there).
_RESERVED: list[socket.socket] = []


def free_port() -> int:
    """A loopback port to hand to a daemon that must be told its port (Prometheus,
    Alertmanager, victoria-metrics, a scrape target named in a configuration).

    The port stays reserved by a socket of this process, bound with SO_REUSEADDR and
    never listening: the daemon (Go's servers, Python's http.server and tornado all
    set SO_REUSEADDR) can still bind and listen on it, and may restart on it, while
    the kernel gives it to no other bind to port 0 and no outgoing connection.
    Picking a port and closing it, as before, left it free between the pick and the
    daemon's bind, and with several suites on one machine another suite's daemon took
    it now and then and answered for this one. Nobody listens on a reserved port, so
    it also serves as a port where nothing answers."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return s.getsockname()[1]


def wait_http(url: str, timeout: float = 15.0, ok=(200,), **kw) -> None:
    import requests
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            r = requests.get(url, timeout=1, **kw)
            if r.status_code in ok:
                return
            last = r.status_code
        except requests.RequestException as e:  # not up yet
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready after {timeout}s: {last}")


class Daemon:
    def __init__(self, args: list[str], log: Path):
        self.log = log
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self.fh, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


SHARED_DATA = (ROOT.parent / "shared" / "data").resolve()


def require_data(rel: str) -> Path:
    """A file under ../shared/data. Missing: skip on a laptop, fail in CI."""
    import pytest
    p = SHARED_DATA / rel
    if not p.exists():
        if IN_CI:
            pytest.fail(f"shared data file missing: {p}")
        pytest.skip(f"shared data file missing: {p}")
    return p


LISTENING = re.compile(r"gpulse listening on (https?://\S+?)/?(?:\s|\"|$)")
PROBES = re.compile(r"probes \(/healthz, /readyz only\) on plain HTTP port (\d+)")


class Gpulse:
    """A `gpulse serve` subprocess on a loopback port the kernel picks, found from the
    process's own "gpulse listening on URL" line. A port picked beforehand and handed
    over could be taken by another suite's daemon in between, and that daemon would
    then answer for this one. The output is read on a thread as it comes (`lines`),
    so a chatty process never blocks on a full pipe."""

    def __init__(self, *args: str, env: dict | None = None, ready: bool = True, timeout: float = 20.0):
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(ROOT / "exporter") + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        self.cmd = [sys.executable, "-m", "gpulse", "serve",
                    "--web.listen-address", "127.0.0.1:0", *args]
        self.timeout = timeout
        self.lines: list[str] = []
        self._more = threading.Condition()  # a line came, or the output ended
        self._ended = False
        self.proc = subprocess.Popen(self.cmd, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if ready:
            try:
                wait_http(self.url + "/readyz", timeout=timeout)
            except AssertionError:
                self.stop()
                raise AssertionError(f"gpulse did not become ready: {self.output()}") from None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._more:
                self.lines.append(line.rstrip("\n"))
                self._more.notify_all()
        with self._more:
            self._ended = True
            self._more.notify_all()

    def said(self, pattern: re.Pattern, what: str) -> re.Match:
        """The first line of the output matching pattern, waiting for it while the
        process runs; one that ends or stays silent fails with its output."""
        def found() -> re.Match | None:
            return next((m for ln in self.lines if (m := pattern.search(ln))), None)
        with self._more:
            self._more.wait_for(lambda: found() is not None or self._ended, self.timeout)
            m = found()
        if m is None:
            raise AssertionError(f"gpulse never said {what}:\n{self.output()[-3000:]}")
        return m

    @property
    def url(self) -> str:
        """The base URL this process said it listens on (waits for the line)."""
        return self.said(LISTENING, "where it listens").group(1)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def probe_port(self) -> int:
        """The plain probe port it said it opened (--web.probe-listen-address)."""
        return int(self.said(PROBES, "where its probes listen").group(1))

    def metrics(self, **kw) -> str:
        import requests
        r = requests.get(self.url + "/metrics", timeout=5, **kw)
        r.raise_for_status()
        return r.text

    def wait_metrics(self, pred, what: str = "the condition", timeout: float = 30.0) -> str:
        """Scrape until pred(/metrics text) holds and return that text; every scrape
        must answer. On timeout, fail with the last body and the exporter's log."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.metrics()
            if pred(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{what} not seen within {timeout}s; last /metrics:\n{text[-3000:]}\n"
                             f"{self.output()[-2000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        """Everything the process wrote, once it has stopped."""
        self.stop()
        self._reader.join(10)
        return "".join(ln + "\n" for ln in self.lines)


def gpulse_export(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env_path = str(ROOT / "exporter")
    p = subprocess.run([sys.executable, "-m", "gpulse", "export", *args], capture_output=True, timeout=300,
                       env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p
