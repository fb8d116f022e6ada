"""Wires one running exporter: source → sampler → exposition → HTTP server.

Order matters for clear failures: the port is bound first (a taken port fails in
milliseconds, before the GPU library is touched), then the source is opened.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import Any

from .clock import ClockError, clock_from_env
from .collector import Exposition
from .sampler import Sampler
from .http.app import App
from .http.livepage import register as register_live_page
from .http.server import ListenError, make_server
from .sources import SourceError, make_source
from .http.webconfig import WebConfigError, load_web_config
from .safeyaml import FileTextError, read_text

log = logging.getLogger("gpulse")

# SIGTERM to exit must stay under a second: in-flight requests get DRAIN_S to
# finish while the sampler stops; the source gets until STOP_S to close.
DRAIN_S = 0.4
STOP_S = 0.7


class RuntimeStartError(Exception):
    """Fatal start-up problem; str() is the one line for the user."""


def make_attributor(cfg: Any) -> Any:
    """The kube/Slurm attributor when configured (its module is optional)."""
    if not (cfg.kube.enabled or cfg.slurm.job_map_dir):
        return None
    from .attribution import make_attributor as make
    return make(cfg)


class Runtime:
    def __init__(self, cfg: Any, config_file: str | None = None):
        self.cfg = cfg
        self.config_file = config_file
        self.server = None
        self.sampler: Sampler | None = None
        self.attributor = None
        self._stopped = threading.Event()
        self._reload_lock = threading.Lock()
        self._config_digest = _digest(config_file)

    def start(self) -> None:
        cfg = self.cfg
        try:
            web = load_web_config(cfg.web.config_file)   # a bad file or cert: fail before anything runs
        except WebConfigError as e:
            raise RuntimeStartError(str(e)) from None
        try:
            source = make_source(cfg)
        except SourceError as e:
            raise RuntimeStartError(str(e)) from None
        try:
            self.attributor = make_attributor(cfg)
        except ImportError as e:
            raise RuntimeStartError(f"attribution needs the [kube] extra: {e}") from None
        except ValueError as e:   # ConfigError: attribution settings that cannot work
            raise RuntimeStartError(str(e)) from None
        try:
            clock = clock_from_env(os.environ)   # the wall clock, or virtual time under test
        except ClockError as e:
            raise RuntimeStartError(str(e)) from None
        self.sampler = Sampler(cfg, source, self.attributor, clock)
        ah = self.attributor.health if self.attributor is not None else None
        self.exposition = Exposition(cfg.node_name, lambda: self.sampler.snapshot, self.sampler.health, ah)
        self.app = App(cfg, self.sampler, self.exposition)
        register_live_page(self.app)                    # the live heatmap page at /
        try:
            self.server = make_server(cfg, self.app, web)
        except ListenError as e:
            raise RuntimeStartError(str(e)) from None
        try:
            self.sampler.start()
        except SourceError as e:
            self.server.server_close()
            raise RuntimeStartError(str(e)) from None
        if self.attributor is not None:
            self.attributor.start()
        log.info("gpulse listening on %s (%s; source %s, node %s)", self.url(web.context is not None),
                 "TLS" if web.context is not None else "plain HTTP", cfg.source, cfg.node_name)
        if self.server.probe_address is not None:
            log.info("probes (/healthz, /readyz only) on plain HTTP port %d", self.server.probe_address[1])

    def url(self, tls: bool) -> str:
        """The address to open, as a URL a terminal makes clickable: all interfaces
        (0.0.0.0, ::) are shown as the loopback address, which is always among them."""
        host, port = self.server.server_address[:2]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if tls else 'http'}://{host}:{port}/"

    def serve_forever(self) -> None:
        assert self.server is not None
        try:
            self.server.serve_forever()
        finally:
            self._cleanup()

    def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, stop the sampler."""
        if self.server is not None and not self._stopped.is_set():
            self._stopped.set()
            self.server.shutdown()

    def _cleanup(self) -> None:
        t0 = time.monotonic()
        # the sampler and attributor stop on a thread of their own: a source stuck in
        # the driver must not hold the process past STOP_S
        stopper = threading.Thread(target=self._stop_workers, name="gpulse-stop", daemon=True)
        stopper.start()
        if self.server is not None:
            self.server.server_close()          # no new connections
            left = self.server.drain(DRAIN_S)
            if left:
                log.warning("shutdown: %d requests still running after %.1fs were cut", left, DRAIN_S)
        stopper.join(max(0.0, STOP_S - (time.monotonic() - t0)))
        if stopper.is_alive():
            log.warning("shutdown: the source did not stop within %.1fs; exiting anyway", STOP_S)

    def _stop_workers(self) -> None:
        if self.attributor is not None:
            self.attributor.stop()
        if self.sampler is not None:
            self.sampler.stop()

    def reload(self) -> None:
        """SIGHUP: re-read what can change without a restart: the web config (TLS
        certificates, users, headers). A bad file, or one that would open the door
        (no users left, client certificates no longer required), is logged and the
        running config kept; connections and requests in progress are not touched.
        The --config file is read at start only: an edit to it is named in a warning,
        not applied (sources, samplers and attribution would have to restart)."""
        self._config_file_changed()
        path = self.cfg.web.config_file
        if not path:
            log.info("SIGHUP: no --web.config.file to reload")
            return
        if self.server is None:
            return
        with self._reload_lock:
            try:
                web = load_web_config(path)
                self.server.set_web_config(web)
            except (WebConfigError, ValueError) as e:
                log.error("SIGHUP: %s; keeping the previous web config", e)
                return
            except Exception as e:  # noqa: BLE001 - whatever the file does, keep serving
                log.error("SIGHUP: web config %s: cannot reload (%s); keeping the previous web config",
                          path, type(e).__name__)
                return
        log.info("SIGHUP: web config %s reloaded (%s, %d users)", path,
                 "TLS" if web.context is not None else "plain HTTP", len(web.users))

    def _config_file_changed(self) -> None:
        if self.config_file and _digest(self.config_file) != self._config_digest:
            log.warning("SIGHUP: %s has changed since start and is not reloaded (only the web config "
                        "is); restart gpulse to apply it", self.config_file)


def _digest(path: str | None) -> str | None:
    """A fingerprint of the --config file as read at start (None: unreadable)."""
    if not path:
        return None
    try:
        return hashlib.sha256(read_text(path).encode()).hexdigest()
    except FileTextError:
        return None
