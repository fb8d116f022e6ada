"""`gpulse export`: the OpenMetrics of a replayed log, backfilled by promtool and
equal to what a live `gpulse serve --source replay` of the same log serves.

The logs are cut from the real 8xH100 ckpt50 trace at poll boundaries (8 rows a
poll, rows of one poll milliseconds apart), around its periodic checkpoint
stalls, so the stall counters move too.
"""
from __future__ import annotations

import time

import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from conftest import Gpulse, require_binary
from realtrace import cut_trace, poll_time
from testing.daemons import gpulse_export
from testing.promutil import Prometheus, backfill

NODE = "h100-a"
# Values that depend on the wall clock of the process that serves them (the live
# exporter runs now, the export at the recorded time) or on its own CPU: compared
# by presence only. process_* and python_* describe the exporting process and are
# not exported at all.
CLOCK_SERIES = {"gpulse_gpu_last_sample_timestamp_seconds", "gpulse_exporter_last_sample_timestamp_seconds",
                "gpulse_exporter_snapshot_timestamp_seconds", "gpulse_exporter_seconds_since_last_sample",
                "gpulse_exporter_stale"}
PROCESS_PREFIXES = ("process_", "python_", "gpulse_exporter_sample_duration_seconds")


def series_of(families) -> dict[tuple, list[tuple[float | None, float]]]:
    """(sample name, sorted labels) -> [(timestamp, value)] in file order."""
    out: dict[tuple, list] = {}
    for fam in families:
        for s in fam.samples:
            if s.name.startswith(PROCESS_PREFIXES):
                continue
            out.setdefault((s.name, tuple(sorted(s.labels.items()))), []).append((s.timestamp, s.value))
    return out


def snapshots(exported: dict) -> list[dict[tuple, float]]:
    """The export as one {series: value} per scrape time."""
    times = sorted({float(t) for points in exported.values() for t, _ in points})
    by_time = {t: {} for t in times}
    for key, points in exported.items():
        for t, v in points:
            by_time[float(t)][key] = v
    return [by_time[t] for t in times]


def is_counter(key: tuple) -> bool:
    return key[0].endswith("_total")


# ------------------------------------------------------------------ promtool

def test_promtool_backfills_the_export_and_prometheus_returns_its_values(tmp_path):
    require_binary("promtool")
    require_binary("prometheus")          # before the export, not after it
    log = cut_trace(tmp_path / "ckpt50-part.csv", 225, 60)
    body = gpulse_export("--input", str(log), "--scrape-interval", "15s", "--node", NODE).stdout.decode()
    assert body.endswith("# EOF\n")
    exported = series_of(parse_om(body))
    points = exported[("gpulse_gpu_busy_seconds_total", (("gpu", "3"), ("node", NODE)))]
    stamps = [float(t) for t, _ in points]
    assert all(t % 15 == 0 for t in stamps) and stamps == sorted(stamps) and len(stamps) >= 4
    # the recorded time of the trace, not the time of the export
    # (the first scrape on the grid after the first analysis tick, 1 s in)
    assert 0 < stamps[0] - poll_time(log.read_text().splitlines()[1]) <= 15 + 1

    blocks = backfill(body, tmp_path / "data")
    prom = Prometheus(tmp_path, [], rules=[], storage=blocks)
    try:
        url = prom.url
        for (name, labels), pts in exported.items():
            if name not in ("gpulse_gpu_active_seconds_total", "gpulse_group_sync_stall_seconds_total",
                            "gpulse_gpu_utilization_ratio"):
                continue
            sel = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
            r = requests.get(url + "/api/v1/query_range", timeout=30, params=dict(
                query=sel, start=pts[0][0], end=pts[-1][0], step=15)).json()
            assert r["status"] == "success", r
            (got,) = r["data"]["result"]
            assert [(float(t), float(v)) for t, v in got["values"]] == \
                [(float(t), pytest.approx(v, rel=1e-12)) for t, v in pts], sel
    finally:
        prom.stop()


# ------------------------------------------------------------------ against a live replay

def _scrape(g: Gpulse) -> dict[tuple, float]:
    return {k: pts[-1][1] for k, pts in series_of(parse_text(g.metrics())).items()}


def test_export_equals_a_live_scrape_of_the_same_replay(tmp_path):
    """A live replay's scrape and the export agree series by series: the same
    series at every scrape, every counter between the export's values at the
    two analysis ticks around the live one (the live sampler's poll phase puts
    its ticks between the export's), and, once the replay has finished, every
    value equal. The live replay plays the 20 s cut at twice its pace (its engine
    goes by the log's clock, its ticks by the wall's: a tick spans 2 s of the log,
    which the final equality holds to as well)."""
    log = cut_trace(tmp_path / "ckpt50-part.csv", 250, 20)
    exported = snapshots(series_of(parse_om(
        gpulse_export("--input", str(log), "--scrape-interval", "100ms", "--node", NODE).stdout.decode())))
    # one entry per analysis tick: the 100 ms grid repeats each tick's snapshot
    ticks = [s for i, s in enumerate(exported)
             if i == 0 or any(s[k] != exported[i - 1].get(k) for k in s if is_counter(k))]
    key0 = ("gpulse_gpu_sampled_seconds_total", (("gpu", "0"), ("node", NODE)))

    g = Gpulse("--source", "replay", "--replay.file", str(log), "--replay.speed", "2", "--node-name", NODE)
    live: list[dict] = []
    try:
        deadline = time.monotonic() + 90
        unchanged_since = None
        while time.monotonic() < deadline:
            s = _scrape(g)
            if key0 in s:
                if live and s[key0] == live[-1][key0]:
                    unchanged_since = unchanged_since or time.monotonic()
                    if time.monotonic() - unchanged_since > 4:   # the replay has finished
                        break
                else:
                    unchanged_since = None
                live.append(s)
            time.sleep(0.3)
        else:
            pytest.fail("the live replay did not finish within 90 s")
    finally:
        g.stop()
    assert len(live) >= 20

    checked = 0
    # before the export's first tick the live exporter can only be between nothing and that tick
    ticks.insert(0, {k: 0.0 for k in ticks[0]})
    for s in live[:-1]:
        k = max(i for i, e in enumerate(ticks) if e[key0] <= s[key0] + 1e-9)
        lo, hi = ticks[k], ticks[min(k + 1, len(ticks) - 1)]
        assert set(s) == set(lo) or set(s) == set(hi) or (k == 0 and set(s) <= set(hi)), \
            f"series differ: live only {set(s) - set(lo)}, export only {set(lo) - set(s)}"
        for key, v in s.items():
            if is_counter(key):
                assert lo[key] - 1e-9 <= v <= hi[key] + 1e-9, f"{key}: live {v}, export {lo[key]}..{hi[key]}"
                checked += 1
    assert checked > 100

    final, last = live[-1], exported[-1]
    assert set(final) == set(last)
    for key, v in final.items():
        if key[0] not in CLOCK_SERIES:
            assert last[key] == pytest.approx(v, rel=1e-12, abs=1e-12), key
    stall = ("gpulse_group_sync_stall_seconds_total", (("node", NODE),))
    assert final[stall] > 1, "the cut should hold part of a checkpoint stall"


# ------------------------------------------------------------------ --workload

def test_workload_labels_every_per_gpu_and_group_series(tmp_path):
    """One job's per-node exports compare across nodes in the rules only when their
    series share a `workload` label: --workload puts it on every per-GPU series (as
    attribution would; identity stays on gpulse_gpu_info alone) and on every group
    series, and leaves the rest of the export as it was."""
    log = cut_trace(tmp_path / "ckpt50-part.csv", 225, 45)
    plain = series_of(parse_om(gpulse_export("--input", str(log), "--node", NODE).stdout.decode()))
    body = gpulse_export("--input", str(log), "--node", NODE, "--workload", "llm-7b").stdout.decode()
    labelled = series_of(parse_om(body))
    per_gpu = [k for k in labelled if dict(k[1]).get("gpu") and k[0] != "gpulse_gpu_info"]
    group = [k for k in labelled if k[0].startswith("gpulse_group_")]
    assert len({dict(k[1])["gpu"] for k in per_gpu}) == 8 and group
    assert all(dict(k[1]).get("workload") == "llm-7b" for k in per_gpu + group)
    assert not any("workload" in dict(k[1]) for k in plain)
    # the same series and values, with the label added
    unlabel = {(n, tuple(x for x in labels if x[0] != "workload")): pts for (n, labels), pts in labelled.items()}
    assert set(unlabel) == set(plain)
    counters = [k for k in plain if k[0] == "gpulse_gpu_active_seconds_total"]
    assert all(unlabel[k] == plain[k] for k in counters)

    p = gpulse_export("--input", str(log), "--workload", "a\nb", check=False)
    assert p.returncode == 2 and p.stdout == b""
    (line,) = p.stderr.decode().splitlines()
    assert "--workload" in line


# ------------------------------------------------------------------ bad input

def test_bad_input_is_one_line_and_exit_code(tmp_path):
    p = gpulse_export("--input", str(tmp_path / "missing.csv"), check=False)
    assert p.returncode == 1 and p.stdout == b""
    (line,) = p.stderr.decode().splitlines()
    assert "missing.csv" in line and "Traceback" not in line

    (tmp_path / "junk.csv").write_text("this is not a GPU log\n")
    p = gpulse_export("--input", str(tmp_path / "junk.csv"), check=False)
    assert p.returncode == 1 and len(p.stderr.decode().splitlines()) == 1 and p.stdout == b""

    log = cut_trace(tmp_path / "ok.csv", 228, 3)
    p = gpulse_export("--input", str(log), "--scrape-interval", "soon", check=False)
    assert p.returncode == 2
    (line,) = p.stderr.decode().splitlines()
    assert "--scrape-interval" in line
