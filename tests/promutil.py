"""A real Prometheus (the Debian binary) scraping test targets every second with
the shipped exporter alert rules, for checks on alert conditions."""
from __future__ import annotations

import subprocess
from pathlib import Path

import requests
import yaml

from conftest import ROOT, free_port, require_binary, wait_http

EXPORTER_RULES = ROOT / "prometheus" / "rules" / "gpulse-exporter.rules.yml"


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], rules: Path = EXPORTER_RULES):
        prom = require_binary("prometheus")
        port = free_port()
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
               "rule_files": [str(rules)],
               "scrape_configs": [{"job_name": "gpulse", "static_configs": [{"targets": targets}]}]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.proc = subprocess.Popen(
            [prom, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        try:
            wait_http(self.url + "/-/ready", timeout=30)
        except AssertionError:
            self.stop()
            raise

    def alerts(self, name: str) -> list[dict]:
        """Label sets of ALERTS{alertname=name} now (pending or firing)."""
        r = requests.get(self.url + "/api/v1/query", params={"query": f'ALERTS{{alertname="{name}"}}'}, timeout=5)
        return [x["metric"] for x in r.json()["data"]["result"]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def add_scrape(series: dict[str, list], snap, n: int) -> None:
    """Scrape number n of a snapshot (its collector families, histograms left out) into
    promtool input series {series text: values}, None for scrapes a series missed."""
    from gpulse.collector import snapshot_families
    for fam in snapshot_families(snap):
        if fam.type == "histogram":
            continue
        for s in fam.samples:
            key = s.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items())) + "}"
            col = series.setdefault(key, [])
            col.extend([None] * (n - len(col)))
            col.append(s.value)
