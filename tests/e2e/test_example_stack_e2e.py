"""`prometheus/examples/stack.py`, the one-command local stack, run as a user runs it
on a recording: real gpulse, Prometheus, Alertmanager and its receiver, until the
receiver prints the sync-stall page of a real 8xH100 run (../shared/data ckpt50: rank 0
checkpoints while its peers wait, ~15 s at a time, recurring).

The exporter replays the log at 30 times its recorded pace (`--replay-speed`): its
verdicts go by the log's clock, so a stall is final the same 20 s of the run after it
ends as live, in under a second of the test's time; no verdict here waits on the wall
clock (the simulated scenarios' first alerts are timed in virtual time by
tests/integration/rules/test_example_stack.py). What else the test changes: every
port a free one, a 1 s scrape, the rules' `for:` scaled by 0.01
(prometheus/tools/shorten_for.py) and Alertmanager's group wait of 1 s
(`--group-wait`: Alertmanager's timer, not a verdict; the 30 s of alertmanager.yml are
counted by that test too); the example routing stays."""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time

from conftest import ROOT, require_binary, require_data

STACK = ROOT / "prometheus" / "examples" / "stack.py"
SHORTEN = ROOT / "prometheus" / "tools" / "shorten_for.py"


def test_stack_pages_the_stalls_of_a_recorded_run(tmp_path):
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    log = require_data("traces/h100-8gpu/ckpt50.csv")
    rules = tmp_path / "rules"
    r = subprocess.run([sys.executable, str(SHORTEN), "--factor", "0.01", "--out", str(rules),
                        *map(str, sorted((ROOT / "prometheus" / "rules").glob("*.yml")))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ports = [a for n in ("gpulse", "prometheus", "alertmanager", "receiver") for a in (f"--{n}-port", "0")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    proc = subprocess.Popen([sys.executable, str(STACK), *ports, "--scrape-interval", "1s", "--rules", str(rules),
                             "--group-wait", "1s", "--replay", str(log), "--replay-speed", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
                continue
            seen.append(line)
            if " ALERT firing GpulseSyncStalls " in line:
                break
        else:
            raise AssertionError("no alert printed in 180 s:\n" + "".join(seen)[-3000:])
        up = next(x for x in seen if " up: " in x)
        assert "expect the alerts of the recorded run once the rules fire" in up, up
        assert "[warning, route /chat]" in line and "cluster=local" in line and "stall together" in line, line
        # the share paged is the run's: rank 0's checkpoints hold its peers most of the time
        share = float(line.rsplit("stall together ", 1)[1].split("%")[0])
        assert 30 <= share <= 90, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, "".join(seen)
