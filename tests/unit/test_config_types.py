"""The Config sections are real frozen dataclasses with real types, and the types are
what the settings are read as: the annotation of a setting, its parser and the value a
loaded Config holds agree."""
from __future__ import annotations

import dataclasses
import types
import typing

import pytest

from gpulse import config as gcfg
from gpulse.config import FIELDS, Config, ConfigError, load_config


def _named_types(hint) -> list:
    """hint and every type inside it (the str of tuple[str, ...], both sides of bool | str)."""
    return [hint] + [t for arg in typing.get_args(hint) if arg is not Ellipsis for t in _named_types(arg)]


def _classes() -> list[type]:
    return [Config] + [h for h in typing.get_type_hints(Config).values() if dataclasses.is_dataclass(h)]


def test_every_section_is_a_frozen_dataclass():
    sections = _classes()[1:]
    assert sorted(f.name for f in dataclasses.fields(Config) if dataclasses.is_dataclass(typing.get_type_hints(Config)[f.name])) == gcfg.SECTIONS
    assert len(sections) == len(gcfg.SECTIONS) >= 8
    for cls in _classes():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        assert cls.__module__ == "gpulse.config.schema" and cls.__qualname__ == cls.__name__, cls   # a class statement


def test_no_setting_is_typed_any():
    for cls in _classes():
        for name, hint in typing.get_type_hints(cls).items():
            assert typing.Any not in _named_types(hint), f"{cls.__name__}.{name}: {hint}"
            assert hint is not object, f"{cls.__name__}.{name}"


def test_annotation_is_what_the_parser_returns():
    """The type a setting is declared with is the type its raw value is read into."""
    hints = {f"{prefix}{name}": hint
             for prefix, cls in [("", Config)] + [(f"{s}.", gcfg.SECTION_CLASSES[s]) for s in gcfg.SECTIONS]
             for name, hint in typing.get_type_hints(cls).items() if not dataclasses.is_dataclass(hint)}
    assert sorted(hints) == sorted(f.key for f in FIELDS)
    for f in FIELDS:
        assert typing.get_type_hints(f.parse)["return"] == hints[f.key], f.key


def _is_instance(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, h) for h in typing.get_args(hint))
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_is_instance(v, item) for v in value)
    if hint is float:
        return isinstance(value, float)      # not an int from YAML: 2 becomes 2.0
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


def _all_values(cfg: Config):
    for prefix, obj in [("", cfg)] + [(f"{s}.", getattr(cfg, s)) for s in gcfg.SECTIONS]:
        for name, hint in typing.get_type_hints(type(obj)).items():
            if not dataclasses.is_dataclass(hint):
                yield prefix + name, getattr(obj, name), hint


def test_defaults_and_loaded_values_have_their_types(tmp_path):
    # YAML's own types where a user writes them so: ints for floats and durations, a list
    path = tmp_path / "gpulse.yml"
    path.write_text("analysis_interval: 2\nidle_threshold: 0\nweb:\n  timeout: 30\n  max_requests: '12'\n"
                    "replay:\n  speed: 3\nkube:\n  enabled: 'true'\n  copy_labels: [team, owner]\n")
    for cfg in (load_config(environ={}), load_config(str(path), environ={"GPULSE_SIM_GPUS": "4"})):
        seen = list(_all_values(cfg))
        assert len(seen) == len(FIELDS)
        for key, value, hint in seen:
            assert _is_instance(value, hint), f"{key}: {value!r} is not a {hint}"
    assert cfg.analysis_interval == 2.0 and cfg.web.max_requests == 12 and cfg.sim.gpus == 4
    assert cfg.kube.enabled is True and cfg.kube.copy_labels == ("team", "owner")


def test_config_is_frozen():
    cfg = load_config(environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sim.gpus = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.source = "sim"


@pytest.mark.parametrize("yaml_text, message", [
    ("sim:\n  gpus: many\n", "sim.gpus: expected an integer, got 'many'"),
    ("web:\n  timeout: [1, 2]\n", "web.timeout: expected a duration like 100ms or 30s, got a list"),
    ("kube:\n  copy_labels: 5\n", "kube.copy_labels: expected a list of strings, got 5"),
    ("nvml:\n  gpm: maybe\n", "nvml.gpm: expected true or false, got 'maybe'"),
    ("kube:\n  enabled: sometimes\n", "kube.enabled: expected true, false or auto, got 'sometimes'"),
    ("replay:\n  speed: fast\n", "replay.speed: expected a number, got 'fast'"),
    ("log:\n  level: loud\n", "log.level: must be one of debug, info, warning, error; got 'loud'"),
])
def test_wrong_type_in_yaml_is_one_line(tmp_path, yaml_text, message):
    path = tmp_path / "gpulse.yml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), environ={})
    assert str(e.value) == f"{path}: {message}"


def test_wrong_type_in_the_environment_names_the_variable():
    with pytest.raises(ConfigError) as e:
        load_config(environ={"GPULSE_SIM_GPUS": "many"})
    assert str(e.value) == "GPULSE_SIM_GPUS: sim.gpus: expected an integer, got 'many'"


def test_test_helper_is_not_in_the_package():
    assert not hasattr(gcfg, "test_config")
    from testing.config import test_config
    cfg = test_config(sim__gpus=3, source="sim")
    assert isinstance(cfg, Config) and cfg.sim.gpus == 3 and cfg.source == "sim"
