"""The Prometheus requests Grafana would send for a dashboard's panels.

Reads the generated dashboard JSON (no SDK needed), and reproduces how Grafana
(11.x, frontend + backend Prometheus datasource) turns a panel target into a
query: the step from the time range, the panel's max data points and min
interval and the datasource scrape interval; then `$__interval`,
`$__rate_interval`, `$__range` and the dashboard variables substituted in the
expression. The tests run these against a real Prometheus and the scale bench
times them, so both exercise exactly what a browser would ask for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

# Grafana's interval rounding table (rangeutil.roundInterval / intervalv2):
# (upper bound exclusive, rounded value), in milliseconds.
_ROUND_MS = (
    (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
    (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000),
    (45000, 30000), (90000, 60000), (210000, 120000), (450000, 300000), (750000, 600000),
    (1050000, 900000), (1500000, 1200000), (2700000, 1800000), (5400000, 3600000),
    (9000000, 7200000), (16200000, 10800000), (32400000, 21600000), (86400000, 43200000),
    (604800000, 86400000), (1814400000, 604800000), (3628800000, 2592000000),
)
_SAFE_RESOLUTION = 11000     # Prometheus refuses more than 11,000 points per series
_DEFAULT_SCRAPE = "15s"


def round_interval_ms(ms: float) -> int:
    for bound, value in _ROUND_MS:
        if ms < bound:
            return value
    return 31536000000


_DUR_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_DUR_MS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000, "w": 604800000, "y": 31536000000}


def parse_duration_ms(text: str) -> int:
    """'15s', '1m', '1h30m' -> milliseconds (Grafana's interval syntax)."""
    text = text.strip()
    parts = _DUR_RE.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return int(sum(float(n) * _DUR_MS[u] for n, u in parts))


def format_interval(ms: int) -> str:
    """Grafana's gtime.FormatInterval: the largest whole unit."""
    for unit, size in (("y", 31536000000), ("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            return f"{ms // size}{unit}"
    return "1ms"


def go_duration(ms: int) -> str:
    """Go's time.Duration.String(), which Grafana uses for $__rate_interval."""
    if ms % 1000:
        return f"{ms / 1000:g}s" if ms < 60000 else go_duration(ms - ms % 1000)
    s = ms // 1000
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


@dataclass(frozen=True)
class Timing:
    range_ms: int
    interval_ms: int        # what the frontend computed (panel min interval applied)
    step_ms: int            # the step sent to Prometheus; also $__interval
    rate_interval_ms: int   # $__rate_interval


def grafana_timing(range_ms: int, max_data_points: int, *, panel_interval: str = "",
                   target_interval: str = "", scrape_interval: str = _DEFAULT_SCRAPE) -> Timing:
    """Step and interval variables for one target, as Grafana computes them."""
    scrape = scrape_interval or _DEFAULT_SCRAPE
    # Frontend (PanelQueryRunner + rangeutil.calculateInterval): the panel's
    # "min interval", else the datasource scrape interval, is a lower bound.
    low = parse_duration_ms(panel_interval or scrape)
    interval_ms = max(round_interval_ms(range_ms / max_data_points), low)
    # Backend (promlib calculatePrometheusInterval): a target-level interval
    # replaces the frontend's as the minimum; the result is never finer than
    # range/11000.
    minimum = parse_duration_ms(target_interval) if target_interval and not target_interval.startswith("$") \
        else interval_ms
    calculated = range_ms / max_data_points
    step = minimum if calculated < minimum else round_interval_ms(calculated)
    step = max(step, round_interval_ms(range_ms / _SAFE_RESOLUTION))
    scrape_ms = parse_duration_ms(target_interval if target_interval and not target_interval.startswith("$")
                                  else scrape)
    rate = max(interval_ms + scrape_ms, 4 * scrape_ms)
    return Timing(range_ms=range_ms, interval_ms=interval_ms, step_ms=step, rate_interval_ms=rate)


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str          # dashboard title
    panel: str              # panel title
    panel_type: str
    ref: str
    expr: str               # as written in the dashboard, variables unsubstituted
    instant: bool
    panel_interval: str
    target_interval: str
    max_data_points: int | None
    time_from: str | None   # the panel's relative time override, e.g. "30m"

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel} [{self.ref}]"

    def range_ms(self, dashboard_range_ms: int) -> int:
        return parse_duration_ms(self.time_from) if self.time_from else dashboard_range_ms

    def timing(self, dashboard_range_ms: int, width_px: int = 1920, scrape_interval: str = _DEFAULT_SCRAPE) -> Timing:
        return grafana_timing(self.range_ms(dashboard_range_ms), self.max_data_points or width_px,
                              panel_interval=self.panel_interval, target_interval=self.target_interval,
                              scrape_interval=scrape_interval)


def _panels(dashboard: Mapping) -> Iterator[Mapping]:
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", []) or []


def panel_queries(dashboard: Mapping) -> Iterator[PanelQuery]:
    """Every Prometheus target of every panel, collapsed rows included."""
    for p in _panels(dashboard):
        for t in p.get("targets", []) or []:
            if t.get("hide"):
                continue
            yield PanelQuery(
                dashboard=dashboard.get("title", ""), panel=p.get("title", ""), panel_type=p.get("type", ""),
                ref=t.get("refId", ""), expr=t.get("expr", ""), instant=bool(t.get("instant")) and not t.get("range"),
                panel_interval=p.get("interval", "") or "", target_interval=t.get("interval", "") or "",
                max_data_points=p.get("maxDataPoints"), time_from=(p.get("timeFrom") or None),
            )


def variable_defaults(dashboard: Mapping) -> dict[str, dict]:
    """name -> the variable's definition, for allValue/multi lookups."""
    return {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}


def _regex_escape(value: str) -> str:
    # Grafana's prometheusSpecialRegexEscape for multi-value variables.
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def format_value(var: Mapping, value: str | Sequence[str]) -> str:
    """A variable's text in a query, as Grafana's Prometheus datasource writes it."""
    if value == "$__all" or value == ["$__all"]:
        if var.get("allValue"):
            return var["allValue"]
        value = [o["value"] for o in var.get("options", []) if o.get("value") != "$__all"]
    if isinstance(value, str):
        return _regex_escape(value) if var.get("multi") or var.get("includeAll") else value
    escaped = [_regex_escape(v) for v in value]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


_VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(expr: str, timing: Timing, variables: Mapping[str, str]) -> str:
    """Replace Grafana's built-in and dashboard variables. `variables` holds the
    already formatted text of each dashboard variable (see format_value)."""
    range_s = int(round(timing.range_ms / 1000))
    builtins = {
        "__interval": format_interval(timing.step_ms),
        "__interval_ms": str(timing.step_ms),
        "__rate_interval": go_duration(timing.rate_interval_ms),
        "__rate_interval_ms": str(timing.rate_interval_ms),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(timing.range_ms),
    }

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtins:
            return builtins[name]
        if name in variables:
            return variables[name]
        if name.isdecimal():   # a regex group ($1 in label_replace): Grafana leaves it as written
            return m.group(0)
        raise KeyError(f"no value for variable ${name} in {expr!r}")

    return _VAR_RE.sub(repl, expr)


def fixed_values(dashboard: Mapping) -> dict[str, str]:
    """The current value of each custom and constant variable (the ones a user
    picks from a fixed list or never sees), formatted for a query."""
    out = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "custom":
            out[v["name"]] = format_value(v, v["current"]["value"])
        elif v.get("type") == "constant":
            out[v["name"]] = v["query"]
    return out


def choices(dashboard: Mapping, name: str) -> list[str]:
    """The option values of a custom variable, e.g. every `metric` choice."""
    return [o["value"] for v in dashboard.get("templating", {}).get("list", []) if v["name"] == name
            for o in v.get("options", [])]
