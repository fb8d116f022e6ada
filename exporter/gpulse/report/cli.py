"""`gpulse report`: a post-mortem of a whole run from Prometheus or a recorded log.

    gpulse report --input ckpt1000.csv --out report/
    gpulse report --input 'job-4711/*.csv' --out report/        # one job, a log per node
    gpulse report --prometheus http://prom:9090 --last 4h --workload llama-70b --out report/

Writes report.html, heatmap.png and findings.json into --out and prints the findings.
What it prints passes through safetext.terminal: a name from the input (a node, a file,
a workload) cannot send control sequences to the terminal.
Exit codes: 0 written, 2 bad arguments, 1 the input could not be read (one line on
stderr, never a traceback).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..config import FIELD_BY_KEY, parse_duration
from ..logsetup import setup_command_logging
from ..safetext import terminal
from ..sources.cells import CellError, parse_any_time
from .clock import parse_zone, settle
from .errors import ReportError, UsageError
from .heatmap import ORDERS
from .progress import Progress

# the same choices `gpulse serve` offers, from the one list of each
LOG_FORMATS = FIELD_BY_KEY["replay.format"].choices
ACTIVITY_MODES = FIELD_BY_KEY["activity"].choices


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="post-mortem report of a run: heatmap, findings and remedies",
                       description="Post-mortem of a whole run from Prometheus range data or a recorded log: "
                                   "report.html (heatmap of every GPU), heatmap.png and findings.json.")
    src = p.add_argument_group("input (one of)")
    src.add_argument("--input", metavar="FILE", nargs="+", action="extend",
                     help="recorded log: nvidia-smi CSV, dmon, nvidia-smi -q or dcgm-exporter output; several logs "
                          "or glob patterns (repeated --input, or several paths) are one job, a log per node")
    src.add_argument("--input-format", default="auto", choices=LOG_FORMATS, help="format of --input (default: auto)")
    src.add_argument("--node-name", action="append", default=[], metavar="NAME",
                     help="node name of a log, once per log in the order of the logs (default: the hostname the "
                          "log records; else, of several logs, the file name without its extension)")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus base URL, e.g. http://localhost:9090")
    rng = p.add_argument_group("time range and selection (with --prometheus)")
    rng.add_argument("--last", metavar="DURATION", help="the range ending now (or at --end), e.g. 4h")
    rng.add_argument("--start", metavar="TIME", help="RFC 3339 or Unix time")
    rng.add_argument("--end", metavar="TIME", help="RFC 3339 or Unix time (default: now)")
    rng.add_argument("--node", metavar="REGEX", default="", help="only nodes matching (PromQL regex)")
    rng.add_argument("--workload", metavar="REGEX", default="", help="only this workload (PromQL regex)")
    rng.add_argument("--selector", metavar="MATCHERS", default="", help='extra label matchers, e.g. namespace="ml"')
    rng.add_argument("--step", metavar="DURATION", help="query resolution (default: fits the range, at least the scrape interval)")
    rng.add_argument("--max-points", type=int, default=11000, metavar="N",
                     help="points per series per request; longer ranges are split (default: 11000)")
    auth = p.add_argument_group("Prometheus connection")
    auth.add_argument("--prometheus.bearer-token-file", dest="bearer_token_file", default="", metavar="FILE")
    auth.add_argument("--prometheus.username", dest="username", default="", metavar="USER")
    auth.add_argument("--prometheus.password-file", dest="password_file", default="", metavar="FILE")
    auth.add_argument("--prometheus.ca-file", dest="ca_file", default="", metavar="FILE")
    auth.add_argument("--prometheus.cert-file", dest="cert_file", default="", metavar="FILE")
    auth.add_argument("--prometheus.key-file", dest="key_file", default="", metavar="FILE")
    auth.add_argument("--prometheus.insecure-skip-verify", dest="insecure", action="store_true")
    auth.add_argument("--prometheus.timeout", dest="timeout", default="30s", metavar="DURATION",
                      help="for each request as a whole, however slowly the answer comes (default: 30s)")
    an = p.add_argument_group("analysis (as for gpulse serve)")
    an.add_argument("--idle-threshold", dest="idle_threshold", default=None)
    an.add_argument("--min-stall", dest="min_stall", default=None, metavar="DURATION")
    an.add_argument("--activity", default=None, choices=ACTIVITY_MODES)
    an.add_argument("--power-gate", dest="power_gate", default=None)
    an.add_argument("--analysis-window", dest="analysis_window", default=None, metavar="DURATION")
    out = p.add_argument_group("output")
    out.add_argument("--out", metavar="DIR", required=True, help="directory for report.html, heatmap.png, findings.json")
    out.add_argument("--timezone", metavar="ZONE", default=None,
                     help="where the log was written, e.g. Europe/Berlin or +02:00 (nvidia-smi writes local time "
                          "without a zone); times are shown in it (default: UTC, the zone of a zoneless log unknown)")
    out.add_argument("--order", default="natural", choices=ORDERS,
                     help="heatmap rows: natural (node, then GPU index) or worst (stragglers and the lowest work "
                          "score first) (default: natural)")
    p.add_argument("--quiet", action="store_true", help="print no progress (shown only on a terminal, for reports that take more than a few seconds)")
    p.set_defaults(run=run)


def _time(value: str, flag: str) -> float:
    try:
        return parse_any_time(value)
    except CellError:
        raise UsageError(f"{flag}: expected RFC 3339 (2026-01-31T12:00:00Z) or Unix time, got {value!r}") from None


def _duration(value: str, flag: str) -> float:
    try:
        d = parse_duration(value)
    except ValueError:
        raise UsageError(f"{flag}: expected a duration like 30s, 15m or 4h, got {value!r}") from None
    if d <= 0:
        raise UsageError(f"{flag}: must be positive, got {value!r}")
    return d


def _range(ns: argparse.Namespace) -> tuple[float, float]:
    end = _time(ns.end, "--end") if ns.end else time.time()
    if ns.last and ns.start:
        raise UsageError("give either --last or --start, not both")
    if ns.last:
        return end - _duration(ns.last, "--last"), end
    if ns.start:
        return _time(ns.start, "--start"), end
    raise UsageError("with --prometheus, give the range: --last 4h, or --start (and --end)")


def run(ns: argparse.Namespace) -> int:
    setup_command_logging()
    try:
        return _run(ns)
    except ReportError as e:
        print(f"gpulse: {terminal(str(e))}", file=sys.stderr)
        return e.exit_code


def _run(ns: argparse.Namespace) -> int:
    from . import inputs
    from .findings import analyse
    from ..sources.prom import Auth, selector
    from .outputs import write_outputs
    from .render import summary_lines

    if bool(ns.input) == bool(ns.prometheus):
        raise UsageError("give one input: --input FILE or --prometheus URL")
    if ns.timezone:
        parse_zone(ns.timezone)           # a bad zone is a usage error before any work
    analysis = {k: getattr(ns, k) for k in inputs.ANALYSIS_KEYS if getattr(ns, k, None) is not None}
    progress = Progress(ns.quiet)
    t0 = time.monotonic()
    if ns.input:
        rec = inputs.from_logs(ns.input, ns.input_format, ns.node_name, analysis, progress)
    else:
        start, end = _range(ns)
        step = _duration(ns.step, "--step") if ns.step else None
        if ns.max_points < 2:
            raise UsageError("--max-points: must be at least 2")
        auth = Auth(ns.bearer_token_file, ns.username, ns.password_file, ns.ca_file, ns.cert_file, ns.key_file,
                    ns.insecure)
        rec = inputs.from_prometheus(ns.prometheus, start, end, selector(ns.node, ns.workload, ns.selector), auth,
                                     step, ns.max_points, analysis, _duration(ns.timeout, "--prometheus.timeout"),
                                     progress)
    progress.done()
    if not rec.gpus:
        raise ReportError(f"{rec.source}: no GPU data to report on")
    settle(rec, rec.log_format, ns.timezone)
    a = analyse(rec)
    try:
        paths = write_outputs(a, ns.out, order=ns.order)
    except OSError as e:
        raise ReportError(f"cannot write the report into {ns.out}: {e.strerror or e}") from None
    doc_lines = summary_lines(a.as_json())
    for line in doc_lines:
        print(terminal(line))
    if not ns.quiet:
        print(terminal(f"wrote {paths['report.html']}, {paths['heatmap.png']}, {paths['findings.json']} "
                       f"({time.monotonic() - t0:.1f} s)"), file=sys.stderr)
    return 0
