"""What a new user meets first: `--help`, a mistyped flag or key, the environment.

The help lists each choice from the registry it is checked against, and defaults the
way the README writes them; flags are taken only as spelled; check-config finds what
serve would refuse, with a hint for the usual slips."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from gpulse.config import FIELDS, format_duration, parse_duration
from gpulse.logsetup import FORMATTERS, LEVELS
from gpulse.sources import SOURCES
from gpulse.sources.recorded import FORMATS

LOOPBACK = ("--web.listen-address", "127.0.0.1:0")


def gpulse(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPULSE_")}
    e.update(PYTHONPATH=str(ROOT / "exporter"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpulse", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def serve_help() -> str:
    p = gpulse("serve", "--help")
    assert p.returncode == 0, p.stderr
    return " ".join(p.stdout.split())      # argparse wraps lines wherever it likes


@pytest.mark.parametrize("flag,choices", [
    ("--source", tuple(SOURCES)),
    ("--log.level", LEVELS),
    ("--log.format", tuple(FORMATTERS)),
    ("--replay.format", ("auto", *FORMATS)),
])
def test_help_lists_the_choices_of_each_registry(serve_help, flag, choices):
    assert f"{flag} {{{','.join(choices)}}}" in serve_help, serve_help


def test_every_choice_field_lists_its_choices(serve_help):
    for f in FIELDS:
        if f.choices:
            assert "{" + ",".join(f.choices) + "}" in serve_help, f.key


def test_help_shows_durations_as_people_write_them(serve_help):
    assert "--sample-interval DURATION how often the source is polled (default: 100ms)" in serve_help
    assert "(default: 30s)" in serve_help and "(default: 15m)" in serve_help
    for f in FIELDS:
        if f.parse is parse_duration:
            assert f"(default: {format_duration(f.default)})" in serve_help, f.key
    assert not re.search(r"default: \d+\.\d+\)", " ".join(
        line for line in serve_help.split("--") if "DURATION" in line)), "a duration default printed as seconds"


@pytest.mark.parametrize("args,typed,meant", [
    (["serve", "--web.listen", "127.0.0.1:0"], "--web.listen", "--web.listen-address"),
    (["serve", "--sim.g", "4", *LOOPBACK], "--sim.g", "--sim.gpus"),
    (["serve", "--sample-intervall", "1s", *LOOPBACK], "--sample-intervall", "--sample-interval"),
    (["serve", "--stale", "1s", *LOOPBACK], "--stale", "--stale-after"),
])
def test_abbreviated_flags_are_refused_with_a_hint(args, typed, meant):
    line = one_line_error(gpulse(*args), f"unrecognized arguments: {typed}", f"did you mean {meant}?",
                          "(see gpulse serve --help)")
    assert line.startswith("gpulse: ")


@pytest.mark.parametrize("args,hint", [
    (["serve", "--frobnicate", *LOOPBACK], "(see gpulse serve --help)"),
    (["check-config", "--frobnicate"], "(see gpulse check-config --help)"),
    (["report", "--inp", "x.csv", "--out", "r"], "(see gpulse report --help)"),
    (["--frobnicate"], "(see gpulse --help)"),
])
def test_unknown_flag_hint_names_the_subcommand(args, hint):
    one_line_error(gpulse(*args), "unrecognized arguments", hint)


# ---------------------------------------------------------------- check-config


@pytest.mark.parametrize("text,needles", [
    ("sim:\n  scenaro: straggler\n", ["sim.scenaro: unknown key", "did you mean sim.scenario?"]),
    ("sample-interval: 50ms\n", ["sample-interval: unknown key", "YAML keys use underscores: sample_interval"]),
    ("web:\n  listen-address: ':9999'\n", ["web.listen-address", "underscores: web.listen_address"]),
    ("simm:\n  gpus: 4\n", ["simm: unknown key", "did you mean sim?"]),
    ("zzz_nothing_like_it: 1\n", ["zzz_nothing_like_it: unknown key"]),
])
def test_check_config_suggests_the_key_meant(tmp_path, text, needles):
    path = tmp_path / "typo.yml"
    path.write_text(text)
    line = one_line_error(gpulse("check-config", str(path)), str(path), *needles)
    if "nothing_like" in text:
        assert "did you mean" not in line


@pytest.mark.parametrize("text,key", [
    ("sim:\n  gpus: many\n", "sim.gpus"),
    ("sim:\n  gpus: [1, 2]\n", "sim.gpus"),
    ("web:\n  timeout: {a: 1}\n", "web.timeout"),
    ("replay:\n  loop: maybe\n", "replay.loop"),
    ("node_name: [a]\n", "node_name"),
])
def test_wrong_types_name_the_file(tmp_path, text, key):
    path = tmp_path / "types.yml"
    path.write_text(text)
    one_line_error(gpulse("check-config", str(path)), f"gpulse: {path}: {key}: expected")


def test_check_config_reads_the_environment_as_serve_does(tmp_path):
    good = tmp_path / "good.yml"
    good.write_text("source: sim\n")
    bad_env = {"GPULSE_SIM_GPUS": "eight"}
    check = one_line_error(gpulse("check-config", str(good), env=bad_env), "GPULSE_SIM_GPUS: sim.gpus", "'eight'")
    serve = one_line_error(gpulse("serve", "--config", str(good), *LOOPBACK, env=bad_env))
    assert check == serve
    p = gpulse("check-config", str(good), env={"GPULSE_SIM_GPUS": "8", "GPULSE_LOG_LEVEL": "debug"})
    assert p.returncode == 0 and p.stdout.strip() == (
        f"{good}: OK (with GPULSE_LOG_LEVEL, GPULSE_SIM_GPUS from the environment)"), p.stdout + p.stderr
    p = gpulse("check-config", env={"GPULSE_SIM_SCENARIO": "straggler"})
    assert p.returncode == 0 and "environment: OK" in p.stdout, p.stdout + p.stderr
    one_line_error(gpulse("check-config", env={"GPULSE_SOURCE": "gpu"}), "GPULSE_SOURCE: source", "nvml")


def test_a_near_miss_environment_variable_is_warned_about(tmp_path):
    env = {"GPULSE_SIM_GPU": "3", "GPULSE_PROMETHEUS_URL": "http://p:9090"}   # the second is Grafana's
    p = gpulse("check-config", env=env)
    assert p.returncode == 0 and "environment: OK" in p.stdout, p.stdout + p.stderr
    assert p.stderr.strip() == ("gpulse: warning: GPULSE_SIM_GPU is not a setting and is ignored; "
                                "did you mean GPULSE_SIM_GPUS?"), p.stderr
    p = gpulse("serve", "--source", "replay", "--replay.file", str(tmp_path / "none.csv"), *LOOPBACK, env=env)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "did you mean GPULSE_SIM_GPUS?" in p.stderr and "PROMETHEUS" not in p.stderr, p.stderr


def test_check_config_checks_the_web_config_it_names(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    cfg = tmp_path / "gpulse.yml"
    cfg.write_text(f"web:\n  config_file: {web}\n")
    p = gpulse("check-config", str(cfg))
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr
    web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
    one_line_error(gpulse("check-config", str(cfg)), f"web config {web}", "X-Frame-Options")
    one_line_error(gpulse("check-config", env={"GPULSE_WEB_CONFIG_FILE": str(tmp_path / "none.yml")}),
                   "none.yml")


def test_report_offers_the_same_log_formats_and_activity_modes_as_serve():
    """`gpulse report --help` lists every recorded-log format and activity mode that
    `gpulse serve` does (it once lost nvidia-smi-q by keeping its own list)."""
    out = gpulse("report", "--help").stdout
    flat = re.sub(r"\s+", "", out)
    assert "{auto," + ",".join(FORMATS) + "}" in flat
    assert "{auto,power-gated,utilization,sm_active,gr_engine_active}" in flat
