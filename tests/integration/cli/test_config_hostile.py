"""Config files, flags and environment values built to hurt: alias bombs, NaN and
infinite durations, 401-digit numbers, huge values. Each is one line on stderr and
exit 2 (or, for a SIGHUP reload, one logged line while the old config keeps serving),
never a traceback, a hang or a process that eats the machine's memory."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from conftest import ROOT, Gpulse, limited
from gpulse.config import FIELDS, ConfigError, load_config
from gpulse.safeyaml import MAX_ALIAS_EXPANSION
from gpulse.http.webconfig import WebConfigError, parse_web_config

# Without the expansion check these inputs need gigabytes; a child capped at 1.5 GB
# fails fast with a MemoryError traceback instead of taking the machine with it.
MEMORY_CAP = 1536 << 20
# serve commands that should fail; should one start, it must not take a real port
LOOPBACK = ("--web.listen-address", "127.0.0.1:0")


def gpulse(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPULSE_")}
    e.update(PYTHONPATH=str(ROOT / "exporter"), **(env or {}))
    return subprocess.run(limited([sys.executable, "-m", "gpulse", *args], address_space=MEMORY_CAP),
                          capture_output=True, text=True, env=e, timeout=timeout)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulse: "), p.stderr[-2000:]
    assert len(lines[0]) < 300, lines[0][:500]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" value, ~1.4 KB of flow YAML: width**levels strings once expanded."""
    parts = ['&laughs0 [' + ", ".join(['"lollollollollollollollollollollollollollollollol"'] * width) + ']']
    for i in range(1, levels + 1):
        parts.append(f"&laughs{i} [" + ", ".join([f"*laughs{i - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


BOMB = bomb()


def test_the_bomb_is_the_size_of_the_attack():
    assert 1000 < len(BOMB) < 2000
    assert 9 ** 9 > 1000 * MAX_ALIAS_EXPANSION


# Top-level keys, section keys, a whole section: the bomb is refused wherever it sits.
BOMB_PLACES = [
    "node_name: {b}\n",
    "sim:\n  gpus: {b}\n",
    "sample_interval: {b}\n",
    "web:\n  listen_address: {b}\n",
    "kube:\n  copy_labels: {b}\n",
    "sim: {b}\n",
    "{b}\n",
]


@pytest.mark.parametrize("place", BOMB_PLACES)
def test_alias_bomb_in_config_is_one_line(tmp_path, place):
    path = tmp_path / "bomb.yml"
    path.write_text(place.format(b=BOMB))
    one_line_error(gpulse("check-config", str(path)), str(path), "aliases expand")


def test_alias_bomb_through_serve_config(tmp_path):
    path = tmp_path / "bomb.yml"
    path.write_text("sim:\n  scenario: " + BOMB + "\n")
    one_line_error(gpulse("serve", "--config", str(path), "--web.listen-address", "127.0.0.1:0"),
                   str(path), "aliases expand")


@pytest.mark.parametrize("text,needle", [
    ("node_name: &a [*a]\n", "refers to the node that contains it"),
    ("sim:\n  gpus: 2\n  gpus: 3\n", "duplicate key 'gpus'"),
])
def test_cycles_and_duplicate_keys(tmp_path, text, needle):
    path = tmp_path / "c.yml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(str(path), environ={})


def test_a_config_that_never_ends_is_refused(tmp_path):
    link = tmp_path / "zero.yml"
    link.symlink_to("/dev/zero")
    one_line_error(gpulse("check-config", str(link)), "zero.yml", "not a regular file")


def test_a_huge_config_file_is_refused(tmp_path):
    path = tmp_path / "huge.yml"
    path.write_text("# padding\n" * 200_000)
    one_line_error(gpulse("check-config", str(path)), "huge.yml", "larger than")


def test_a_fifo_config_is_refused_without_waiting_for_a_writer(tmp_path):
    # opening a FIFO for reading blocks until a writer comes; nobody ever writes here
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    one_line_error(gpulse("check-config", str(fifo)), "fifo.yml", "not a regular file")
    web = tmp_path / "web.yml"
    os.mkfifo(web)
    p = gpulse("serve", "--source", "sim", "--web.listen-address", "127.0.0.1:0", "--web.config.file", str(web))
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1, (p.returncode, p.stderr[-2000:])
    assert "web.yml" in lines[0] and "not a regular file" in lines[0], lines[0]


# ---------------------------------------------------------------- web config


WEB_BOMB_PLACES = [
    "http_server_config:\n  http2: {b}\n",
    "http_server_config:\n  headers:\n    X-Frame-Options: {b}\n",
    "basic_auth_users:\n  alice: {b}\n",
    "tls_server_config:\n  cert_file: {b}\n  key_file: k.pem\n",
    "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  cipher_suites: {b}\n",
]


@pytest.mark.parametrize("place", WEB_BOMB_PLACES)
def test_alias_bomb_in_web_config(place):
    with pytest.raises(WebConfigError) as e:
        parse_web_config(place.format(b=BOMB), "w.yml")
    msg = str(e.value)
    assert msg.startswith("w.yml:") and "aliases expand" in msg and "\n" not in msg, msg


class LogLines:
    """Waits for lines in a running gpulse's combined output (read on Gpulse's thread)."""

    def __init__(self, g: Gpulse):
        self.lines = g.lines

    def wait_for(self, needle: str, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [ln for ln in self.lines if needle in ln]
            if hits:
                return hits
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not logged within {timeout}s:\n" + "\n".join(self.lines[-30:]))


def _frame_option(url: str) -> str:
    r = requests.get(url + "/metrics", timeout=10)
    assert r.status_code == 200
    return r.headers.get("X-Frame-Options", "")


def test_sighup_reload_of_an_alias_bomb_keeps_serving(tmp_path):
    """The bomb arrives by SIGHUP: one line is logged, scrapes keep answering with the
    previous web config, and the next good file still reloads (the reload path lives)."""
    wc = tmp_path / "web.yml"
    wc.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    g = Gpulse("--source", "sim", "--sim.gpus", "2", "--web.config.file", str(wc), ready=False)
    log = LogLines(g)
    try:
        log.wait_for("listening on")
        assert _frame_option(g.url) == "deny"
        wc.write_text("http_server_config:\n  http2: " + BOMB + "\n")
        os.kill(g.proc.pid, signal.SIGHUP)
        hit = log.wait_for("keeping the previous web config")
        assert len(hit) == 1 and "aliases expand" in hit[0] and str(wc) in hit[0], hit
        for _ in range(5):
            assert _frame_option(g.url) == "deny"
        wc.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
        os.kill(g.proc.pid, signal.SIGHUP)
        log.wait_for("reloaded")
        assert _frame_option(g.url) == "sameorigin"
        assert g.proc.poll() is None
    finally:
        g.stop()
    assert not [ln for ln in log.lines if "Traceback" in ln or "MemoryError" in ln], log.lines[-20:]
    assert len([ln for ln in log.lines if "SIGHUP" in ln]) == 2, log.lines


# ---------------------------------------------------------------- numbers

NUMERIC = [f for f in FIELDS if f.parse.__name__ in ("parse_duration", "parse_float")]


@pytest.mark.parametrize("field", NUMERIC, ids=[f.key for f in NUMERIC])
@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf", ".NaN"])
def test_non_finite_yaml_numbers_are_refused(tmp_path, field, bad):
    path = tmp_path / "nan.yml"
    sec, _, name = field.key.rpartition(".")
    path.write_text(f"{sec}:\n  {name}: {bad}\n" if sec else f"{name}: {bad}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path), environ={})
    msg = str(e.value)
    assert msg.startswith(f"{path}: {field.key}: ") and "finite" in msg, msg


@pytest.mark.parametrize("key", ["web.timeout", "sample_interval", "stale_after", "history", "idle_threshold"])
def test_nan_through_the_cli(tmp_path, key):
    path = tmp_path / "nan.yml"
    sec, _, name = key.rpartition(".")
    path.write_text(f"{sec}:\n  {name}: .nan\n" if sec else f"{name}: .nan\n")
    one_line_error(gpulse("check-config", str(path)), str(path), key, "finite")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_non_finite_numbers_from_flags_and_env(value):
    one_line_error(gpulse("serve", f"--idle-threshold={value}", *LOOPBACK), "idle_threshold")
    one_line_error(gpulse("check-config", env={"GPULSE_POWER_GATE": value}), "GPULSE_POWER_GATE: power_gate")


HUGE = "9" * 401


def test_401_digit_gpus_from_flag_yaml_and_env(tmp_path):
    one_line_error(gpulse("serve", "--sim.gpus", HUGE, *LOOPBACK), "sim.gpus", "401-digit")
    path = tmp_path / "huge.yml"
    path.write_text(f"sim:\n  gpus: {HUGE}\n")
    one_line_error(gpulse("check-config", str(path)), str(path), "sim.gpus", "401-digit")
    one_line_error(gpulse("serve", "--config", str(path), *LOOPBACK), "sim.gpus", "401-digit")
    one_line_error(gpulse("serve", *LOOPBACK, env={"GPULSE_SIM_GPUS": HUGE}), "GPULSE_SIM_GPUS: sim.gpus", "401-digit")
    one_line_error(gpulse("serve", "--sim.seed", HUGE, *LOOPBACK), "sim.seed", "401-digit")
    one_line_error(gpulse("serve", "--sample-interval", HUGE, *LOOPBACK), "sample_interval")


@pytest.mark.parametrize("text", [
    "node_name: [" + ", ".join(["x"] * 50_000) + "]\n",
    "sim:\n  scenario: '" + "x" * 200_000 + "'\n",
    "source: {" + ", ".join(f"k{i}: {i}" for i in range(20_000)) + "}\n",
    "'" + "k" * 100_000 + "': 1\n",
    "sim:\n  " + "z" * 100_000 + ": 1\n",
])
def test_messages_never_carry_a_big_raw_value(tmp_path, text):
    path = tmp_path / "big.yml"
    path.write_text(text)
    one_line_error(gpulse("check-config", str(path)), str(path))


@pytest.mark.parametrize("key", ["replay.file", "web.config_file", "slurm.job_map_dir", "dcgm.url", "node_name",
                                 "kube.copy_labels"])
def test_a_nul_in_a_string_setting_is_refused(tmp_path, key):
    """A NUL in a path used to reach open() as 'embedded null byte' (a traceback at
    start, or an error on every attribution refresh)."""
    path = tmp_path / "nul.yml"
    sec, _, name = key.rpartition(".")
    path.write_text(f'{sec}:\n  {name}: "a\\0b"\n' if sec else f'{name}: "a\\0b"\n')
    one_line_error(gpulse("check-config", str(path)), f"{path}: {key}: contains a NUL character")
    one_line_error(gpulse("serve", "--source", "sim", "--config", str(path), *LOOPBACK), "NUL")


def test_a_huge_node_name_is_refused():
    """It would be a label value on every series of every scrape."""
    one_line_error(gpulse("serve", "--node-name", "n" * 100_000, *LOOPBACK), "node_name", "longer than 4096")
