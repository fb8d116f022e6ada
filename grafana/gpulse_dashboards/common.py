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

# The exact SDK release the committed JSON was generated with. Releases of the
# SDK change defaults and field order, so a different one would produce different
# JSON and the up-to-date test would (rightly) fail. 11.6.0 targets Grafana 11.6+
# (schemaVersion 41), which Grafana 12 also loads.
SDK_DIST = "grafana-foundation-sdk"
SDK_VERSION = "1769699379!11.6.0"

# The uid of the Prometheus datasource shipped in provisioning/. Dashboards never
# reference it: the datasource variable starts on Grafana's default datasource.
PROVISIONED_DATASOURCE_UID = "gpulse-prometheus"

RUNBOOK_BASE = "https://github.com/gpulse/gpulse/blob/main/docs/runbooks/"


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

# Columns of the cluster-wide per-GPU panels. Grafana rounds range/points to
# its interval table: 160 gives 2-minute steps at 4 h (120 columns), 10 at 24 h,
# 1 h at a week, so a panel of 1,024 GPUs stays near 150k values (~5 MB) and
# under a second whatever the range. Each cell is a 5-minute mean, so sampling
# it every 2 minutes skips no stall.
LONG_RANGE_POINTS = 160

# Exporter health needs no finer than a minute; at 15 s the per-bucket rate of
# the sample-loop histogram over 128 exporters costs seconds for a 4 h range.
HEALTH_INTERVAL = "1m"


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


# What the `metric` variable selects. Its value is spliced into metric names
# (`{__name__=~"node_gpu:gpulse_gpu_${metric}:ratio_rate5m"}`), so a query
# names all three choices but Prometheus only reads the series of the selected
# one: the others match no metric name and cost nothing.
METRIC_CHOICES = (("busy ratio", "busy"), ("SM activity", "active"), ("power", "power"))
DEFAULT_METRIC = "active"


def metric_variable() -> "db.CustomVariable":
    return (db.CustomVariable("metric")
            .label("Colour by")
            .description("busy ratio: a kernel was running (NVML utilisation). "
                         "SM activity: real work (SM activity, or utilisation gated by power). "
                         "power: draw as a fraction of the power limit.")
            .values(",".join(f"{text} : {value}" for text, value in METRIC_CHOICES))
            .options([dm.VariableOption(text=t, value=v, selected=(v == DEFAULT_METRIC)) for t, v in METRIC_CHOICES])
            .current(next(dm.VariableOption(text=t, value=v, selected=True)
                          for t, v in METRIC_CHOICES if v == DEFAULT_METRIC)))


def node_major_rows(expr: str) -> str:
    """Series labelled node and gpu, returned grouped by node.

    Prometheus sorts a range result by label set, name by name, so {gpu, node}
    comes back interleaved by GPU index (node-a/0, node-b/0, ...). `device`
    ("node/gpu") sorts before both, so the rows come out node by node.
    """
    return f'label_join(\n{expr.strip()},\n"device", "/", "node", "gpu")'


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
    extra = f", {matchers}" if matchers else ""
    return _Built(PromAnnotation(
        "Firing gpulse alerts",
        f'ALERTS{{alertname=~"Gpulse.*", alertstate="firing"{extra}}}',
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
            .url(RUNBOOK_BASE + page)
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
