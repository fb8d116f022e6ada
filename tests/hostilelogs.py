"""Small recorded logs written by the tests that need a name or a clock a real log
would not have: an nvidia-smi CSV (index column) and dcgm-exporter exposition text
with Hostname and pod labels. Two halves of GPUs: the first at ~99 % and full power,
the rest at ~10 %, so every report on them has an imbalance finding and a picture.
And the smallest nvidia-smi CSV a replay reads (`small_log`, `small_rows`), with the
replay source made from it (`replay_source`)."""
from __future__ import annotations

import json
import time
from typing import Callable

from gpulse.sources import make_source
from gpulse.sources.replay import ReplaySource
from testing.config import test_config

T0 = 1_785_000_000.0          # 2026-07-25, a plausible recording
# names a tenant or a node can set: template slots, markup that would run, a JSON line
# separator, both quotes and an ampersand
HOSTILE = "n{{SCRIPT}}{{BODY}}{{DATA}}</script><svg onload=window.pwned=1>\u2028'\"&amp;"
HOSTILE_FILE = "ckpt1{{BODY}}{{FINDINGS}}<svg onload=window.pwned=1>.csv"


def _util(gpu: int, gpus: int) -> tuple[float, float]:
    return (99.0, 650.0) if gpu < gpus // 2 else (10.0, 120.0)


def smi_csv(polls: int = 240, gpus: int = 4, interval: float = 0.5,
            stamp: Callable[[int, float], float] = lambda k, t: t) -> str:
    """nvidia-smi --query-gpu CSV; stamp(poll, t) may move a poll's time."""
    out = ["timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"]
    for k in range(polls):
        t = stamp(k, T0 + k * interval)
        ms = round(t * 1000)
        when = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}"
        for g in range(gpus):
            u, w = _util(g, gpus)
            out.append(f"{when}, {g}, {u:.0f} %, {w:.2f} W, 40000 MiB")
    return "\n".join(out) + "\n"


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def dcgm_text(host: str, pod: str = "", scrapes: int = 120, gpus: int = 4, interval: float = 1.0) -> str:
    """dcgm-exporter scrapes appended to one file, each after a line holding its time."""
    out = []
    for k in range(scrapes):
        out.append(f"{T0 + k * interval:.3f}")
        for g in range(gpus):
            u, w = _util(g, gpus)
            labels = (f'gpu="{g}",UUID="GPU-0000000{g}-0000-0000-0000-000000000000",modelName="NVIDIA H100",'
                      f'Hostname="{_label(host)}"' + (f',pod="{_label(pod)}",namespace="ml"' if pod else ""))
            out.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {u:.0f}")
            out.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {w:.3f}")
            out.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} 40000")
    return "\n".join(out) + "\n"


def dcgm_api_json(host: str, pod: str, points: int = 120, gpus: int = 2, interval: float = 1.0) -> str:
    """A Prometheus query_range answer of dcgm-exporter series, as saved from the API:
    labels through Prometheus (job, instance, the workload's pod as exported_pod).
    json.dumps writes any lone surrogate in a name as the escape a server would."""
    result = []
    for g in range(gpus):
        u, w = _util(g, gpus)
        for name, v in (("DCGM_FI_DEV_GPU_UTIL", u), ("DCGM_FI_DEV_POWER_USAGE", w), ("DCGM_FI_DEV_FB_USED", 40000)):
            metric = {"__name__": name, "gpu": str(g), "UUID": f"GPU-0000000{g}-0000-0000-0000-000000000000",
                      "Hostname": host, "job": "dcgm", "instance": "10.0.0.1:9400", "exported_pod": pod,
                      "exported_namespace": "ml"}
            result.append({"metric": metric, "values": [[T0 + k * interval, f"{v}"] for k in range(points)]})
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


SMALL_HEADER = "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]\n"


def small_log(tmp_path, rows: list[str], name: str = "run.csv") -> str:
    p = tmp_path / name
    p.write_text(SMALL_HEADER + "".join(rows))
    return str(p)


def small_rows(seconds: int, gpus: int = 2, step: float = 1.0) -> list[str]:
    out = []
    for k in range(seconds):
        for g in range(gpus):
            t = k * step
            out.append(f"2025/01/01 00:00:{int(t):02d}.{int(round((t % 1) * 1000)) + g:03d}, {g}, {10 * g + k} %, "
                       f"{100 + k} W, 1000 MiB\n")
    return out


def replay_source(path, **kw) -> ReplaySource:
    cfg = test_config(source="replay", replay__file=path, **{"replay__" + k: v for k, v in kw.items()})
    src = make_source(cfg)
    assert isinstance(src, ReplaySource)
    return src
