"""Flags, config files and their errors: one line, exit 2, no traceback."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from gpulse.config import FIELDS


def gpulse(*args, env=None, timeout=20):
    e = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpulse", *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def one_line_error(p, *needles):
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_version():
    p = gpulse("--version")
    assert p.returncode == 0 and p.stdout.startswith("gpulse ")


@pytest.mark.parametrize("args,needles", [
    (["--sim.gpus", "x"], ["sim.gpus", "integer"]),
    (["--sim.gpus", "0"], ["sim.gpus", ">= 1"]),
    (["--sim.scenario", "nope"], ["sim.scenario", "balanced"]),
    (["--source", "gpu"], ["source", "nvml"]),
    (["--sample-interval", "fast"], ["sample_interval", "duration"]),
    (["--idle-threshold", "2"], ["idle_threshold", "<= 1"]),
    (["--web.listen-address", "nope"], ["web.listen_address", "HOST:PORT"]),
    (["--log.format", "xml"], ["log.format"]),
    (["--frobnicate"], ["unrecognized arguments: --frobnicate"]),
])
def test_bad_flags(args, needles):
    one_line_error(gpulse("serve", *args), *needles)


def test_check_config(tmp_path):
    good = tmp_path / "good.yml"
    good.write_text("source: sim\nsim:\n  scenario: straggler\n  gpus: 4\nweb:\n  listen_address: ':9999'\nsample_interval: 50ms\n")
    p = gpulse("check-config", str(good))
    assert p.returncode == 0 and "OK" in p.stdout
    for text, needles in [
        ("sim:\n  scenarios: x\n", ["sim.scenarios", "unknown key"]),
        ("sim:\n  gpus: many\n", ["sim.gpus", "integer"]),
        ("analysis_window: -1\n", ["analysis_window"]),
        ("web: 3\n", ["web", "mapping"]),
        ("source: [sim\n", ["line", "bad.yml"]),
        ("- a\n- b\n", ["top level"]),
    ]:
        bad = tmp_path / "bad.yml"
        bad.write_text(text)
        one_line_error(gpulse("check-config", str(bad)), *needles)
    one_line_error(gpulse("check-config", str(tmp_path / "missing.yml")), "missing.yml")


@pytest.mark.parametrize("text, env, message", [
    # a check across settings names where each value came from, as a single bad value does
    ("log:\n  level: info\n", {"GPULSE_WEB_LISTEN_ADDRESS": "foo"},
     "GPULSE_WEB_LISTEN_ADDRESS: web.listen_address: expected HOST:PORT or :PORT, got 'foo'"),
    ("web:\n  listen_address: foo\n", {}, "{file}: web.listen_address: expected HOST:PORT or :PORT, got 'foo'"),
    # a bare number is seconds: said, with the value it was checked against and its origin
    ("sample_interval: 10\n", {}, "{file}: sample_interval: 10 is read as 10s (a bare number is seconds), "
     "which must not exceed analysis_interval (1s, the default)"),
    ("analysis_interval: 500ms\n", {"GPULSE_SAMPLE_INTERVAL": "1"}, "GPULSE_SAMPLE_INTERVAL: sample_interval: 1 is "
     "read as 1s (a bare number is seconds), which must not exceed analysis_interval (500ms, from {file})"),
    ("analysis_window: 2s\n", {"GPULSE_ANALYSIS_INTERVAL": "5s"}, "{file}: analysis_window: 2s, which must be at "
     "least analysis_interval (5s, from GPULSE_ANALYSIS_INTERVAL)"),
])
def test_check_config_names_the_file_or_variable(tmp_path, text, env, message):
    f = tmp_path / "gpulse.yml"
    f.write_text(text)
    p = gpulse("check-config", str(f), env=env)
    one_line_error(p)
    assert p.stderr.strip() == "gpulse: " + message.format(file=f)


def test_every_field_is_a_flag_and_a_yaml_key():
    p = gpulse("serve", "--help")
    for f in FIELDS:
        assert "--" + f.key.replace("_", "-") in p.stdout


def test_nvml_missing_is_one_clear_line():
    p = gpulse("serve", "--source", "nvml", "--web.listen-address", "127.0.0.1:0",
               env={"LD_LIBRARY_PATH": "/nonexistent"})
    assert p.returncode == 1, p
    assert "Traceback" not in p.stderr
    assert "--source sim" in p.stderr
