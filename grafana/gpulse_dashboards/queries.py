"""PromQL shared by several dashboards, written once.

Selectors are passed in as matcher text (e.g. 'node=~"$node", workload=~"$workload"')
so the cluster view and the one-workload view read the same expressions.

How a heatmap cell gets its colour
----------------------------------
A cell spans one query step, which Grafana also substitutes as `$__interval`.
The exporter integrates every GPU's sub-second samples into counters, so the
share of a cell's time spent working is

    (C(t) - C(t - $__interval)) / (sampled(t) - sampled(t - $__interval))

with C the busy or active seconds counter read at the cell's two edges. That is
exact for the cell's own span, whatever its length, and neighbouring cells tile
the time axis without overlap. `increase(C[$__interval])` would not do: a
window one scrape long holds a single sample and returns nothing, and a longer
one ($__rate_interval) smears a 15 s stall over several cells. `C offset I`
reads the latest sample at or before t - I, the same lookback as `C` itself.
After a counter reset the sampled delta is negative and `> 0` drops the cell.
"""
from __future__ import annotations

from gpulse.analysis.thresholds import value
from gpulse.palette import SPIN_WEIGHT
# the recording rules' names, written once for the rule templates and the dashboards
from gpulse.rulenames import (CELL_RATIO, CELL_SECONDS, CELLS_1M, GPU_ACTIVE_DEV_5M as PEER_DEV, GPU_ACTIVE_GAP_5M as PEER_GAP,
                              GPU_BUSY_DEV_5M as BUSY_PEER_DEV, GPU_BUSY_GAP_5M as BUSY_PEER_GAP,
                              GPU_PEER_WAIT_5M as PEER_WAIT, INCREASE, INCREASE_15S as INCREMENTS,
                              NODE_ACTIVE_DISTANCE_1M as NODE_DISTANCE, OTHER_NODES_LOST_5M,
                              WNODE_DEV_5M as NODE_PEER_DEV, WNODE_PEER_WAIT_5M as NODE_PEER_WAIT, cells)

# What makes a GPU a straggler, as the GpulseStragglerGPU alert judges it: it
# costs its peers at least straggler_cost_ratio of their time (PEER_WAIT: hot, it
# computes while they wait; cold, its rank is off the GPU while they spin-wait)
# AND its gap stands out of the group's spread by a robust z-score beyond
# straggler_z. The panels list exactly what would page.
OUTLIER_Z = value("straggler_z")
OUTLIER_COST = value("straggler_cost_ratio")

# The work score (palette.work_score) is active + SPIN_WEIGHT x spin-wait. Since
# spin-wait = busy - active wherever activity does not exceed utilisation (always
# for power-gated activity, and what SM activity is physically), with a weight
# of one half the score is the plain mean of the active and busy shares. That
# is what lets the `metric` variable select it like any single counter (the
# counters to average are spliced into the metric name), from raw counters and
# from the 5m recording rules alike.
assert SPIN_WEIGHT == 0.5, "the dashboards' work score is mean(active, busy); see queries.py"


# Where a cell's data comes from: the `cells` variable (common.CELLS_CHOICES)
# holds the metric-name suffix of that data, and every branch of a cell query
# names its own data with it, so only the chosen branch matches any series and
# Prometheus reads (and computes on) only that one. The branches are joined with
# `or`; see last_is_default for the order.
# INCREMENTS names the gpulse.gpu.cells15s records (the default). The cell records
# (gpulse.rulenames.cells: node_gpu, node and workload levels; INCREMENTS and
# CELLS_1M): `signal` is the "Colour by" value of a work series, or "sampled" for the
# time the samples covered, both written by one rule so that a cell's two sums read
# the same scrapes (prometheus/templates/gpulse-recording.rules.yml).


def last_is_default(branches: tuple[str, ...]) -> str:
    """Gated branches joined with `or` in one flat chain, the default choice's
    branch last. Prometheus 2.42 does not skip an `or` with one side empty:
    every binary operator the data passes through copies it step by step, and
    an `or` puts its left side's rows in a map at every step where its right
    side's are only looked up (at 1,024 GPUs x 240 cells, about 0.1 s of CPU as
    the right side, 0.2 s as the left; bench/dashboards_scale.py), while one
    between two empty sides costs nothing. `or` is left-associative, so in a
    flat chain the last branch's data passes one `or`, as its right side."""
    return "\nor\n".join(f"(\n{b}\n)" if "\nor\n" in b else b for b in branches)

# Row order (`order`, common.ORDER_CHOICES) gates its branches the same way: the
# natural-order branch adds NATURAL to its selectors, the worst-first branch
# RANKED. `natural` names no metric and `.+` every one, so exactly one branch
# reads data, and natural order (the default) pays nothing for the rank join.
NATURAL = '__name__!~"${order}"'
RANKED = '__name__=~"${order}"'


def _by(level: str) -> str:
    return {"node_gpu": "cluster, node, gpu", "node": "cluster, node", "workload": "cluster, workload"}[level]


# A cell one evaluation of the 15 s records long (`$__interval` equal to their
# interval: the GPU heatmap's cells up to a 1-hour range) reads the share recorded
# already divided (CELL_RATIO, levels RATIO_LEVELS); a longer cell sums the
# increments and divides. `$__interval` is spliced into a name matcher the way
# `${order}` is (NATURAL, RANKED): ONE_EVALUATION matches the records' names only
# when the cell is one evaluation long, LONGER only when it is not, so exactly one
# branch reads data.
ONE_EVALUATION = f'__name__=~".+:{INCREASE}$__interval"'
LONGER = f'__name__!~".+:{INCREASE}$__interval"'
RATIO_LEVELS = ("node_gpu",)


def recorded_cells(level: str, sel: str, by: str = "") -> str:
    """recorded_cell_branches joined, the default (one evaluation's cells) last."""
    return last_is_default(recorded_cell_branches(level, sel, by))


def recorded_cell_branches(level: str, sel: str, by: str = "") -> tuple[str, ...]:
    """Cells from the gpulse.gpu.cells15s records (level node_gpu, node or
    workload): the sum of the 15 s increments a cell holds over the sum of their
    sampled time, one division per row at query time; with `by`, each side
    summed by those labels first (rows of several records). Where the level
    records its share already divided (RATIO_LEVELS) and a cell is one
    evaluation long, the cell is that share, the same value without the
    division at every step: a second branch, last.

    The window is the cell shifted 1 ms later (`offset -1ms`): Prometheus 2.x
    windows include both ends, so where the evaluations fall on the cells'
    edges (as `promtool tsdb create-blocks-from rules` places them) the
    evaluation at the cell's start, which closes the cell before, is left out
    and the one at its end is in. A cell then holds the increments ending
    within it, and neighbouring cells tile the time axis: exact at every cell
    length, one evaluation (15 s, ranges up to an hour on a full panel) or
    several, in one expression, so without the shares the default cells pass
    no `or` between two kinds of cell, and with them the shares are the last
    branch, the right side of their one `or` (last_is_default;
    bench/dashboards_scale.py). The recorded share is read with
    avg_over_time, which is the share itself for the one evaluation a cell of
    that length holds, and stays in 0..1 should a ruler's jitter ever put two
    in one window."""
    ratio = level in RATIO_LEVELS and not by
    gate = f"{LONGER}, " if ratio else ""

    def pick(signal: str) -> str:
        return f'{{__name__="{level}:{CELL_SECONDS}:{INCREMENTS}", __name__=~"{level}:{CELL_SECONDS}:${{cells}}", ' \
               f'{gate}signal="{signal}", {sel}}}'
    work, sampled = (f"sum_over_time({pick(s)}[$__interval] offset -1ms)" for s in ("${metric}", "sampled"))
    if by:
        return (f"sum by ({by}) ({work})\n/ sum by ({by}) ({sampled})",)
    divided = f"{work}\n/ ignoring (signal) {sampled}"
    if not ratio:
        return (divided,)
    return (divided, f'avg_over_time({{__name__="{level}:{CELL_RATIO}:{INCREMENTS}", '
                     f'__name__=~"{level}:{CELL_RATIO}:${{cells}}", {ONE_EVALUATION}, signal="${{metric}}", '
                     f'{sel}}}[$__interval] offset -1ms)')


def cell_ratio(sel: str, by: str = "node, gpu") -> str:
    """The 0..1 value of each heatmap cell, one series per `by` group, from the
    data that is not the 15 s cell records (see recorded_cells).

    `${metric}` is a regex alternation of counter names (`active|busy` for the
    work score, `busy`, `active`, `power`) and `${cells}` the name suffix of
    the data the cells are read from: `seconds_total` (raw counters, exact per
    cell, no recording rules needed), `cells1m` (the same counters merged per
    GPU once a minute by a recording rule: exact for cells of whole minutes) or
    `ratio_rate5m` (the downsampled recording rules, for ranges longer than raw
    data is kept).

    The mean over the selected counters is taken on the counters themselves
    (`avg by` of a plain selector keeps the two names apart; a function would
    drop them and make the two series of one GPU collide), then differenced
    over the cell. `avg`/`max by (node, gpu)` also merges the pieces of
    a GPU whose attribution labels changed: only one piece is live at a time.
    """
    gpu = "node, gpu" if by in ("node, gpu", "node") else f"node, gpu, {by}"
    counters = f'{{__name__=~"gpulse_gpu_(${{metric}})_${{cells}}", {sel}}}'
    sampled = f'{{__name__=~"gpulse_gpu_sampled_${{cells}}", {sel}}}'

    def delta(agg: str, selector: str) -> str:
        return f"({agg} by ({gpu}) ({selector}) - {agg} by ({gpu}) ({selector} offset $__interval))"

    work, covered = delta("avg", counters), delta("max", sampled)
    if by != gpu:
        work, covered = f"sum by ({by}) {work}", f"sum by ({by}) {covered}"
    raw = f"{work}\n/ ({covered} > 0)"
    # the 5m rules are evaluated once a minute: a cell shows the 5-minute mean
    # ending at its end (the whole cell up to 5-minute cells, its end beyond)
    rules = f'avg by ({by}) ({{__name__=~"node_gpu:gpulse_gpu_(${{metric}}):${{cells}}", {sel}}})'
    # the 1m cell rules (gpulse.gpu.cells): the same counters, merged per GPU
    # once a minute, so a cell is one subtraction per GPU. Exact for cells of
    # whole minutes; the readings are the group's evaluations, up to a minute
    # before the cell's edges, so the cells lag the raw ones by under a minute.
    def fast(signal: str) -> str:
        return (f'{{__name__=~"node_gpu:{CELL_SECONDS}:${{cells}}", __name__=~".+:{CELLS_1M}", '
                f'signal="{signal}", {sel}}}')

    def fast_delta(selector: str) -> str:
        d = f"({selector} - {selector} offset $__interval)"
        return d if by == gpu else f"sum by ({by}) {d}"
    # `signal` holds the "Colour by" value itself; Grafana 11.6 puts a single-value
    # custom variable into a Prometheus query without regex escaping
    # (interpolateQueryExpr -> prometheusRegularEscape: backslashes and single
    # quotes only, packages/grafana-prometheus/src/datasource.ts), so
    # `signal="active|busy"` matches the label as written.
    work_1m = fast_delta(fast("${metric}"))
    covered_1m = fast_delta(fast("sampled"))
    ignoring = " ignoring (signal)" if by == gpu else ""
    fast_cells = f"{work_1m}\n/{ignoring} ({covered_1m} > 0)"
    # a power gauge sampled once a scrape aliases; its mean over the cell does
    # not. The limit hardly ever changes, so its latest value is enough.
    power = (f'avg by ({by}) (\n'
             f'  avg_over_time({{__name__=~"gpulse_gpu_(${{metric}})_watts", {sel}}}[$__interval])\n'
             f'  / {{__name__=~"gpulse_gpu_(${{metric}})_limit_watts", {sel}}}\n)')
    return f"(\n{raw}\n)\nor\n(\n{fast_cells}\n)\nor\n{rules}\nor\n{power}"


def row_key(expr: str) -> str:
    """The `device` row key the gpulse.gpu.cells15s records carry, for the cells
    computed at query time: node, then the GPU index zero-padded to two digits
    (node/07 before node/12; MIG "0/1" follows GPU 0). Prometheus returns a range
    result sorted by its label set, label name by label name, and `device`
    sorts before every other label on these series but `cluster`, so rows come
    cluster by cluster, node by node, GPUs in index order."""
    return (f'label_replace(label_join(\n{expr},\n"device", "/", "node", "gpu"),\n'
            f'"device", "$1/0$2", "device", "([^/]*)/([0-9](/.*)?)")')


def _ranked(expr: str, by: str, rank: str, key: str) -> str:
    """`expr` with `rank` (count_values, see _rank; it carries the row's `key`
    label) put in front of its row key, so the most deviant rows sort first.
    The new key is built on the rank vector, which `@ end()` makes one value
    per row for the whole range (evaluated once), and the join copies it over
    the cells' `device`: a label function over the joined cells would run at
    every step over every cell (about 0.45 s at 1,024 GPUs x 240 cells). The
    key is joined into `row` and copied to `device` from there: VictoriaMetrics
    1.79's label_join garbles its result when the target label is one of its
    sources ("1999/1999/ode-000/00" for "1999/gpu-node-000/00")."""
    return (f'(\n{expr}\n) * on ({by}) group_left (device) label_replace(label_join(\n{rank},\n'
            f'"row", "/", "rank", "{key}"), "device", "$1", "row", "(.*)")')


def _rank(share: str, by: str, peers: str) -> str:
    """A `rank` label per row: 1000 + 999 x (1 - distance of the row's mean
    active share over the whole range from its peers' median), four digits that
    sort the most deviant first. `@ end()` makes it one value per row for the
    whole range, so a row keeps its place from the first cell to the last (and
    Prometheus evaluates it once, not at every step).

    The rank is read from the same kind of data as the cells it orders,
    recorded or scraped: a ruler that adds its external labels to what it
    records (vmalert -external.label, Thanos Ruler) gives records a `cluster`
    that scraped series may lack, and a join across the two would match
    nothing. The cells computed at query time carry no `cluster` (they
    group by node, gpu) for the same reason."""
    median = f"on ({peers}) group_left () quantile by ({peers}) (0.5, {share})" if peers \
        else f"scalar(quantile(0.5, {share}))"
    return _rank_of(f"abs({share} - {median})", by)


# Worst first shows this many rows at most, those furthest from their peers: a
# fleet's thousands of rows are under a pixel each on a panel, and the rank's
# join then keeps only these rows, so Prometheus copies and returns them alone
# (2,048 nodes x 240 cells: worst first at about 0.65x natural order's CPU
# instead of 1.9x; bench/dashboards_scale.py).
WORST_ROWS = 100


def _rank_of(distance: str, by: str) -> str:
    """The `rank` label of _rank from each row's distance from its peers (0..1),
    for the WORST_ROWS furthest rows only (the join with the cells drops the rest)."""
    return (f'count_values by ({by}) ("rank", 1000 + round(999 * (1 - clamp_max(topk({WORST_ROWS}, {distance}), 1))))')


def _recorded_node_rank(sel: str) -> str:
    """_rank of the nodes from the gpulse.node.rank records: each node's distance
    from its cluster's median node, minute by minute, averaged over the range (one
    point a minute per node, where the share over the range reads every node's
    15 s sums, twice, for the share and for its median)."""
    return _rank_of(f'avg_over_time({{__name__="{NODE_DISTANCE}", {sel}}}[$__range] @ end())', "cluster, node")


def _recorded_share(level: str, sel: str, by: str) -> str:
    """Each row's active share over the whole range, from the 15 s cell records."""
    def total(signal: str) -> str:
        return (f'sum by ({by}) (sum_over_time({{__name__="{level}:{CELL_SECONDS}:{INCREMENTS}", '
                f'signal="{signal}", {sel}}}[$__range] @ end()))')
    return f"({total('active')}\n / {total('sampled')})"


def _share(sel: str, by: str) -> str:
    """Each row's active share over the whole range from the data of the other
    "Cells from" choices: raw counters, the 1m cell rules or the 5m rules (its
    mean power over its limit when coloured by power). Each
    branch names its data with `${cells}`, as the cells do, so only the chosen
    one reads anything: a rank read from the raw counters whatever the choice
    would make worst first over the 15 s records read every GPU's counters over
    the whole range for a join that matches nothing (2 s of the 16,384-GPU
    nodes overview)."""
    def total(*matchers: str) -> str:
        return f"sum by ({by}) (increase({{{', '.join((*matchers, sel))}}}[$__range] @ end()))"
    def share(work: tuple[str, ...], sampled: tuple[str, ...]) -> str:
        return f"({total(*work)}\n / {total(*sampled)})"
    m1 = f'__name__=~".+:{CELLS_1M}"'
    raw = share(('__name__=~"gpulse_gpu_active_${cells}"',), ('__name__=~"gpulse_gpu_sampled_${cells}"',))
    one_minute = share((f'__name__=~"node_gpu:{CELL_SECONDS}:${{cells}}"', m1, 'signal="active"'),
                       (f'__name__=~"node_gpu:{CELL_SECONDS}:${{cells}}"', m1, 'signal="sampled"'))
    rules = f'avg by ({by}) (avg_over_time({{__name__=~"node_gpu:gpulse_gpu_active:${{cells}}", {sel}}}[$__range] @ end()))'
    # power cells come from the gauges whatever "Cells from" says, and so does their rank
    power = (f'avg by ({by}) (avg_over_time({{__name__=~"gpulse_gpu_(${{metric}})_watts", {sel}}}[$__range] @ end())\n'
             f' / {{__name__=~"gpulse_gpu_(${{metric}})_limit_watts", {sel}}} @ end())')
    return f"(\n{raw}\nor\n{one_minute}\nor\n{rules}\nor\n{power}\n)"


def gpu_rows(sel: str) -> str:
    """Per-GPU heatmap: one row per GPU, node by node, GPUs in index order, or
    worst first (`order`): the GPUs furthest from their node's median over the
    range at the top. Every GPU with a cell has samples in the range, so none
    loses its row in worst-first order."""
    nat, rk = f"{sel}, {NATURAL}", f"{sel}, {RANKED}"
    rec, by = "cluster, node, gpu", "node, gpu"
    keyed = rec + ", device"     # the records carry their row key
    return last_is_default((
        _ranked(row_key(cell_ratio(rk, by)), by, row_key(_rank(_share(rk, by), by, "node")), "device"),
        _ranked(recorded_cells("node_gpu", rk), rec,
                _rank(_recorded_share("node_gpu", rk, keyed), keyed, "cluster, node"), "device"),
        row_key(cell_ratio(nat, by)),
        *recorded_cell_branches("node_gpu", nat)))


def node_rows(sel: str) -> str:
    """Overview: one row per node, the mean over its GPUs, from the node-level
    records (no query sums a large cluster's GPUs); worst first ranks the nodes
    by their distance from the median node, recorded from the same records
    minute by minute (_recorded_node_rank; the other "Cells from" choices, which
    sum the GPUs anyway, from their own data: _share)."""
    nat, rk = f"{sel}, {NATURAL}", f"{sel}, {RANKED}"
    # the ranked records last but one: their data passes two `or`s, not three, and
    # the natural order's default one
    return last_is_default((
        _ranked(cell_ratio(rk, "node"), "node", _rank(_share(rk, "node"), "node", ""), "node"),
        cell_ratio(nat, "node"),
        _ranked(recorded_cells("node", rk), "cluster, node", _recorded_node_rank(rk), "node"),
        recorded_cells("node", nat)))


# Whether the node filter holds every node (`node`'s All value, `.*`) gates the
# workloads overview's branches the way NATURAL/RANKED gate row order: `.*` matches
# every metric name, a node name (or an alternation of them) none.
ALL_NODES = '__name__=~"${node}"'
SOME_NODES = '__name__!~"${node}"'


def workload_rows(sel: str) -> str:
    """Overview: one row per workload, over the GPUs `sel` selects (its node filter
    included): with every node, across all its nodes from the workload-level records;
    with some nodes, the sum of those nodes' per-GPU records (their GPUs only, so
    cheap); for the other `cells` choices, the GPUs' data."""
    attributed = sel + ', workload!=""'
    return last_is_default((cell_ratio(attributed, "cluster, workload"),
                            recorded_cells("node_gpu", f"{attributed}, {SOME_NODES}", by="cluster, workload"),
                            recorded_cells("workload", f"{sel}, {ALL_NODES}")))


def stall_strip(workload_sel: str, node_sel: str | None = None) -> str:
    """Share of each cell's time every GPU of a group was stalled at once, per
    workload across its nodes (per node when GPUs carry no workload). The
    denominator is the time the group held a workload, so a job's start-up
    and the idle time after it are not counted as stalls."""
    def share(by: str, sel: str) -> str:
        def d(name: str) -> str:
            return f"({name}{{{sel}}} - {name}{{{sel}}} offset $__interval)"
        return (f"sum by ({by}) {d('gpulse_group_sync_stall_seconds_total')}\n"
                f"/ (sum by ({by}) {d('gpulse_group_sampled_seconds_total')} > 0)")
    per_workload = share("cluster, workload", f'{workload_sel}, workload!=""')
    return per_workload if node_sel is None else per_workload_or_node(per_workload, share("cluster, node", node_sel))


def stall_period_marks(workload_sel: str, node_sel: str | None = None) -> str:
    """The dominant stall period, rounded to a second, as a `period` label
    (count_values), so an annotation can print it over the spans it holds."""
    def marks(by: str, sel: str) -> str:
        return (f'count_values by ({by}) ("period", round(max by ({by}) '
                f'(gpulse_group_stall_period_seconds{{{sel}}})))')
    per_workload = marks("cluster, workload", f'{workload_sel}, workload!=""')
    return per_workload if node_sel is None else per_workload_or_node(per_workload, marks("cluster, node", node_sel))


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
    # a slow node (GpulseStragglerNode) is a row of its own, without a gpu: the
    # table lists what pages, GPUs and nodes alike
    return {
        "cost to peers": (f"({PEER_WAIT}{{{sel}}} and {top})"
                          f" or ({NODE_PEER_WAIT}{{{sel}}} >= {OUTLIER_COST})"),
        "active deviation": f"{PEER_DEV}{{{sel}}} and {top}",
        "active gap": f"{PEER_GAP}{{{sel}}} and {top}",
        "busy deviation": f"{BUSY_PEER_DEV}{{{sel}}} and {top}",
        "busy gap": f"{BUSY_PEER_GAP}{{{sel}}} and {top}",
    }


def outlier_gap(sel: str) -> str:
    """Gap to the peer median of every GPU the straggler alert would flag, with
    the signal that flags it."""
    def flagged(gap: str, dev: str) -> str:
        return (f"{gap}{{{sel}}} and {PEER_WAIT}{{{sel}}} >= {OUTLIER_COST}"
                f" and abs({dev}{{{sel}}}) > {OUTLIER_Z}")
    return _by_signal(f"({flagged(PEER_GAP, PEER_DEV)})", f"({flagged(BUSY_PEER_GAP, BUSY_PEER_DEV)})")


def per_workload_or_node(workload_expr: str, node_expr: str) -> str:
    """One line per workload; when no GPU carries a workload (attribution off),
    one line per node instead. `or on()` adds the right side only when the left
    side is empty."""
    return f"{workload_expr}\nor on()\n{node_expr}"


LOST = "gpulse_group_lost_seconds_total"


def lost_hours(sel: str, by: str) -> str:
    """GPU-hours lost over the dashboard's range, by `by` (reason and cause always):
    increase() of the exporter's counter itself, exact at any range and scrape, with
    what a straggler cost a workload's GPUs on its other nodes, which no exporter
    counts (the gpulse.lost record OTHER_NODES_LOST_5M, a rate: its integral is its
    value at each minute, a subquery's, times 60, whatever interval the ruler
    evaluates it at; its sync_stall series is negative: the other nodes' stall time
    that was that wait)."""
    return (f"sum by ({by}, reason, cause) (\n  increase({LOST}{{{sel}}}[$__range])\n"
            f"  or sum_over_time({OTHER_NODES_LOST_5M}{{{sel}}}[$__range:1m]) * 60\n) / 3600")
