"""The live heatmap page at `/`: this node's GPUs over the last minutes.

    GET /               the page (HTML, CSS and script inline; no external assets)
    GET /api/heatmap    its data, JSON; ?minutes=N picks the window (1..history)

Both are App.extra_routes, so they go through the same handler as /metrics: the same
TLS, basic auth, request cap and timeouts. The data is what the latest Snapshot
publishes: each GPU's per-tick history and straggler cause, each group's stall
episodes and open stall; a request never touches the GPU library or the engine.

Stall fraction over the window = the part of the window covered by the peer group's
stall episodes (the StallTracker's, plus a stall in progress), divided by the window.

Each group also has a stall strip, as the report has: per column, the share of that
column's time in which all its GPUs were stalled at once (the rise of the group's
stall-seconds counter over the tick), so a 0.3 s stall in a 1 s column shows at 30 %
in the stall colour although the column's work score hardly moves. Columns are
analysis ticks; `col_seconds` is how much of the source's own time one covers (a
replay at speed 10 puts 10 s of the log in each), so the time axis reads in the
time of the run, not of the page.
"""
from __future__ import annotations

import html
import json
import math
from typing import Any
from urllib.parse import parse_qs

from .. import palette
from .app import Request
from ..pages import b64, cell, render_page, web_asset
from ..palette import NO_DATA
from ..safetext import dumps, script_json

JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"
DEFAULT_MINUTES = 15


class LivePage:
    def __init__(self, app: Any):
        self.app = app
        self.cfg = app.cfg
        self.max_minutes = max(1, int(self.cfg.history // 60))
        self._page = self._build_page()

    def register(self) -> None:
        self.app.extra_routes["/"] = self.index
        self.app.extra_routes["/api/heatmap"] = self.data

    def _build_page(self) -> bytes:
        boot = {"node": self.cfg.node_name, "palette": palette.for_browser(),
                "minutes": min(DEFAULT_MINUTES, self.max_minutes),
                "max_minutes": self.max_minutes, "interval": self.cfg.analysis_interval}
        page = render_page("live.html", web_asset("heatmap.js") + "\n" + web_asset("live.js"),
                           {"BOOT": script_json(boot), "NODE": html.escape(self.cfg.node_name, quote=True)})
        return page.encode("utf-8")

    def index(self, req: Request) -> tuple[int, str, bytes]:
        return 200, HTML_TYPE, self._page

    def data(self, req: Request) -> tuple[int, str, bytes]:
        query = parse_qs(req.query)
        raw = (query.get("minutes") or [str(min(DEFAULT_MINUTES, self.max_minutes))])[0]
        try:
            minutes = float(raw)
            if not math.isfinite(minutes) or minutes <= 0:
                raise ValueError
        except ValueError:
            body = json.dumps({"error": f"minutes: expected a positive number, got {raw[:40]!r}"})
            return 400, JSON_TYPE, body.encode()
        minutes = min(minutes, float(self.max_minutes))
        return 200, JSON_TYPE, dumps(self.snapshot(minutes)).encode()

    def snapshot(self, minutes: float) -> dict[str, Any]:
        sampler = self.app.sampler
        snap = sampler.snapshot
        history = snap.history if snap is not None else {}
        cols = max(1, int(round(minutes * 60 / self.cfg.analysis_interval)))
        doc: dict[str, Any] = {"node": self.cfg.node_name, "source": self.cfg.source, "minutes": minutes,
                               "interval": self.cfg.analysis_interval, "stale": bool(sampler.health().get("stale")),
                               "t": None, "rows": [], "cols": 0, "col_seconds": self.cfg.analysis_interval,
                               "timeline": "log" if self.cfg.source == "replay" else "live",
                               "work": "", "busy": "", "active": "", "groups": [], "stragglers": [], "gpus": []}
        if snap is None:
            return doc
        keys = [v.info.gpu for v in snap.gpus]
        width = min(cols, max((len(history.get(k, ())) for k in keys), default=0))
        work, busy, active = [], [], []
        for k in keys:
            h = history.get(k, [])[-width:] if width else []
            pad = width - len(h)
            # the history keeps each tick's busy and active ratios; spin-wait is the busy
            # time that was not active, as the engine integrates it
            work.append(bytes([NO_DATA] * pad) + bytes(
                _cell(None if x[1] is None or x[2] is None else palette.work_score(x[2], max(0.0, x[1] - x[2])))
                for x in h))
            busy.append(bytes([NO_DATA] * pad) + bytes(_cell(x[1]) for x in h))
            active.append(bytes([NO_DATA] * pad) + bytes(_cell(x[2]) for x in h))
        now = snap.t
        col_seconds = _col_seconds([history.get(k, ())[-width:] for k in keys], self.cfg.analysis_interval)
        window = width * col_seconds
        doc.update(t=now, rows=[f"GPU {k}" for k in keys], cols=width, col_seconds=col_seconds, work=b64(work),
                   busy=b64(busy), active=b64(active))
        for g in snap.groups:
            doc["groups"].append({
                "stall": b64([_stall_row(snap.stall_history.get(g.workload, ()), width, col_seconds)]),
                "workload": g.workload, "gpus": list(g.gpus), "holding": g.holding, "in_stall": g.in_stall,
                "imbalance": g.imbalance, "imbalance_explained": g.imbalance_explained,
                "load_balance": g.load_balance, "stall_period": g.stall_period,
                "stall_fraction_window": _covered(g.episodes, g.open_since, now, window) if now is not None else None,
                "stall_fraction_total": g.stall_seconds / g.holding_seconds if g.holding_seconds > 0 else None,
            })
        for v in snap.gpus:
            doc["gpus"].append({"gpu": v.info.gpu, "up": v.up, "error": v.error, "busy": v.util_ratio,
                                "active": v.active_ratio})
            if v.straggler is not None:    # the engine's verdict (analysis.verdict), as in the report
                signal, z = v.straggler
                # why, as the snapshot publishes it (analysis.cause); None until judged
                why = v.cause
                doc["stragglers"].append({"gpu": v.info.gpu, "signal": signal, "z": round(z, 2),
                                          "direction": "busier" if z > 0 else "idler",
                                          "cause": why.cause if why else None,
                                          "remedy": why.remedy if why else None,
                                          "evidence": list(why.evidence) if why else []})
        return doc


def _cell(x: float | None) -> int:
    return NO_DATA if x is None else cell(x)


def _col_seconds(rows: list[Any], interval: float) -> float:
    """Source seconds per column: the span of the longest history over its ticks (the
    analysis interval live; speed times that in a replay)."""
    h = max(rows, key=len, default=())
    if len(h) < 2 or not h[-1][0] > h[0][0]:
        return interval
    return (h[-1][0] - h[0][0]) / (len(h) - 1)


def _stall_row(hist: tuple[tuple[float, float], ...], width: int, col_seconds: float) -> bytes:
    """The last `width` ticks of a group's stall strip: each tick's rise of the
    stall-seconds counter over the column's time (no data before the group's first
    tick, right-aligned like the GPU rows, which share its ticks)."""
    h = hist[-(width + 1):]
    shares = [NO_DATA if b < a else cell(min(1.0, (b - a) / col_seconds))
              for (_, a), (_, b) in zip(h, h[1:])]
    return bytes([NO_DATA] * (width - len(shares))) + bytes(shares[-width:] if width else [])


def _covered(episodes: list[Any], open_since: float | None, now: float, window: float) -> float | None:
    """Share of (now - window, now] inside stall episodes or the stall in progress."""
    if window <= 0:
        return None
    lo = now - window
    covered = sum(max(0.0, min(now, e.start + e.duration) - max(lo, e.start)) for e in episodes)
    if open_since is not None:
        covered += max(0.0, now - max(lo, open_since))
    return min(1.0, covered / window)


def register(app: Any) -> None:
    """Serve the live page at / and its data at /api/heatmap on this App."""
    LivePage(app).register()
