"""The landing dashboard: every GPU of the cluster a row, time across."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from . import queries as Q
from .common import (COUNT, LONG_RANGE_POINTS, RATIO, RULE_5M_INTERVAL, SECONDS, alerts_annotation, label_variable,
                     metric_variable, new_dashboard, query)
from .panels import gpu_heatmap, stat_panel, status_history, straggler_table, time_series

UID = "gpulse-cluster-heatmap"
SEL = 'node=~"$node", workload=~"$workload"'


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "GPU cluster heatmap",
                       "Every GPU of the cluster a row, time across, colour = utilisation. "
                       "Vertical stripes are sync stalls (all GPUs idle at once); an odd row is a straggler.")
         .with_variable(label_variable("node", "Node", "label_values(gpulse_gpu_up, node)"))
         .with_variable(label_variable(
             "workload", "Workload", 'label_values(gpulse_gpu_up{node=~"$node"}, workload)',
             description="Training job the GPUs are attributed to; All includes GPUs without a workload."))
         .with_variable(metric_variable())
         .annotation(alerts_annotation()))

    d = (d
         .with_panel(stat_panel(
             "GPUs reporting", "GPUs whose last poll succeeded (gpulse_gpu_up = 1).", COUNT,
             query(f"count(gpulse_gpu_up{{{SEL}}} == 1)", "up", instant=True)))
         .with_panel(stat_panel(
             "GPUs down", "GPUs the exporter could not read on its last poll (lost, hung, erroring). "
             "Anything above 0 needs a look at the node detail dashboard.", COUNT,
             query(f"count(gpulse_gpu_up{{{SEL}}} == 0) or vector(0)", "down", instant=True),
             thresholds=((None, "green"), (1, "red")))))
    d = (d
         .with_panel(stat_panel(
             "Mean SM activity", "Real work averaged over the selected GPUs over the last 5 minutes. "
             "Low while busy is high means GPUs are spin-waiting in collectives.", RATIO,
             query(f"avg({Q.ACTIVE_5M}{{{SEL}}})", "active", instant=True),
             thresholds=((None, "red"), (0.5, "yellow"), (0.8, "green"))))
         .with_panel(stat_panel(
             "Mean busy ratio", "NVML utilisation (a kernel was running) averaged over the selected GPUs "
             "over the last 5 minutes.", RATIO,
             query(f"avg({Q.BUSY_5M}{{{SEL}}})", "busy", instant=True),
             thresholds=((None, "red"), (0.5, "yellow"), (0.8, "green")))))

    d = d.with_panel(gpu_heatmap(
        "GPU utilisation heatmap",
        "One row per GPU (node/gpu, grouped by node), one column per step, colour from 0 % (dark blue) "
        "to 100 % (dark red) on a fixed scale. A vertical stripe across many rows is a sync stall: every "
        "GPU of a job idle at once. A row that stays a different colour from its neighbours is a "
        "straggler or an idle rank. 'Colour by' switches between busy ratio, SM activity (real work) "
        "and power as a fraction of the limit. Each cell is the 5-minute mean evaluated every minute, "
        "so the panel stays fast over hours and thousands of GPUs; use the status history below for "
        "second-by-second detail.",
        query(Q.heatmap_rows(SEL), "{{node}}/{{gpu}}"),
        max_data_points=LONG_RANGE_POINTS, interval=RULE_5M_INTERVAL))

    d = d.with_row(db.Row("Short ranges: per-GPU status history").collapsed(True).with_panel(status_history(
        "Per-GPU status, last 30 minutes",
        "The heatmap's rows from the 1-minute recording rules over the last 30 minutes, one cell per "
        "scrape interval. Hover a cell for its value. Red is idle, green is fully used.",
        query(Q.status_rows(SEL), "{{node}}/{{gpu}}"),
        time_from="30m", max_data_points=120, interval="15s")))

    d = (d.with_row(db.Row("Load balance"))
         .with_panel(time_series(
             "Imbalance per workload",
             "(max − min) / max of the GPUs' SM activity over 5 minutes, per workload across all its "
             "nodes (per node when GPUs carry no workload). 0 = every rank equally busy; a line "
             "that stays above ~20 % means some ranks wait for others at every step.", RATIO,
             query(Q.per_workload_or_node(
                 'max by (workload) (workload:gpulse_gpu_active:imbalance_ratio5m{workload=~"$workload"})',
                 'max by (node) (node:gpulse_gpu_active:imbalance_ratio5m{node=~"$node"})'),
                 "{{workload}}{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Load balance per workload",
             "Mean / max of the GPUs' SM activity over 5 minutes, per workload (per node when GPUs "
             "carry no workload). 100 % = perfectly balanced; 60 % means the average rank does 60 % "
             "of the busiest rank's work.", RATIO,
             query(Q.per_workload_or_node(
                 'max by (workload) (workload:gpulse_gpu_active:load_balance_ratio5m{workload=~"$workload"})',
                 'max by (node) (node:gpulse_gpu_active:load_balance_ratio5m{node=~"$node"})'),
                 "{{workload}}{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL)))

    d = (d.with_row(db.Row("Sync stalls"))
         .with_panel(time_series(
             "Sync-stall fraction",
             "Share of the last 5 minutes during which all GPUs of a job were idle at the same time "
             "while holding it (waiting on all-reduce, a checkpoint, the input pipeline). Averaged over "
             "the job's nodes; per node when GPUs carry no workload. A few percent is normal; tens of "
             "percent is time the whole job loses.", RATIO,
             query(Q.per_workload_or_node(
                 f'avg by (workload) ({Q.STALL_RATIO}{{{SEL}, workload!=""}})',
                 f'max by (node) ({Q.STALL_RATIO}{{node=~"$node"}})'),
                 "{{workload}}{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Stall period",
             "Dominant period of recurring sync stalls (e.g. a checkpoint every 10 minutes, a data "
             "loader refill every 30 s). No line means no recurring stalls.", SECONDS,
             query(Q.per_workload_or_node(
                 f'max by (workload) (gpulse_group_stall_period_seconds{{{SEL}, workload!=""}})',
                 'max by (node) (gpulse_group_stall_period_seconds{node=~"$node"})'),
                 "{{workload}}{{node}}"),
             min_val=0)))

    d = (d.with_row(db.Row("Stragglers"))
         .with_panel(straggler_table(
             "Top stragglers now",
             "The 10 GPUs furthest from the median of their peers (the other GPUs of the same "
             "workload across nodes, else of the same node), in SM activity or in busy ratio. "
             "Deviation is a robust z-score; gap is the GPU's share minus the peers' median. A GPU "
             f"beyond ±{Q.OUTLIER_Z} and {Q.OUTLIER_GAP:.0%} away is a straggler. Active gap "
             "positive: a hot straggler the others wait for. Busy gap negative while its peers "
             "spin: a cold straggler whose rank is busy off the GPU.",
             Q.straggler_table(SEL)))
         .with_panel(time_series(
             "Outliers: gap to peers over time",
             f"Gap to the peers' median of every GPU that is a straggler by the alert's rule "
             f"(robust z beyond ±{Q.OUTLIER_Z} and at least {Q.OUTLIER_GAP:.0%} away), in the "
             "signal that shows it: active (hot straggler) or busy (cold straggler). Empty when "
             "the cluster is balanced; a line that persists for 10 minutes pages.", RATIO,
             query(Q.outlier_gap(SEL), "{{node}}/{{gpu}} {{signal}}"),
             # a point per 5-minute window shows each independent value once;
             # the alert needs 10 minutes, so no paging straggler falls between
             min_val=-1, max_val=1, interval="5m", max_data_points=LONG_RANGE_POINTS)))
    return d
