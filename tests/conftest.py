"""Shared test plumbing: real binaries, free ports, a running gpulse."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Some test modules import helpers from others by module name (test_helm's render,
# test_dcgm's _Exporter); every test directory is on the path so they find them
# wherever each file lives. Shared helpers proper live beside this file.
for _d in sorted({p.parent for p in Path(__file__).resolve().parent.glob("**/test_*.py")}):
    if str(_d) not in sys.path:
        sys.path.append(str(_d))
SHARED_DATA = (ROOT.parent / "shared" / "data").resolve()
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str) -> str:
    """Path of a binary the test needs. Missing: skip on a laptop, fail loudly in CI."""
    path = shutil.which(name)
    if path is None:
        msg = f"required binary {name!r} not found on PATH"
        if IN_CI:
            pytest.fail(msg + " (CI=true: .ci/run must install it)")
        pytest.skip(msg)
    return path


def require_data(rel: str) -> Path:
    """A file under ../shared/data. Missing: skip on a laptop, fail in CI."""
    p = SHARED_DATA / rel
    if not p.exists():
        if IN_CI:
            pytest.fail(f"shared data file missing: {p}")
        pytest.skip(f"shared data file missing: {p}")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
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


class Gpulse:
    """A `gpulse serve` subprocess on a free loopback port."""

    def __init__(self, *args: str, env: dict | None = None, ready: bool = True, timeout: float = 20.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(ROOT / "exporter") + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        self.cmd = [sys.executable, "-m", "gpulse", "serve",
                    "--web.listen-address", f"127.0.0.1:{self.port}", *args]
        self.proc = subprocess.Popen(self.cmd, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        if ready:
            try:
                wait_http(self.url + "/readyz", timeout=timeout)
            except AssertionError:
                self.stop()
                raise AssertionError(f"gpulse did not become ready: {self.output()}")

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
        self.stop()
        return self.proc.stdout.read() if self.proc.stdout else ""


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
