"""nvidia-smi has no hostname field, but the logs of a job's nodes often name their
host: a wrapper writes a `hostname` column, or every line is prefixed with the host's
name (`nvidia-smi --query-gpu=... -lms 100 | sed "s/^/$(hostname), /"`, the header
too). Either way the log names its node, as dcgm-exporter's Hostname label does, and
its GPU rows are read as without it, by the vectorised reader and row by row alike."""
from __future__ import annotations

import pytest

from conftest import require_data
from gpulse.sources.recorded import read_log, smi_csv, smi_fast
from gpulse.sources.recorded.job import job_logs

ROWS = 4000      # a few batches of 1,000 rows: the vectorised reader takes them


@pytest.fixture
def plain(tmp_path):
    lines = require_data("traces/h100-8gpu/ckpt1000.csv").read_text().splitlines()[:ROWS + 1]
    p = tmp_path / "plain.csv"
    p.write_text("\n".join(lines) + "\n")
    return lines, p


def _forms(lines: list[str], tmp_path, host: str) -> dict:
    head, rows = lines[0], lines[1:]
    forms = {
        "sed prefix": [f"{host}, {ln}" for ln in lines],
        "hostname column first": [f"hostname, {head}"] + [f"{host}, {r}" for r in rows],
        "hostname column last": [f"{head}, hostname"] + [f"{r}, {host}" for r in rows],
    }
    out = {}
    for name, text in forms.items():
        p = tmp_path / (name.replace(" ", "-") + ".csv")
        p.write_text("\n".join(text) + "\n")
        out[name] = p
    return out


def _read(path, fast: bool, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(smi_fast, "BATCH", 1000)
        if not fast:
            m.setattr(smi_fast, "available", lambda: False)
        return read_log(str(path))


@pytest.mark.parametrize("fast", [True, False])
def test_a_log_that_names_its_host_reads_as_that_node(plain, tmp_path, monkeypatch, fast):
    lines, p = plain
    want = _read(p, fast, monkeypatch)
    assert want.nodes == ()
    for name, path in _forms(lines, tmp_path, "gpu-a01").items():
        run = _read(path, fast, monkeypatch)
        assert run.nodes == ("gpu-a01",), name
        assert run.errors == [], name
        assert run.devices == want.devices, name
        assert [r.reading for r in run.records] == [r.reading for r in want.records], name


def test_the_vectorised_reader_takes_the_rows_of_a_host_prefixed_log(plain, tmp_path, monkeypatch):
    if not smi_fast.available():
        pytest.skip("pyarrow not installed")
    by_row = []
    one_row = smi_csv._row_values
    monkeypatch.setattr(smi_csv, "_row_values", lambda *a: by_row.append(1) or one_row(*a))
    lines, _ = plain
    run = _read(_forms(lines, tmp_path, "gpu-a01")["sed prefix"], True, monkeypatch)
    assert len(run.records) == ROWS and len(by_row) < 0.1 * ROWS


def test_a_job_names_its_nodes_by_the_hosts_the_logs_name(plain, tmp_path):
    lines, _ = plain
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _forms(lines, tmp_path / "a", "gpu-a01")["sed prefix"]
    b = _forms(lines, tmp_path / "b", "gpu-a02")["hostname column last"]
    # a log of two hosts, and one without a host, by the file's stem; --node-name wins
    merged = tmp_path / "merged.csv"
    merged.write_text("\n".join(["hostname, timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"]
                                + [f"{h}, 2026/01/31 08:00:{k:02d}.{g}00, {g}, 90 %, 500.00 W, 1000 MiB"
                                   for k in range(20) for h in ("n1", "n2") for g in range(2)]) + "\n")
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(["timestamp, index, utilization.gpu [%]"]
                              + [f"2026/01/31 08:00:{k:02d}.000, 0, 90 %" for k in range(20)]) + "\n")
    for paths, nodes in (([str(a), str(b)], ["gpu-a01", "gpu-a02"]), ([str(merged), str(bare)], ["merged", "bare"])):
        assert [lg.node for lg in job_logs(paths, []).logs] == nodes
        assert [lg.node for lg in job_logs(paths, ["x1", "x2"]).logs] == ["x1", "x2"]


def test_a_log_of_several_hosts_keys_the_gpus_of_all_but_the_first(tmp_path):
    rows = ["hostname, timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"]
    for k in range(20):
        for host in ("n1", "n2"):
            for g in range(2):
                rows.append(f"{host}, 2026/01/31 08:00:{k:02d}.{g}00, {g}, 90 %, 500.00 W, 1000 MiB")
    p = tmp_path / "merged.csv"
    p.write_text("\n".join(rows) + "\n")
    run = read_log(str(p))
    assert run.nodes == ("n1", "n2")
    assert [d.gpu for d in run.devices] == ["0", "1", "n2:0", "n2:1"]
    assert run.errors == []


def test_an_unknown_first_column_is_still_reported_when_the_rows_do_not_repeat_it(tmp_path):
    p = tmp_path / "typo.csv"
    p.write_text("timestmp, index, utilization.gpu [%], memory.used [MiB]\n"
                 + "".join(f"2026/01/31 08:00:{k:02d}.000, 0, 50 %, 10 MiB\n" for k in range(5)))
    run = read_log(str(p))
    assert run.nodes == ()
    assert any("unknown column 'timestmp'" in e.message for e in run.errors)
