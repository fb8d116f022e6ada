"""One log read by the vectorised nvidia-smi CSV reader (smi_fast, pyarrow) and by the
row-by-row one, which must read it alike (tests/unit/sources/test_smi_fast.py on
captures and broken logs, tests/integration/replay/test_smi_fast_traces.py on the whole
real traces)."""
from __future__ import annotations

import pytest

from gpulse.sources.recorded import LogFormatError, read_log, smi_fast


def _read(path: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    taken = [0]
    real = smi_fast._Reader.read

    def counting(self, texts):
        out = real(self, texts)
        taken[0] += sum(w >= 0 for w in out[0])
        return out

    with monkeypatch.context() as m:
        m.setattr(smi_fast._Reader, "read", counting)
        if not fast:
            m.setattr(smi_fast, "available", lambda: False)
        try:
            run = read_log(path)
        except LogFormatError as e:
            return ("fatal", str(e)), taken[0]
    return (run.format, run.devices, [(r.line, r.reading) for r in run.records], run.errors, run.error_count,
            run.warnings, run.timed, run.nodes), taken[0]


def read_alike(path: str, monkeypatch: pytest.MonkeyPatch, min_share: float) -> tuple:
    """The log as both readers read it (the same records, devices, problems, warnings),
    the vectorised one having taken at least `min_share` of the rows."""
    fast, taken = _read(path, True, monkeypatch)
    slow, none = _read(path, False, monkeypatch)
    assert none == 0
    assert fast == slow
    rows = len(fast[2]) if fast[0] != "fatal" else 0
    assert taken >= min_share * rows, (taken, rows)
    return fast
