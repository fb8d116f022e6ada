"""The landing dashboard: every GPU of the cluster a row, time across."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from gpulse.palette import LEGEND
from gpulse import rulenames as R

from . import node as node_dashboard
from . import queries as Q
from .common import (CLUSTER, COUNT, HEATMAP_POINTS, LONG_RANGE_POINTS, RATIO, RULE_5M_INTERVAL, SECONDS,
                     alerts_annotation, cells_variable, dashboard_data_link, label_variable, metric_variable,
                     new_dashboard, order_variable, query, stall_period_annotation)
from .panels import (gpu_heatmap, merge_table, stall_strip, stat_panel, status_history, straggler_table,
                     table_panel, time_series)

UID = "gpulse-cluster-heatmap"
SEL = f'{CLUSTER}, node=~"$node", workload=~"$workload"'
NODE_SEL = f'{CLUSTER}, node=~"$node"'
CELLS_HELP = (" Each cell is the share of its own time span (one query step, at least one scrape "
              "interval) read from the integrated counters, so a stall shorter than the cell still "
              "shifts its colour; 'Cells from' switches to the 5m recording rules for ranges whose "
              "raw data is gone. Colours: " + LEGEND["cells"] + "; " + LEGEND["no_data"] + ".")


def to_node_heatmap() -> object:
    """Overview row -> this dashboard for that node's GPUs (same range, variables)."""
    return dashboard_data_link("GPUs of ${__field.labels.node}", UID,
                               "var-node=${__field.labels.node}&${metric:queryparam}&${cells:queryparam}")


def to_node_detail(field: str = "${__field.labels.node}", gpu: str = "${__field.labels.gpu}") -> object:
    return dashboard_data_link("Node detail", node_dashboard.UID, f"var-node={field}&var-gpu={gpu}")


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "GPU cluster heatmap",
                       "Every GPU of the cluster a row, time across, colour = share of time working. "
                       "Dark columns are sync stalls (all GPUs idle or waiting at once), also drawn in "
                       "the stall strip; an odd row is a straggler.")
         .with_variable(label_variable("node", "Node", 'label_values(gpulse_gpu_up{cluster=~"$cluster"}, node)'))
         .with_variable(label_variable(
             "workload", "Workload", 'label_values(gpulse_gpu_up{cluster=~"$cluster", node=~"$node"}, workload)',
             description="Training job the GPUs are attributed to; All includes GPUs without a workload."))
         .with_variable(metric_variable())
         .with_variable(cells_variable())
         .with_variable(order_variable())
         .annotation(alerts_annotation())
         .annotation(stall_period_annotation(Q.stall_period_marks(SEL, NODE_SEL))))

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
             query(f"avg({R.GPU_ACTIVE_5M}{{{SEL}}})", "active", instant=True),
             thresholds=((None, "red"), (0.5, "yellow"), (0.8, "green"))))
         .with_panel(stat_panel(
             "Mean busy ratio", "NVML utilisation (a kernel was running) averaged over the selected GPUs "
             "over the last 5 minutes.", RATIO,
             query(f"avg({R.GPU_BUSY_5M}{{{SEL}}})", "busy", instant=True),
             thresholds=((None, "red"), (0.5, "yellow"), (0.8, "green")))))

    def strip():
        return stall_strip(
        "Sync stalls",
        "Share of each column's time during which every GPU of a job was stalled at once (per "
        "workload across its nodes; per node without attribution), on the same time axis and "
        "columns as the heatmaps below. It is read from the exporter's stall counter, which "
        "integrates sub-second samples, so a stall much shorter than a scrape interval still shows "
        "here as a faint cell even when the GPU cells look uniform. " + LEGEND["stall"] + "; "
        "the shade is the stalled share of the cell. The 'Recurring sync stalls' annotation marks "
        "when a dominant stall period is detected and prints it.",
        query(Q.stall_strip(SEL, NODE_SEL), "{{workload}}{{node}}"),
        max_data_points=HEATMAP_POINTS)

    d = (d.with_row(db.Row("Overview: one row per node and per workload"))
         .with_panel(strip())
         .with_panel(gpu_heatmap(
             "Nodes",
             "One row per node: the mean over its GPUs. A dark column across every node is a "
             "cluster-wide stall; one odd row is a straggling node. Click a row to open the per-GPU "
             "heatmap of that node (same time range)." + CELLS_HELP,
             query(Q.node_rows(NODE_SEL), "{{node}}"),
             h=12, max_data_points=HEATMAP_POINTS, links=[to_node_heatmap()]))
         .with_panel(gpu_heatmap(
             "Workloads",
             "One row per training job across all its nodes (needs attribution), or across the "
             "nodes the Node filter picks. A dark column in one row only is a stall of that job."
             + CELLS_HELP,
             query(Q.workload_rows(SEL), "{{workload}}"),
             h=6, max_data_points=HEATMAP_POINTS)))

    d = (d.with_row(db.Row("Per GPU"))
         .with_panel(strip())
         .with_panel(gpu_heatmap(
             "GPU heatmap",
             "One row per GPU (node/gpu), node by node and GPUs in index order ('Row order': worst "
             "first puts the GPUs furthest from their node's median at the top). With the default "
             "work score, a sync stall is a dark or mid-tone column across every GPU of the job "
             "(idle, or spinning in the collective), a hot straggler is one bright row among "
             "mid-tone peers that wait for it, and a cold straggler one dark row among "
             "spin-waiting peers. Pick a single node (or click a row of the node overview) above "
             "~128 GPUs; click a row to open that node's detail dashboard." + CELLS_HELP,
             query(Q.gpu_rows(SEL), "{{node}}/{{gpu}}"),
             max_data_points=HEATMAP_POINTS, links=[to_node_detail()])))

    d = d.with_row(db.Row("Short ranges: per-GPU status history").collapsed(True).with_panel(status_history(
        "Per-GPU status, last 30 minutes",
        "The heatmap's rows over the last 30 minutes, one cell per scrape interval, in the same "
        "colours (" + LEGEND["cells"] + "). Hover a cell for its value.",
        query(Q.gpu_rows(SEL), "{{node}}/{{gpu}}"),
        time_from="30m", max_data_points=120, interval="15s", links=[to_node_detail()])))

    d = (d.with_row(db.Row("Load balance"))
         .with_panel(time_series(
             "Imbalance per workload",
             "(max − min) / max of the GPUs' SM activity over 5 minutes, per workload across all its "
             "nodes (per node when GPUs carry no workload). 0 = every rank equally busy; a line "
             "that stays above ~20 % means some ranks wait for others at every step.", RATIO,
             query(Q.per_workload_or_node(
                 f'max by (cluster, workload) ({R.WORKLOAD_IMBALANCE_5M}{{cluster=~"$cluster", workload=~"$workload"}})',
                 f'max by (cluster, node) ({R.NODE_IMBALANCE_5M}{{{NODE_SEL}}})'),
                 "{{workload}}{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Load balance per workload",
             "Mean / max of the GPUs' SM activity over 5 minutes, per workload (per node when GPUs "
             "carry no workload). 100 % = perfectly balanced; 60 % means the average rank does 60 % "
             "of the busiest rank's work.", RATIO,
             query(Q.per_workload_or_node(
                 f'max by (cluster, workload) ({R.WORKLOAD_LOAD_BALANCE_5M}{{cluster=~"$cluster", workload=~"$workload"}})',
                 f'max by (cluster, node) ({R.NODE_LOAD_BALANCE_5M}{{{NODE_SEL}}})'),
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
                 f'avg by (cluster, workload) ({R.GROUP_STALL_5M}{{{SEL}, workload!=""}})',
                 f'max by (cluster, node) ({R.GROUP_STALL_5M}{{{NODE_SEL}}})'),
                 "{{workload}}{{node}}"),
             min_val=0, max_val=1, interval=RULE_5M_INTERVAL))
         .with_panel(time_series(
             "Stall period",
             "Dominant period of recurring sync stalls (e.g. a checkpoint every 10 minutes, a data "
             "loader refill every 30 s). No line means no recurring stalls.", SECONDS,
             query(Q.per_workload_or_node(
                 f'max by (cluster, workload) (gpulse_group_stall_period_seconds{{{SEL}, workload!=""}})',
                 f'max by (cluster, node) (gpulse_group_stall_period_seconds{{{NODE_SEL}}})'),
                 "{{workload}}{{node}}"),
             min_val=0)))

    d = (d.with_row(db.Row("What it costs"))
         .with_panel(table_panel(
             "GPU-hours lost by workload and reason",
             "GPU-hours each workload (or node, without attribution) lost over the range, by reason: "
             "sync stalls (every GPU, each stalled second), waiting for a straggler (by its cause: "
             "throttling and degraded hardware belong to whoever runs the nodes, more work and off-GPU "
             "work to the job's owner) and imbalance. From gpulse_group_lost_seconds_total, the figure "
             "gpulse report's headline and the gpulse.lost records give, with what a straggler cost the "
             f"workload's GPUs on its other nodes ({Q.OTHER_NODES_LOST_5M}, "
             "on the straggler's node's line: waiting for it, and as a negative sync_stall the other "
             "nodes' stall time that was that wait).", "h",
             query(Q.lost_hours(SEL, "workload, node"), "", instant=True, table=True),
             transformations=merge_table({"Value": "GPU-hours"}), sort_by="GPU-hours", w=24)))

    d = (d.with_row(db.Row("Stragglers"))
         .with_panel(straggler_table(
             "Top stragglers now",
             "The 10 GPUs furthest from the median of their peers (the other GPUs of the same "
             "workload across nodes, else of the same node), in SM activity or in busy ratio. "
             "Cost is the share of its peers' time they spend waiting for it; deviation is a robust "
             "z-score; gap is the GPU's share minus the peers' median. A GPU costing its peers "
             f"{Q.OUTLIER_COST:.0%} or more, beyond ±{Q.OUTLIER_Z}, is a straggler. Active gap "
             "positive: a hot straggler the others wait for. Busy gap negative while its peers "
             "spin: a cold straggler whose rank is busy off the GPU. A slow node of a multi-node workload (what "
             "GpulseStragglerNode pages on) is a row of its own, without a GPU.",
             Q.straggler_table(SEL),
             links=[to_node_detail("${__data.fields.node}", "${__data.fields.gpu}")]))
         .with_panel(time_series(
             "Outliers: gap to peers over time",
             f"Gap to the peers' median of every GPU that is a straggler by the alert's rule "
             f"(costing its peers {Q.OUTLIER_COST:.0%} of their time, robust z beyond ±{Q.OUTLIER_Z}), in the "
             "signal that shows it: active (hot straggler) or busy (cold straggler). Empty when "
             "the cluster is balanced; a line that persists for 10 minutes pages.", RATIO,
             query(Q.outlier_gap(SEL), "{{node}}/{{gpu}} {{signal}}"),
             # a point per 5-minute window shows each independent value once;
             # the alert needs 10 minutes, so no paging straggler falls between
             min_val=-1, max_val=1, interval="5m", max_data_points=LONG_RANGE_POINTS)))
    return d
