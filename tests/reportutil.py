"""What report tests share: findings.json checked against its published schema,
Recordings of simulated runs (a fleet of nodes with one bad node, an analysis whose
node, workload and file names are hostile), and a log's report with the live
exporter's snapshots of the same engine run (`report_and_live`, `watching`)."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from typing import Any, Callable, Iterator

import jsonschema

from gpulse.report.collect import GpuTrack, Recording
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_source
from gpulse.report.judge import Judgement
from gpulse.report.render import web_asset
from gpulse.sources.sim import SimSource
from hostilelogs import HOSTILE, HOSTILE_FILE
from testing.config import test_config


SCHEMA = json.loads(web_asset("findings.schema.json"))


def validate(doc):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    v = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    errors = [f"{list(e.path)}: {e.message}" for e in v.iter_errors(doc)]
    assert errors == []


@contextlib.contextmanager
def watching(path, look: Callable[[Any], None], **analysis: Any) -> Iterator[None]:
    """Within it, the one report of the log `path` made in this process (through
    `gpulse.cli.main` or `gpulse.report.inputs`) calls `look(snapshot)` on each
    Snapshot of the engine run it reads: what `gpulse serve --source replay
    --replay.speed 0` serves at each tick, so the live gauges and the report are judged
    on one run instead of two (replaying a real trace is most of these tests' cost).
    The report's settings are checked to be the exporter's defaults (`analysis`: the
    settings a report may override, `min_stall=0.2`) but for the history it keeps, so
    the two views still judge by the same thresholds."""
    from gpulse.report import inputs

    live = test_config(source="replay", replay__file=str(path), replay__speed=0, **analysis)
    engine = inputs.run_offline
    runs = []

    def tee(source, cfg, **kw):
        assert dataclasses.replace(cfg, history=live.history) == live, \
            "the report judges the log by other settings than the exporter"
        runs.append(cfg)
        for pair in engine(source, cfg, **kw):
            look(pair[1])
            yield pair

    inputs.run_offline = tee
    try:
        yield
    finally:
        inputs.run_offline = engine
    assert len(runs) == 1


def report_and_live(path, look: Callable[[Any], None], **analysis: Any) -> dict:
    """findings.json of `gpulse report`'s analysis of the log, with `look(snapshot)`
    called on each Snapshot of its engine run (`watching`)."""
    from gpulse.report import inputs

    with watching(path, look, **analysis):
        return analyse(inputs.from_log(str(path), analysis=analysis or None)).as_json()


def sim_rec(scenario, node, gpus=8, seconds=90):
    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=gpus, node_name=node)
    return from_source(SimSource(cfg), cfg, f"sim {scenario}", until=seconds)


def fleet(nodes, bad_node, gpus=8):
    """A multi-node Recording: every node a copy of a balanced simulated node, one
    node (bad_node) a copy of one with a hot straggler on its GPU 1."""
    good, bad = sim_rec("balanced", "x", gpus), sim_rec("straggler", "x", gpus)
    rec = Recording(source="fleet", interval=good.interval, idle_threshold=good.idle_threshold,
                    activity=good.activity, window=good.window, times=copy.copy(good.times), epoch=False)
    for name in nodes:
        src = bad if name == bad_node else good
        grp = copy.deepcopy(src.groups[""])
        grp.workload, grp.gpus = name, []
        for k, g in src.gpus.items():
            t = copy.deepcopy(g)
            t.key, t.node = f"{name}:{k}", name
            rec.gpus[t.key] = t
            grp.gpus.append(t.key)
        rec.groups[name] = grp
    return rec


NODES = [f"node-{i}" for i in (10, 2, 1, *range(3, 10), *range(11, 34))]     # 33 nodes, 264 GPUs


def hostile_analysis():
    cfg = test_config(source="sim", sim__scenario="imbalance", sim__gpus=4, node_name=HOSTILE)
    rec = from_source(SimSource(cfg), cfg, HOSTILE_FILE, until=90)
    for g in list(rec.gpus.values())[2:]:        # a second node, so rows are named by node
        g.node = HOSTILE + "2"
    for gr in rec.groups.values():               # a tenant's workload name (an ownerReference)
        gr.workload = HOSTILE
    return analyse(rec)


def bare_judgement(nodes: int, gpus: int = 8, digits: int = 2) -> Judgement:
    """The Judgement of a Recording of nodes × gpus GPUs named node-NN:G and no ticks:
    what a test of the report's words sets its figures on."""
    rec = Recording(source="test", interval=1.0, idle_threshold=0.05, activity="util", window=60.0)
    for n in range(nodes):
        for g in range(gpus):
            node = f"node-{n:0{digits}d}"
            rec.gpus[f"{node}:{g}"] = GpuTrack(key=f"{node}:{g}", node=node, gpu=str(g))
    return Judgement(rec)
