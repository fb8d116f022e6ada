"""One report for a multi-node job from its per-node nvidia-smi logs.

The job is the straggler sweep's 4 x 8 layout (bench/lib/corpus: levels from the real
8xH100 traces in ../shared/data, their timing: 100 ms polls, row skew, query stalls,
each node's own poll jitter, power as logged by `power.draw.instant`, so step-level
spin-waits can be judged) with sharded checkpoints added: every 30-60 s all ranks
leave the GPU for a few seconds (a sync stall that starts and ends on every node at
once). Each node's clock reads its own offset, up to 3 s, so the logs disagree on
when things happened until the report aligns them. The real traces' own checkpoint
pattern (rank 0 writes while the others spin-wait) is aligned on directly, from
ckpt1000.csv with its clock moved.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import limited, require_data

GPUS, NODES = 8, 4
# seconds each node's clock reads ahead of true time; node 0 is the reference
OFFSETS = (1.2, 0.0, 3.0, 2.35)
HEALTHY, SLOW, TAIL = 60.0, 240.0, 20.0


def _corpus():
    require_data("traces/h100-8gpu/ckpt1000.csv")
    import importlib
    # bench.lib.corpus's own `cases` is a function: the module by its full name
    return (importlib.import_module("bench.lib.corpus.cases"),
            importlib.import_module("bench.lib.corpus.smi"))


def write_job(out: Path, slow: set[tuple[int, int]], seed: int, fmt: str = "instant",
              offsets: tuple[float, ...] = OFFSETS, checkpoints: bool = True,
              stalls: list[float] | None = None) -> list[Path]:
    """The job's per-node logs (`<out>/train-n<N>.csv`): data-parallel steps in which
    the ranks in `slow` compute 25 % longer from HEALTHY seconds of training on, with
    checkpoint stalls every 30-60 s (none: `checkpoints` False), whose lengths are
    appended to `stalls`."""
    cases, smi = _corpus()
    lv = cases.levels()
    rng = random.Random(seed)
    end = cases.LEAD + cases.STARTUP + HEALTHY + SLOW + TAIL

    class Shifted(smi.Timeline):
        """A node's timeline on its own clock: everything `off` seconds later."""

        def __init__(self, off: float):
            super().__init__(GPUS, end + off)
            self.off = off

        def add(self, gpu, a, b, state, part=0.0, fill=smi.OFF):
            super().add(gpu, a + self.off, b + self.off, state, part, fill)

    tls = [Shifted(o) for o in offsets]
    t = 0.0
    for tl in tls:
        t = cases.start_up(tl, cases.LEAD)
    onset, stop = t + HEALTHY, t + HEALTHY + SLOW
    ranks = [(n, g) for n in range(NODES) for g in range(GPUS)]
    c = rng.uniform(1.0, 2.0)
    ckpt = t + rng.uniform(30.0, 60.0)
    while t < stop:
        if checkpoints and t >= ckpt:
            length = rng.uniform(2.0, 5.0)
            if stalls is not None:
                stalls.append(length)
            for n, g in ranks:
                tls[n].add(g, t, t + length, smi.IDLE)
            t += length
            ckpt = t + rng.uniform(30.0, 60.0)
            continue
        work = {r: c * (1 + rng.uniform(-0.02, 0.02)) * (1.25 if r in slow and t >= onset else 1.0) for r in ranks}
        e = t + max(work.values()) + 0.03 * c
        for r in ranks:
            tls[r[0]].add(r[1], t, t + work[r], smi.COMPUTE)
            tls[r[0]].add(r[1], t + work[r], e, smi.SPIN)
        t = e
    paths = []
    for n, tl in enumerate(tls):
        tl.end = t + 2.0 + TAIL + offsets[n]
        cases.job_exit(tl, t)          # on the node's clock: Shifted.add moves it
        path = out / f"train-n{n}.csv"
        smi.write_log(str(path), tl, lv, fmt, seed * 10 + n)
        paths.append(path)
    return paths


def report(*args: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--quiet", *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "findings.json").read_text()) if p.returncode == 0 else {}
    return p, doc


def validate(doc: dict) -> None:
    from gpulse.pages import web_asset
    schema = json.loads(web_asset("findings.schema.json"))
    v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    assert [f"{list(e.path)}: {e.message}" for e in v.iter_errors(doc)] == []


def _check_offsets(doc: dict) -> None:
    clocks = doc["clocks"]
    assert clocks["reference"] == "train-n0"
    found = {n["node"]: n for n in clocks["nodes"]}
    for n, true in enumerate(OFFSETS):
        node = found[f"train-n{n}"]
        assert node["aligned"], node
        assert node["offset_seconds"] == pytest.approx(true - OFFSETS[0], abs=0.2), node
    line = next(x for x in doc["notes"] if x.startswith("clock offsets applied"))
    for n, true in enumerate(OFFSETS[1:], 1):
        said = float(re.search(rf"train-n{n} ([+-]\d+\.\d\d) s", line).group(1))
        assert said == pytest.approx(true - OFFSETS[0], abs=0.2), line


def test_a_slow_node_of_four_is_named_in_one_report_with_the_clocks_aligned(tmp_path):
    stalls: list[float] = []
    paths = write_job(tmp_path, {(1, g) for g in range(GPUS)}, seed=7, stalls=stalls)
    p, doc = report("--input", str(tmp_path / "train-n*.csv"), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    _check_offsets(doc)
    # on aligned clocks every checkpoint is one stall of the whole job, as long as it was
    # (on the clocks as recorded the nodes overlap for a third of that)
    assert len([e for e in doc["stall_episodes"] if e["stalled_seconds"] >= 1.0]) == len(stalls)
    assert sum(e["stalled_seconds"] for e in doc["stall_episodes"]) == pytest.approx(sum(stalls), rel=0.15)
    assert doc["run"]["gpus"] == NODES * GPUS
    assert {(g["node"], g["workload"]) for g in doc["gpus"]} == {(f"train-n{n}", "train") for n in range(NODES)}
    [nd] = doc["straggler_nodes"]
    assert (nd["node"], nd["workload"], nd["gpus"]) == ("train-n1", "train", GPUS)
    assert not [s for s in doc["stragglers"] if s["node"] != "train-n1"]
    assert any(f["kind"] == "straggler_node" and "train-n1" in f["text"] for f in doc["findings"])
    assert "train-n1" in p.stdout
    # the heatmap: every GPU of every node, nodes in natural order
    page = (tmp_path / "r" / "report.html").read_text()
    hm = json.loads(page.split('id="gpulse-heatmap">', 1)[1].split("</script>", 1)[0])
    assert len(hm["rows"]) == NODES * GPUS
    assert [r.split()[0] for r in hm["rows"][::GPUS]] == [f"train-n{n}" for n in range(NODES)]
    assert hm["node_breaks"] == [GPUS * n for n in range(1, NODES)]
    validate(doc)
    assert paths


def test_a_slow_gpu_on_another_node_is_named_by_node_and_gpu(tmp_path):
    write_job(tmp_path, {(2, 5)}, seed=11)
    logs = sorted(tmp_path.glob("train-n*.csv"))
    p, doc = report("--input", *map(str, logs), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    _check_offsets(doc)
    assert not doc["straggler_nodes"]
    named = {(s["node"], s["gpu"]) for s in doc["stragglers"]}
    assert named == {("train-n2", "5")}, doc["stragglers"]
    [text] = [f["text"] for f in doc["findings"] if f["kind"] == "straggler"]
    assert text.startswith("train-n2 GPU 5 worked "), text
    # its peers counted, not listed node by node ("train-n0 GPUs 0–7; train-n1 GPUs 0–7;
    # train-n2 GPUs 0–4, 6 and 7; ..."): the sentence names the straggler's node alone
    assert f"for its {NODES * GPUS - 1} peers on {NODES} nodes" in text, text
    assert not [n for n in range(NODES) if n != 2 and f"train-n{n}" in text], text


def _fingerprint(rec) -> tuple:
    """What the report keeps of a run, whole: every GPU's and group's tracks, and the
    findings document made of them."""
    from gpulse.report.findings import analyse
    gpus = [(k, g.node, g.gpu, g.workload, g.lost_to, repr(g.signals_end),
             *(bytes(getattr(g, n)) for n in ("busy", "active", "spin_wait", "idle", "sampled", "dev_busy",
                                                "dev_active", "cost_active", "cost_busy", "signals",
                                                "signal_ticks")))
            for k, g in rec.gpus.items()]
    groups = [(w, gr.gpus, sorted(gr.lost.items()), bytes(gr.holding), bytes(gr.stall), bytes(gr.imbalance),
               repr(gr.episodes)) for w, gr in rec.groups.items()]
    return bytes(rec.times), gpus, groups, json.dumps(analyse(rec).as_json(), sort_keys=True)


@pytest.mark.parametrize("logs_read", ["job", "one log"])
def test_rows_are_read_as_the_same_rows_one_by_one(tmp_path, monkeypatch, logs_read):
    """The nodes' polls interleave row by row, so the merge gathers rows of several
    logs into one Rows, some with counters (one node logs clock-event states) and some
    without, some whose gauges have one set of fields and some not (a pending remapping
    unknown now and then; so are the reader's Rows of that node's log read alone): what
    the engine is given and the report made of it are those of the same rows handed on
    one Record at a time, to the bit."""
    pytest.importorskip("pyarrow")
    from gpulse.engine import Engine
    from gpulse.report import inputs
    from gpulse.sources.recorded import Rows, job
    from gpulse.sources.recorded.stream import LogStream
    write_job(tmp_path, {(2, 5)}, seed=11)
    logs = sorted(tmp_path.glob("train-n*.csv"))
    states = logs[3].read_text().splitlines()
    logs[3].write_text("\n".join([states[0] + ", clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown"]
                                 + [ln + (", Active" if k % 7 == 0 else ", Not Active") + ", Not Active"
                                    for k, ln in enumerate(states[1:])]) + "\n")
    # node 1 logs a pending row remapping, unknown ([N/A]) on some rows: its rows' gauges
    # then differ in their fields
    pending = logs[1].read_text().splitlines()
    logs[1].write_text("\n".join([pending[0] + ", remapped_rows.pending"]
                                 + [ln + (", [N/A]" if k > 4000 and k % 9 == 0 else ", Yes" if k > 4000 else ", No")
                                    for k, ln in enumerate(pending[1:])]) + "\n")
    read = [str(p) for p in logs] if logs_read == "job" else [str(logs[1])]
    owner, name = (job.JobStream, "_merged") if logs_read == "job" else (LogStream, "items")
    items = getattr(owner, name)
    kinds: list[tuple[str, bool]] = []

    def seen(self):
        for item in items(self):
            if type(item) is Rows:
                nodes = {g.split(":")[0] for g in item.gpu} if logs_read == "job" else ()
                kinds.append(("mixed" if len(nodes) > 1 else "one", item.uniform))
            yield item

    def one_by_one(self):
        for item in items(self):
            yield from (item.records() if type(item) is Rows else (item,))

    # what the engine is given, reading by reading: the samples, and each recorded
    # instant's gauges and counters
    ingest = Engine.ingest
    given = [hashlib.sha256()]

    def tee(self, result, wall):
        for r in sorted(result.readings, key=lambda r: r.gpu):
            given[-1].update(repr((r.gpu, r.samples, r.gauges, r.counters, r.up, r.instants)).encode())
        return ingest(self, result, wall)

    monkeypatch.setattr(Engine, "ingest", tee)
    monkeypatch.setattr(owner, name, seen)
    rows = _fingerprint(inputs.from_logs(read))
    if logs_read == "job":
        assert sum(k == "mixed" for k, _ in kinds) > 0.5 * len(kinds), kinds[:20]
    else:
        assert {u for _, u in kinds} == {True, False}, kinds[:20]
    given.append(hashlib.sha256())
    monkeypatch.setattr(owner, name, one_by_one)
    alone = _fingerprint(inputs.from_logs(read))
    assert given[0].hexdigest() == given[1].hexdigest()
    assert rows[0] == alone[0] and rows[2] == alone[2]
    assert rows[1] == alone[1]
    assert rows[3] == alone[3]
    if logs_read == "job":
        assert '"train-n2"' in rows[3]


@pytest.mark.parametrize("logs_read", ["job", "one log"])
def test_logs_read_in_a_process_of_their_own_give_the_same_report(tmp_path, monkeypatch, logs_read):
    """The 4-node job with its clocks up to 3 s apart (and one node's log alone): read,
    and scanned for its clock offsets, on the second core (sources/recorded/ahead.py,
    for long logs), the report keeps what it keeps read in process, to the bit, and
    finds the same offsets."""
    pytest.importorskip("pyarrow")
    from gpulse.report import inputs
    from gpulse.sources.recorded import ahead
    write_job(tmp_path, {(2, 5)}, seed=11)
    logs = sorted(tmp_path.glob("train-n*.csv"))
    read = [str(p) for p in logs] if logs_read == "job" else [str(logs[1])]
    used: list[str] = []
    for name in ("ReadAhead", "Call"):
        def counted(*args, _cls=getattr(ahead, name), _name=name):
            used.append(_name)
            return _cls(*args)
        monkeypatch.setattr(ahead, name, counted)
    monkeypatch.setattr(ahead, "AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(ahead, "cpus", lambda: 2)
    aside = inputs.from_logs(read)
    assert sorted(set(used)) == (["Call", "ReadAhead"] if logs_read == "job" else ["ReadAhead"])
    monkeypatch.setattr(ahead, "AHEAD_MIN_BYTES", 1 << 62)
    here = inputs.from_logs(read)
    assert _fingerprint(aside) == _fingerprint(here)
    assert (aside.clocks, aside.notes, aside.source) == (here.clocks, here.notes, here.source)
    if logs_read == "job":
        _check_offsets({"clocks": aside.clocks, "notes": aside.notes})


def test_a_log_that_fails_in_the_scan_aside_fails_as_it_does_in_process(tmp_path, monkeypatch):
    """The alignment's scan of the later logs runs in a process of its own: a log there
    that cannot be read is the same one-line error, after the earlier logs scanned."""
    from gpulse.sources.recorded import LogFormatError, ahead, job
    write_job(tmp_path, set(), seed=3)
    logs = sorted(tmp_path.glob("train-n*.csv"))
    logs[3].write_text("what,is,this\n1,2,3\n")
    errors = []
    for least in (0, 1 << 62):
        monkeypatch.setattr(ahead, "AHEAD_MIN_BYTES", least)
        monkeypatch.setattr(ahead, "cpus", lambda: 2)
        with pytest.raises(LogFormatError) as e:
            job.job_logs([str(p) for p in logs], [])
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "train-n3.csv:1: unknown header" in errors[0]


def test_a_repeated_input_used_to_report_on_the_last_log_only(tmp_path):
    """`--input a --input b` once kept only b (8 GPUs of a 16-GPU job, exit 0)."""
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    src = require_data("traces/h100-8gpu/ckpt1.csv").read_text()
    a.write_text(src)
    b.write_text(src)
    p, doc = report("--input", str(a), "--input", str(b), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    assert doc["run"]["gpus"] == 16
    assert {g["node"] for g in doc["gpus"]} == {"a", "b"}


def test_one_log_given_twice_is_one_line(tmp_path):
    log = require_data("traces/h100-8gpu/ckpt1.csv")
    p, _ = report("--input", str(log), str(log), out=tmp_path / "r")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "given twice" in line and "ckpt1.csv" in line


@pytest.mark.parametrize("args, says", [
    (("{d}/nothing-*.csv",), "no file matches"),
    (("{d}/a.csv", "{d}/missing.csv"), "missing.csv: no such file"),
    (("{d}/a.csv", "{d}/b.csv", "--node-name", "x"), "1 node name(s) for 2 logs"),
    (("{d}/a.csv", "{d}/b.csv", "--node-name", "x", "--node-name", "x"), "node 'x' named twice"),
])
def test_bad_sets_of_logs_are_one_line(tmp_path, args, says):
    src = require_data("traces/h100-8gpu/ckpt1.csv").read_text()
    (tmp_path / "a.csv").write_text(src)
    (tmp_path / "b.csv").write_text(src)
    argv = [a.format(d=tmp_path) for a in args]
    i = argv.index("--node-name") if "--node-name" in argv else len(argv)
    p, _ = report("--input", *argv[:i], *argv[i:], out=tmp_path / "r")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert says in line


def test_logs_without_common_stall_edges_keep_their_clocks_and_say_so(tmp_path):
    """No checkpoints and sub-second all-reduces: no all-GPU edge to align on."""
    write_job(tmp_path, set(), seed=3, offsets=(0.0, 0.0, 0.0, 0.0), checkpoints=False)
    logs = sorted(tmp_path.glob("train-n*.csv"))[:2]
    p, doc = report("--input", *map(str, logs), "--node-name", "a", "--node-name", "b", out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    assert [(n["node"], n["offset_seconds"]) for n in doc["clocks"]["nodes"]] == [("a", 0.0), ("b", 0.0)]
    assert not any(x.startswith("clock offsets applied") for x in doc["notes"])
    assert any("clock taken as recorded" in x or "clocks taken as recorded" in x for x in doc["notes"]), doc["notes"]
    assert "Node clocks taken as recorded" in p.stdout
    validate(doc)


def moved_clock(src: Path, dest: Path, seconds: float) -> Path:
    """The nvidia-smi log at src with every timestamp `seconds` later."""
    import datetime as dt
    lines = src.read_text().splitlines()
    out = [lines[0]]
    for ln in lines[1:]:
        stamp, rest = ln.split(",", 1)
        t = dt.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f") + dt.timedelta(seconds=seconds)
        out.append(t.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3] + "," + rest)
    dest.write_text("\n".join(out) + "\n")
    return dest


def test_the_real_checkpoint_stalls_align_a_moved_clock(tmp_path):
    """ckpt1000.csv (rank 0 checkpoints while GPUs 1-7 spin-wait, 1 s-averaged power)
    against itself with every timestamp 1.7 s later: the offset is found."""
    from gpulse.sources.recorded import job
    src = require_data("traces/h100-8gpu/ckpt1000.csv")
    other = moved_clock(src, tmp_path / "b.csv", 1.7)
    aligned = job.align([job.NodeLog(str(src), "a"), job.NodeLog(str(other), "b")])
    assert aligned.reference == "a"
    b = aligned.logs[1]
    assert b.aligned and b.offset == pytest.approx(1.7, abs=0.05), aligned
    assert aligned.edges["b"] >= 3


def test_export_of_several_logs_is_each_node_on_the_aligned_clock(tmp_path):
    """Two nodes that logged the same run, one clock 1.7 s ahead: one export holds both
    nodes' series under one workload, on the same scrape times with the same values
    once the offset is taken off (without it every scrape would see 1.7 s of other data)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    src = require_data("traces/h100-8gpu/ckpt1000.csv")
    a = tmp_path / "a.csv"
    a.write_text(src.read_text())
    moved_clock(src, tmp_path / "b.csv", 1.7)
    p = subprocess.run([sys.executable, "-m", "gpulse", "export", "--input", str(tmp_path / "*.csv")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert re.search(r"clock offsets applied, against node a .*: b \+1\.7\d s", p.stderr), p.stderr
    series: dict[tuple, list] = {}
    for fam in text_string_to_metric_families(p.stdout):
        for smp in fam.samples:
            if smp.name == "gpulse_gpu_active_seconds_total":
                series.setdefault((smp.labels["node"], smp.labels["gpu"], smp.labels.get("workload")), []).append(
                    (smp.timestamp, smp.value))
    assert {k[0] for k in series} == {"a", "b"} and {k[2] for k in series} == {"job"}
    for gpu in map(str, range(8)):
        a_pts, b_pts = series[("a", gpu, "job")], series[("b", gpu, "job")]
        assert [t for t, _ in b_pts] == [t for t, _ in a_pts]
        # the offset is estimated (within 0.05 s): a scrape may see a row more or less
        assert [v for _, v in b_pts] == pytest.approx([v for _, v in a_pts], abs=0.2)


def test_the_alignment_reads_the_whole_logs_only_when_their_start_does_not_align(tmp_path, monkeypatch):
    """ckpt1000.csv's first minute is start-up (no stall edge): read that far, the
    nodes cannot be aligned, so the logs are read whole, and the offset is found."""
    from gpulse.sources.recorded import job
    src = require_data("traces/h100-8gpu/ckpt1000.csv")
    other = moved_clock(src, tmp_path / "b.csv", -2.4)
    scans = []
    edges = job._edges

    def counted(*args):
        scans.append(args[-1])
        return edges(*args)
    monkeypatch.setattr(job, "_edges", counted)
    monkeypatch.setattr(job, "ALIGN_SCAN_S", 60.0)
    aligned = job.align([job.NodeLog(str(src), "a"), job.NodeLog(str(other), "b")])
    assert scans == [60.0, 60.0, None, None]
    assert aligned.logs[1].offset == pytest.approx(-2.4, abs=0.05)
    scans.clear()
    monkeypatch.setattr(job, "ALIGN_SCAN_S", 3600.0)    # longer than the log: read once
    again = job.align([job.NodeLog(str(src), "a"), job.NodeLog(str(other), "b")])
    assert scans == [3600.0, 3600.0] and again.logs[1].offset == aligned.logs[1].offset


def _head(dest: Path, rows: int = 2000, skip: int = 0) -> Path:
    """The first `rows` rows of the real ckpt1.csv (about 25 s of 8 GPUs at ~100 ms),
    after `skip` rows (12,000: past its start-up, into training)."""
    lines = require_data("traces/h100-8gpu/ckpt1.csv").read_text().splitlines()
    dest.write_text("\n".join([lines[0], *lines[1 + skip:1 + skip + rows]]) + "\n")
    return dest


def test_logs_of_different_runs_are_refused_in_one_line(tmp_path):
    """Two logs a day apart once gave exit 0 and a report of one 'job' spanning the day
    (every tick of it analysed: 10 s for 25 s of data, an hour for logs a year apart),
    its GPUs compared as peers though they never ran together."""
    a = _head(tmp_path / "a.csv")
    b = moved_clock(a, tmp_path / "b.csv", 86400.0)
    p, _ = report("--input", str(a), str(b), out=tmp_path / "r")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "no common stretch of time" in line and "24 h" in line, line
    assert str(a) in line and str(b) in line, line


def test_a_log_without_timestamps_among_timed_ones_is_refused_in_one_line(tmp_path):
    """A log without a clock reads from time 0 (1970): beside a timed log, the job's
    analysis once ticked through 55 years and never ended."""
    a = _head(tmp_path / "a.csv")
    lines = a.read_text().splitlines()
    b = tmp_path / "b.csv"
    b.write_text("\n".join(ln.split(",", 1)[1] for ln in lines) + "\n")
    for argv in (["report", "--quiet", "--input", str(a), str(b), "--out", str(tmp_path / "r")],
                 ["export", "--input", str(a), str(b)]):
        p = subprocess.run([sys.executable, "-m", "gpulse", *argv], capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and "Traceback" not in p.stderr, (argv[0], p.stderr[-2000:])
        (line,) = p.stderr.strip().splitlines()
        assert f"{b}: no timestamps, while the other logs have them" in line, line


def test_logs_one_after_the_other_are_refused_in_one_line(tmp_path):
    """A log that begins 35 s after the other ended (within a single log's gap rule,
    GAP_FREE_S) was once one job with a gap: of two real traces logged 47 s apart,
    the report said every GPU of the later log 'stopped reporting ... and never came
    back' and counted its whole run as no one's work (the earlier log's GPUs had
    released their memory). Two runs, not one: refused before anything is analysed."""
    a = _head(tmp_path / "a.csv")
    b = moved_clock(a, tmp_path / "b.csv", 60.0)
    p, _ = report("--input", str(a), str(b), out=tmp_path / "r")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"gpulse: {b}: its first row comes ") and f"the last, {a})" in line, line
    assert "no common stretch of time" in line, line


def test_logs_one_after_the_other_longer_than_the_scan_stop_where_the_second_begins(tmp_path, monkeypatch):
    """The alignment reads a log's first ALIGN_SCAN_S only (here 5 s), so it cannot
    see where a long log ends: the merge stops at the later log's first row, where
    every log before it has ended, with the same line."""
    from gpulse.sources.recorded import LogFormatError, job
    a = _head(tmp_path / "a.csv", rows=4000, skip=12000)                # ~50 s of training
    b = moved_clock(a, tmp_path / "b.csv", 80.0)
    monkeypatch.setattr(job, "ALIGN_SCAN_S", 5.0)
    aligned = job.align([job.NodeLog(str(a), "a"), job.NodeLog(str(b), "b")])     # no end seen: kept
    stream = job.JobStream(aligned.logs, workload="job")
    with pytest.raises(LogFormatError) as e:
        for rec in stream.records():
            assert rec.reading.gpu.startswith("a:"), rec      # nothing of b is read as the job's
    assert str(e.value).startswith(f"{b}: its first row comes ") and f"(the last, {a})" in str(e.value)


def test_a_node_that_joins_while_the_others_run_is_one_job(tmp_path):
    """The guard asks for a common stretch, not for every pair: node d's log ends at
    12 s (its node failed), node e's begins at 40 s (the replacement), node a's runs
    through both; one job of three nodes."""
    a = _head(tmp_path / "a.csv", rows=4000, skip=12000)                # ~50 s of training
    d = _head(tmp_path / "d.csv", rows=1000, skip=12000)                # ~12 s
    e = moved_clock(_head(tmp_path / "e0.csv", skip=12000), tmp_path / "e.csv", 40.0)
    p, doc = report("--input", str(a), str(d), str(e), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr[-2000:]
    assert doc["run"]["gpus"] == 24
    assert {g["node"] for g in doc["gpus"] if g["sampled_seconds"]} == {"a", "d", "e"}
    missing = _missing(doc)
    # d's node failed; e's joined late: its GPUs did not stop, they began; a's log ends
    # before e's. Each is its whole node, said once for the node
    assert set(missing) == {"Node a", "Node d", "Node e"}, missing
    assert "stopped reporting" in missing["Node d"]["text"] and "never came back" in missing["Node d"]["text"]
    assert "all 8 of its GPUs at once" in missing["Node d"]["text"], missing
    assert "gave its first reading at " in missing["Node e"]["text"] and "joined late" in missing["Node e"]["text"]
    assert "stopped" not in missing["Node e"]["text"], missing


def _missing(doc: dict) -> dict[str, dict]:
    """The gpu_missing findings by whom they name ('Node d', 'n1 GPU 5')."""
    out = {}
    for f in doc["findings"]:
        if f["kind"] == "gpu_missing":
            who = re.match(r"(Node \S+|\S+ GPU \d+) ", f["text"]).group(1)
            assert who not in out, (who, doc["findings"])
            out[who] = f
    return out


def _cut(path: Path, share: float, gpu: str | None = None) -> None:
    """Rows of `path` from `share` of its rows on dropped: all of them (its logger
    stopped), or GPU `gpu`'s only (it fell off the bus)."""
    head, *rows = path.read_text().splitlines(keepends=True)
    at = int(len(rows) * share)
    kept = rows[:at] + ([r for r in rows[at:] if r.split(", ")[1] != gpu] if gpu is not None else [])
    path.write_text(head + "".join(kept))


def test_a_node_whose_log_ends_early_is_one_finding_for_the_node(tmp_path):
    """Every GPU of a node going silent at once is the node (down, its exporter or
    logger stopped), not eight GPUs fallen off the bus: a 4 x 8 job (clocks aligned)
    whose node 3 logger stopped at 70 % of the run once gave eight 'train-n3 GPU k
    stopped reporting ... lost, hung or fallen off the bus' findings; it is one for the
    node. A single GPU that stopped (node 1's GPU 5) is still that GPU."""
    paths = write_job(tmp_path, set(), seed=11)
    _cut(paths[3], 0.7)
    _cut(paths[1], 0.6, gpu="5")
    p, doc = report("--input", *map(str, paths), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr[-2000:]
    validate(doc)
    _check_offsets(doc)
    missing = _missing(doc)
    assert set(missing) == {"Node train-n3", "train-n1 GPU 5"}, missing
    node, gpu = missing["Node train-n3"], missing["train-n1 GPU 5"]
    assert node["severity"] == "high" and "all 8 of its GPUs at once" in node["text"], node
    assert "never came back" in node["text"] and "the node went down, or its exporter or logger stopped" in node["text"]
    assert "taken as recorded" not in node["text"], node
    assert gpu["severity"] == "high" and "fallen off the bus" in gpu["text"], gpu


def test_logs_ending_apart_on_clocks_not_aligned_name_nodes_not_gpus(tmp_path):
    """A node's clock 45 s ahead, beyond the alignment's lag range (ALIGN_LAG_S): its
    log seems to run on 45 s after the others end (23 s of them its training). The report once said all 24 GPUs
    of the other three nodes 'stopped reporting ... and never came back: lost, hung or
    fallen off the bus' (high). They are one finding per node, medium, each saying
    that the clock of the node taken as recorded may be why."""
    from gpulse.sources.recorded import job
    assert 45.0 > job.ALIGN_LAG_S
    paths = write_job(tmp_path, set(), seed=12, offsets=(0.0, 0.0, 0.0, 45.0))
    p, doc = report("--input", *map(str, paths), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr[-2000:]
    validate(doc)
    assert [n["node"] for n in doc["clocks"]["nodes"] if not n["aligned"]] == ["train-n3"], doc["clocks"]
    missing = _missing(doc)
    assert set(missing) == {"Node train-n0", "Node train-n1", "Node train-n2"}, missing
    for f in missing.values():
        assert f["severity"] == "medium" and "never came back" in f["text"], f
        assert "the clocks of train-n3 were taken as recorded" in f["text"], f


def test_off_gpu_ranks_of_a_job_are_named_by_node_and_gpu(tmp_path):
    """The real ckpt1.csv's rank 0 leaves the GPU while the others spin-wait; two nodes
    logged it (the second's clock 1.3 s ahead). A GPU's index is its rank on one node
    only: the job's findings once read 'rank 0, 0 holds everybody up' and 'rank 0 is
    the bottleneck' for GPU 0 of each node; they name node and GPU."""
    a = _head(tmp_path / "a.csv", rows=40000)
    b = moved_clock(a, tmp_path / "b.csv", 1.3)
    p, doc = report("--input", str(a), str(b), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    texts = [f["text"] for f in doc["findings"]]
    assert not [t for t in texts if "rank 0" in t], texts
    stalls = [f["text"] for f in doc["findings"] if f["kind"] == "sync_stall"]
    assert any("checkpointing by a GPU 0; b GPU 0" in t for t in stalls), stalls
    assert any("a GPU 0; b GPU 0 hold everybody up" in t for t in stalls), stalls
    stragglers = [f["text"] for f in doc["findings"] if f["kind"] == "straggler"]
    assert stragglers and all("its rank is the bottleneck" in t for t in stragglers), stragglers


def test_off_gpu_ranks_alike_on_many_nodes_are_one_finding(tmp_path):
    """Five nodes logged the real ckpt1.csv (clocks up to 2.1 s apart): rank 0 of each
    leaves the GPU while its peers spin-wait. Beyond four alike stragglers (NODES_NAMED)
    the job's report words them as one finding naming all five; findings.json still
    lists each (a 1,024-GPU report once gave a paragraph per node)."""
    from gpulse.report.judge import NODES_NAMED
    a = _head(tmp_path / "a.csv", rows=40000)
    logs = [a] + [moved_clock(a, tmp_path / f"{n}.csv", s) for n, s in zip("bcde", (0.4, 1.3, -0.7, 2.1))]
    assert len(logs) == NODES_NAMED + 1
    p, doc = report("--input", *map(str, logs), out=tmp_path / "r")
    assert p.returncode == 0, p.stderr
    validate(doc)
    assert sorted((s["node"], s["gpu"]) for s in doc["stragglers"]) == [(n, "0") for n in "abcde"]
    found = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert len(found) == 1, [f["text"][:100] for f in found]
    text = found[0]["text"]
    assert text.startswith("GPU 0 of 5 nodes from a to e straggle alike, each with the same cause"), text
    assert ". The costliest: " in text and "its rank is the bottleneck" in text, text
    assert found[0]["cause"] == "off_gpu"


def test_a_job_of_more_logs_than_the_soft_open_file_limit(tmp_path):
    """A job's logs are all open while they are merged. A shell's soft `ulimit -n` of
    1,024 once stopped a report on a larger job with 'Too many open files'; the soft
    limit is raised toward the hard one, and past the hard one it is one line."""
    import resource
    a = _head(tmp_path / "n0.csv", rows=300)
    logs = [str(a)] + [_copy_to(a, tmp_path / f"n{i}.csv") for i in range(1, 50)]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def run(soft: int, hard: int) -> subprocess.CompletedProcess:
        return subprocess.run(limited([sys.executable, "-m", "gpulse", "report", "--quiet", "--input", *logs,
                                       "--out", str(tmp_path / "r")], open_files=(soft, hard)),
                              capture_output=True, text=True, timeout=300)
    p = run(40, hard)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r" / "findings.json").read_text())["run"]["gpus"] == 50 * 8
    p = run(40, 40)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "50 logs are read at once" in line and "may open 40 files" in line and "ulimit -n" in line, line


def _copy_to(src: Path, dest: Path) -> str:
    dest.write_bytes(src.read_bytes())
    return str(dest)


def _paused(dest: Path, pause: float, rows: int = 2000, skew: float = 0.0) -> Path:
    """2 × `rows` rows of ckpt1.csv's training (after its start-up), the second half
    `pause` seconds later (the job, and its loggers, stopped for longer than it had
    run), every stamp `skew` later."""
    import datetime as dt
    lines = require_data("traces/h100-8gpu/ckpt1.csv").read_text().splitlines()
    out = [lines[0]]
    for k, ln in enumerate(lines[16001:16001 + 2 * rows]):
        stamp, rest = ln.split(",", 1)
        t = dt.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f")
        t += dt.timedelta(seconds=skew + (pause if k >= rows else 0.0))
        out.append(t.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3] + "," + rest)
    dest.write_text("\n".join(out) + "\n")
    return dest


def test_a_job_wide_pause_longer_than_the_recording_is_one_clock_step_on_every_node(tmp_path):
    """Every node's logger stops for 2 hours after 25 s of training and goes on: longer than
    the time recorded, which a single log takes as its clock stepping forward. Each
    node's log takes its own step out, by its own last poll; the nodes stay within a
    poll of each other, one job of 50 s, and no stretch counts as unrecorded."""
    a = _paused(tmp_path / "a.csv", 7200.0)
    b = _paused(tmp_path / "b.csv", 7200.0, skew=0.04)
    alone, one = report("--input", str(a), out=tmp_path / "one")
    p, doc = report("--input", str(a), str(b), out=tmp_path / "job")
    assert alone.returncode == 0 and p.returncode == 0, (alone.stderr, p.stderr)
    validate(doc)
    assert doc["run"]["gpus"] == 16
    # the job spans what one node's log spans, not two hours
    span = lambda d: d["run"]["duration_seconds"]   # noqa: E731
    assert span(doc) == pytest.approx(span(one), abs=1.0) and span(doc) < 120, (span(doc), span(one))
    steps = [n for n in doc["notes"] if "stepped forward" in n]
    assert any(n.startswith(f"{a}:") for n in steps) and any(n.startswith(f"{b}:") for n in steps), doc["notes"]
    # both nodes' GPUs worked alike, as the node alone did: no node slow or idle for
    # want of time, no GPU of one node waiting for the other's
    busy = {(g["node"], g["gpu"]): g["busy_fraction"] for g in doc["gpus"]}
    alone = {g["gpu"]: g["busy_fraction"] for g in one["gpus"]}
    assert sum(alone.values()) > 6, alone      # training, not start-up
    for gpu in map(str, range(8)):
        assert busy[("a", gpu)] == pytest.approx(alone[gpu], abs=0.03), (busy, alone)
        assert busy[("b", gpu)] == pytest.approx(alone[gpu], abs=0.03), (busy, alone)
    # and the job concludes what the node alone does (here its rank 0 off the GPU),
    # with no gap and no slow node
    kinds = lambda d: sorted(f["kind"] for f in d["findings"])   # noqa: E731
    assert kinds(doc) == kinds(one) and "gap" not in kinds(doc) and not doc["straggler_nodes"], \
        ([(f["kind"], f["text"]) for f in doc["findings"]], kinds(one))
