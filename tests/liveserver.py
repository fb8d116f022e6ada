"""A gpulse Runtime (sampler + exposition + HTTP server) in the test process, for
tests that need to reach inside: inject a faulty source, add a route that holds a
request open, or count what was logged. Everything else about it is the real
server a `gpulse serve` process runs."""
from __future__ import annotations

import logging
import threading
from typing import Any
from unittest import mock

from testing.config import test_config
from gpulse.runtime import Runtime


class Records(logging.Handler):
    """Collects gpulse log records at or above `level`."""

    def __init__(self, level: int = logging.ERROR):
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


class Live:
    def __init__(self, source: Any = None, log_level: int = logging.ERROR, config_file: str | None = None,
                 **overrides: Any):
        """source: None for the configured one, or a callable cfg -> Source;
        config_file: the --config file the runtime was started from (what SIGHUP looks at)."""
        settings = {"source": "sim", "sim__gpus": 2, "web__listen_address": "127.0.0.1:0", **overrides}
        self.cfg = test_config(**settings)
        self.log = Records(log_level)
        self._logger = logging.getLogger("gpulse")
        self._saved_level = self._logger.level
        self._logger.setLevel(min(log_level, logging.INFO))
        self._logger.addHandler(self.log)
        self.rt = Runtime(self.cfg, config_file=config_file)
        if source is not None:
            self.source = source(self.cfg)
            with mock.patch("gpulse.runtime.make_source", lambda cfg: self.source):
                self.rt.start()
        else:
            self.rt.start()
        self.thread = threading.Thread(target=self.rt.serve_forever, name="test-serve", daemon=True)
        self.thread.start()
        self.port = self.rt.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def server(self):
        return self.rt.server

    def close(self) -> None:
        self.rt.shutdown()
        self.thread.join(5)
        self._logger.removeHandler(self.log)
        self._logger.setLevel(self._saved_level)

    def __enter__(self) -> "Live":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
