"""Wires one running exporter: source → sampler → exposition → HTTP server.

Order matters for clear failures: the port is bound first (a taken port fails in
milliseconds, before the GPU library is touched), then the source is opened.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from .collector import Exposition
from .sampler import Sampler
from .server import App, ListenError, make_server
from .sources import SourceError, make_source

log = logging.getLogger("gpulse")


class RuntimeStartError(Exception):
    """Fatal start-up problem; str() is the one line for the user."""


def make_attributor(cfg: Any) -> Any:
    """The kube/Slurm attributor when configured (its module is optional)."""
    if not (cfg.kube.enabled or cfg.slurm.job_map_dir):
        return None
    from .kube import make_attributor as make
    return make(cfg)


class Runtime:
    def __init__(self, cfg: Any, config_file: str | None = None):
        self.cfg = cfg
        self.config_file = config_file
        self.server = None
        self.sampler: Sampler | None = None
        self.attributor = None
        self._stopped = threading.Event()

    def start(self) -> None:
        cfg = self.cfg
        try:
            source = make_source(cfg)
        except SourceError as e:
            raise RuntimeStartError(str(e)) from None
        try:
            self.attributor = make_attributor(cfg)
        except ImportError as e:
            raise RuntimeStartError(f"attribution needs the [kube] extra: {e}") from None
        self.sampler = Sampler(cfg, source, self.attributor)
        ah = self.attributor.health if self.attributor is not None else None
        self.exposition = Exposition(cfg.node_name, lambda: self.sampler.snapshot, self.sampler.health, ah)
        self.app = App(cfg, self.sampler, self.exposition)
        try:
            self.server = make_server(cfg, self.app)
        except ListenError as e:
            raise RuntimeStartError(str(e)) from None
        try:
            self.sampler.start()
        except SourceError as e:
            self.server.server_close()
            raise RuntimeStartError(str(e)) from None
        if self.attributor is not None:
            self.attributor.start()
        host, port = self.server.server_address[:2]
        log.info("gpulse listening on %s:%s (source %s, node %s)", host, port, cfg.source, cfg.node_name)

    def serve_forever(self) -> None:
        assert self.server is not None
        try:
            self.server.serve_forever(poll_interval=0.2)
        finally:
            self._cleanup()

    def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, stop the sampler."""
        if self.server is not None and not self._stopped.is_set():
            self._stopped.set()
            self.server.shutdown()

    def _cleanup(self) -> None:
        if self.attributor is not None:
            self.attributor.stop()
        if self.sampler is not None:
            self.sampler.stop()
        if self.server is not None:
            self.server.server_close()

    def reload(self) -> None:
        """SIGHUP: re-read what can change without a restart (web config)."""
        log.info("SIGHUP: nothing to reload")
