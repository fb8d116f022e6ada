"""PromQL shared by several dashboards, written once.

Selectors are passed in as matcher text (e.g. 'node=~"$node", workload=~"$workload"')
so the cluster view and the one-workload view read the same expressions.
"""
from __future__ import annotations

from gpulse.analysis.thresholds import value

from .common import node_major_rows

BUSY_5M = "node_gpu:gpulse_gpu_busy:ratio_rate5m"
ACTIVE_5M = "node_gpu:gpulse_gpu_active:ratio_rate5m"
BUSY_1M = "node_gpu:gpulse_gpu_busy:ratio_rate1m"
ACTIVE_1M = "node_gpu:gpulse_gpu_active:ratio_rate1m"
PEER_DEV = "node_gpu:gpulse_gpu_active:peer_deviation5m"
PEER_GAP = "node_gpu:gpulse_gpu_active:peer_gap_ratio5m"
BUSY_PEER_DEV = "node_gpu:gpulse_gpu_busy:peer_deviation5m"
BUSY_PEER_GAP = "node_gpu:gpulse_gpu_busy:peer_gap_ratio5m"
STALL_RATIO = "node_workload:gpulse_group_sync_stall:ratio_rate5m"

# What makes a GPU a straggler, as the GpulseStragglerGPU alert judges it: a
# robust z-score beyond 3.5 against its peers AND at least 10 points of time
# away from their median, in either signal (active finds a hot straggler, busy
# a cold one). The panels list exactly what would page.
OUTLIER_Z = value("straggler_z")
OUTLIER_GAP = value("straggler_gap_ratio")


def selected_ratio(rule_window: str, sel: str) -> str:
    """The per-GPU 0..1 series the `metric` variable selects, one per (node, gpu):
    the busy or active recording rule of the given window ("1m" or "5m"), or the
    mean power draw over the step as a fraction of the power limit. Only the
    selected branch matches any metric name (see common.METRIC_CHOICES).

    `max by (node, gpu)` merges the pieces of a GPU whose attribution labels
    changed during the range into one row. Power is averaged over the step
    because a gauge sampled once a step aliases; the limit hardly ever changes,
    so its latest value is enough. Dividing before aggregating is the cheaper
    order (measured by bench/dashboards_scale.py)."""
    return (f'max by (node, gpu) (\n'
            f'  {{__name__=~"node_gpu:gpulse_gpu_${{metric}}:ratio_rate{rule_window}", {sel}}}\n'
            f'  or\n'
            f'  avg_over_time({{__name__=~"gpulse_gpu_${{metric}}_watts", {sel}}}[$__interval])\n'
            f'    / {{__name__=~"gpulse_gpu_${{metric}}_limit_watts", {sel}}}\n'
            f')')


def heatmap_rows(sel: str) -> str:
    """Long-range heatmap: the 5m recording rules evaluated every minute (one
    value per GPU per minute whatever the scrape interval), one row per GPU."""
    return node_major_rows(selected_ratio("5m", sel))


def status_rows(sel: str) -> str:
    """Short-range variant: the 1m rules, which follow every scrape."""
    return node_major_rows(selected_ratio("1m", sel))


def _by_signal(active: str, busy: str) -> str:
    """Both signals of a per-GPU quantity as one vector, told apart by `signal`."""
    return (f'label_replace({active}, "signal", "active", "", "")\n'
            f'or\nlabel_replace({busy}, "signal", "busy", "", "")')


def outliers(sel: str, k: int = 10) -> str:
    """The k GPUs furthest from their peers' median in either signal, either way."""
    worst = _by_signal(f"abs({PEER_DEV}{{{sel}}})", f"abs({BUSY_PEER_DEV}{{{sel}}})")
    return f"topk({k}, max without (signal) (\n{worst}\n))"


def straggler_table(sel: str) -> dict[str, str]:
    """Column name -> instant query, for the current top outliers."""
    top = outliers(sel)
    return {
        "active deviation": f"{PEER_DEV}{{{sel}}} and {top}",
        "active gap": f"{PEER_GAP}{{{sel}}} and {top}",
        "busy deviation": f"{BUSY_PEER_DEV}{{{sel}}} and {top}",
        "busy gap": f"{BUSY_PEER_GAP}{{{sel}}} and {top}",
    }


def outlier_gap(sel: str) -> str:
    """Gap to the peer median of every GPU the straggler alert would flag, with
    the signal that flags it."""
    def flagged(gap: str, dev: str) -> str:
        return (f"{gap}{{{sel}}} and abs({gap}{{{sel}}}) >= {OUTLIER_GAP}"
                f" and abs({dev}{{{sel}}}) > {OUTLIER_Z}")
    return _by_signal(f"({flagged(PEER_GAP, PEER_DEV)})", f"({flagged(BUSY_PEER_GAP, BUSY_PEER_DEV)})")


def per_workload_or_node(workload_expr: str, node_expr: str) -> str:
    """One line per workload; when no GPU carries a workload (attribution off),
    one line per node instead. `or on()` adds the right side only when the left
    side is empty."""
    return f"{workload_expr}\nor on()\n{node_expr}"
