"""Shared by the scripts that write a file from another (values table, config
schema): rewrite it, or with --check only say that it is stale."""
from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(path: Path, current: str, wanted: str, check: bool, stale: str) -> int:
    """stale: the one line printed when check finds the file out of date."""
    if check:
        if current != wanted:
            print(stale, file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted, encoding="utf-8")
    return 0
