"""Property-based fuzzing of every parser that reads outside input, bounded in time.

Each parser gets two kinds of input from hypothesis: text built from its own
grammar with hostile values, and real recorded files (../shared/data) mutated at
random (bytes deleted, inserted, replaced, lines duplicated, cut short). The
property is the same everywhere: the parser returns, or raises its one documented
error with a one-line message. Nothing else escapes, and nothing takes long (the
hypothesis deadline flags a slow example, a subprocess timeout a hang).
"""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import ROOT, require_data
from gpulse.collector import wants_openmetrics
from gpulse.config import ConfigError, load_config, parse_duration, parse_listen_address
from gpulse.http.webconfig import WebConfigError, parse_web_config

FUZZ = settings(max_examples=100, deadline=5000, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])

# text a hostile or broken file is made of: control characters, quotes, YAML and CSV
# syntax, huge and odd numbers, non-ASCII digits, surrogate-free unicode
HOSTILE_TOKENS = ["", " ", "\t", "\n", "\r\n", "\x00", "\x1b[2J", "'", '"', "\\", "{", "}", "[", "]", ":", ",",
                  "#", "&a", "*a", "!!python/object:os.system", "<<: *a", "---", "...", "|", ">", "%YAML 1.1",
                  "NaN", "nan", "-Inf", "+Inf", "1e309", "-0", "9" * 5000, "0x1F", "١٢", "²", "½", "N/A",
                  "[N/A]", "[Not Supported]", "[GPU is lost]", "%", " W", " MiB", "ü", "😀", "\u2028", "\ufeff"]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_TOKENS), st.text(max_size=12)), max_size=60).map("".join)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """One file rewritten by every example (a new directory each would cost more than the parse)."""
    return tmp_path_factory.mktemp("fuzz") / "input"


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert msg and "\n" not in msg and "Traceback" not in msg, repr(msg)
    return msg


@st.composite
def mutated(draw, seed: str, max_edits: int = 8) -> str:
    """`seed` with a few random edits: a fuzzer's mutations over a real file."""
    text = seed
    for _ in range(draw(st.integers(1, max_edits))):
        if not text:
            text = draw(hostile_text)
            continue
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["delete", "insert", "replace", "dup-line", "truncate", "swap-lines"]))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 200)):]
        elif op == "insert":
            text = text[:i] + draw(hostile_text) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(HOSTILE_TOKENS)) + text[i + 1:]
        elif op == "truncate":
            text = text[:i]
        else:
            lines = text.split("\n")
            j = draw(st.integers(0, len(lines) - 1))
            if op == "dup-line":
                lines[j:j] = [lines[j]] * draw(st.integers(1, 50))
            else:
                k = draw(st.integers(0, len(lines) - 1))
                lines[j], lines[k] = lines[k], lines[j]
            text = "\n".join(lines)
    return text


def head(path, max_lines: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return "".join(line for _, line in zip(range(max_lines), fh))


# ---------------------------------------------------------------- config YAML

CONFIG_SEED = """\
source: sim
sample_interval: 100ms
analysis_window: 30s
web:
  listen_address: ":9479"
  max_requests: 64
  timeout: 10s
sim:
  scenario: straggler
  gpus: 8
kube:
  enabled: false
  copy_labels: [team, app]
"""

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                         st.sampled_from(HOSTILE_TOKENS), st.text(max_size=20))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), inner, max_size=4)),
    max_leaves=12)
config_keys = st.sampled_from(["source", "sample_interval", "analysis_interval", "analysis_window", "idle_threshold",
                               "web", "sim", "kube", "log", "replay", "dcgm", "nvml", "slurm", "bogus", "history"])


@FUZZ
@given(doc=st.dictionaries(config_keys, st.one_of(yaml_values, st.dictionaries(
    st.sampled_from(["listen_address", "timeout", "max_requests", "gpus", "scenario", "level", "enabled",
                     "copy_labels", "file", "speed", "healthz_public", "nope"]), yaml_values, max_size=4)), max_size=6))
def test_fuzz_config_structures(scratch, doc):
    import yaml
    path = scratch
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    except (yaml.YAMLError, UnicodeEncodeError):
        assume(False)
    try:
        load_config(str(path), environ={})
    except ConfigError as e:
        one_line(e)


@FUZZ
@given(text=st.one_of(hostile_text, mutated(CONFIG_SEED)))
def test_fuzz_config_text(scratch, text):
    path = scratch
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(str(path), environ={})
    except ConfigError as e:
        one_line(e)


PATHOLOGICAL_YAML = ["[" * 100_000, "{a: " * 50_000, "".join(" " * i + f"k{i}:\n" for i in range(1200)),
                     "a: &a [" + ", ".join(["*a"] * 3) + "]\n",
                     "sample_interval: " + "9" * 5000 + "\n",       # over Python's int digit limit
                     "source: 2001-13-01\n"]                         # a timestamp YAML cannot build


@pytest.mark.parametrize("text", PATHOLOGICAL_YAML)
def test_config_pathological_yaml_is_one_line_quickly(tmp_path, text):
    """Deep nesting, alias loops, unbuildable values: `gpulse check-config` answers in
    one line, no traceback, no hang."""
    path = tmp_path / "deep.yml"
    path.write_text(text)
    p = subprocess.run([sys.executable, "-m", "gpulse", "check-config", str(path)], capture_output=True, text=True,
                       timeout=60, env={"PYTHONPATH": str(ROOT / "exporter")})
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("gpulse: "), p.stderr


@FUZZ
@given(value=st.one_of(hostile_text, st.integers(), st.floats(), st.booleans(), st.none(),
                       st.lists(st.integers(), max_size=3)))
def test_fuzz_value_parsers(value):
    for parse in (parse_duration, parse_listen_address):
        try:
            parse(value)
        except ValueError as e:
            one_line(e)


# ---------------------------------------------------------------- web config

WEB_SEED = """\
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS12
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
http_server_config:
  headers:
    X-Frame-Options: deny
basic_auth_users:
  prometheus: $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG
"""


@pytest.mark.parametrize("text", PATHOLOGICAL_YAML)
def test_web_config_pathological_yaml(text):
    with pytest.raises(WebConfigError) as e:
        parse_web_config(text, "w.yml")
    one_line(e.value)


@FUZZ
@given(text=st.one_of(hostile_text, mutated(WEB_SEED)))
def test_fuzz_web_config(text):
    try:
        tls, users, headers, _ = parse_web_config(text, "fuzz.yml")
    except WebConfigError as e:
        assert one_line(e).startswith("fuzz.yml: ")
        return
    for name, value in headers:     # whatever got through is safe to put on the wire
        assert "\r" not in value and "\n" not in value and value


# ---------------------------------------------------------------- replayed logs


def _read_log_property(path, text: str, fmt: str) -> None:
    from gpulse.sources.recorded import LogFormatError, read_log
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        run = read_log(str(path), fmt)
    except LogFormatError as e:
        one_line(e)
        return
    for e in run.errors:
        assert "\n" not in str(e)
    for r in run.records:
        assert isinstance(r.t, float) and math.isfinite(r.t)


_SEEDS: dict[str, str] = {}


def seed(name: str) -> str:
    """A real recorded file (its head), read once; passed by name so a failing
    example prints the name, not 40 kB of text."""
    if not _SEEDS:
        _SEEDS.update({
        "smi": head(require_data("traces/h100-8gpu/ckpt10.csv"), 120),
        "query": head(require_data("captures/nvidia-smi/h100-mig-query-gpu.csv"), 40),
        "q": head(require_data("captures/nvidia-smi/h100-80gb-hbm3-q.txt"), 200),
        "dcgm": require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text(),
        "dcgm8": require_data("captures/dcgm-exporter/h100x8-eks-aicr-sampled.prom").read_text(),
        })
    return _SEEDS[name]


SEED_NAMES = ["smi", "query", "q", "dcgm", "dcgm8"]


@FUZZ
@given(data=st.data())
def test_fuzz_replay_logs(scratch, data):
    name = data.draw(st.sampled_from(SEED_NAMES))
    text = data.draw(st.one_of(mutated(seed(name)), hostile_text))
    fmt = data.draw(st.sampled_from(["auto", "auto", "nvidia-smi-csv", "dmon", "nvidia-smi-q", "dcgm"]))
    _read_log_property(scratch, text, fmt)


# ---------------------------------------------------------------- dcgm-exporter exposition

DCGM_NAMES = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED",
              "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "not_dcgm"]
label_values = st.one_of(st.sampled_from(["0", "7", "", "-1", "1/2", "²", "١", "0" * 400, 'a"b', "a\\", "\n", "😀"]),
                         st.text(max_size=8))
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "0x10", "1_000", "", "abc"]))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def exposition(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 15))):
        name = draw(st.sampled_from(DCGM_NAMES))
        labels = draw(st.dictionaries(st.sampled_from(["gpu", "UUID", "GPU_I_ID", "Hostname", "pod", "namespace",
                                                        "container", "modelName", "err_code"]), label_values,
                                      max_size=5))
        body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        ts = draw(st.one_of(st.just(""), st.integers(-2**63, 2**63).map(lambda x: f" {x}")))
        lines.append(f"{name}{{{body}}} {draw(number)}{ts}")
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(hostile_text))
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=st.one_of(exposition(), hostile_text), data=st.data())
def test_fuzz_dcgm_exposition(text, data):
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    series, bad = parse_exposition(text)
    for line, why in bad:
        assert "\n" not in why
    mapper = DcgmMapper()
    t = 0.0
    for _ in range(data.draw(st.integers(1, 3))):       # stateful across scrapes: counters, XIDs
        mapper.map([(n, lab, v, 0) for n, lab, v, _ts in series], t)
        t += data.draw(st.sampled_from([1.0, 0.0, -5.0, 1e9]))


@FUZZ
@given(data=st.data())
def test_fuzz_dcgm_real_capture_mutated(data):
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    text = data.draw(mutated(seed(data.draw(st.sampled_from(["dcgm", "dcgm8"])))))
    series, _ = parse_exposition(text)
    DcgmMapper().map([(n, lab, v, 0) for n, lab, v, _ts in series], 0.0)


def _flat(counters: dict) -> dict:
    out = {}
    for fam, v in counters.items():
        for lab, x in (v.items() if isinstance(v, dict) else [((), v)]):
            out[(fam, lab)] = x
    return out


@FUZZ
@given(answers=st.lists(st.lists(st.tuples(
    st.sampled_from(["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                     "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]),
    st.sampled_from(["0", "1"]),
    st.one_of(st.sampled_from(["-0", "-0.0", "0", "0.005", "7400000", "9.3e18", "2147483632", "NaN", "+Inf", "-1"]),
              st.integers(0, 2**40).map(str))), max_size=12), min_size=1, max_size=6),
    steps=st.lists(st.sampled_from([1.0, 0.0, -3.0, 0.5]), min_size=6, max_size=6))
def test_fuzz_dcgm_counters_never_decrease(answers, steps):
    """Whatever DCGM's counters do between and within answers (resets, -0, duplicates,
    blanks, garbage), the counters gpulse exports from them never go down."""
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    mapper = DcgmMapper(one_node=True)
    prev: dict = {}
    t = 0.0
    for answer, dt in zip(answers, steps):
        text = "".join(f'{name}{{gpu="{gpu}",Hostname="h"}} {value}\n' for name, gpu, value in answer)
        series, _ = parse_exposition(text)
        m = mapper.map([(n, lab, v, 0) for n, lab, v, _ts in series], t)
        for key, rec in m.readings.items():
            for k, v in _flat(rec.counters).items():
                assert v >= prev.get((key, k), 0.0), (key, k, prev.get((key, k)), v)
                prev[(key, k)] = v
        t += dt


# ---------------------------------------------------------------- request headers


@FUZZ
@given(accept=st.one_of(st.none(), hostile_text, st.lists(st.sampled_from(
    ["application/openmetrics-text", "text/plain", ";q=", "q=0", "q=nan", "q=1e999", "version=1.0.0", ",", ";", "*/*"]),
    max_size=8).map("".join)))
def test_fuzz_accept_header(accept):
    assert wants_openmetrics(accept) in (True, False)


@pytest.mark.parametrize("gpu", ["²", "0²", "١", "0/²", "1/١٢"])
def test_unicode_digit_gpu_labels(scratch, gpu):
    """str.isdigit() is true for '²', which int() refuses: the fuzzer's first find in
    the dcgm path (a crash in the GPU sort order of a replayed log)."""
    from gpulse.sources.dcgm import DcgmMapper, parse_exposition
    line = f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-x"}} 50\nDCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-y"}} 40\n'
    series, _ = parse_exposition(line)
    DcgmMapper().map([(n, lab, v, 0) for n, lab, v, _ts in series], 0.0)
    _read_log_property(scratch, line * 3, "dcgm")
