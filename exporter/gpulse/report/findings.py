"""The findings of one run: judged (report/judge.py), worded (report/words.py),
written as findings.json (report/document.py)."""
from __future__ import annotations

from typing import Any

from . import document, words
from .collect import Recording
from .judge import Judgement
from .words import Finding

__all__ = ["Analysis", "Finding", "analyse"]


class Analysis(Judgement):
    """All findings of one Recording; `as_json()` is findings.json."""

    def __init__(self, rec: Recording):
        super().__init__(rec)
        self.findings: list[Finding] = words.findings(self)
        self.lost_headline = words.lost_headline(self)

    def as_json(self) -> dict[str, Any]:
        return document.as_json(self, self.findings, self.lost_headline)


def analyse(rec: Recording) -> Analysis:
    return Analysis(rec)
