"""Time to fire: the same exporters, rules and Alertmanager routing evaluated by
Prometheus (prometheus/rules) and by vmalert on VictoriaMetrics (the vmalert
variant), side by side in one run, as tests/e2e/test_victoriametrics_e2e.py builds them.

    .venv/bin/python bench/vm_timing.py                       # VictoriaMetrics' default latency offset (30s)
    .venv/bin/python bench/vm_timing.py --latency-offset 1s
    .venv/bin/python bench/vm_timing.py --latency-offset 1s --flush   # as the end-to-end tests run it

Hold times are the shipped ones scaled by 0.01 (15 m -> 9 s), scrape and evaluation
every second, Alertmanager group_wait 1 s. Prints, per alert that reached a webhook,
the seconds from the stack's start until each webhook had it, and vmalert minus
Prometheus. Needs the Debian packages prometheus, prometheus-alertmanager and
victoria-metrics.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "exporter")]     # testing/ (the end-to-end stack), gpulse

import requests  # noqa: E402

from testing.vmstack import Stack, both_paged  # noqa: E402

# The same query on both, at the same instant: where MetricsQL gives another answer.
PROBES = (
    # a counter born at 1 during the run (the dcgm node's XID): Prometheus has no
    # sample before it to take a difference from, MetricsQL counts it from 0
    'sum(increase(gpulse_gpu_xid_errors_total[10m]))',
    # growth as the XID and ECC alerts measure it: the same in both
    'sum(last_over_time(gpulse_gpu_xid_errors_total[10m]) - min_over_time(gpulse_gpu_xid_errors_total[10m]))',
    # a steadily growing counter: Prometheus extrapolates to the window's edges,
    # MetricsQL takes the last sample before the window as the baseline
    'sum(increase(gpulse_group_sync_stalls_total{node="sim-stall"}[15m]))',
    'sum(rate(gpulse_gpu_busy_seconds_total{node="e2e-imbalance"}[1m]))',
    # the raw value, to compare the increases with
    'sum(gpulse_group_sync_stalls_total{node="sim-stall"})',
)


def instant(url: str, query: str, at: float) -> str:
    r = requests.get(url + "/api/v1/query", params={"query": query, "time": at}, timeout=30).json()
    res = r["data"]["result"]
    return res[0]["value"][1] if res else "(empty)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-offset", default="30s", help="victoria-metrics -search.latencyOffset (default: its own)")
    ap.add_argument("--flush", action="store_true",
                    help="flush victoria-metrics every second, as the end-to-end tests do (default: as deployed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vm-timing-") as tmp:
        stack = Stack(Path(tmp), latency_offset=args.latency_offset, flush=args.flush)
        try:
            vm, prom = both_paged(stack)
            # one more round so an alert one ruler sends late is still counted
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                vm, prom = stack.firing(stack.receiver), stack.firing(stack.prom_receiver)
                time.sleep(0.5)
            # an instant both have scraped past on either latency offset
            at = time.time() - 35
            probes = [(q, instant(stack.prom_url, q, at), instant(stack.url, q, at)) for q in PROBES]
        finally:
            stack.close()
    print(f"victoria-metrics -search.latencyOffset={args.latency_offset}{', flushed every second' if args.flush else ''}; "
          "seconds from start to the webhook")
    print(f"{'alert':28} {'node':16} {'Prometheus':>10} {'vmalert':>8} {'vm - prom':>9}")
    for key in sorted(vm.keys() | prom.keys(), key=lambda k: (dict(k)["alertname"], dict(k).get("node", ""))):
        labels = dict(key)
        p, v = prom.get(key), vm.get(key)
        diff = f"{v - p:+9.1f}" if p is not None and v is not None else f"{'only one':>9}"
        print(f"{labels['alertname']:28} {labels.get('node', ''):16} "
              f"{'-' if p is None else f'{p:.1f}':>10} {'-' if v is None else f'{v:.1f}':>8} {diff}")
    print("\nsame query, same instant (Prometheus | VictoriaMetrics)")
    for q, p, v in probes:
        print(f"  {q}\n      {p} | {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
