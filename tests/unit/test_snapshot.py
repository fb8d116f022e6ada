"""The Snapshot is built whole and never changed after; the engine takes the sample
spacing from its source, not from the DCGM settings."""
from __future__ import annotations

import dataclasses

import pytest

from testing.config import test_config
from gpulse.engine import Engine
from gpulse.sources import make_source
from gpulse.sources.dcgm import DcgmSource

STEP = 0.1


def _run(cfg, polls: int, engine_kw=None):
    src = make_source(cfg)
    eng = Engine(cfg, src.open(), src.name, **(engine_kw or {}))
    snaps = []
    for i in range(polls):
        eng.ingest(src.poll(i * STEP), wall=1e9 + i * STEP)
        if i % 10 == 9:
            # as the sampler publishes it: its own health beside the engine's snapshot
            snaps.append(dataclasses.replace(eng.analyze(wall=1e9 + i * STEP), health={"polls_total": i + 1}))
    return eng, snaps


def test_snapshot_carries_health_and_history_and_keeps_them():
    cfg = test_config(source="sim", sim__gpus=4, sim__scenario="sync-stall", analysis_interval="1s")
    _, snaps = _run(cfg, 200)
    first, last = snaps[0], snaps[-1]
    assert first.health == {"polls_total": 10} and last.health == {"polls_total": 200}
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.health = {}
    # each snapshot has its own copy: later ticks leave an earlier one as it was
    assert set(first.history) == {"0", "1", "2", "3"}
    assert len(first.history["0"]) == 1 and len(last.history["0"]) == len(snaps)
    assert isinstance(last.history["0"], tuple)
    assert [t for t, _, _ in last.history["0"]] == sorted(t for t, _, _ in last.history["0"])


def test_groups_publish_their_episodes_and_open_stall():
    cfg = test_config(source="sim", sim__gpus=4, sim__scenario="sync-stall", analysis_interval="1s",
                      min_stall="0.2s")
    _, snaps = _run(cfg, 600)
    seen = [e for s in snaps for g in s.groups for e in g.episodes]
    assert seen, "the sync-stall scenario stalls within a minute"
    for s in snaps:
        for g in s.groups:
            assert isinstance(g.episodes, tuple)
            assert g.open_since is None or g.in_stall
            assert all(e.start <= s.t for e in g.episodes)


def test_offline_engine_keeps_no_page_history():
    cfg = test_config(source="sim", sim__gpus=2)
    eng, snaps = _run(cfg, 30, {"history": False})
    assert snaps[-1].history == {} and eng.history_ticks == 0


def test_gap_limit_follows_the_source_not_the_dcgm_setting():
    cfg = test_config(source="sim", sim__gpus=2, dcgm__interval="30s", sample_interval="0.1s")
    src = make_source(cfg)
    assert src.sample_spacing is None
    assert Engine(cfg, src.open(), src.name, sample_spacing=src.sample_spacing).max_gap == 3.0
    dcgm = DcgmSource(test_config(source="dcgm", dcgm__interval="30s"))
    assert dcgm.sample_spacing == 30.0
    assert Engine(cfg, [], "dcgm", sample_spacing=dcgm.sample_spacing).max_gap == 90.0


class _PublishedOnly:
    """A sampler as a route sees it: the published Snapshot and health(), nothing else
    (no engine, no lock), so reaching for anything more fails the test."""
    __slots__ = ("snapshot",)

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def health(self):
        return {"stale": False}


def test_live_page_data_comes_from_the_snapshot_alone():
    from types import SimpleNamespace

    from gpulse.http.livepage import LivePage
    cfg = test_config(source="sim", sim__gpus=4, sim__scenario="sync-stall", analysis_interval="1s",
                      min_stall="0.2s")
    _, snaps = _run(cfg, 600)
    snap = next(s for s in reversed(snaps) if any(g.episodes for g in s.groups))
    page = LivePage(SimpleNamespace(cfg=cfg, sampler=_PublishedOnly(snap), extra_routes={}))
    doc = page.snapshot(1.0)
    assert doc["rows"] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"] and doc["cols"] == len(snap.history["0"])
    assert doc["t"] == snap.t
    (group,) = doc["groups"]
    assert 0 < group["stall_fraction_window"] <= 1          # from the published episodes
