"""One training job across all its nodes: its ranks, balance, stragglers, stalls."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from . import queries as Q
from .common import (LONG_RANGE_POINTS, PER_SECOND, RATIO, RULE_5M_INTERVAL, SECONDS, alerts_annotation, label_variable,
                     metric_variable, new_dashboard, query, runbook_link)
from .panels import gpu_heatmap, straggler_table, time_series

UID = "gpulse-training-workload"
SEL = 'workload="$workload"'


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "Training workload",
                       "One training job across all its nodes: per-rank heatmap, load balance, "
                       "stragglers and sync stalls.", time_from="now-3h")
         .with_variable(label_variable(
             "workload", "Workload", 'label_values(gpulse_gpu_up{workload!=""}, workload)',
             multi=False, include_all=False,
             description="Needs GPU attribution (Kubernetes or Slurm) so that series carry a workload label."))
         .with_variable(metric_variable())
         .annotation(alerts_annotation('workload="$workload"'))
         .link(runbook_link("Runbook: sync stalls", "GpulseSyncStalls.md"))
         .link(runbook_link("Runbook: stragglers", "GpulseStragglerGPU.md"))
         .link(runbook_link("Runbook: imbalance", "GpulseWorkloadImbalance.md")))

    d = d.with_panel(gpu_heatmap(
        "Ranks heatmap",
        "One row per GPU of the job (node/gpu), one column per step, colour 0–100 % on a fixed scale. "
        "A vertical stripe is a sync stall of the whole job; a row unlike the rest is a straggling "
        "rank. The contrast between busy ratio and SM activity tells which rank the others wait for: "
        "waiting ranks read busy (spinning in the collective) but not active.",
        query(Q.heatmap_rows(SEL), "{{node}}/{{gpu}}"),
        h=16, max_data_points=LONG_RANGE_POINTS, interval=RULE_5M_INTERVAL))

    d = (d.with_row(db.Row("Balance"))
         .with_panel(time_series(
             "Imbalance and load balance",
             "Imbalance = (max − min) / max and load balance = mean / max of the ranks' SM activity "
             "over 5 minutes, across all nodes of the job. Balanced: imbalance near 0, load balance "
             "near 100 %.", RATIO,
             query('workload:gpulse_gpu_active:imbalance_ratio5m{workload="$workload"}', "imbalance", "A"),
             query('workload:gpulse_gpu_active:load_balance_ratio5m{workload="$workload"}', "load balance", "B"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Spin-wait share per node",
             "Share of time the job's GPUs on each node were busy but not doing real work: spinning in a "
             "collective while waiting for another rank. The node that does not spin is usually the one "
             "the others wait for.", RATIO,
             query('sum by (node) (rate(gpulse_gpu_spin_wait_seconds_total{workload="$workload"}[$__rate_interval]))'
                   ' / sum by (node) (rate(gpulse_gpu_sampled_seconds_total{workload="$workload"}[$__rate_interval]))',
                   "{{node}}"),
             min_val=0, max_val=1)))

    d = (d.with_row(db.Row("Stragglers"))
         .with_panel(straggler_table(
             "Top stragglers now",
             "The job's 10 ranks furthest from the median rank, in SM activity or busy ratio. "
             "Deviation is a robust z-score; gap is the rank's share minus the median. Beyond "
             f"±{Q.OUTLIER_Z} and {Q.OUTLIER_GAP:.0%} away it is a straggler: active gap positive = "
             "the rank the others wait for; busy gap negative = a rank busy off the GPU.",
             Q.straggler_table(SEL)))
         .with_panel(time_series(
             "Gap to peers per rank",
             "Each rank's SM activity minus the job's median over 5 minutes. Lines hugging 0 are "
             "healthy; one line far above or below the band is a straggler.", RATIO,
             query(f'{Q.PEER_GAP}{{{SEL}}}', "{{node}}/{{gpu}}"),
             min_val=-1, max_val=1, interval=RULE_5M_INTERVAL)))

    d = (d.with_row(db.Row("Sync stalls"))
         .with_panel(time_series(
             "Sync-stall fraction per node",
             "Share of the last 5 minutes during which all of the job's GPUs on a node were idle at "
             "once while the job held them. Lines that rise together on every node are job-wide "
             "stalls (checkpoint, data loading, all-reduce).", RATIO,
             query(f'{Q.STALL_RATIO}{{{SEL}}}', "{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL, w=8))
         .with_panel(time_series(
             "Stall episodes",
             "Sync-stall episodes per second, summed over the job's nodes. A steady rate means a "
             "periodic stall; see the period panel.", PER_SECOND,
             query(f'sum by (node) (rate(gpulse_group_sync_stalls_total{{{SEL}}}[$__rate_interval]))', "{{node}}"),
             min_val=0, w=8))
         .with_panel(time_series(
             "Stall period",
             "Dominant period of recurring stalls per node; equal values on all nodes point at a "
             "job-wide cause (e.g. a checkpoint every N steps). No line means no recurring stalls.",
             SECONDS,
             query(f'gpulse_group_stall_period_seconds{{{SEL}}}', "{{node}}"),
             min_val=0, w=8)))
    return d
