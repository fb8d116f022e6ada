"""A `gpulse serve` process in virtual time (gpulse/clock.py), for tests of verdicts.

The exporter polls and analyses `seconds` of virtual time as fast as the CPU allows,
publishes one snapshot of all of it, and then answers /readyz with 503 and the words
SPENT; what it serves from then on is its verdict at that virtual time, whatever the
machine's load was on the way. With `clock_file`, the exporter writes its time there
and a fake libnvidia-ml given the same file (tests/fakenvml: FAKENVML_CLOCK) follows it.
"""
from __future__ import annotations

import time

import requests

SPENT = "the virtual clock is spent"


def env(seconds: float, clock_file: str | None = None) -> dict[str, str]:
    """The environment that runs `gpulse serve` on a virtual clock."""
    e = {"GPULSE_VIRTUAL_CLOCK": f"{seconds:g}"}
    if clock_file is not None:
        e["GPULSE_VIRTUAL_CLOCK_FILE"] = str(clock_file)
    return e


def wait_spent(url: str, timeout: float) -> None:
    """Wait until the exporter at `url` has run its virtual time out. `timeout` bounds
    the CPU it may take on a loaded machine, not a verdict's real time."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = requests.get(url + "/readyz", timeout=5)
            last = f"{r.status_code} {r.text.strip()}"
            if r.status_code == 503 and SPENT in r.text:
                return
        except requests.RequestException as e:   # a busy exporter may answer late
            last = str(e)
        time.sleep(0.2)
    raise AssertionError(f"{url}: the virtual clock was not spent within {timeout}s (last /readyz: {last})")
