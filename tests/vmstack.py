"""A VictoriaMetrics stack from the Debian `victoria-metrics` package, for tests and
bench/vm_timing.py: vmagent scrapes gpulse targets into victoria-metrics, vmalert
evaluates rule files against it (writing recording rules and ALERTS back, reading
alert state from it) and notifies an Alertmanager. Everything on free loopback
ports with temporary data directories.

Settings a test changes from the defaults, and why:
- 1 s scrape and evaluation interval, as the Prometheus end-to-end test uses;
- `-search.latencyOffset=1s` (default 30 s): VictoriaMetrics hides the newest 30 s
  of samples from queries; with 6-9 s hold times nothing would fire for half a minute.
  bench/vm_timing.py measures the default too.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import requests
import yaml

from conftest import free_port, require_binary
from test_alerting_e2e import Daemon
from test_dashboards_prometheus import Stack as PrometheusStack


class VictoriaMetrics:
    """victoria-metrics + vmagent + vmalert. `url` serves the Prometheus query API."""

    def __init__(self, tmp: Path, targets: list[str], rules_dir: Path, alertmanager_url: str,
                 external_labels: dict[str, str] | None = None, latency_offset: str = "1s",
                 interval: str = "1s"):
        binaries = [require_binary(b) for b in ("victoria-metrics", "vmagent", "vmalert")]
        vm_bin, vmagent_bin, vmalert_bin = binaries
        self.daemons: list[Daemon] = []
        scrape = {"global": {"scrape_interval": interval, "scrape_timeout": "900ms"},
                  "scrape_configs": [{"job_name": "gpulse", "static_configs": [{"targets": targets}]}]}
        (tmp / "scrape.yml").write_text(yaml.safe_dump(scrape))
        labels = [f"-external.label={k}={v}" for k, v in (external_labels or {}).items()]
        try:
            vm_port = self._start(lambda port: [
                vm_bin, f"-storageDataPath={tmp / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{port}",
                "-retentionPeriod=1d", f"-search.latencyOffset={latency_offset}", "-loggerLevel=WARN",
            ], tmp / "victoria-metrics.log")
            self.url = f"http://127.0.0.1:{vm_port}"
            self._start(lambda port: [
                vmagent_bin, f"-promscrape.config={tmp / 'scrape.yml'}", f"-httpListenAddr=127.0.0.1:{port}",
                f"-remoteWrite.url={self.url}/api/v1/write", f"-remoteWrite.tmpDataPath={tmp / 'vmagent-data'}",
                "-loggerLevel=WARN",
            ], tmp / "vmagent.log")
            alert_port = self._start(lambda port: [
                vmalert_bin, f"-rule={rules_dir}/*.yml", f"-datasource.url={self.url}",
                f"-remoteWrite.url={self.url}", f"-remoteRead.url={self.url}",
                f"-notifier.url={alertmanager_url}", f"-evaluationInterval={interval}",
                f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=WARN", *labels,
            ], tmp / "vmalert.log")
            self.vmalert_url = f"http://127.0.0.1:{alert_port}"
        except BaseException:
            self.stop()
            raise

    def _start(self, argv: Callable[[int], list[str]], log: Path, attempts: int = 5) -> int:
        """Start a daemon on a free port and wait for /health; its port. A port found
        free can be taken before the daemon binds it (another test's listener, or an
        outgoing connection of the daemons already running, which draw from the same
        ephemeral range), so a daemon that exits on "address already in use" is
        started again on another port."""
        for _ in range(attempts):
            port = free_port()
            daemon = Daemon(argv(port), log)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if daemon.proc.poll() is not None:
                    break
                try:
                    if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        self.daemons.append(daemon)
                        return port
                except requests.RequestException:
                    pass
                time.sleep(0.1)
            daemon.stop()
            if "address already in use" not in daemon.tail():
                break
        raise AssertionError(f"{daemon.proc.args[0]} did not start:\n{daemon.tail()}")

    # a Prometheus HTTP API call (POST, as Grafana sends them); the result list
    api = PrometheusStack.api

    def alerts(self) -> list[dict]:
        """vmalert's active alerts (pending and firing), Prometheus' /api/v1/alerts shape."""
        r = requests.get(self.vmalert_url + "/api/v1/alerts", timeout=5)
        r.raise_for_status()
        return r.json()["data"]["alerts"]

    def logs(self) -> str:
        return "\n".join(f"--- {d.log.name}\n{d.tail()}" for d in self.daemons)

    def stop(self) -> None:
        for d in reversed(self.daemons):
            d.stop()
