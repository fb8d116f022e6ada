"""A real `gpulse serve --source sim` process over HTTP."""
import os
import re
import subprocess
import time

import requests

from conftest import ROOT, require_binary

DOC = (ROOT / "docs" / "metrics.md").read_text()


def parse_families(text):
    """{family name: type} from # TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def value(text, name, **labels):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_health_ready_and_promtool(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "4",
                    "--analysis-window", "3s", "--node-name", "n1")
    assert requests.get(g.url + "/healthz", timeout=2).status_code == 200
    time.sleep(3.5)
    text = g.metrics()
    assert value(text, "gpulse_group_imbalance_ratio", node="n1") >= 0.75
    assert value(text, "gpulse_group_load_balance_ratio", node="n1") <= 0.65
    assert value(text, "gpulse_gpu_up", gpu="3") == 1
    promtool = require_binary("promtool")
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "" and p.stderr.strip() == "", p.stdout + p.stderr


def test_openmetrics_negotiation(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2")
    r = requests.get(g.url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=3)
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n") and r.text.count("# EOF") == 1
    assert "gpulse_gpu_busy_seconds_total{" in r.text
    r = requests.get(g.url + "/metrics", timeout=3)
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# EOF" not in r.text
    assert requests.get(g.url + "/nope", timeout=3).status_code == 404
    assert requests.post(g.url + "/metrics", timeout=3).status_code == 405
    assert requests.head(g.url + "/metrics", timeout=3).status_code == 200
    assert "gpulse" in requests.get(g.url + "/", timeout=3).text


def test_port_taken_is_one_line(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "1")
    # the same command line again, on the port the first one holds
    p = subprocess.run([*g.cmd, "--web.listen-address", f"127.0.0.1:{g.port}"], capture_output=True, text=True,
                       timeout=20, env={**os.environ, "PYTHONPATH": str(ROOT / "exporter")})
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert lines == [f"gpulse: cannot listen on 127.0.0.1:{g.port}: address already in use"], p.stderr


def test_sigterm_exits_promptly(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2")
    t0 = time.monotonic()
    g.proc.terminate()
    rc = g.proc.wait(timeout=5)
    assert rc == 0
    assert time.monotonic() - t0 < 2.0


def test_docs_match_metrics(gpulse_proc):
    """docs/metrics.md lists every exposed family with its type, and every 'always' row is exposed."""
    documented = {}
    for m in re.finditer(r"^\| `(gpulse_\w+)` \| (\w+) \| ([^|]+) \|", DOC, re.M):
        documented[m.group(1)] = (m.group(2), m.group(3).strip())
    g = gpulse_proc("--source", "sim", "--sim.scenario", "sync-stall", "--analysis-window", "2s")
    time.sleep(2.5)
    fams = parse_families(g.metrics())
    exposed = {n: t for n, t in fams.items() if n.startswith("gpulse_")}
    for name, typ in exposed.items():
        doc_name = name + "_total" if typ == "counter" and name + "_total" in documented else name
        assert doc_name in documented, f"{name} is exposed but not in docs/metrics.md"
        assert documented[doc_name][0] == typ, f"{name}: doc says {documented[doc_name][0]}, /metrics says {typ}"
    exposed_names = set(exposed) | {n + "_total" for n, t in exposed.items() if t == "counter"}
    for name, (typ, when) in documented.items():
        if when == "always":
            assert name in exposed_names, f"{name} is documented as always present but not exposed"
