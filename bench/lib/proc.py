"""Shared bench plumbing: start `gpulse serve` as its own process, read its CPU and RSS."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import requests

from testing.daemons import free_port  # noqa: F401  (benchmarks import it from here)

ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def start_gpulse(*args: str, env: dict | None = None, root: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """`gpulse serve` from the tree at `root` (default this checkout; see tree_at)."""
    port = free_port()
    e = dict(os.environ, PYTHONPATH=str(root / "exporter"))
    e.update(env or {})
    p = subprocess.Popen([sys.executable, "-m", "gpulse", "serve", "--web.listen-address",
                          f"127.0.0.1:{port}", "--log.level", "warning", *args],
                         env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(p, url + "/readyz", 30, f"gpulse {' '.join(args)} did not become ready")
    return p, url


@contextlib.contextmanager
def tree_at(rev: str) -> Iterator[Path]:
    """The repository at git revision `rev`, extracted to a temporary directory, so a
    bench can run an earlier gpulse beside this one in the same command."""
    with tempfile.TemporaryDirectory(prefix="gpulse-") as d:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
        yield Path(d)


def wait_ready(p: subprocess.Popen, url: str, timeout: float, failure: str) -> None:
    """Poll url until it answers 200; kill the process and exit with `failure` if it
    exits first or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise SystemExit(failure)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK   # utime + stime


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]
