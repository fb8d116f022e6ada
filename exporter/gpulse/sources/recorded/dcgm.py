"""dcgm-exporter output, recorded: exposition text (one or many scrapes), CSV exports,
or Prometheus HTTP API JSON. The field map is the live source's (sources/dcgm/), so a
live node and a log of one look the same downstream."""
from __future__ import annotations

import calendar
import itertools
import json
import re
import time
from typing import Iterable, Iterator

from ... import safetext
from ..cells import CellError, parse_any_time
from ..dcgm.fields import FIELDS, DcgmMapper, parse_exposition
from .records import Problems, Record, RunFacts

# bytes of a Prometheus API JSON answer, the one format read whole
MAX_JSON = 64 << 20

_EXPOSITION = re.compile(r"^(#\s*(HELP|TYPE)\s|DCGM_FI_\w*[\s{])")
_NAME = re.compile(r"^([A-Za-z_:][\w:]*)")
_SAMPLE_SHAPE = re.compile(r"^[A-Za-z_:][\w:]*(\{.*\})?\s+(\S+)(\s+-?\d+)?$")


def _other_sample(s: str) -> bool:
    """A well-formed exposition sample (of a metric gpulse does not read)."""
    m = _SAMPLE_SHAPE.match(s)
    if not m:
        return False
    try:
        float(m.group(2))
    except ValueError:
        return False
    return True


def sniff_csv(first: str) -> bool:
    """A CSV header naming DCGM fields, or metric and value columns."""
    names = [c.strip().strip('"').lower() for c in first.split(",")]
    return "," in first and (any(n.startswith("dcgm_fi_") for n in names) or {"value"} <= set(names) and bool(
        {"metric", "__name__", "name", "field"} & set(names)))


def sniff(head: list[str]) -> bool:
    first = head[0]
    return (first.startswith(("{", "["))          # Prometheus HTTP API JSON
            or any(_EXPOSITION.match(m) for m in head[:5]) or sniff_csv(first))


def read(lines: Iterable[str], err: Problems, interval: float, run: RunFacts) -> Iterator[Record]:
    """Recorded dcgm-exporter output -> records (see stream.LogStream).

    - exposition text: one scrape, or many appended (`curl ... >> log`). A new scrape
      starts where a series repeats; a line holding only a time (epoch seconds or ISO
      8601, as `date` prints it between curls) stamps the scrape after it. Sample
      timestamps, when present, win. Without any clock, scrapes are `interval` apart.
    - Prometheus HTTP API JSON (/api/v1/query or query_range responses), parsed whole
      and so capped at MAX_JSON.
    - CSV: wide (a time column, label columns, one column per DCGM field) or long
      (time, metric, label columns, value).
    Text and CSV stream: one scrape (or one instant's rows) is held at a time.
    """
    mapper = DcgmMapper(count_on=False)
    lines = iter(lines)
    skipped = []
    first = ""
    for ln in lines:
        skipped.append(ln)
        if ln.strip():
            first = ln.strip()
            break
    lines = itertools.chain(skipped, lines)
    if first.startswith(("{", "[")):
        size = 0
        parts = []
        for ln in lines:
            size += len(ln) + 1
            if size > MAX_JSON:
                raise err.fatal(0, f"Prometheus API JSON larger than {MAX_JSON >> 20} MiB: JSON is read whole; "
                                   "export a shorter range, or CSV or exposition text, which are streamed")
            parts.append(ln)
        scrapes = _json_scrapes("\n".join(parts), err)
        del parts
    elif not first.startswith("#") and "," in first.split("{")[0]:
        scrapes = _csv_scrapes(lines, err)     # a header row; exposition commas sit inside {}
    else:
        scrapes = _text_scrapes(lines, err, interval, run)
    for t, line, series in scrapes:
        m = mapper.map(series, t)
        for bad_line, desc in m.invalid:
            err.add(bad_line or line, f"{desc}; value dropped")
        for key, dev in m.devices.items():
            run.found.setdefault(key, dev)
        run.has_sm_active = run.has_sm_active or m.has_sm_active
        run.nodes_found.extend(h for h in m.nodes if h not in run.nodes_found)
        for reading in m.readings.values():
            yield Record(reading, line)


# (time, first line, [(name, labels, value, line)])
_Scrape = tuple[float, int, list[tuple[str, dict[str, str], float, int]]]


def _time_line(s: str) -> float | None:
    """A line holding only a time, as a logging loop writes between scrapes."""
    try:
        return parse_any_time(s)
    except CellError:
        pass
    for fmt in ("%a %b %d %H:%M:%S UTC %Y", "%a %b %d %H:%M:%S GMT %Y", "%a %b %d %H:%M:%S %Y"):
        try:
            return float(calendar.timegm(time.strptime(s, fmt)))   # `date` output
        except ValueError:
            continue
    return None


def _parse_numbered(numbered: list[tuple[int, str]]) -> tuple[list, list[tuple[int, str]]]:
    """Sample lines with their file line numbers -> ([(name, labels, value, ts, line)], bad)."""
    series, bad = parse_exposition("\n".join(s for _, s in numbered) + "\n")
    if not bad and len(series) == len(numbered):   # one sample per line: lines pair up
        return [x + (n,) for x, (n, _) in zip(series, numbered)], []
    series, bad = [], []
    for n, s in numbered:   # find the file lines: parse them one by one
        got, b = parse_exposition(s + "\n")
        series.extend(x + (n,) for x in got)
        bad.extend((n, msg) for _, msg in b)
    return series, bad


def _text_scrapes(lines: Iterable[str], err: Problems, interval: float, run: RunFacts) -> Iterator[_Scrape]:
    body: list[tuple[int, str]] = []
    body_t: float | None = None
    body_line = 0
    i = 0
    seen: set[str] = set()
    pending_t: float | None = None
    boundary = True
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        m = _NAME.match(s)
        name = m.group(1) if m and s[m.end():m.end() + 1] in ("{", " ", "\t") else None
        if name not in FIELDS:
            t = _time_line(s)
            if t is not None:
                pending_t, boundary = t, True
            elif not _other_sample(s):
                err.add(n, f"neither an exposition sample nor a time: {s[:80]!r}; skipped")
            continue      # well-formed but another exporter's metric: not ours to read
        # the series identity; a line cut inside its labels has no '}' and is reported by the parser
        close = s.rfind("}")
        key = s[:close + 1] if close >= 0 else s
        if boundary or key in seen:
            if body:
                yield from _text_scrape(body, body_t, body_line, i, err, interval, run)
                i += 1
            body, body_t, body_line = [], pending_t, n
            pending_t, boundary, seen = None, False, set()
        seen.add(key)
        body.append((n, s))
    if body:
        yield from _text_scrape(body, body_t, body_line, i, err, interval, run)


def _text_scrape(body: list[tuple[int, str]], t0: float | None, line: int, i: int, err: Problems, interval: float,
                 run: RunFacts) -> Iterator[_Scrape]:
    series, bad = _parse_numbered(body)
    for n, msg in bad:
        err.add(n, msg + "; skipped")
    if any(x[3] is not None for x in series):
        # explicit sample timestamps win: one scrape per distinct time
        by_t: dict[float, list] = {}
        for name, labels, value, ts, n in series:
            by_t.setdefault(ts if ts is not None else (t0 if t0 is not None else i * interval),
                            []).append((name, labels, value, n))
        for ts in sorted(by_t):
            yield ts, line, by_t[ts]
        return
    if t0 is None:
        run.timed = False
        t0 = i * interval
    yield t0, line, [(name, labels, value, n) for name, labels, value, _, n in series]


def _json_scrapes(text: str, err: Problems) -> Iterator[_Scrape]:
    try:
        doc = safetext.loads(text)       # lone surrogates replaced: names go into every output
    except json.JSONDecodeError as e:
        raise err.fatal(e.lineno, f"not valid JSON: {e.msg}") from None
    except RecursionError:
        raise err.fatal(0, "JSON nested too deeply to be a Prometheus API query response") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise err.fatal(1, "JSON is not a Prometheus API query response (no data.result list)")
    by_t: dict[float, list[tuple[str, dict[str, str], float, int]]] = {}
    for n, item in enumerate(result):
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or "__name__" not in metric:
            err.add(0, f"data.result[{n}]: no metric name; series skipped")
            continue
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        labels = {k: str(v) for k, v in metric.items() if k != "__name__"}
        for p in points:
            try:
                ts, v = float(p[0]), float(p[1])
            except (TypeError, ValueError, IndexError):
                err.add(0, f"data.result[{n}]: bad point {p!r}; skipped")
                continue
            by_t.setdefault(ts, []).append((metric["__name__"], labels, v, 0))
    for ts in sorted(by_t):
        yield ts, 0, by_t[ts]


def _csv_scrapes(lines: Iterable[str], err: Problems) -> Iterator[_Scrape]:
    import csv
    rows = csv.reader(lines)
    header = [h.strip() for h in next(rows)]
    lower = [h.lower() for h in header]
    tcol = next((i for i, h in enumerate(lower) if h in ("timestamp", "time", "ts")), None)
    if tcol is None:
        raise err.fatal(1, f"dcgm CSV header has no timestamp/time column: {', '.join(header)[:80]!r}")
    name_col = next((i for i, h in enumerate(lower) if h in ("metric", "__name__", "name", "field")), None)
    value_col = lower.index("value") if "value" in lower else None
    long_form = name_col is not None and value_col is not None
    label_cols = [i for i, h in enumerate(header) if i not in (tcol, name_col, value_col)
                  and not _field_column(h)]
    field_cols = [(i, _field_column(h)) for i, h in enumerate(header) if _field_column(h)]
    if not long_form and not field_cols:
        raise err.fatal(1, f"dcgm CSV header names no DCGM_FI_* column and no metric/value columns: "
                           f"{', '.join(header)[:80]!r}")
    cur_t: float | None = None
    cur: list[tuple[str, dict[str, str], float, int]] = []
    cur_line = 2
    for n, row in enumerate(rows, 2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            err.add(n, f"{'truncated line' if len(row) < len(header) else 'too many fields'}: "
                       f"{len(row)} fields, header has {len(header)}; row skipped")
            continue
        try:
            t = parse_any_time(row[tcol])
        except CellError as e:
            err.add(n, f"column {header[tcol]!r}: {e}; row skipped")
            continue
        labels = {header[i]: row[i].strip() for i in label_cols if row[i].strip()}
        found: list[tuple[str, dict[str, str], float, int]] = []
        cells = [(row[name_col].strip(), {}, row[value_col])] if long_form else \
                [(fname, flabels, row[i]) for i, (fname, flabels) in field_cols]
        for fname, flabels, cell in cells:
            if not cell.strip():
                continue
            try:
                v = float(cell)
            except ValueError:
                err.add(n, f"{fname}: not a number: {cell.strip()[:40]!r}; value dropped")
                continue
            # a wide row's fields share its labels (the mapper reads them, never writes)
            found.append((fname, {**labels, **flabels} if flabels else labels, v, n))
        if cur and t != cur_t:
            yield cur_t, cur_line, cur
            cur = []
        if not cur:
            cur_t, cur_line = t, n
        cur.extend(found)
    if cur:
        yield cur_t, cur_line, cur


def _field_column(header: str) -> tuple[str, dict[str, str]] | None:
    """'DCGM_FI_DEV_GPU_UTIL' or 'DCGM_FI_DEV_GPU_UTIL{gpu="0",...}' (Grafana's CSV) ->
    (name, labels); None for any other column."""
    h = header.strip()
    if not h.startswith("DCGM_FI_"):
        return None
    if "{" not in h:
        return h, {}
    series, _ = parse_exposition(h + " 0\n")
    if not series:
        return None
    return series[0][0], series[0][1]


# ---------------------------------------------------------------- the live source
