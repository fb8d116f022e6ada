"""Panel constructors with gpulse's house style.

Each takes the title, a description that tells the reader how to read the panel,
a unit and the queries, so no dashboard can leave one of them out.
"""
from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, stat, statetimeline, statushistory, table, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm

from .common import CELLS_NO_DATA, RATIO, datasource_ref


def _finish(panel, title: str, description: str, unit: str, queries, h: int, w: int):
    panel = panel.title(title).description(description).unit(unit).datasource(datasource_ref())
    if any("${cells}" in q.build().expr for q in queries):
        panel = panel.no_value(CELLS_NO_DATA)
    for q in queries:
        panel = panel.with_target(q)
    return panel.height(h).span(w)


def _thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (db.ThresholdsConfig()
            .mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value=v, color=c) for v, c in steps]))


def _legend(table_mode: bool = False, calcs: list[str] | None = None) -> cb.VizLegendOptions:
    lg = cb.VizLegendOptions().show_legend(True).placement(
        cm.LegendPlacement.RIGHT if table_mode else cm.LegendPlacement.BOTTOM)
    lg = lg.display_mode(cm.LegendDisplayMode.TABLE if table_mode else cm.LegendDisplayMode.LIST)
    if calcs:
        lg = lg.calcs(calcs)
    return lg


def time_series(title: str, description: str, unit: str, *queries, h: int = 8, w: int = 12,
                min_val: float | None = None, max_val: float | None = None,
                stack: bool = False, bars: bool = False, legend_calcs: list[str] | None = None,
                interval: str = "", max_data_points: int | None = None) -> timeseries.Panel:
    p = (timeseries.Panel()
         .line_width(1)
         .fill_opacity(60 if stack or bars else 10)
         .show_points(cm.VisibilityMode.NEVER)
         .span_nulls(False)
         .legend(_legend(table_mode=bool(legend_calcs), calcs=legend_calcs))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if bars:
        p = p.draw_style(cm.GraphDrawStyle.BARS)
    if stack:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    if interval:
        p = p.interval(interval)
    if max_data_points:
        p = p.max_data_points(max_data_points)
    return _finish(p, title, description, unit, queries, h, w)


# How Grafana 11.6 draws these heatmaps (grafana/grafana, public/app/plugins/
# panel/heatmap/fields.ts, prepareHeatmapData; public/app/features/transformers/
# calculateHeatmap/heatmap.ts, rowsToCellsHeatmap): with `calculate: false` and
# several series, the frames are outer-joined on time in the order the data
# source returned them (re-sorted only when every series name parses as a
# number, like Prometheus `le` buckets) and every value field becomes one
# ordinal row (`yOrdinalDisplay`), labelled with its display name (our legend
# format). So the row order is Prometheus' result order, which the queries set
# through the `device` label (queries._rows), and a cell's width is the query
# step. The step is $__interval: the frontend divides the range by
# maxDataPoints and rounds it (rangeutil.calculateInterval), never below the
# panel's min interval or the data source's scrape interval; the backend
# (pkg/promlib, calculatePrometheusInterval) sends the same as the step.
# testing/grafana_queries.grafana_timing reproduces both. Field data links are
# attached per row field (`field.getLinks` in prepareHeatmapData), so
# `${__field.labels.node}` is the clicked row's node.
HEATMAP_AXIS_PX = 120   # y-axis width shared by the GPU rows and the strip, so time columns line up


def _rows_heatmap(color: heatmap.HeatmapColorOptions, value: str, max_data_points: int) -> heatmap.Panel:
    """Every series a row (calculate off), on a fixed 0..1 colour scale."""
    return (heatmap.Panel()
            .calculate(False)
            # The default filter (le: 1e-9) hides zero cells, which would paint an
            # idle GPU like a missing one; anything at or above 0 is drawn.
            .filter_values(heatmap.FilterValueRange().le(-1e-9))
            .color(color.scale(hm.HeatmapColorScale.LINEAR).min(0).max(1))
            .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.UNKNOWN).value(value))
            # First series at the top, as in a table of GPUs.
            .y_axis(heatmap.YAxisConfig().reverse(True).axis_placement(cm.AxisPlacement.LEFT)
                    .axis_width(HEATMAP_AXIS_PX))
            .cell_gap(0)
            .cell_values(heatmap.CellValues().unit(RATIO).decimals(0))
            .show_value(cm.VisibilityMode.NEVER)
            .show_legend()
            .mode(cm.TooltipDisplayMode.SINGLE)
            .max_data_points(max_data_points)
            .min(0).max(1))


def gpu_heatmap(title: str, description: str, *queries, h: int = 20, w: int = 24,
                max_data_points: int, interval: str = "", links=()) -> heatmap.Panel:
    """Colour = a 0..1 share in gpulse's palette (dark = idle, bright = working)."""
    from gpulse.palette import GRAFANA_SCHEME

    p = _rows_heatmap(heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme(GRAFANA_SCHEME)
                      .steps(64), "share of time", max_data_points)
    if interval:
        p = p.interval(interval)
    if links:
        p = p.data_links(list(links))
    return _finish(p, title, description, RATIO, queries, h, w)


def stall_strip(title: str, description: str, *queries, h: int = 4, w: int = 24,
                max_data_points: int) -> heatmap.Panel:
    """One row per peer group, the share of each cell's time in sync stalls,
    in the one stall colour: transparent at 0, solid at 100 %."""
    from gpulse.palette import STALL_HEX

    p = _rows_heatmap(heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.OPACITY).fill(STALL_HEX),
                      "stalled", max_data_points)
    return _finish(p, title, description, RATIO, queries, h, w)


def status_history(title: str, description: str, *queries, h: int = 14, w: int = 24,
                   time_from: str, max_data_points: int, interval: str, links=()) -> statushistory.Panel:
    """The same rows as the heatmap as discrete cells with values, for short
    ranges, in the same palette and direction (Grafana's continuous colour
    mode of the same scheme)."""
    from gpulse.palette import GRAFANA_SCHEME

    p = (statushistory.Panel()
         .time_from(time_from)
         .max_data_points(max_data_points)
         .interval(interval)
         .show_value(cm.VisibilityMode.NEVER)
         .row_height(0.9)
         .col_width(0.95)
         .legend(cb.VizLegendOptions().show_legend(False).display_mode(cm.LegendDisplayMode.HIDDEN)
                 .placement(cm.LegendPlacement.BOTTOM))
         .color_scheme(db.FieldColor().mode(f"continuous-{GRAFANA_SCHEME.lower()}"))
         .min(0).max(1))
    if links:
        p = p.data_links(list(links))
    return _finish(p, title, description, RATIO, queries, h, w)


def state_timeline(title: str, description: str, unit: str, *queries, mappings, h: int = 8,
                   w: int = 12) -> statetimeline.Panel:
    p = (statetimeline.Panel()
         .show_value(cm.VisibilityMode.NEVER)
         .merge_values(True)
         .mappings(mappings)
         .legend(cb.VizLegendOptions().show_legend(True).display_mode(cm.LegendDisplayMode.LIST)
                 .placement(cm.LegendPlacement.BOTTOM)))
    return _finish(p, title, description, unit, queries, h, w)


def value_text(mapping: dict[str, tuple[str, str]]) -> list:
    """Value mappings {value: (text, colour)}."""
    return [dm.ValueMap(options={k: dm.ValueMappingResult(text=t, color=c, index=i)
                                 for i, (k, (t, c)) in enumerate(mapping.items())})]


def stat_panel(title: str, description: str, unit: str, *queries, h: int = 4, w: int = 6,
               thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),),
               reducer: str = "lastNotNull", mappings=None) -> stat.Panel:
    p = (stat.Panel()
         .graph_mode(cm.BigValueGraphMode.AREA)
         .color_mode(cm.BigValueColorMode.VALUE)
         .reduce_options(cb.ReduceDataOptions().calcs([reducer]).values(False))
         .thresholds(_thresholds(*thresholds)))
    if mappings:
        p = p.mappings(mappings)
    return _finish(p, title, description, unit, queries, h, w)


def table_panel(title: str, description: str, unit: str, *queries, h: int = 8, w: int = 12,
                transformations: list[dm.DataTransformerConfig] = (),
                field_units: dict[str, str] | None = None, sort_by: str = "",
                sort_desc: bool = True) -> table.Panel:
    p = table.Panel().filterable(True).show_header(True)
    for t in transformations:
        p = p.with_transformation(t)
    for name, u in (field_units or {}).items():
        p = p.override_by_name(name, [dm.DynamicConfigValue(id_val="unit", value=u)])
    if sort_by:
        p = p.sort_by([cb.TableSortByFieldState().display_name(sort_by).desc(sort_desc)])
    return _finish(p, title, description, unit, queries, h, w)


def merge_table(rename: dict[str, str], hide: tuple[str, ...] = ("Time", "__name__", "instance", "job")) -> list:
    """Instant table queries joined on their labels into one row per series."""
    return [
        dm.DataTransformerConfig(id_val="merge", options={}),
        dm.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {h: True for h in hide},
            "renameByName": dict(rename),
            "indexByName": {},
        }),
    ]


def straggler_table(title: str, description: str, columns: dict[str, str], *, h: int = 8,
                    w: int = 12, links=()) -> table.Panel:
    """One row per outlier GPU, a column per instant query (z-scores and gaps)."""
    from .common import RATIO, ZSCORE, query

    refs = [chr(ord("A") + i) for i in range(len(columns))]
    targets = [query(expr, "", ref, instant=True, table=True) for ref, expr in zip(refs, columns.values())]
    rename = {f"Value #{ref}": name for ref, name in zip(refs, columns)}
    gap_units = {name: RATIO for name in columns if "gap" in name}
    p = table_panel(title, description, ZSCORE, *targets, transformations=merge_table(rename),
                    field_units=gap_units, sort_by=next(iter(columns)), h=h, w=w)
    return p.data_links(list(links)) if links else p
