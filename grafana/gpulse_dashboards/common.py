"""Pieces every gpulse dashboard shares: the pinned SDK, the datasource variable,
query and variable builders, alert annotations, units, and the JSON encoding.

Conventions enforced here rather than repeated in each dashboard:
- every panel and every query points at the `${datasource}` variable, never at a
  fixed datasource uid, so the same JSON works on any Grafana;
- panel ids are numbered in layout order when the dashboard is encoded, so they
  are unique and stable between runs of the generator.
"""
from __future__ import annotations

import json
from importlib import metadata

from gpulse.rulenames import CELLS_1M, INCREASE_15S, RATE_5M

from .queries import WORST_ROWS

# The exact SDK release the committed JSON was generated with. Releases of the
# SDK change defaults and field order, so a different one would produce different
# JSON and the up-to-date test would (rightly) fail. 11.6.0 targets Grafana 11.6+
# (schemaVersion 41), which Grafana 12 also loads.
SDK_DIST = "grafana-foundation-sdk"
SDK_VERSION = "1769699379!11.6.0"

# The uid of the Prometheus datasource shipped in provisioning/. Dashboards never
# reference it: the datasource variable starts on Grafana's default datasource.
PROVISIONED_DATASOURCE_UID = "gpulse-prometheus"

# Default of the constant `runbook_base` variable every runbook link is built
# from. The Helm chart substitutes this exact string with its own value, so it
# is spelled here once and nowhere else in the dashboards.
RUNBOOK_BASE = "https://github.com/gpulse/gpulse/blob/main/docs/runbooks"


class SdkMissing(RuntimeError):
    """The pinned grafana-foundation-sdk is not installed. str() is one line."""


def require_sdk() -> None:
    try:
        have = metadata.version(SDK_DIST)
    except metadata.PackageNotFoundError:
        raise SdkMissing(
            f"{SDK_DIST} is not installed; install it with: pip install '{SDK_DIST}=={SDK_VERSION}'"
        ) from None
    if have != SDK_VERSION:
        raise SdkMissing(
            f"{SDK_DIST} {have} is installed but the dashboards are pinned to {SDK_VERSION}; "
            f"install it with: pip install '{SDK_DIST}=={SDK_VERSION}'"
        )


# Everything below needs the SDK; importing this module without it is fine as
# long as only require_sdk() is used.
try:
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.builders import prometheus as prom
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import dashboard as dm
except ImportError:  # reported by require_sdk()
    db = prom = dm = JSONEncoder = None  # type: ignore[assignment]


# Grafana unit ids (grafana/packages/grafana-data valueFormats).
RATIO = "percentunit"      # 0..1 shown as a percentage
SECONDS = "s"
BYTES = "bytes"
BYTES_PER_SECOND = "Bps"
WATTS = "watt"
JOULES = "joule"
CELSIUS = "celsius"
HERTZ = "hertz"
COUNT = "short"
PER_SECOND = "cps"         # events per second
ZSCORE = "sishort"         # a dimensionless score; SI short keeps 2.5 as 2.5

# A Prometheus recording rule evaluated every minute cannot be sampled usefully
# more often than that; this is the panel "min interval" of panels reading one.
RULE_5M_INTERVAL = "1m"

# Columns of the heatmaps and the stall strip. Grafana divides the range by
# this, rounds it on its interval table and never goes below the datasource's
# scrape interval, so a cell is max(scrape interval, ~range / 240): one 15 s
# scrape up to 1 h, 1 m at 4 h, 5 m at 24 h. 240 columns are ~7 px each on a
# 1,600 px panel; the cost of a heatmap query grows with columns x rows
# (bench/dashboards_scale.py). The strip and the GPU rows share it, so their
# columns line up.
HEATMAP_POINTS = 240

# Columns of the long-range time series (imbalance, stall fraction), which
# read 5-minute recording rules: 160 gives 2-minute steps at 4 h.
LONG_RANGE_POINTS = 160

# Exporter health needs no finer than a minute; at 15 s the per-bucket rate of
# the sample-loop histogram over 128 exporters costs seconds for a 4 h range.
HEALTH_INTERVAL = "1m"

# Every selector carries this, so one dashboard serves a Thanos or Mimir that
# holds several Prometheus servers' data, told apart by an external `cluster`
# label. All is `.*`, which also matches series without the label.
CLUSTER = 'cluster=~"$cluster"'


def datasource_ref() -> "dm.DataSourceRef":
    return dm.DataSourceRef(type_val="prometheus", uid="${datasource}")


def query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
          table: bool = False, interval: str = "") -> "prom.Dataquery":
    """One Prometheus target on the datasource variable."""
    q = prom.Dataquery().expr(expr.strip()).ref_id(ref).datasource(datasource_ref())
    q = q.instant() if instant else q.range()
    if legend:
        q = q.legend_format(legend)
    if table:
        q = q.format("table")
    if interval:
        q = q.interval(interval)
    return q


def datasource_variable() -> "db.DatasourceVariable":
    return (db.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus"))


def label_variable(name: str, label: str, expr: str, *, multi: bool = True,
                   include_all: bool = True, description: str = "") -> "db.QueryVariable":
    """A variable listing the values of one label. `All` becomes `.*`, which also
    matches a missing label (e.g. `workload` when attribution is off)."""
    v = (db.QueryVariable(name)
         .label(label)
         .query(expr)
         .datasource(datasource_ref())
         .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
         .sort(dm.VariableSort.NATURAL_ASC)
         .multi(multi)
         .include_all(include_all))
    if include_all:
        v = v.all_value(".*").current(dm.VariableOption(text="All", value="$__all", selected=True))
    if description:
        v = v.description(description)
    return v


# What the `metric` variable selects: a regex alternation of the counters
# whose mean colours a cell, spliced into metric names
# (`gpulse_gpu_(${metric})_seconds_total`), so Prometheus only reads the series
# of the selected choice. The work score (default) is mean(active, busy) =
# active + 0.5 x spin-wait (see queries.py): idle dark, spin-waiting mid-tone,
# working bright, so a stall and a straggler both show in one view.
METRIC_CHOICES = (("work score", "active|busy"), ("busy ratio", "busy"), ("SM activity", "active"),
                  ("power", "power"))
DEFAULT_METRIC = "active|busy"

# Where the cells come from (the value is the metric-name suffix of that data,
# see gpulse.rulenames and queries.cell_ratio): the 15 s cell records
# (default: per-GPU counter increments recorded every 15 s, exact per cell and
# one division per GPU at query time, so a 1,024-GPU heatmap stays under a
# second), the raw counters (the same cells with no recording rules, computed
# at query time), the 1m cell rules (exact for whole-minute cells, for stores
# that keep only downsampled data) or the 5m recording rules (a 5-minute mean,
# for ranges whose raw data is gone). See docs/dashboards.md.
CELLS_CHOICES = (("15 s cell records, exact per cell", INCREASE_15S),
                 ("raw counters, exact per cell (no recording rules)", "seconds_total"),
                 ("1m rules, exact for whole-minute cells", CELLS_1M),
                 ("5m recording rules (long ranges)", RATE_5M))
DEFAULT_CELLS = INCREASE_15S
# What a panel reading "Cells from" shows instead of a bare "No data" (Grafana's
# no-data text is the panel's noValue): the default reads recording rules, and a
# Prometheus scraping gpulse without them has none of those series.
CELLS_NO_DATA = ("No data. 'Cells from' starts at the 15 s cell records, which gpulse's recording rules "
                 "write (group gpulse.gpu.cells15s in prometheus/rules/gpulse-recording.rules.yml). "
                 "Without those rules in Prometheus, pick 'raw counters' in 'Cells from'.")
# queries.NATURAL / RANKED: "natural" names no metric, ".+" every one.
ORDER_CHOICES = (("node, GPU", "natural"), (f"worst {WORST_ROWS} first", ".+"))


def _custom(name: str, label: str, description: str, choices, default: str) -> "db.CustomVariable":
    # Grafana splits a custom variable's query on commas and " : ", so values
    # holding "|" are fine; options and current are given in full so the
    # JSON does not depend on Grafana re-parsing the query.
    return (db.CustomVariable(name)
            .label(label)
            .description(description)
            .values(",".join(f"{text} : {value}" for text, value in choices))
            .options([dm.VariableOption(text=t, value=v, selected=(v == default)) for t, v in choices])
            .current(next(dm.VariableOption(text=t, value=v, selected=True) for t, v in choices if v == default)))


def metric_variable() -> "db.CustomVariable":
    return _custom("metric", "Colour by",
                   "work score: real work bright, spin-waiting in a collective mid-tone, idle dark "
                   "(active + 0.5 x spin-wait). busy ratio: a kernel was running (NVML utilisation). "
                   "SM activity: real work only. power: draw as a fraction of the power limit.",
                   METRIC_CHOICES, DEFAULT_METRIC)


def cells_variable() -> "db.CustomVariable":
    return _custom("cells", "Cells from",
                   "15 s cell records: each cell is exactly the share of its own time span, from "
                   "per-GPU counter increments a recording rule stores every 15 s (cheapest). raw "
                   "counters: the same "
                   "exact cells computed from the scraped counters, for a Prometheus without gpulse's "
                   "recording rules; costs several times more for a whole large cluster. 1m rules: "
                   "the counters read once a minute, exact for cells of whole minutes (ranges of 4 h "
                   "and more), one cell a minute below that. 5m recording rules: each cell is the "
                   "5-minute mean ending at its end (blurred over 5 minutes below 5-minute cells); "
                   "use it when raw data is no longer kept for the range.",
                   CELLS_CHOICES, DEFAULT_CELLS)


def order_variable() -> "db.CustomVariable":
    return _custom("order", "Row order",
                   f"node, GPU: node by node, GPUs in index order. worst {WORST_ROWS} first: the "
                   f"{WORST_ROWS} GPUs (nodes) furthest from their peers' median SM activity over the "
                   "range, the furthest at the top (every row where there are fewer).",
                   ORDER_CHOICES, "natural")


def cluster_variable() -> "db.QueryVariable":
    return label_variable("cluster", "Cluster", "label_values(gpulse_gpu_up, cluster)",
                          description="External `cluster` label of a Thanos or Mimir holding several "
                          "Prometheus servers; All (or no such label) shows everything.")


def runbook_variable() -> "db.ConstantVariable":
    return db.ConstantVariable("runbook_base").value(RUNBOOK_BASE)


class PromAnnotation(dm.AnnotationQuery if dm else object):  # type: ignore[misc]
    """A Prometheus annotation query with the title/text/tag fields Grafana's
    Prometheus datasource reads, which the SDK's generic model does not carry."""

    def __init__(self, name: str, expr: str, *, title: str, text: str, tag_keys: str,
                 color: str = "red", step: str = "60s") -> None:
        super().__init__(name=name, datasource=datasource_ref(), enable=True, hide=False,
                         icon_color=color, expr=expr)
        self._extra = {"titleFormat": title, "textFormat": text, "tagKeys": tag_keys,
                       "step": step, "useValueForTime": False}

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), **self._extra}


class _Built:
    """Adapts an already built model to the builder interface Dashboard expects."""

    def __init__(self, model):
        self._model = model

    def build(self):
        return self._model


def alerts_annotation(matchers: str = "") -> _Built:
    # the alerts carry `cluster` like the series they come from, so two
    # clusters with the same node or job names do not show each other's
    extra = f", {matchers}" if matchers else ""
    return _Built(PromAnnotation(
        "Firing gpulse alerts",
        f'ALERTS{{alertname=~"Gpulse.*", alertstate="firing", {CLUSTER}{extra}}}',
        title="{{alertname}}",
        text="{{severity}} {{node}} {{workload}}",
        tag_keys="alertname,severity",
    ))


def dashboard_links() -> "db.DashboardLink":
    """A drop-down of the other gpulse dashboards, keeping time range and variables."""
    return (db.DashboardLink("gpulse dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(["gpulse"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True))


def runbook_link(title: str, page: str) -> "db.DashboardLink":
    return (db.DashboardLink(title)
            .type(dm.DashboardLinkType.LINK)
            .url("${runbook_base}/" + page)
            .icon("doc")
            .target_blank(True))


def new_dashboard(uid: str, title: str, description: str, *, time_from: str = "now-6h") -> "db.Dashboard":
    return (db.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["gpulse", "gpu"])
            .editable()
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .time(time_from, "now")
            .refresh("1m")
            .timezone("browser")
            .with_variable(datasource_variable())
            .with_variable(cluster_variable())
            .with_variable(runbook_variable())
            .link(dashboard_links()))


def _number_panels(model) -> None:
    n = 0
    for p in model.panels or []:
        n += 1
        p.id_val = n
        for child in getattr(p, "panels", None) or []:
            n += 1
            child.id_val = n


def to_json(builder) -> dict:
    model = builder.build()
    _number_panels(model)
    return json.loads(json.dumps(model, cls=JSONEncoder))


class DataLink:
    """A panel data link ({title, url}); the SDK types these as dashboard links,
    whose extra fields (tags, type) a data link does not have."""

    def __init__(self, title: str, url: str):
        self.title, self.url = title, url

    def to_json(self) -> dict[str, object]:
        return {"title": self.title, "url": self.url, "targetBlank": False}


def dashboard_data_link(title: str, uid: str, params: str) -> _Built:
    """A data link to another gpulse dashboard that keeps the time range, the
    data source and the cluster. `params` uses Grafana's data-link variables,
    e.g. `var-node=${__field.labels.node}` (a heatmap row's labels) or
    `var-node=${__data.fields.node}` (a table row's column)."""
    return _Built(DataLink(title, f"/d/{uid}/?{params}&${{__url_time_range}}"
                                  "&${datasource:queryparam}&${cluster:queryparam}"))


def stall_period_annotation(expr: str) -> _Built:
    from gpulse.palette import STALL_HEX
    return _Built(PromAnnotation(
        "Recurring sync stalls", expr,
        title="recurring sync stalls every {{period}} s",
        text="{{workload}}{{node}}: dominant stall period {{period}} s",
        tag_keys="workload,node", color=STALL_HEX, step="1m"))
