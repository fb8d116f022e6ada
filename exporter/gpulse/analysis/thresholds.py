"""Every detection threshold of gpulse, named once.

The live exporter, the live page, the report, the Prometheus rules and the
Grafana dashboards all judge stalls, stragglers and imbalance by these numbers.
Nothing else may spell one of them out: Python code imports it from here, the
rule files and dashboards are generated from this table (a drift test fails
when a copy differs, and tests/unit/analysis/test_thresholds.py fails when a Python module
carries its own copy). docs/activity.md explains how each value was chosen.

A `Threshold` carries its value, its unit and one line saying what it means,
so generated files and docs can cite it. The last section holds what only the GPU
health and exporter alerts read: hardware limits, how long a condition must last,
the critical XID codes and the exporter's job names, so those rules are generated
from this table too and nothing in them is written twice.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model import UTIL_PERIOD


@dataclass(frozen=True)
class Threshold:
    name: str
    # a number; for unit "codes" the codes a rule matches, for "regex" a label pattern
    value: float | tuple[int, ...] | str
    # "ratio" (0..1), "seconds", "z" (robust z-score), "count", "watts_ratio", "bytes", "factor",
    # "celsius", "codes", "regex"
    unit: str
    doc: str


_TABLE = (
    # -- stalls -------------------------------------------------------------
    Threshold("idle_ratio", 0.10, "ratio",
              "utilisation/activity below this counts as idle (default of --idle-threshold)"),
    Threshold("min_stall_seconds", 0.2, "seconds",
              "shortest co-inactive stretch counted as a sync-stall episode (default of --min-stall)"),
    Threshold("stall_notable_ratio", 0.02, "ratio",
              "stall share of work time worth a report finding without a rhythm"),
    Threshold("stall_high_ratio", 0.05, "ratio",
              "stall share of work time that makes a stall finding high severity"),
    Threshold("stall_merge_ratio", 0.25, "ratio",
              "two stalled stretches are one episode when the work between them is shorter than this share of the longer"),
    Threshold("stall_merge_gap_seconds", 5.0, "seconds",
              "and that work is shorter than this"),
    Threshold("stall_merged_max_seconds", 120.0, "seconds",
              "merging stops at this episode length, so a mostly stalled group still has episodes"),
    Threshold("stall_pending_seconds", 20.0, "seconds",
              "an episode is final (counted) at the latest this long after it ended"),
    Threshold("stall_family_factor", 3.0, "factor",
              "episodes within this factor of each other's length form one stall pattern"),
    Threshold("util_window_seconds", UTIL_PERIOD, "seconds",
              "NVML utilisation averages over at least this (the driver's sample period, 1/6 to 1 s by product): "
              "a co-idle stretch reads this much shorter than its stall"),
    Threshold("stall_min_span_seconds", 120.0, "seconds",
              "a stall pattern covering this long is also judged by its share of that time (the page's 2-minute window)"),
    Threshold("stall_open_max_seconds", 120.0, "seconds",
              "a co-idle stretch still open when a log ends, memory held on every GPU, is a stall cut by the end "
              "of the record up to this long; longer, the job was done or hung"),
    Threshold("warmup_active_seconds", 5.0, "seconds",
              "a group that holds a workload must have worked this long before co-idle time is a stall"),
    # -- stall rhythm ---------------------------------------------------------
    Threshold("period_tolerance_ratio", 0.2, "ratio",
              "an interval between stall starts fits a period when within this share of a whole number of periods"),
    Threshold("period_fit_ratio", 0.7, "ratio",
              "share of the intervals a period must explain (the rest: stalls that swallowed or shifted cycles)"),
    Threshold("period_max_cycles", 3, "count",
              "an interval of up to this many periods is cycles merged or swallowed by a longer stall"),
    Threshold("period_pair_min_seconds", 1.0, "seconds",
              "two stalls alone make a rhythm only when both last at least this long"),
    Threshold("period_pair_factor", 2.0, "factor",
              "and neither is longer than this multiple of the other"),
    Threshold("period_checkpoint_seconds", 30.0, "seconds",
              "a rhythm this slow reads as checkpointing, evaluation or logging (faster: a step-level wait)"),
    Threshold("period_stale_periods", 3.0, "count",
              "a rhythm whose last stall is more than this many periods old has stopped"),
    # -- phases -----------------------------------------------------------------
    Threshold("work_busy_ratio", 0.5, "ratio",
              "some GPU of the group must be non-idle this share of a tick for the tick to be work"),
    Threshold("work_sustain_seconds", 5.0, "seconds",
              "for this long in a row before the group is working (shorter: start-up blips)"),
    Threshold("hold_min_bytes", 256 * 2**20, "bytes",
              "memory in use at or above this marks a GPU as holding a workload (a CUDA context is ~0.5 GiB)"),
    Threshold("hold_min_ratio", 0.01, "ratio",
              "or at or above this share of its memory, whichever is larger"),
    Threshold("missing_min_seconds", 10.0, "seconds",
              "a GPU silent this long during work while its peers report is a finding"),
    Threshold("phase_notable_seconds", 10.0, "seconds",
              "a start-up or held-idle stretch this long is worth a report line"),
    # -- activity (busy is not working) ---------------------------------------
    Threshold("power_gate_ratio", 0.3, "watts_ratio",
              "a highly utilised sample is work only above this fraction of the power reference (default of --power-gate)"),
    Threshold("spin_util_ratio", 0.5, "ratio",
              "spin-waiting is only plausible at or above this utilisation"),
    Threshold("idle_power_factor", 3.0, "factor",
              "without a power limit the gate is at least this multiple of the idle power floor"),
    Threshold("power_edge_ratio", 0.5, "ratio",
              "a utilisation step this large between two samples is an edge; power that moves this share of its range in the same sample follows it sharply"),
    Threshold("power_sharp_share_ratio", 0.3, "ratio",
              "power that follows fewer than this share of the edges sharply on the median GPU is an average (nvidia-smi power.draw: 1 s); an edge counts where its busy side draws working power (at or above the spin gate)"),
    Threshold("power_edges_min_count", 20, "count",
              "edges needed before judging whether power is averaged"),
    Threshold("share_spin_seconds", 10, "seconds",
              "busy samples under the spin gate a GPU needs before its own spin-wait level (their median power) is known (the averaged-power share's zero)"),
    Threshold("share_work_seconds", 60, "seconds",
              "sustained-compute samples (busy above the spin gate for a second or more) a GPU needs before its working level is known (the averaged-power share's one)"),
    Threshold("work_power_quantile", 0.9, "ratio",
              "a GPU's working level is this quantile of its power over its sustained-compute samples"),
    Threshold("share_gap_factor", 1, "factor",
              "the averaged-power share applies only where a GPU's working level lies at least this multiple of the spin gate above its spin-wait level"),
    Threshold("spin_wait_share_ratio", 0.5, "ratio",
              "peers that spend this share of their busy time spin-waiting wait at idle-level power"),
    # -- stragglers and imbalance ----------------------------------------------
    Threshold("straggler_cost_ratio", 0.05, "ratio",
              "share of its peers' time spent waiting for a GPU (or node) that makes it a straggler: the job runs "
              "about this much slower for it"),
    Threshold("straggler_z", 3.5, "z",
              "and its gap to the peer median this many times the group's measured spread (robust z): "
              "a gap the measurement noise explains is no straggler"),
    Threshold("z_mad_floor", 0.01, "ratio",
              "floor of the measured spread (1.4826 MAD) in the robust z-score: utilisation and SM activity are read "
              "in whole percents, so a spread below one point is not measured"),
    Threshold("straggler_min_gpus", 3, "count",
              "peer groups smaller than this have no straggler (who deviates from whom is undefined)"),
    Threshold("straggler_persistence_ratio", 0.5, "ratio",
              "a GPU deviating this share of the work time is a straggler of the whole run"),
    Threshold("straggler_min_span_seconds", 120.0, "seconds",
              "a GPU deviating this long without a break is a straggler for that span"),
    Threshold("spin_wait_mention_ratio", 0.05, "ratio",
              "peers spin-waiting at least this share of the time is worth saying in a straggler finding"),
    Threshold("straggler_break_seconds", 30.0, "seconds",
              "a straggler that stops deviating for less than this (a few ordinary steps) is still the same straggler"),
    Threshold("straggler_recur_seconds", 300.0, "seconds",
              "deviating runs of one GPU this close together, costing its peers straggler_cost_ratio of this long, "
              "make it a straggler without a run of straggler_min_span_seconds (a rank off the GPU every few minutes); "
              "one run alone is a pause"),
    Threshold("straggler_high_gap_ratio", 0.15, "ratio",
              "a straggler costing its peers this share of their time is a high-severity finding"),
    Threshold("imbalance_alert_ratio", 0.3, "ratio",
              "(max - min) / max of active fractions beyond which a group is imbalanced (a 5-minute window or the whole run)"),
    Threshold("imbalance_min_active_ratio", 0.2, "ratio",
              "the busiest GPU must be at least this active for imbalance to count"),
    Threshold("imbalance_high_ratio", 0.7, "ratio",
              "whole-run imbalance that makes the finding high severity"),
    # -- straggler cause (analysis/cause.py) ------------------------------------
    Threshold("cause_throttle_share_ratio", 0.1, "ratio",
              "a throttle reason holding the straggler's clocks this share of its span more than its peers' is a cause"),
    Threshold("cause_clock_gap_ratio", 0.05, "ratio",
              "an SM clock this share below the peers' median is held down"),
    Threshold("cause_temperature_gap_ratio", 0.1, "ratio",
              "a temperature this share above the peers' median is at the thermal limit"),
    Threshold("cause_power_limit_ratio", 0.95, "ratio",
              "mean power at or above this share of the power limit is at the limit"),
    Threshold("cause_peers_wait_ratio", 0.5, "ratio",
              "peers spin-waiting this share of the busy time a cold straggler lacks against them wait for it (its rank is off the GPU); below, they compute while it waits (it gets less work)"),
    Threshold("cause_pcie_replays_count", 10, "count",
              "PCIe replays within a straggler span this many more than its peers' make a degraded link"),
    # link state and NVLink errors
    Threshold("cause_link_ratio", 0.9, "ratio",
              "a PCIe link width or generation (mean over a straggler span) at or below this share of its maximum "
              "and of its peers' is a degraded link"),
    Threshold("cause_nvlink_errors_count", 10, "count",
              "NVLink errors (CRC, replay, recovery; all links) within a straggler span this many more than its "
              "peers' make a degraded link"),
    # -- paging (read by the generated Prometheus rules) -----------------------
    Threshold("stall_page_ratio", 0.10, "ratio",
              "share of the last 2 minutes a group spends in sync stalls before GpulseSyncStalls pages"),
    Threshold("stall_recurring_episodes", 3, "count",
              "stall episodes within 10 minutes that make stalls recurring (one long pause is not)"),
    Threshold("pause_page_seconds", 60, "seconds",
              "co-idle seconds within 5 minutes, in a pause that does not recur, before GpulseSyncPause tells"),
    Threshold("straggler_settle_seconds", 270, "seconds",
              "a group must have held its workload this long of the last 5 minutes before GpulseStragglerGPU, "
              "GpulseStragglerGPURecurring or GpulseStragglerNode pages"),
    Threshold("stall_for_seconds", 60, "seconds",
              "recurring stalls over the page share this long before GpulseSyncStalls pages (`for:`)"),
    Threshold("pause_for_seconds", 60, "seconds",
              "a long pause this long before GpulseSyncPause tells (`for:`)"),
    Threshold("straggler_for_seconds", 90, "seconds",
              "a GPU or node costing its peers this long, after 2 minutes of cost, before GpulseStragglerGPU "
              "or GpulseStragglerNode pages (`for:`)"),
    Threshold("imbalance_for_seconds", 900, "seconds",
              "a group imbalanced this long before GpulseWorkloadImbalance pages (`for:`)"),
    # -- GPU health and the exporter (read by the generated Prometheus rules only) --
    Threshold("gpu_lost_seconds", 60, "seconds",
              "a GPU the exporter cannot read this long is lost (GpulseGPULost; rides out one failed poll)"),
    Threshold("gpu_missing_seconds", 600, "seconds",
              "a GPU listed this long ago and no longer enumerated, its node still reporting, is lost"),
    Threshold("error_window_seconds", 600, "seconds",
              "XID and uncorrectable ECC errors page while they are this recent (events: no `for:`)"),
    Threshold("xid_critical_codes", (48, 62, 64, 74, 79, 94, 95, 119, 120, 140), "codes",
              "XID codes that need a GPU reset or a node drain (critical; any other XID warns)"),
    Threshold("thermal_throttle_ratio", 0.1, "ratio",
              "share of 5 minutes with clocks held down for a thermal reason before GpulseThermalThrottling"),
    Threshold("thermal_throttle_seconds", 600, "seconds",
              "for this long"),
    Threshold("power_brake_ratio", 0.05, "ratio",
              "share of 5 minutes under the hardware power brake before GpulsePowerThrottling warns"),
    Threshold("power_brake_seconds", 300, "seconds",
              "for this long"),
    Threshold("power_cap_ratio", 0.5, "ratio",
              "share of 5 minutes at the software power cap before GpulsePowerThrottling tells (info)"),
    Threshold("power_cap_seconds", 1800, "seconds",
              "for this long (running at the cap under full load is normal)"),
    Threshold("gpu_temperature_celsius", 85, "celsius",
              "a GPU die above this is hot (thermal slowdown starts a few degrees higher)"),
    Threshold("memory_temperature_celsius", 90, "celsius",
              "GPU memory (HBM) above this is hot (rated to about 95 °C)"),
    Threshold("temperature_seconds", 600, "seconds",
              "for this long before GpulseHighTemperature"),
    Threshold("health_hold_seconds", 300, "seconds",
              "a throttling or temperature alert keeps firing through dips this short (keep_firing_for)"),
    Threshold("power_cap_hold_seconds", 600, "seconds",
              "the power-cap alert keeps firing through dips this short"),
    Threshold("exporter_job_regex", ".*gpulse.*", "regex",
              "scrape jobs that are gpulse exporters (the examples' `gpulse`, the chart's `<release>-gpulse`)"),
    Threshold("exporter_down_seconds", 300, "seconds",
              "an exporter that cannot be scraped this long is down (rides out a rolling update)"),
    Threshold("stale_seconds", 120, "seconds",
              "an exporter serving stale GPU data this long pages GpulseMetricsStale"),
)

THRESHOLDS: dict[str, Threshold] = {t.name: t for t in _TABLE}


def value(name: str) -> float:
    """The value of one threshold; KeyError names an unknown one."""
    return THRESHOLDS[name].value
