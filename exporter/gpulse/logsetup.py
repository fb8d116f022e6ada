"""Logging setup: text for people, JSON lines for log pipelines.

LEVELS and FORMATTERS are the one list of --log.level and --log.format choices."""
from __future__ import annotations

import json
import logging
import sys
import time

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


def _text() -> logging.Formatter:
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


FORMATTERS = {"text": _text, "json": JsonFormatter}


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
