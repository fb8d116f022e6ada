"""`gpulse check-config` on pathological YAML: one line, no traceback, no hang. The
in-process fuzzing of the parsers is in tests/unit/*/test_fuzz_*.py (tests/fuzzing.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from fuzzing import PATHOLOGICAL_YAML


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
