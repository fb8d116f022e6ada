"""Settings, in the test process: precedence of the sources of a setting, durations
as people write them, the README's table of defaults, the flag parser
(tests/integration/cli/test_cli.py and test_cli_help.py run the gpulse command itself)."""
from __future__ import annotations

import math
import re
import socket

import pytest

from conftest import ROOT
from gpulse.cli import build_parser
from gpulse.config import FIELDS, ConfigError, env_name, format_duration, load_config, parse_duration


def test_precedence_flags_over_env_over_file(tmp_path, monkeypatch):
    f = tmp_path / "c.yml"
    f.write_text("sim:\n  gpus: 3\n  seed: 5\nnode_name: from-file\n")
    cfg = load_config(str(f), {"sim.gpus": "6"}, environ={env_name("sim.seed"): "9"})
    assert (cfg.sim.gpus, cfg.sim.seed, cfg.node_name) == (6, 9, "from-file")
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert load_config(environ={}).node_name == socket.gethostname()
    monkeypatch.setenv("NODE_NAME", "n1")       # the Downward API's spec.nodeName
    assert load_config(environ={}).node_name == "n1"
    assert load_config(overrides={"node_name": "n2"}, environ={}).node_name == "n2"
    with pytest.raises(ConfigError, match="replay.file"):
        load_config(overrides={"source": "replay"}, environ={})


def test_durations():
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("2m") == 120
    assert parse_duration(3) == 3.0


def test_duration_format_round_trips():
    for f in FIELDS:
        if f.parse is parse_duration:
            for v in (f.default, f.lo, f.hi):
                if v is not None:
                    assert parse_duration(format_duration(v)) == pytest.approx(v), (f.key, v)
    assert [format_duration(v) for v in (0.1, 30, 900, 1.5, 7200, 0.05)] == ["100ms", "30s", "15m", "1.5s", "2h", "50ms"]


def test_readme_flag_table_matches_the_defaults():
    """README's "Flags and config" table states defaults; they are the ones in FIELDS."""
    by_flag = {"--" + f.key.replace("_", "-"): f for f in FIELDS}
    checked = 0
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `(--[\w.-]+)` \| `([^`]+)` \|", line)
        if m and m.group(1) in by_flag:
            f = by_flag[m.group(1)]
            assert m.group(2) == f.show(f.default), (m.group(1), m.group(2), f.show(f.default))
            checked += 1
    assert checked >= 6


def test_full_flags_and_equals_form_still_parse():
    ns = build_parser().parse_args(["serve", "--web.listen-address=127.0.0.1:0", "--sim.gpus", "4",
                                    "--web.config.file", "w.yml", "--no-nvml.xid-events"])
    assert (getattr(ns, "web.listen_address"), getattr(ns, "sim.gpus")) == ("127.0.0.1:0", "4")
    assert getattr(ns, "web.config_file") == "w.yml" and getattr(ns, "nvml.xid_events") is False


def test_harmless_anchors_still_work(tmp_path):
    path = tmp_path / "anchors.yml"
    path.write_text("kube:\n  workload_label_keys: &keys [app, team]\n  copy_labels: *keys\n")
    cfg = load_config(str(path), environ={})
    assert cfg.kube.copy_labels == ("app", "team") == cfg.kube.workload_label_keys


def test_duration_parser_is_finite_for_every_input():
    for v in (math.nan, math.inf, -math.inf, 10 ** 400, "1" * 400 + "s"):
        with pytest.raises(ValueError):
            parse_duration(v)
