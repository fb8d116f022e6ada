"""`gpulse report --prometheus`: a real Prometheus (behind basic auth) holding the
scrapes of a `--source sim` run with half its GPUs idle."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, free_port
from reportutil import validate
from tlsutil import bcrypt_hash
from testing.promutil import Prometheus

SECONDS = 240        # of the run stored: a report's last 2 minutes stay inside it for minutes
AUTH = ("reporter", "pw-123")


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """The run scraped every second in virtual time (the exporter's own engine and
    encoder, its last scrape 5 s ago), backfilled with the real promtool into a real
    Prometheus behind basic auth: no test waits for scrapes on the wall clock."""
    from gpulse.collector import encode
    from gpulse.sources.sim import SimSource
    from testing.config import test_config
    from testing.promutil import backfill, scrape_run
    tmp = tmp_path_factory.mktemp("report-prometheus")
    cfg = test_config(source="sim", sim__scenario="imbalance", sim__gpus=4, node_name="n1", analysis_window=5)
    _, families, _, last, _ = scrape_run(cfg, SimSource(cfg), SECONDS, scrape=1.0, ago=5.0)
    backfill(encode(families, openmetrics=True), tmp / "tsdb")
    (tmp / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {AUTH[0]: bcrypt_hash(AUTH[1])}}))
    (tmp / "password").write_text(AUTH[1] + "\n")
    (tmp / "wrong").write_text("nope\n")
    p = Prometheus(tmp, [], rules=[], storage=tmp / "tsdb", web_config=tmp / "web.yml", auth=AUTH)
    try:
        yield {"url": p.url, "dir": tmp, "end": int(last)}
    finally:
        p.stop()


def report(prom, tmp_path, *args, auth=True):
    cred = ["--prometheus.username", AUTH[0], "--prometheus.password-file", str(prom["dir"] / "password")] if auth else []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    return subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", prom["url"], *cred, *args,
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)


def test_report_from_prometheus(prom, tmp_path):
    p = report(prom, tmp_path, "--last", "2m", "--quiet")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "findings.json").read_text())
    validate(doc)
    assert [(g["node"], g["gpu"]) for g in doc["gpus"]] == [("n1", "0"), ("n1", "1"), ("n1", "2"), ("n1", "3")]
    assert doc["run"]["tick_seconds"] == 1 and doc["run"]["activity"] == "sm_active"
    found = [f for f in doc["findings"] if f["kind"] == "imbalance"]
    assert len(found) == 1, (doc["run"], [(f["kind"], f["text"]) for f in doc["findings"]])
    f = found[0]
    assert f["text"].startswith("GPUs 0 and 1 at 9") and "GPUs 2 and 3 under 1" in f["text"]
    assert p.stdout.splitlines()[0].startswith("This run lost ") and "to imbalance" in p.stdout.splitlines()[0]
    assert p.stdout.splitlines()[1].startswith("[high] GPUs 0 and 1 at 9")
    busy = {g["gpu"]: g["busy_fraction"] for g in doc["gpus"]}
    assert busy["0"] > 0.9 and busy["3"] < 0.2
    page = (tmp_path / "report.html").read_text()
    assert page.count("class='row-label") == 4
    # the title names the server; no empty matcher set after it
    assert doc["source"] == prom["url"] and f"<title>gpulse report — {prom['url']}</title>" in page


def test_split_ranges_give_the_same_picture(prom, tmp_path):
    # one range for both, inside the stored run
    end = str(prom["end"] - 5)
    whole = report(prom, tmp_path / "a", "--last", "2m", "--end", end, "--step", "1s")
    split = report(prom, tmp_path / "b", "--last", "2m", "--end", end, "--step", "1s", "--max-points", "20")
    assert whole.returncode == split.returncode == 0, split.stderr
    a = json.loads((tmp_path / "a" / "findings.json").read_text())
    b = json.loads((tmp_path / "b" / "findings.json").read_text())
    assert [g["gpu"] for g in a["gpus"]] == [g["gpu"] for g in b["gpus"]]
    for ga, gb in zip(a["gpus"], b["gpus"]):
        assert ga["busy_fraction"] == pytest.approx(gb["busy_fraction"], abs=0.02)
    assert [f["kind"] for f in a["findings"]] == [f["kind"] for f in b["findings"]]


@pytest.mark.parametrize("args, auth, expected", [
    (("--last", "2m", "--node", "no-such-node"), True, "gpulse: no gpulse series match {{node=~\"no-such-node\"}}"),
    (("--last", "2m", "--selector", 'gpu=~"("'), True, "gpulse: Prometheus rejected the query (bad_data):"),
    (("--last", "2m"), False, "gpulse: Prometheus at {url} answered 401 Unauthorized"),
    (("--last", "2m", "--start", "2026-01-01T00:00:00Z"), True, "gpulse: give either --last or --start, not both"),
])
def test_prometheus_errors_are_one_line(prom, tmp_path, args, auth, expected):
    p = report(prom, tmp_path, *args, auth=auth)
    assert p.returncode in (1, 2)
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(expected.format(url=prom["url"])), line


def test_unreachable_prometheus(tmp_path):
    port = free_port()        # nobody listens there
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", f"http://127.0.0.1:{port}",
                        "--last", "1h", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [f"gpulse: cannot reach Prometheus at http://127.0.0.1:{port}: connection refused"]


# ------------------------------------------------------------------ without a server

def counters(levels, seconds, start=1000.0, reset_at=None):
    """What query_range returns for a few GPUs whose utilisation is constant: the
    integrating counters grow by level × 1 s per second (reset once if asked)."""
    data = {name: {} for name in ("busy", "active", "sampled", "memory", "memory_total")}
    for key, level in levels.items():
        pts = {n: {} for n in data}
        acc = [0.0, 0.0, 0.0]
        for k in range(seconds + 1):
            t = round(start + k, 3)
            if reset_at is not None and k == reset_at:
                acc = [0.0, 0.0, 0.0]
            pts["busy"][t], pts["active"][t], pts["sampled"][t] = acc
            pts["memory"][t] = 20 * 2**30
            pts["memory_total"][t] = 80 * 2**30
            acc = [acc[0] + level, acc[1] + level, acc[2] + 1.0]
        for n in data:
            data[n][key] = {"points": pts[n], "workload": "train"}
    return data


def test_range_source_over_two_nodes_names_the_idle_gpu():
    from testing.config import test_config
    from gpulse.report.collect import Recording, collect
    from gpulse.report.findings import analyse
    from gpulse.sources.prom import PromRangeSource
    from gpulse.drive import run_offline
    levels = {("a", "0"): 0.95, ("a", "1"): 0.95, ("b", "0"): 0.95, ("b", "1"): 0.05}
    src = PromRangeSource(counters(levels, 180, reset_at=90), 1000.0, 1180.0, 1.0)
    cfg = test_config(source="sim", sample_interval=1.0, analysis_interval=1.0, history=10)
    rec = Recording("test", 1.0, cfg.idle_threshold, "sm_active", cfg.analysis_window)
    collect((snap for _, snap in run_offline(src, cfg)), rec, src.node_and_gpu)
    doc = analyse(rec).as_json()
    assert [(g["node"], g["gpu"], g["workload"]) for g in doc["gpus"]] == \
        [("a", "0", "train"), ("a", "1", "train"), ("b", "0", "train"), ("b", "1", "train")]
    busy = [g["busy_fraction"] for g in doc["gpus"]]
    assert busy == pytest.approx([0.95, 0.95, 0.95, 0.05], abs=0.01)     # the counter reset is no spike
    # GPU 1 of b idles while its peers compute (no spin-wait): nobody waits for it,
    # so it costs them nothing and is no straggler; the spread is imbalance, named
    # across the nodes
    assert doc["stragglers"] == []
    [imb] = [f for f in doc["findings"] if f["kind"] == "imbalance"]
    assert "b GPU 1" in imb["text"]


def test_timezone_only_picks_how_prometheus_times_are_shown(prom, tmp_path):
    """Prometheus stores Unix time: --timezone moves nothing, it only writes the
    times in that zone and says which."""
    import re
    from datetime import datetime, timezone
    end = prom["end"]
    rng = ("--start", str(end - 90), "--end", str(end), "--quiet")
    utc = report(prom, tmp_path / "utc", *rng)
    tokyo = report(prom, tmp_path / "tokyo", *rng, "--timezone", "Asia/Tokyo")
    assert utc.returncode == tokyo.returncode == 0, tokyo.stderr
    a = json.loads((tmp_path / "utc" / "findings.json").read_text())
    b = json.loads((tmp_path / "tokyo" / "findings.json").read_text())
    assert a["run"]["start_time"] == b["run"]["start_time"] and a["notes"] == b["notes"] == []
    page_a = (tmp_path / "utc" / "report.html").read_text()
    page_b = (tmp_path / "tokyo" / "report.html").read_text()
    assert "times: UTC" in page_a and "times: Asia/Tokyo (UTC+09:00)" in page_b
    first = re.compile(r"data-axis='wall'><span[^>]*>([0-9:]+)<")
    t_a = datetime.strptime(first.search(page_a).group(1), "%H:%M:%S")
    t_b = datetime.strptime(first.search(page_b).group(1), "%H:%M:%S")
    assert ((t_b - t_a).total_seconds() - 9 * 3600) % 86400 == 0
    start = datetime.fromisoformat(a["run"]["start_time"].replace("Z", "+00:00"))
    assert start.astimezone(timezone.utc).strftime("%H:%M:%S") == first.search(page_a).group(1)


def test_a_slow_node_of_a_workload_is_named_once_as_the_node():
    """Four nodes of one workload, two GPUs each; both GPUs of node c compute 75 % of
    the time against 50 % elsewhere (a power-capped or warm node): the report names
    node c once, with what it costs the other nodes, and none of its GPUs apart."""
    from testing.config import test_config
    from gpulse.report.collect import Recording, collect
    from gpulse.report.findings import analyse
    from gpulse.sources.prom import PromRangeSource
    from gpulse.drive import run_offline
    levels = {(n, g): (0.75 if n == "c" else 0.5) for n in "abcd" for g in "01"}
    src = PromRangeSource(counters(levels, 300), 1000.0, 1300.0, 1.0)
    cfg = test_config(source="sim", sample_interval=1.0, analysis_interval=1.0, history=10)
    rec = Recording("test", 1.0, cfg.idle_threshold, "sm_active", cfg.analysis_window)
    collect((snap for _, snap in run_offline(src, cfg)), rec, src.node_and_gpu)
    doc = analyse(rec).as_json()
    [nd] = doc["straggler_nodes"]
    assert (nd["node"], nd["workload"], nd["direction"], nd["gpus"]) == ("c", "train", "busier", 2)
    assert nd["cost"] == pytest.approx(0.25, abs=0.02)
    assert not [s for s in doc["stragglers"] if s["node"] == "c"]
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler_node"]
    assert f["text"].startswith("Node c is a straggler of workload train") and "6 GPUs" in f["text"]


def test_a_node_whose_series_end_early_is_one_finding_for_the_node():
    """From Prometheus, a node whose exporter went down (its series end at 200 s of 300
    while the other nodes' go on) is one finding for the node, as from its log
    (test_report_multinode.py), not one 'fallen off the bus' per GPU; a single GPU
    gone on another node is still that GPU."""
    from testing.config import test_config
    from gpulse.report.collect import Recording, collect
    from gpulse.report.findings import analyse
    from gpulse.sources.prom import PromRangeSource
    from gpulse.drive import run_offline
    data = counters({(n, g): 0.9 for n in "abcd" for g in "01"}, 300)
    for name in data:
        for key in [("d", "0"), ("d", "1"), ("b", "1")]:
            pts = data[name][key]["points"]
            for t in [t for t in pts if t > 1200.0]:
                del pts[t]
    src = PromRangeSource(data, 1000.0, 1300.0, 1.0)
    cfg = test_config(source="sim", sample_interval=1.0, analysis_interval=1.0, history=10)
    rec = Recording("test", 1.0, cfg.idle_threshold, "sm_active", cfg.analysis_window)
    collect((snap for _, snap in run_offline(src, cfg)), rec, src.node_and_gpu)
    doc = analyse(rec).as_json()
    missing = sorted((f["severity"], f["text"]) for f in doc["findings"] if f["kind"] == "gpu_missing")
    assert len(missing) == 2, missing
    (_, node), (_, gpu) = missing       # sorted: "Node d ..." before "b GPU 1 ..."
    assert gpu.startswith("b GPU 1 stopped reporting at ") and "fallen off the bus" in gpu, missing
    assert node.startswith("Node d stopped reporting at ") and "all 2 of its GPUs at once" in node, missing
    assert "taken as recorded" not in node and all(sev == "high" for sev, _ in missing), missing
