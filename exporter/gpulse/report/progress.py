"""Progress of a long report on the terminal: one line, rewritten in place.

    progress = Progress(quiet=ns.quiet)
    progress("fetched 3/8 ranges")                       # a step, as words
    progress("reading run.csv", done=0.42, rows=1_234_567) # a share of the input read
    progress.done()                                      # clears the line

A report of a few seconds says nothing: the line appears once DELAY seconds have
passed, is rewritten at most every EVERY seconds, and with a share done it says how
many rows were read and about how long is left (the elapsed time spread over the
share still to read: reading rows is the report's cost, so the rate holds). Nothing
is written with --quiet or when stderr is no terminal (a pipe, a file, a CI log),
where a rewritten line would only be noise.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from ..safetext import terminal
from .clock import elapsed as elapsed_words

DELAY = 2.0       # seconds before the first line: short reports stay silent
EVERY = 0.5       # seconds between rewrites


class Progress:
    def __init__(self, quiet: bool = False, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.on = not quiet and _is_tty(self.stream)
        self.t0 = clock()
        self.last = -EVERY
        self.spoke = False

    def __call__(self, msg: str, done: float | None = None, rows: int | None = None) -> None:
        if not self.on:
            return
        now = self.clock()
        elapsed = now - self.t0
        if elapsed < DELAY or now - self.last < EVERY:
            return
        self.last = now
        self.spoke = True
        self.stream.write("\r\033[K" + terminal(msg + _share(done, rows, elapsed)))
        self.stream.flush()

    def done(self) -> None:
        if self.spoke:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.spoke = False


def _share(done: float | None, rows: int | None, elapsed: float) -> str:
    """': 1,234,567 rows, 42 %, about 35 s left' (the parts that are known)."""
    parts = []
    if rows is not None:
        parts.append(f"{rows:,} rows")
    if done is not None and done > 0:
        parts.append(f"{100 * min(done, 1.0):.0f} %")
        if done < 1.0:
            parts.append(f"about {elapsed_words(elapsed * (1.0 - done) / done)} left")
    return ": " + ", ".join(parts) if parts else ""


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):    # no such method, or a closed stream
        return False
