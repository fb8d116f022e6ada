"""Test-only servers and emulators, for the tests and benchmarks; no part of the wheel."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent      # the repository
