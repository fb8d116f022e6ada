"""Logging setup: text for people, JSON lines for log pipelines.

LEVELS and FORMATTERS are the one list of --log.level and --log.format choices."""
from __future__ import annotations

import json
import logging
import sys
import time

from .safetext import terminal

LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class TerminalFormatter(logging.Formatter):
    """Text lines whose control characters (a node's or a file's name may carry ESC
    sequences) are shown as escapes, so a log read on a terminal cannot be rewritten
    by what it quotes; newlines and tabs of tracebacks stay."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal(super().format(record))


def _text() -> logging.Formatter:
    return TerminalFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


FORMATTERS = {"text": _text, "json": JsonFormatter}


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def setup_command_logging() -> None:
    """A one-shot command's logging (`gpulse report`): warnings and above, the message
    alone, as Python prints them without any set-up, but through TerminalFormatter.
    Left alone when something (a test runner) has set up logging already."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalFormatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
