"""The Config the tests and benchmarks start from."""
from __future__ import annotations

from typing import Any

from gpulse.config import Config, load_config


def test_config(**overrides: Any) -> Config:
    """A Config for tests and benchmarks: defaults plus dotted-key overrides
    (use '__' for '.': sim__gpus=4), ignoring the environment."""
    return load_config(overrides={k.replace("__", "."): v for k, v in overrides.items()}, environ={})


test_config.__test__ = False  # not a pytest test
