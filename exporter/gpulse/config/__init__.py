"""One frozen, typed Config built from defaults < YAML file < GPULSE_* env < flags.

Every setting is declared once, as a typed field of the Config dataclasses (FIELDS
is derived from them). The YAML key, the flag and the env var are derived from its
dotted name, so they cannot drift apart:

    sim.scenario  ->  YAML `sim: {scenario: ...}`,  --sim.scenario,  GPULSE_SIM_SCENARIO

Every error names the key, where the value came from (the file, the GPULSE_*
variable; flags are on the command line in front of the user) and the reason in one
line (ConfigError); the CLI prints it and exits 2. Raw values appear in messages only
through safeyaml.shown(), so a hostile value cannot make the message itself huge.
"""
from __future__ import annotations

# values.py reads a raw value, schema.py is the table of settings, loading.py builds a Config
from .loading import (as_dict, config_value, default_node_name, env_near_misses, env_settings, load_config,
                      read_config_file, suggest)
from .schema import (DEFAULT_LISTEN, DEFAULT_PORT, DEFAULT_WORKLOAD_LABEL_KEYS, FIELD_BY_KEY, FIELDS,
                     SCENARIOS, SECTION_CLASSES, SECTIONS, AutoBool, Config, DcgmConfig, Duration, Field,
                     KubeConfig, LogConfig, NvmlConfig, ReplayConfig, SimConfig, SlurmConfig, WebConfig,
                     env_name, flag_name, setting)
from .values import (MAX_INT_DIGITS, MAX_STR_CHARS, ConfigError, format_duration, parse_auto_bool, parse_bool,
                     parse_duration, parse_float, parse_int, parse_list, parse_listen_address, parse_str)

__all__ = ["Config", "ConfigError", "FIELDS", "FIELD_BY_KEY", "load_config", "read_config_file",
           "parse_duration", "parse_listen_address", "config_value", "as_dict",
           "DEFAULT_PORT", "DEFAULT_LISTEN", "SCENARIOS", "env_name", "env_settings", "flag_name",
           "format_duration", "suggest", "env_near_misses", "default_node_name", "DEFAULT_WORKLOAD_LABEL_KEYS",
           "SECTIONS", "SECTION_CLASSES", "Field", "setting", "Duration", "AutoBool", "WebConfig", "LogConfig",
           "SimConfig", "NvmlConfig", "DcgmConfig", "ReplayConfig", "KubeConfig", "SlurmConfig",
           "MAX_INT_DIGITS", "MAX_STR_CHARS", "parse_bool", "parse_auto_bool", "parse_int", "parse_float",
           "parse_str", "parse_list"]
