"""The report's output directory when something else is in it: a symlink planted at
an output name, and a run that dies between its files. The report writes each file
new (O_EXCL, O_NOFOLLOW) and renames all three into place only when all are written."""
from __future__ import annotations

import json
import os

import pytest

from testing.config import test_config
from gpulse.report import outputs
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_source
from gpulse.sources.sim import SimSource

NAMES = ("report.html", "heatmap.png", "findings.json")


@pytest.fixture(scope="module")
def analysis():
    cfg = test_config(source="sim", sim__scenario="imbalance", sim__gpus=4, node_name="n1")
    return analyse(from_source(SimSource(cfg), cfg, "sim imbalance", until=60))


def test_a_symlink_at_an_output_name_is_replaced_not_followed(analysis, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in NAMES:
        (out / name).symlink_to(victim)
    outputs.write_outputs(analysis, str(out))
    assert victim.read_text() == "keep me\n"
    for name in NAMES:
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0
    assert json.loads((out / "findings.json").read_text())["run"]["gpus"] == 4
    assert sorted(os.listdir(out)) == sorted(NAMES)       # no temporary file left


def _dies_in_the_png(monkeypatch):
    def render_png(*a, **kw):              # the process is killed while it draws the picture
        raise KeyboardInterrupt
    monkeypatch.setattr(outputs, "render_png", render_png)


def _dies_writing_the_second_file(monkeypatch):
    real, opened = os.fdopen, []

    def fdopen(fd, *args, **kw):          # one file is on disk, the next dies half-way
        opened.append(fd)
        if len(opened) == 2:
            os.close(fd)
            raise KeyboardInterrupt
        return real(fd, *args, **kw)
    monkeypatch.setattr(outputs.os, "fdopen", fdopen)


@pytest.mark.parametrize("dies", [_dies_in_the_png, _dies_writing_the_second_file])
def test_a_run_that_dies_part_way_leaves_the_previous_report_whole(analysis, tmp_path, monkeypatch, dies):
    out = tmp_path / "out"
    outputs.write_outputs(analysis, str(out))
    before = {n: (out / n).read_bytes() for n in NAMES}
    dies(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_outputs(analysis, str(out), order="worst")
    assert {n: (out / n).read_bytes() for n in NAMES} == before
    assert sorted(os.listdir(out)) == sorted(NAMES)
