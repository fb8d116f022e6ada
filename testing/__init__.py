"""Test-only servers and emulators, for the tests and benchmarks; no part of the wheel."""
