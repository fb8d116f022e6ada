"""One training job across all its nodes: its ranks, balance, stragglers, stalls."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from . import queries as Q
from gpulse.palette import LEGEND
from gpulse import rulenames as R

from .cluster import CELLS_HELP, to_node_detail
from .common import (CLUSTER, HEATMAP_POINTS, PER_SECOND, RATIO, RULE_5M_INTERVAL, SECONDS, alerts_annotation,
                     cells_variable, label_variable, metric_variable, new_dashboard, order_variable, query,
                     runbook_link, stall_period_annotation)
from .panels import gpu_heatmap, merge_table, stall_strip, straggler_table, table_panel, time_series

UID = "gpulse-training-workload"
SEL = f'{CLUSTER}, workload="$workload"'


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "Training workload",
                       "One training job across all its nodes: per-rank heatmap, load balance, "
                       "stragglers and sync stalls.", time_from="now-3h")
         .with_variable(label_variable(
             "workload", "Workload", 'label_values(gpulse_gpu_up{cluster=~"$cluster", workload!=""}, workload)',
             multi=False, include_all=False,
             description="Needs GPU attribution (Kubernetes or Slurm) so that series carry a workload label."))
         .with_variable(metric_variable())
         .with_variable(cells_variable())
         .with_variable(order_variable())
         .annotation(alerts_annotation('workload="$workload"'))
         .annotation(stall_period_annotation(Q.stall_period_marks(SEL)))
         .link(runbook_link("Runbook: sync stalls", "GpulseSyncStalls.md"))
         .link(runbook_link("Runbook: stragglers", "GpulseStragglerGPU.md"))
         .link(runbook_link("Runbook: imbalance", "GpulseWorkloadImbalance.md")))

    d = (d
         .with_panel(stall_strip(
             "Sync stalls",
             "Share of each column's time during which every GPU of the job on a node was stalled "
             "at once, summed over its nodes, on the same columns as the ranks below. Read from the "
             "integrated stall counter, so stalls shorter than a scrape interval still show. "
             + LEGEND["stall"] + ".",
             query(Q.stall_strip(SEL), "{{workload}}"),
             max_data_points=HEATMAP_POINTS))
         .with_panel(gpu_heatmap(
             "Ranks heatmap",
             "One row per GPU of the job (node/gpu), node by node. A dark or mid-tone column across "
             "every row is a sync stall of the whole job; a bright row among mid-tone peers is the "
             "rank the others wait for (hot straggler), a dark row among spin-waiting peers a rank "
             "busy off the GPU (cold straggler). Click a row for its node's detail." + CELLS_HELP,
             query(Q.gpu_rows(SEL), "{{node}}/{{gpu}}"),
             h=16, max_data_points=HEATMAP_POINTS, links=[to_node_detail()])))

    d = (d.with_row(db.Row("Balance"))
         .with_panel(time_series(
             "Imbalance and load balance",
             "Imbalance = (max − min) / max and load balance = mean / max of the ranks' SM activity "
             "over 5 minutes, across all nodes of the job. Balanced: imbalance near 0, load balance "
             "near 100 %.", RATIO,
             query(f'{R.WORKLOAD_IMBALANCE_5M}{{{SEL}}}', "imbalance", "A"),
             query(f'{R.WORKLOAD_LOAD_BALANCE_5M}{{{SEL}}}', "load balance", "B"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Spin-wait share per node",
             "Share of time the job's GPUs on each node were busy but not doing real work: spinning in a "
             "collective while waiting for another rank. The node that does not spin is usually the one "
             "the others wait for.", RATIO,
             query(f'sum by (cluster, node) (rate(gpulse_gpu_spin_wait_seconds_total{{{SEL}}}[$__rate_interval]))'
                   f' / sum by (cluster, node) (rate(gpulse_gpu_sampled_seconds_total{{{SEL}}}[$__rate_interval]))',
                   "{{node}}"),
             min_val=0, max_val=1)))

    d = (d.with_row(db.Row("Stragglers"))
         .with_panel(straggler_table(
             "Top stragglers now",
             "The job's 10 ranks furthest from the median rank, in SM activity or busy ratio. "
             "Cost is the share of the other ranks' time spent waiting for it; deviation is a robust "
             "z-score; gap is the rank's share minus the median. Costing them "
             f"{Q.OUTLIER_COST:.0%} or more, beyond ±{Q.OUTLIER_Z}, it is a straggler: active gap positive = "
             "the rank the others wait for; busy gap negative = a rank busy off the GPU. A slow node "
             "(what GpulseStragglerNode pages on) is a row of its own, without a GPU.",
             Q.straggler_table(SEL),
             links=[to_node_detail("${__data.fields.node}", "${__data.fields.gpu}")]))
         .with_panel(time_series(
             "Gap to peers per rank",
             "Each rank's SM activity minus the job's median over 5 minutes. Lines hugging 0 are "
             "healthy; one line far above or below the band is a straggler.", RATIO,
             query(f'{Q.PEER_GAP}{{{SEL}}}', "{{node}}/{{gpu}}"),
             min_val=-1, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(table_panel(
             "GPU-hours lost by reason",
             "GPU-hours the job lost over the range: to sync stalls (every GPU, each stalled second), "
             "waiting for a straggler (by its cause: throttling and degraded hardware belong to whoever "
             "runs the nodes, more work and off-GPU work to the job), and to imbalance "
             "(gpulse_group_lost_seconds_total, the figure the report's headline gives; with what a "
             "straggler cost the GPUs on the job's other nodes, which no node's exporter counts: "
             f"{Q.OTHER_NODES_LOST_5M}).", "h",
             query(Q.lost_hours(SEL, "workload"), "", instant=True, table=True),
             transformations=merge_table({"Value": "GPU-hours"}), sort_by="GPU-hours")))

    d = (d.with_row(db.Row("Sync stalls"))
         .with_panel(time_series(
             "Sync-stall fraction per node",
             "Share of the last 5 minutes during which all of the job's GPUs on a node were idle at "
             "once while the job held them. Lines that rise together on every node are job-wide "
             "stalls (checkpoint, data loading, all-reduce).", RATIO,
             query(f'{R.GROUP_STALL_5M}{{{SEL}}}', "{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL, w=8))
         .with_panel(time_series(
             "Stall episodes",
             "Sync-stall episodes per second, summed over the job's nodes. A steady rate means a "
             "periodic stall; see the period panel.", PER_SECOND,
             query(f'sum by (cluster, node) (rate(gpulse_group_sync_stalls_total{{{SEL}}}[$__rate_interval]))', "{{node}}"),
             min_val=0, w=8))
         .with_panel(time_series(
             "Stall period",
             "Dominant period of recurring stalls per node; equal values on all nodes point at a "
             "job-wide cause (e.g. a checkpoint every N steps). No line means no recurring stalls.",
             SECONDS,
             query(f'gpulse_group_stall_period_seconds{{{SEL}}}', "{{node}}"),
             min_val=0, w=8)))
    return d
