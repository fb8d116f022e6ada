"""`prometheus/examples/stack.py`, the one-command local stack, run as a user runs it:
real gpulse, Prometheus, Alertmanager and its receiver, until the receiver prints the
first alert. What the test changes: every port a free one, a 1 s scrape, the rules'
`for:` scaled by 0.01 (prometheus/tools/shorten_for.py) and Alertmanager's group wait
of 1 s (`--group-wait`: the wait is Alertmanager's timer, not a verdict; the 30 s of
alertmanager.yml are counted in tests/integration/rules/test_example_stack.py); the
example routing stays."""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time

from conftest import ROOT, require_binary

STACK = ROOT / "prometheus" / "examples" / "stack.py"
SHORTEN = ROOT / "prometheus" / "tools" / "shorten_for.py"


def test_stack_prints_the_first_alert(tmp_path):
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    rules = tmp_path / "rules"
    r = subprocess.run([sys.executable, str(SHORTEN), "--factor", "0.01", "--out", str(rules),
                        *map(str, sorted((ROOT / "prometheus" / "rules").glob("*.yml")))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ports = [a for n in ("gpulse", "prometheus", "alertmanager", "receiver") for a in (f"--{n}-port", "0")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    proc = subprocess.Popen([sys.executable, str(STACK), *ports, "--scrape-interval", "1s", "--rules", str(rules),
                             "--group-wait", "1s"],
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
        assert "expect GpulseSyncStalls once the rules fire" in up, up
        assert "[warning, route /chat]" in line and "cluster=local" in line and "stall together" in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, "".join(seen)
