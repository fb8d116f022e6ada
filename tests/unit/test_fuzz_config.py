"""The config file and the value parsers under fuzzed input: a Config or one ConfigError line (see tests/fuzzing.py)."""
from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from fuzzing import FUZZ, HOSTILE_TOKENS, hostile_text, mutated, one_line, scratch  # noqa: F401 - scratch is a fixture
from gpulse.config import ConfigError, load_config, parse_duration, parse_listen_address


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


@FUZZ
@given(value=st.one_of(hostile_text, st.integers(), st.floats(), st.booleans(), st.none(),
                       st.lists(st.integers(), max_size=3)))
def test_fuzz_value_parsers(value):
    for parse in (parse_duration, parse_listen_address):
        try:
            parse(value)
        except ValueError as e:
            one_line(e)
