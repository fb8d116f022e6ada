"""The names of gpulse's recording rules, written once.

The rule templates (prometheus/templates/, `record: @{GPU_BUSY_1M}` and every read of
a record), the dashboards (grafana/gpulse_dashboards/) and any other generated source
name a record by its constant here; prometheus/generate.py fills the templates in.
A name follows `level:metric:operations` (docs/metrics.md): `node_gpu` one GPU,
`workload_gpu` one GPU of a group that holds a workload, `workload_node` the GPUs of
one workload on one node, `node_workload` one peer group, `node`, `workload` and
`cluster` their sums. tests/unit/test_rules_once.py fails when a rule,
dashboard or chart source spells one of these names out, and when a constant here
is recorded by no rule or by more than one.
"""
from __future__ import annotations

# The heatmap cell records, named from their parts because the dashboards select
# among them by suffix (the "Cells from" variable) and level (node_gpu, node, workload).
CELL_SECONDS = "gpulse_gpu_cell_seconds"
CELL_RATIO = "gpulse_gpu_cell_ratio"     # a cell's share, divided when recorded (one evaluation's cells)
# per-evaluation increments (gpulse.gpu.cells15s): the operation, then the group's
# interval, which the dashboards compare with a cell's length (`$__interval`)
INCREASE, CELL_INTERVAL = "increase", "15s"
INCREASE_15S = INCREASE + CELL_INTERVAL
CELLS_1M = "cells1m"             # the counters merged per GPU once a minute (gpulse.gpu.cells)
RATE_5M = "ratio_rate5m"         # the downsampled per-GPU ratios (gpulse.gpu.downsample)


def cells(level: str, op: str) -> str:
    return f"{level}:{CELL_SECONDS}:{op}"


# -- per GPU ------------------------------------------------------------------
GPU_BUSY_1M = "node_gpu:gpulse_gpu_busy:ratio_rate1m"
GPU_ACTIVE_1M = "node_gpu:gpulse_gpu_active:ratio_rate1m"
GPU_BUSY_5M = f"node_gpu:gpulse_gpu_busy:{RATE_5M}"
GPU_ACTIVE_5M = f"node_gpu:gpulse_gpu_active:{RATE_5M}"
GPU_SPIN_WAIT_5M = f"node_gpu:gpulse_gpu_spin_wait:{RATE_5M}"
GPU_CELLS_1M = cells("node_gpu", CELLS_1M)
GPU_CELLS_15S = cells("node_gpu", INCREASE_15S)
NODE_CELLS_15S = cells("node", INCREASE_15S)
WORKLOAD_CELLS_15S = cells("workload", INCREASE_15S)
GPU_CELL_RATIO_15S = f"node_gpu:{CELL_RATIO}:{INCREASE_15S}"
# each node's distance from its cluster's median node in active share, per minute
# (gpulse.node.rank): what the nodes overview ranks its rows by, worst first
NODE_ACTIVE_DISTANCE_1M = "node:gpulse_gpu_active:median_distance1m"

# -- GPUs of groups that hold a workload, and their peer comparison --------------
HELD_ACTIVE_5M = "workload_gpu:gpulse_gpu_active:ratio_rate5m"
HELD_BUSY_5M = "workload_gpu:gpulse_gpu_busy:ratio_rate5m"
HELD_SPIN_WAIT_5M = "workload_gpu:gpulse_gpu_spin_wait:ratio_rate5m"
HELD_ACTIVE_2M = "workload_gpu:gpulse_gpu_active:ratio_rate2m"
HELD_BUSY_2M = "workload_gpu:gpulse_gpu_busy:ratio_rate2m"
HELD_SPIN_WAIT_2M = "workload_gpu:gpulse_gpu_spin_wait:ratio_rate2m"
NODE_IMBALANCE_5M = "node:gpulse_gpu_active:imbalance_ratio5m"
NODE_LOAD_BALANCE_5M = "node:gpulse_gpu_active:load_balance_ratio5m"
WORKLOAD_IMBALANCE_5M = "workload:gpulse_gpu_active:imbalance_ratio5m"
WORKLOAD_LOAD_BALANCE_5M = "workload:gpulse_gpu_active:load_balance_ratio5m"
GPU_ACTIVE_GAP_5M = "node_gpu:gpulse_gpu_active:peer_gap_ratio5m"
GPU_BUSY_GAP_5M = "node_gpu:gpulse_gpu_busy:peer_gap_ratio5m"
GPU_ACTIVE_GAP_2M = "node_gpu:gpulse_gpu_active:peer_gap_ratio2m"
GPU_BUSY_GAP_2M = "node_gpu:gpulse_gpu_busy:peer_gap_ratio2m"
GPU_ACTIVE_DEV_5M = "node_gpu:gpulse_gpu_active:peer_deviation5m"
GPU_BUSY_DEV_5M = "node_gpu:gpulse_gpu_busy:peer_deviation5m"
GPU_PEER_SPIN_WAIT_5M = "node_gpu:gpulse_gpu_peer_spin_wait:median5m"
GPU_PEER_SPIN_WAIT_2M = "node_gpu:gpulse_gpu_peer_spin_wait:median2m"
GPU_COLD_WAIT_5M = "node_gpu:gpulse_gpu_cold_wait:ratio5m"
GPU_COLD_WAIT_2M = "node_gpu:gpulse_gpu_cold_wait:ratio2m"
GPU_PEER_WAIT_5M = "node_gpu:gpulse_gpu_peer_wait:ratio5m"
GPU_PEER_WAIT_2M = "node_gpu:gpulse_gpu_peer_wait:ratio2m"
# recurring cold stragglers: 15 s tiles of what the peers waited (gpulse.gpu.wait15s)
HELD_BUSY_15S = "workload_gpu:gpulse_gpu_busy:ratio15s"
HELD_SPIN_WAIT_15S = "workload_gpu:gpulse_gpu_spin_wait:ratio15s"
GPU_COLD_WAIT_15S = "node_gpu:gpulse_gpu_cold_wait:ratio15s"
GPU_COLD_RUN_15S = "node_gpu:gpulse_gpu_cold_run:bool15s"
GPU_RECUR_WAIT_5M = "node_gpu:gpulse_gpu_recurring_wait:ratio5m"

# -- one workload's nodes against each other -------------------------------------
WNODE_ACTIVE_5M = "workload_node:gpulse_gpu_active:ratio_rate5m"
WNODE_BUSY_5M = "workload_node:gpulse_gpu_busy:ratio_rate5m"
WNODE_SPIN_WAIT_5M = "workload_node:gpulse_gpu_spin_wait:ratio_rate5m"
WNODE_ACTIVE_GAP_5M = "workload_node:gpulse_node_active:peer_gap_ratio5m"
WNODE_BUSY_GAP_5M = "workload_node:gpulse_node_busy:peer_gap_ratio5m"
WNODE_COLD_WAIT_5M = "workload_node:gpulse_node_cold_wait:ratio5m"
WNODE_PEER_WAIT_5M = "workload_node:gpulse_node_peer_wait:ratio5m"
WNODE_ACTIVE_2M = "workload_node:gpulse_gpu_active:ratio_rate2m"
WNODE_BUSY_2M = "workload_node:gpulse_gpu_busy:ratio_rate2m"
WNODE_SPIN_WAIT_2M = "workload_node:gpulse_gpu_spin_wait:ratio_rate2m"
WNODE_ACTIVE_GAP_2M = "workload_node:gpulse_node_active:peer_gap_ratio2m"
WNODE_BUSY_GAP_2M = "workload_node:gpulse_node_busy:peer_gap_ratio2m"
WNODE_COLD_WAIT_2M = "workload_node:gpulse_node_cold_wait:ratio2m"
WNODE_PEER_WAIT_2M = "workload_node:gpulse_node_peer_wait:ratio2m"
WNODE_DEV_5M = "workload_node:gpulse_node:peer_deviation5m"

# -- lost time and sync stalls ---------------------------------------------------
WORKLOAD_LOST_5M = "cluster_workload:gpulse_group_lost_seconds:rate5m"
CLUSTER_LOST_5M = "cluster:gpulse_group_lost_seconds:rate5m"
# what a straggler on one node costs a workload's GPUs on its other nodes, which no
# node's exporter counts as such (gpulse.lost): by the straggler's node
OTHER_NODES_LOST_5M = "workload_node:gpulse_other_nodes_lost_seconds:rate5m"
# ... and the per-node means it reads, per second of wall time, not gated by the
# group holding its workload (their rises and falls after the job exits count)
WNODE_ACTIVE_RATE_5M = "workload_node:gpulse_gpu_active_seconds:rate5m"
WNODE_BUSY_RATE_5M = "workload_node:gpulse_gpu_busy_seconds:rate5m"
WNODE_SPIN_WAIT_RATE_5M = "workload_node:gpulse_gpu_spin_wait_seconds:rate5m"
GROUP_STALL_2M = "node_workload:gpulse_group_sync_stall:ratio_rate2m"
GROUP_STALL_5M = "node_workload:gpulse_group_sync_stall:ratio_rate5m"

# constant -> name, every record (the templates' placeholders)
RECORDS: dict[str, str] = {k: v for k, v in globals().items() if k.isupper() and k[0] != "_"
                           and isinstance(v, str) and v.count(":") == 2}
