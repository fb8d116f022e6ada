"""The report's error types: str() is the one line printed (no traceback)."""
from __future__ import annotations


class ReportError(Exception):
    """The input could not be read or analysed (exit 1)."""

    exit_code = 1


class UsageError(ReportError):
    """Bad or missing arguments (exit 2, like any other bad flag)."""

    exit_code = 2
