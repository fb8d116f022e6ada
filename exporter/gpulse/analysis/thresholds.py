"""Every detection threshold of gpulse, named once.

The live exporter, the live page, the report, the Prometheus rules and the
Grafana dashboards all judge stalls, stragglers and imbalance by these numbers.
Nothing else may spell one of them out: Python code imports it from here, the
rule files and dashboards are generated from this table (a drift test fails
when a copy differs). docs/activity.md explains how each value was chosen.

A `Threshold` carries its value, its unit and one line saying what it means,
so generated files and docs can cite it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    unit: str   # "ratio" (0..1), "seconds", "z" (robust z-score), "count", "watts_ratio"
    doc: str


_TABLE = (
    # -- stalls -------------------------------------------------------------
    Threshold("idle_ratio", 0.10, "ratio",
              "utilisation/activity below this counts as idle (default of --idle-threshold)"),
    Threshold("min_stall_seconds", 0.2, "seconds",
              "shortest co-inactive stretch counted as a sync-stall episode (default of --min-stall)"),
    Threshold("stall_alert_ratio", 0.2, "ratio",
              "share of time a group spends in sync stalls before GpulseSyncStalls pages"),
    Threshold("stall_notable_ratio", 0.02, "ratio",
              "stall share of work time worth a report finding without a rhythm"),
    # -- activity (busy is not working) ---------------------------------------
    Threshold("power_gate_ratio", 0.3, "watts_ratio",
              "a highly utilised sample is work only above this fraction of the power reference (default of --power-gate)"),
    Threshold("spin_util_ratio", 0.5, "ratio",
              "spin-waiting is only plausible at or above this utilisation"),
    # -- stragglers and imbalance ----------------------------------------------
    Threshold("straggler_z", 3.5, "z",
              "robust z-score against the peer median beyond which a GPU is a straggler"),
    Threshold("straggler_gap_ratio", 0.1, "ratio",
              "and at least this far (share of time) from the peer median"),
    Threshold("z_mad_floor", 0.05, "ratio",
              "floor of the MAD in the robust z-score, so a very tight group does not flag noise"),
    Threshold("imbalance_alert_ratio", 0.3, "ratio",
              "(max - min) / max of active fractions beyond which a group is imbalanced"),
    Threshold("imbalance_min_active_ratio", 0.2, "ratio",
              "the busiest GPU must be at least this active for imbalance to count"),
    # -- paging (read by the generated Prometheus rules) -----------------------
    Threshold("stall_page_ratio", 0.10, "ratio",
              "share of the last 2 minutes a group spends in sync stalls before GpulseSyncStalls pages"),
    Threshold("stall_recurring_episodes", 3, "count",
              "stall episodes within 10 minutes that make stalls recurring (one long pause is not)"),
    Threshold("pause_page_seconds", 60, "seconds",
              "co-idle seconds within 5 minutes, in a pause that does not recur, before GpulseSyncPause tells"),
    Threshold("straggler_settle_seconds", 270, "seconds",
              "a group must have held its workload this long of the last 5 minutes before GpulseStragglerGPU pages"),
)

THRESHOLDS: dict[str, Threshold] = {t.name: t for t in _TABLE}


def value(name: str) -> float:
    """The value of one threshold; KeyError names an unknown one."""
    return THRESHOLDS[name].value
