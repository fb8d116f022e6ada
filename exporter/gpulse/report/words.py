"""A judged run (report/judge.py) in plain words: one Finding per problem, each
with its remedy, and the headline of the time lost.

One cause, one finding
    An idle straggler and the stall patterns in which it is the rank off the GPU are
    the same cause seen twice (rank 0 checkpointing while the others spin-wait):
    they make one finding, the straggler's, naming the patterns, with one remedy.
    Stragglers alike on many nodes (the same GPU of each, the same cause) are one
    cause too: beyond NODES_NAMED of them, one finding (`_alike`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable

from ..analysis.thresholds import value
from ..analysis.verdict import imbalance_explained
from ..model import gpu_sort_key
from .clock import clock_of
from .judge import NODES_NAMED, WORK_BUSY, Judgement, and_list, union

WORK_SUSTAIN = value("work_sustain_seconds")
SPIN_WAITING = value("spin_wait_share_ratio")
STALL_NOTABLE = value("stall_notable_ratio")
IMBALANCE = value("imbalance_alert_ratio")
MISSING_MIN = value("missing_min_seconds")


# a finding's severities, most severe first: the order findings are listed in
SEVERITY = {"high": 0, "medium": 1, "info": 2}


@dataclass
class Finding:
    kind: str
    severity: str           # high, medium, info
    text: str
    remedy: str = ""
    spans: list[tuple[float, float]] = field(default_factory=list)   # (start, end) in input time
    cause: Any = None       # analysis.cause.Verdict of a straggler or imbalance finding


def pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def secs(x: float) -> str:
    if x >= 600:
        return f"{x / 60:.0f} min" if x < 5400 else f"{x / 3600:.1f} h"
    return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} GPU-hours"


def findings(j: Judgement) -> list[Finding]:
    """The findings of a judged run, most severe first."""
    F: list[Finding] = []
    pattern_findings = [(p, f) for p in j.patterns if (f := _pattern_words(j, p)) is not None]
    nodes = [(nd, _with_cause(_node_words(j, nd), nd["verdict"]), True)
             for nd in sorted(j.straggler_nodes, key=lambda d: -d["cost"])]
    F += _alike(nodes, lambda nd: (nd["workload"], nd["cause"]),
                lambda nds: f"{len(nds)} nodes of workload {nds[0]['workload'] or '(the node group)'} "
                            f"({j.labels(sorted((k for nd in nds for k in nd['keys']), key=gpu_sort_key))})")
    gpus = []
    for st in sorted(j.stragglers, key=lambda s: -s["cost"]):
        f = _with_cause(_straggler_words(j, st, st["cause"]), st["verdict"])
        alone = f.text
        # a straggler whose finding took in stall patterns keeps its own: its words
        # name those patterns, which its alikes' would not
        f = _one_cause(j, st, f, pattern_findings)
        gpus.append((st, f, f.text == alone))
    F += _alike(gpus, lambda st: (st["workload"], st["gpu"], st["direction"], st["cause"]),
                lambda sts: j.labels(sorted((st["key"] for st in sts), key=gpu_sort_key)))
    imb = _imbalance_words(j)
    if imb:
        F.append(_with_cause(imb, j.imbalance_cause(imb.spans)))
    F.extend(f for _, f in pattern_findings)
    F.extend(_missing_words(j))
    F.extend(_phase_words(j))
    limit = _input_limit(j)
    if limit is not None:
        F.append(limit)
    if not any(f.severity in ("high", "medium") for f in F):
        w = j.work_seconds()
        if w > 0:
            busy = [s["busy_fraction"] for s in j.gpu_stats.values() if s["busy_fraction"] is not None]
            caveat = ("; spin-waits shorter than about a second cannot be seen in this input (see the note "
                      "on power), so this holds for longer stalls only") if limit is not None else ""
            F.insert(0, Finding("healthy", "info",
                                f"No sync-stall or imbalance problem found: over {secs(w)} of work the GPUs were "
                                f"busy {pct(median(busy))} (median) and evenly loaded{caveat}.", "",
                                j.work_spans()))
        elif not any(f.kind == "no_work" for f in F):
            F.insert(0, Finding("no_work", "info", "The GPUs never worked: no GPU was busy for a sustained "
                                f"stretch ({pct(WORK_BUSY)} or more for {WORK_SUSTAIN:g} s).",
                                "check that the job ran on these GPUs and the time range is right",
                                [(j.tick_start(0), j.tick_end(j.rec.ticks - 1))] if j.rec.ticks else []))
    F.sort(key=lambda f: SEVERITY[f.severity])
    return F


def _alike(items: list[tuple[dict[str, Any], Finding, bool]], key: Callable[[dict[str, Any]], Any],
           name: Callable[[list[dict[str, Any]]], str]) -> list[Finding]:
    """Stragglers (or slow nodes) that straggle alike, costliest first: beyond
    NODES_NAMED of one key (the same GPU of each node, the same way, the same cause:
    rank 0 of every node checkpointing) they are one finding, in the place of the
    costliest, not a finding each; it names them all, their lost time in all, and the
    costliest one's own words. An item whose flag is False keeps its own finding."""
    groups: dict[Any, list[tuple[dict[str, Any], Finding]]] = {}
    for st, f, may in items:
        if may:
            groups.setdefault(key(st), []).append((st, f))
    out = []
    for st, f, may in items:
        members = groups.get(key(st)) if may else None
        if members is None or len(members) <= NODES_NAMED:
            out.append(f)
        elif members[0][0] is st:
            sts = [m for m, _ in members]
            lost = sum(m["lost_gpu_seconds"] for m in sts)
            text = (f"{name(sts)} straggle alike, each with the same cause"
                    + (f"; the others lost {_hours(lost)} waiting for them" if lost >= 1 else "")
                    + f". The costliest: {f.text}")
            out.append(Finding(f.kind, min((m.severity for _, m in members), key=SEVERITY.__getitem__), text,
                               f.remedy, union([sp for _, m in members for sp in m.spans]), f.cause))
    return out


def _one_cause(j: Judgement, st: dict[str, Any], f: Finding,
               pattern_findings: list[tuple[dict[str, Any], Finding]]) -> Finding:
    """An idle straggler and the stall patterns in which it is the one off the GPU
    are one cause (its rank's work off the GPU): one finding, not one per view.
    The patterns' findings are taken out of pattern_findings."""
    if st["direction"] != "idler":
        return f
    same = [(p, pf) for p, pf in pattern_findings
            if p["off_gpu"] == [st["key"]] and st["workload"] in p["workloads"]]
    if not same:
        return f
    for item in same:
        pattern_findings.remove(item)
    same.sort(key=lambda x: -x[0]["count"])
    if len(same) == 1:
        f.text += f" The same cause shows as every GPU stalling together: {same[0][0]['summary']}."
    else:
        # several rhythms are told apart as such, and said to overlap where they do,
        # so that their figures do not read as one pattern's
        ranges = sorted((p["spans"][0][0], p["spans"][-1][1]) for p, _ in same)
        overlap = any(b[0] < a[1] for a, b in zip(ranges, ranges[1:]))
        f.text += (f" The same cause shows as every GPU stalling together, in {len(same)} separate rhythms"
                   + (" that overlap in time" if overlap else "") + ": "
                   + "; ".join(f"({chr(ord('a') + n)}) {p['summary']}" for n, (p, _) in enumerate(same)) + ".")
    f.severity = min([f.severity] + [pf.severity for _, pf in same], key=SEVERITY.__getitem__)
    f.spans = union(f.spans + [s for _, pf in same for s in pf.spans])
    return f


def _straggler_words(j: Judgement, st: dict[str, Any], why: str) -> Finding:
    """The straggler's sentence; `why` is its analysis.cause verdict, the one
    judge of whether an idle straggler's peers wait for it or out-compute it."""
    k = st["key"]
    gr = j.rec.groups.get(st["workload"])
    peers = [p for p in (gr.gpus if gr else []) if p != k]
    stats = st["stats"]
    peers = [p for p in peers if p in stats]
    named = _peer_names(j, k, peers, gr.gpus if gr else [])
    me = stats[k]
    peer_busy = median(stats[p]["busy_fraction"] for p in peers
                       if stats[p]["busy_fraction"] is not None)
    peer_spin = median((stats[p]["spin_wait_fraction"] or 0.0) for p in peers)
    when = "" if st["whole_run"] else when_spans(j, st["spans"])
    what = "of the work time" if st["whole_run"] else f"of its straggling time ({when})"
    # a GPU's index is its rank on one node; across nodes the global rank is unknown
    rank = "its rank" if j.rec.multi_node else f"rank {st['gpu'] if st['gpu'].isdigit() else k}"
    sev = "high" if st["cost"] >= value("straggler_high_gap_ratio") else "medium"
    spans = st["spans"]
    if st["direction"] == "idler":
        # the power figures are over the state the sentence names: the ticks it was idle
        figures = st["idle_power"]
        watts = (f"{figures[1]:.0f} W while it was idle, against {figures[2]:.0f} W while it worked; "
                 if figures is not None else "")
        power = (f" at idle-level power ({watts}spin-waiting {pct(peer_spin)} of the time)"
                 if peer_busy > 0 and peer_spin >= SPIN_WAITING * peer_busy else "")
        if why == "off_gpu":
            text = (f"{j.label(k)} was idle {pct(me['idle_fraction'])} {what} while "
                    f"{named} read {pct(peer_busy)} busy{power}, i.e. waiting for it: "
                    f"{rank} is the bottleneck and its work is off the GPU (checkpointing, data loading, "
                    "host-side preprocessing).")
        elif why == "more_work":
            text = (f"{j.label(k)} was busy only {pct(me['busy_fraction'])} {what} against "
                    f"{pct(peer_busy)} for {named}, which compute meanwhile: it gets too "
                    "little work.")
        else:
            text = (f"{j.label(k)} was busy only {pct(me['busy_fraction'])} {what} against "
                    f"{pct(peer_busy)} for {named}.")
        return Finding("straggler", sev, text, "", spans)   # the cause's remedy is set by _with_cause
    peer_act = median(stats[p]["active_fraction"] or 0.0 for p in peers)
    wait = f", spending {pct(peer_spin)} of the time spin-waiting" if peer_spin >= value("spin_wait_mention_ratio") else ""
    lost = (f" They lost {_hours(st['lost_gpu_seconds'])} waiting for it ({pct(st['cost'])} of their time)."
            if st["lost_gpu_seconds"] >= 1 else "")
    text = (f"{j.label(k)} worked {pct(me['active_fraction'])} {what} against {pct(peer_act)} "
            f"for {named}{wait}: they wait for it at every synchronisation point.{lost}")
    return Finding("straggler", sev, text, "", spans)   # the cause's remedy is set by _with_cause


def _peer_names(j: Judgement, k: str, peers: list[str], group: list[str]) -> str:
    """A straggler's peers as its sentence names them: by GPU on one node ('GPUs 0–4, 6
    and 7'); on several, where they are every other GPU of its group, counted ('its 31
    peers on 4 nodes'): every node's GPUs listed, all of them but one, said no more than
    the count, and read as if some GPUs had been left out."""
    nodes = {j.rec.gpus[p].node for p in peers if p in j.rec.gpus}
    if j.rec.multi_node and len(nodes) > 1 and set(peers) == set(group) - {k}:
        return f"its {len(peers):,} peers on {len(nodes):,} nodes"
    return j.labels(peers)


def _node_words(j: Judgement, nd: dict[str, Any]) -> Finding:
    when = when_spans(j, nd["spans"])
    what = "real work" if nd["signal"] == "active" else "busy time"
    lost = (f"; they lost {_hours(nd['lost_gpu_seconds'])} waiting for it" if nd["lost_gpu_seconds"] >= 1 else "")
    text = (f"Node {nd['node']} is a straggler of workload {nd['workload'] or '(the node group)'}: its "
            f"{nd['gpus']} GPUs averaged {pct(nd['fraction'])} {what} against a median of "
            f"{pct(nd['peer_median'])} for the workload's nodes ({when}), so the other nodes' "
            f"{nd['others']} GPUs wait for it {pct(nd['cost'])} of their time at every synchronisation "
            f"point{lost}.")
    sev = "high" if nd["cost"] >= value("straggler_high_gap_ratio") else "medium"
    return Finding("straggler_node", sev, text, "", list(nd["spans"]))


def _imbalance_words(j: Judgement) -> Finding | None:
    # the pager's definition over the whole run: the same spread, the same busiest-GPU guard
    imb = j.imbalance.get("whole_run")
    if imb is None or not imb > IMBALANCE:
        return None
    acts = {k: s["active_fraction"] for k, s in j.gpu_stats.items() if s["active_fraction"] is not None}
    hi_v, lo_v = max(acts.values()), min(acts.values())
    if not hi_v > value("imbalance_min_active_ratio"):
        return None
    mid = (hi_v + lo_v) / 2
    hi = sorted((k for k, v in acts.items() if v >= mid), key=lambda k: j.rec.ordered_gpus().index(j.rec.gpus[k]))
    lo = sorted((k for k, v in acts.items() if v < mid), key=lambda k: j.rec.ordered_gpus().index(j.rec.gpus[k]))
    if imbalance_explained(acts, {s["key"] for s in j.stragglers}):
        return None           # stragglers explain it; their findings say more
    text = (f"{j.labels(hi)} at {pct(min(acts[k] for k in hi))}"
            f"{'' if len(hi) == 1 else ' or more'} and {j.labels(lo)} under "
            f"{pct(max(acts[k] for k in lo) + 0.005)} (real work over the whole run; imbalance "
            f"{imb:.2f}, load balance {j.imbalance['load_balance']:.2f}): work is unevenly distributed.")
    remedy = ("rebalance: data/pipeline/tensor parallel sizing, dynamic load balancing; more GPUs or "
              "overclocking will not help")
    return Finding("imbalance", "high" if imb >= value("imbalance_high_ratio") else "medium", text, remedy,
                   j.work_spans())


def _pattern_words(j: Judgement, p: dict[str, Any]) -> Finding | None:
    work = j.work_seconds()
    share = p["stalled_seconds"] / work if work > 0 else 0.0
    local = p["span_share"]
    d = p["duration_seconds"]
    period = p["period_seconds"]
    if period is None and max(share, local or 0.0) < STALL_NOTABLE:
        return None
    who = ""
    if p["off_gpu"]:
        all_keys = sorted({k for gr in j.rec.groups.values() for k in gr.gpus}, key=gpu_sort_key)
        waiting = [k for k in all_keys if k not in p["off_gpu"]]
        # a GPU's index is its rank on one node; across nodes the GPUs are named
        ranks = (j.labels(p["off_gpu"]) if j.rec.multi_node else
                 "rank " + ", ".join(j.rec.gpus[k].gpu for k in p["off_gpu"] if k in j.rec.gpus))
        who = (f"; during them {j.labels(p['off_gpu'])} work{'s' if len(p['off_gpu']) == 1 else ''} off "
               f"the GPU while {j.labels(waiting)} spin-wait for {'it' if len(p['off_gpu']) == 1 else 'them'}")
        cause = f"consistent with periodic checkpointing by {ranks}" if period else \
            f"{ranks} {'hold' if j.rec.multi_node and len(p['off_gpu']) > 1 else 'holds'} everybody up with work off the GPU"
    elif period is not None and period >= value("period_checkpoint_seconds"):
        cause = "consistent with periodic checkpointing, evaluation or logging"
    elif period is not None:
        cause = "consistent with a step-level wait: the input pipeline not keeping up or exposed communication"
    else:
        cause = "the whole job waits together without a steady rhythm (input pipeline, I/O, host-side work)"
    rhythm = f" every ~{secs(period)}" if period else ""
    times = f"{p['count']} time{'s' if p['count'] != 1 else ''}"
    # a pattern confined to part of a long run costs its own stretch more than the run
    during = (f"{pct(local)} of the time from {when_of(j, p['spans'][0][0])} to {when_of(j, p['spans'][-1][1])}, "
              if local is not None and pct(local) != pct(share) else "")
    p["summary"] = f"~{secs(d)}{rhythm} ({times}, {during}{pct(share)} of the work time)"
    text = (f"All GPUs stall together for ~{secs(d)}{rhythm} ({times}, {during}{pct(share)} of the work time)"
            f"{who}: {cause}.")
    if p["off_gpu"] or (period is not None and period >= value("period_checkpoint_seconds")):
        remedy = ("make checkpointing asynchronous (snapshot to host memory, write in the background), "
                  "checkpoint less often, or write to faster storage")
    elif period is not None:
        remedy = ("more data-loader workers, prefetching and pinned memory; overlap communication with "
                  "computation (bucketed all-reduce) or use larger steps")
    else:
        remedy = "profile a stall (torch profiler, nsys) to see what every rank waits on"
    worst = max(share, local or 0.0)
    sev = "high" if worst >= value("stall_high_ratio") else "medium" if worst >= STALL_NOTABLE or period else "info"
    return Finding("sync_stall", sev, text, remedy, p["spans"])


def _missing_words(j: Judgement) -> list[Finding]:
    """A GPU silent for MISSING_MIN seconds of work while its peers report (lost,
    hung, off the bus): the engine marks it down; the report says when. Where every
    GPU of a node went silent together, that is the node (down, or its exporter or
    logger stopped), not its GPUs one by one: one finding names the node."""
    out = []
    need = max(1, math.ceil(MISSING_MIN / j.iv))
    for gr in j.rec.groups.values():
        ticks = j.work_ticks.get(gr.workload, [])
        members = [j.rec.gpus[k] for k in gr.gpus if k in j.rec.gpus]
        runs: dict[str, tuple[int, int]] = {}
        for g in members:
            best: tuple[int, int] | None = None
            run_start = None
            for n, i in enumerate(ticks + [-1]):
                silent = i >= 0 and not g.sampled[i] > 0 and any(o.sampled[i] > 0 for o in members if o is not g)
                if silent and run_start is None:
                    run_start = n
                elif not silent and run_start is not None:
                    if best is None or n - run_start > best[1] - best[0]:
                        best = (run_start, n)
                    run_start = None
            if best is not None and best[1] - best[0] >= need:
                runs[g.key] = best
        by_node: dict[str, list[Any]] = {}
        for g in members:
            by_node.setdefault(g.node, []).append(g)
        for g in members:
            if g.key not in runs:
                continue
            mates = by_node[g.node]
            whole = (j.rec.multi_node and len(by_node) > 1 and len(mates) > 1
                     and all(runs.get(o.key) == runs[g.key] for o in mates))
            if whole and g is not mates[0]:
                continue        # said once, for the node
            out.append(_missing_finding(j, g, ticks, runs[g.key], len(mates) if whole else 0))
    return out


def _missing_finding(j: Judgement, g: Any, ticks: list[int], run: tuple[int, int], node_gpus: int) -> Finding:
    """GPU g's silent run (or, node_gpus > 0, its whole node's) in plain words."""
    a, b = ticks[run[0]], ticks[run[1] - 1]
    length = j.tick_end(b) - j.tick_start(a)
    to_end = b == ticks[-1]
    who, peers = (f"Node {g.node}", "the other nodes") if node_gpus else (j.label(g.key), "its peers")
    together = f", all {node_gpus} of its GPUs at once," if node_gpus else ""
    # a whole node's log that seems to begin or end apart from the others' may be its clock
    doubt = _clock_doubt(j, g.node) if node_gpus else ""
    if not any(x > 0 for x in g.sampled[:a]):
        # silent from the start, so nothing stopped: a GPU or node (or its logger)
        # that joined late, or one never read while its peers worked
        text = (f"{who} gave no reading while {peers} worked" if to_end else
                f"{who} gave its first reading at {when_of(j, j.tick_end(b))}, "
                f"{secs(length)} after {peers} began working")
        text += (": it joined late (a replacement node, a logger started late) or its rows were "
                 f"unreadable until then{doubt}; {peers}' numbers cover that time without it.")
        remedy = ("if it was not meant to join late, look at why its node or logger started late (a "
                  "failed start, a node replaced during the job)")
        severity = "high" if to_end and not doubt else "medium"
    elif node_gpus:
        text = (f"{who} stopped reporting at {when_of(j, j.tick_start(a))}{together} while {peers} went on"
                + (", and never came back" if to_end else f", for {secs(length)}")
                + f": the node went down, or its exporter or logger stopped{doubt}; "
                f"{peers}' numbers cover that time without it.")
        remedy = ("check whether the node went down then (its kernel log, the scheduler's node events); if it "
                  "did not, its exporter or logger stopped early: keep one running on every node for the "
                  "whole job")
        severity = "high" if to_end and not doubt else "medium"
    else:
        text = (f"{who} stopped reporting at {when_of(j, j.tick_start(a))} while {peers} "
                + ("went on, and never came back" if to_end else f"went on, for {secs(length)}")
                + ": lost, hung or fallen off the bus; its peers' numbers cover that time without it.")
        remedy = ("check the node's kernel log for XID errors (79: fallen off the bus) and the GPU's "
                  "health; drain the node if it repeats")
        severity = "high" if to_end else "medium"
    return Finding("gpu_missing", severity, text, remedy, [(j.tick_start(a), j.tick_end(b))])


def _clock_doubt(j: Judgement, node: str) -> str:
    """Where a job's node clocks could not all be aligned, a node's log that seems to
    begin or end apart from the others' may only be its clock: say so."""
    clocks = j.rec.clocks
    kept = [n["node"] for n in clocks["nodes"] if not n["aligned"]] if clocks else []
    if not kept or not j.rec.multi_node:
        return ""
    if kept == [node]:
        whose = "its clock was"
    elif len(kept) > NODES_NAMED:
        whose = f"the clocks of {len(kept):,} nodes were"
    else:
        whose = f"the clocks of {and_list(kept)} were"
    return (f" (or {whose} taken as recorded, with no all-GPU stall edges to align on, and "
            "differ by that much)")


def _input_limit(j: Judgement) -> Finding | None:
    """Say what the input cannot show instead of guessing: with power averaged over
    about a second, power-gated activity reads a shorter spin-wait as work."""
    if not j.rec.power_averaged or j.rec.activity != "power-gated" or j.work_seconds() <= 0:
        return None
    return Finding("input_limit", "info",
                   "Power in this input lags utilisation by about a second (nvidia-smi's power.draw is a 1 s "
                   "average): a rank spin-waiting for less than that reads as working, so sub-second sync "
                   "stalls in which some ranks spin-wait, and step-level stragglers, cannot be judged from it. "
                   "Stalls in which every GPU goes idle, and longer spin-waits, are measured as usual.",
                   "log power.draw.instant instead of power.draw, or use SM activity (dcgm-exporter with "
                   "profiling, --source dcgm) to judge short spin-waits",
                   j.work_spans())


def _phase_words(j: Judgement) -> list[Finding]:
    out = []
    for s in j.spans:
        dur = j.tick_end(s.b) - j.tick_start(s.a)
        when = when_of(j, j.tick_start(s.a))
        before = len(out)
        if s.kind == "no_job" and s.restart:
            out.append(Finding("gap", "medium",
                               f"No job for {secs(dur)} from {when}: the job exited and a new run started "
                               f"afterwards — a crash and restart (or requeue), reported as a gap, not as a "
                               "sync stall.",
                               "find why the job exited (its logs, XID errors, OOM kills); resume from the "
                               "last checkpoint sooner"))
        elif s.kind == "no_data":
            out.append(Finding("gap", "info", f"No samples for {secs(dur)} from {when}: a gap in the data; "
                               "nothing is concluded about it."))
        elif s.kind == "startup" and dur >= value("phase_notable_seconds"):
            out.append(Finding("startup", "info",
                               f"Start-up took {secs(dur)} from {when} (memory held, no sustained work: "
                               "loading, compiling, communicator set-up); it is not counted as stalls.",
                               "if it matters: cache the dataset and compiled kernels, load checkpoints in "
                               "parallel"))
        elif s.kind == "held_idle" and dur >= value("phase_notable_seconds"):
            out.append(Finding("held_idle", "info",
                               f"Memory held for {secs(dur)} from {when} without sustained work."))
        if len(out) > before:
            out[-1].spans = [(j.tick_start(s.a), j.tick_end(s.b))]
    return out


# spans a sentence lists one by one; beyond them it counts them (a slow node of a
# 4-hour run straggled in 25 spans, each "from 23:06:30 (6 min 30 s into the recording)")
SPANS_NAMED = 3


def when_spans(j: Judgement, spans: list[tuple[float, float]]) -> str:
    """'from 10:32:13 (32 min 13 s into the recording) for 142 s; …', or beyond
    SPANS_NAMED spans: '25 times from A to B, 195 s each, 81 min in all'."""
    if len(spans) <= SPANS_NAMED:
        return "; ".join(f"from {when_of(j, a)} for {secs(b - a)}" for a, b in spans)
    lengths = sorted(b - a for a, b in spans)
    short, long = secs(lengths[0]), secs(lengths[-1])
    return (f"{len(spans)} times from {when_of(j, min(a for a, _ in spans))} to "
            f"{when_of(j, max(b for _, b in spans))}, "
            f"{short if short == long else f'{short} to {long}'} each, {secs(sum(lengths))} in all")


def when_of(j: Judgement, t: float) -> str:
    return clock_of(j.rec).when(t, j.t0)


# Culprits the headline names one by one, worst first; the rest are counted in one part
# ("2 % waiting for 125 more stragglers (off_gpu)"), so a fleet's headline stays a line.
HEADLINE_NAMED = 3


def share(x: float) -> str:
    """A headline's share of the work: whole percent, one decimal under 1 % (a slow node
    of a thousand GPUs loses a fraction of a percent of the job, not 0 %), and "<0.1 %"
    for a loss too small for that."""
    if 0 < x < 0.0005:
        return "<0.1 %"
    return f"{100 * x:.1f} %" if 0 < x < 0.0095 else pct(x)


def lost_headline(j: Judgement) -> str:
    """'This run lost N GPU-hours of M (X %): Y % to GPU 3 (throttling), ...'."""
    lost = j.lost
    total, work = lost["gpu_seconds"], lost["work_gpu_seconds"]
    if work <= 0:
        return ""
    if total < 1.0:
        return f"This run lost no GPU time to sync stalls, stragglers or imbalance (of {_hours(work)})."
    # (lost GPU-seconds, who, cause): slow nodes before GPUs where they lost the same
    culprits = [(nd["lost_gpu_seconds"], f"node {nd['node']}", nd.get("cause"))
                for nd in j.straggler_nodes if nd["lost_gpu_seconds"] > 0]
    culprits += [(st["lost_gpu_seconds"], j.label(st["key"]), st.get("cause"))
                 for st in j.stragglers if st["lost_gpu_seconds"] > 0]
    culprits.sort(key=lambda c: -c[0])
    parts = [f"{share(s / work)} waiting for {who}" + (f" ({cause})" if cause else "")
             for s, who, cause in culprits[:HEADLINE_NAMED]]
    more = culprits[HEADLINE_NAMED:]
    if more:
        causes = list(dict.fromkeys(c for _, _, c in more if c))
        parts.append(f"{share(sum(s for s, _, _ in more) / work)} waiting for {len(more)} more "
                     + ("straggler" if len(more) == 1 else "stragglers")
                     + (f" ({', '.join(causes)})" if causes else ""))
    named = sum(s for s, _, _ in culprits)
    for item in lost["by_reason"]:
        if item["reason"] == "sync_stall":
            parts.append(f"{share(item['gpu_seconds'] / work)} to sync stalls")
        elif item["reason"] == "imbalance":
            parts.append(f"{share(item['gpu_seconds'] / work)} to imbalance")
    rest = sum(i["gpu_seconds"] for i in lost["by_reason"] if i["reason"] == "straggler") - named
    if rest >= 0.005 * work:
        parts.append(f"{share(rest / work)} waiting for stragglers of shorter spans")
    return (f"This run lost {total / 3600:.2f} of {_hours(work)} ({pct(total / work)})"
            + (": " + ", ".join(parts) if parts else "") + ".")


def _with_cause(f: Finding, v: Any) -> Finding:
    """The finding with its cause (analysis.cause.Verdict); the cause's remedy replaces the general one."""
    f.cause, f.remedy = v, v.remedy
    return f
