#!/usr/bin/env python3
"""A local alerting stack in one command: gpulse on simulated GPUs, Prometheus with
the shipped rules, Alertmanager with the example routing, and a webhook receiver
that prints every notification.

    .venv/bin/python prometheus/examples/stack.py              # sync stalls, first alert in ~2 min
    .venv/bin/python prometheus/examples/stack.py --scenario straggler    # ~7 min
    .venv/bin/python prometheus/examples/stack.py --replay run.csv --replay-speed 10

`--replay` serves a recorded log (an nvidia-smi CSV, dmon or dcgm-exporter text, as
`gpulse serve --source replay` reads it) instead of simulated GPUs, so a past run's
pages come through the shipped rules and routing; `--replay-speed` plays it faster
than it was recorded (the exporter judges by the log's own clock, so its verdicts
keep the run's timing; the rules' windows and `for:` stay in wall time and so cover
that many times more of the log). At the log's end gpulse serves its last values,
marked stale, and GpulseMetricsStale follows.

It runs prometheus.yml and alertmanager.yml of this folder as they are: with the
default ports (gpulse 9479, Prometheus 9090, Alertmanager 9093, receiver 5001) they
already point at one another; other ports (`--*-port`, 0 = any free port) are
written into copies in a temporary folder. Needs `prometheus` and
`prometheus-alertmanager` (Debian's names) or `alertmanager` on PATH. Ctrl-C stops
everything.

How long until the first alert, with the shipped rules at a 15 s scrape (measured
in virtual time by tests/integration/rules/test_example_stack.py, plus Alertmanager's 30 s
group wait): sync-stall about 2 minutes (GpulseSyncStalls), straggler about 7
(GpulseStragglerGPU: 270 s of held workload, then for: 1m), imbalance about 16
(GpulseWorkloadImbalance: for: 15m).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "rules"
DEFAULT_PORTS = {"gpulse": 9479, "prometheus": 9090, "alertmanager": 9093, "receiver": 5001}
# minutes to the first notification, per scenario (see the module doc)
FIRST_ALERT = {"sync-stall": ("GpulseSyncStalls", 2), "straggler": ("GpulseStragglerGPU", 7),
               "imbalance": ("GpulseWorkloadImbalance", 16)}


def say(line: str) -> None:
    print(time.strftime("%H:%M:%S ") + line, flush=True)


class Receiver:
    """The webhook every route of alertmanager.yml posts to: one line per alert."""

    def __init__(self, port: int):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                for a in body.get("alerts", []):
                    labels = a.get("labels", {})
                    where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())
                                      if k not in ("alertname", "severity"))
                    say(f"ALERT {a.get('status', '?')} {labels.get('alertname', '?')} "
                        f"[{labels.get('severity', '?')}, route {self.path}] {where}: "
                        f"{a.get('annotations', {}).get('summary', '')}")
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(*names: str) -> str:
    for n in names:
        path = shutil.which(n)
        if path:
            return path
    sys.exit(f"stack.py: {' or '.join(names)} not found on PATH (Debian: apt install {names[0]})")


def configs(ports: dict[str, int], workdir: Path, scrape: str, rules: Path,
            group_wait: str | None = None) -> tuple[Path, Path]:
    """The example files as they are when every setting is its default; else copies
    with the ports, interval, rules and group wait written in."""
    prom_file, am_file = HERE / "prometheus.yml", HERE / "alertmanager.yml"
    if ports == DEFAULT_PORTS and scrape == "15s" and rules == RULES and group_wait is None:
        return prom_file, am_file
    prom = yaml.safe_load(prom_file.read_text(encoding="utf-8"))
    prom["global"].update(scrape_interval=scrape, evaluation_interval=scrape)
    prom["rule_files"] = [str(rules / "*.yml")]
    prom["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"localhost:{ports['alertmanager']}"]}]
    for job in prom["scrape_configs"]:
        if job["job_name"] == "gpulse":
            job["static_configs"] = [{"targets": [f"localhost:{ports['gpulse']}"]}]
    am = yaml.safe_load(am_file.read_text(encoding="utf-8"))
    for rc in am["receivers"]:
        for hook in rc.get("webhook_configs", []):
            path = hook["url"].split("://", 1)[1].partition("/")[2]
            hook["url"] = f"http://127.0.0.1:{ports['receiver']}/{path}"
    if group_wait is not None:
        # every route's wait before its first notification, the critical route's too
        for route in (am["route"], *am["route"].get("routes", [])):
            route["group_wait"] = group_wait
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(prom, sort_keys=False))
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(am, sort_keys=False))
    return workdir / "prometheus.yml", workdir / "alertmanager.yml"


def wait_ready(url: str, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"stack.py: {what} exited with status {proc.returncode} (its log is above)")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    sys.exit(f"stack.py: {what} not ready at {url} after {timeout:g}s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gpulse (simulated GPUs or a recorded log) + Prometheus + "
                                             "Alertmanager + a receiver that prints alerts, on this machine.")
    ap.add_argument("--scenario", default="sync-stall",
                    help="gpulse --sim.scenario (default: sync-stall; unused with --replay)")
    for name, port in DEFAULT_PORTS.items():
        ap.add_argument(f"--{name}-port", type=int, default=port, help=f"default {port}; 0: any free port")
    ap.add_argument("--scrape-interval", default="15s", help="Prometheus scrape and rule interval (default: 15s)")
    ap.add_argument("--rules", type=Path, default=RULES, help=f"folder of rule files (default: {RULES})")
    ap.add_argument("--group-wait", metavar="DURATION",
                    help="Alertmanager's wait before a group's first notification, on every route "
                         "(default: alertmanager.yml's, 30s; 10s for critical alerts)")
    ap.add_argument("--replay", type=Path, metavar="FILE",
                    help="serve this recorded log instead of simulated GPUs (gpulse --source replay)")
    ap.add_argument("--replay-speed", type=float, default=1.0, metavar="FACTOR",
                    help="with --replay: log seconds played per second (default: 1, as recorded)")
    ap.add_argument("--gpulse", default=f"{sys.executable} -m gpulse",
                    help="the gpulse command (default: this Python's gpulse module)")
    args = ap.parse_args(argv)
    if args.replay is not None and not args.replay.is_file():
        ap.error(f"--replay: no such file: {args.replay}")
    if args.replay_speed <= 0:
        ap.error(f"--replay-speed must be above 0, not {args.replay_speed:g}")
    ports = {n: getattr(args, f"{n}_port") or free_port() for n in DEFAULT_PORTS}
    prometheus = binary("prometheus")
    alertmanager = binary("prometheus-alertmanager", "alertmanager")

    work = Path(tempfile.mkdtemp(prefix="gpulse-stack-"))
    procs: list[tuple[str, subprocess.Popen]] = []
    try:
        receiver = Receiver(ports["receiver"])
        prom_cfg, am_cfg = configs(ports, work, args.scrape_interval, args.rules.resolve(),
                                  args.group_wait)
        source = (["--source", "sim", "--sim.scenario", args.scenario] if args.replay is None else
                  ["--source", "replay", "--replay.file", str(args.replay.resolve()),
                   "--replay.speed", f"{args.replay_speed:g}"])
        procs.append(("gpulse", subprocess.Popen(
            args.gpulse.split() + ["serve", *source,
                                   "--web.listen-address", f"127.0.0.1:{ports['gpulse']}", "--log.level", "warning"])))
        procs.append(("alertmanager", subprocess.Popen(
            [alertmanager, f"--config.file={am_cfg}", f"--storage.path={work / 'alertmanager'}",
             f"--web.listen-address=127.0.0.1:{ports['alertmanager']}", "--cluster.listen-address=",
             "--log.level=warn"])))
        procs.append(("prometheus", subprocess.Popen(
            [prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={work / 'prometheus'}",
             f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--log.level=warn"])))
        for (name, proc), path in zip(procs, ("/readyz", "/-/ready", "/-/ready")):
            wait_ready(f"http://127.0.0.1:{ports[name]}{path}", proc, name)
        alert, minutes = (FIRST_ALERT.get(args.scenario, ("an alert", None)) if args.replay is None
                          else ("the alerts of the recorded run", None))
        shipped = args.scrape_interval == "15s" and args.rules.resolve() == RULES and args.group_wait is None
        when = f"in about {minutes} minutes" if minutes and shipped else "once the rules fire"
        say(f"up: gpulse http://127.0.0.1:{ports['gpulse']}/ (live page), Prometheus "
            f"http://127.0.0.1:{ports['prometheus']}/alerts, Alertmanager http://127.0.0.1:{ports['alertmanager']}/, "
            f"receiver on :{receiver.port}; expect {alert} {when}; Ctrl-C stops")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            for name, proc in procs:
                if proc.poll() is not None:
                    say(f"{name} exited with status {proc.returncode}; stopping")
                    return 1
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        for _, proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
