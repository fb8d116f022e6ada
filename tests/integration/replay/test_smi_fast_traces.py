"""The vectorised nvidia-smi CSV reader (smi_fast, pyarrow) and the row-by-row one read
the whole real 8xH100 traces of ../shared/data alike, in batches of 1,000 rows: the
same records, devices, problems and clock warnings, the vectorised reader taking at
least 90 % of the rows (tests/readalike.py)."""
from __future__ import annotations

import pytest

from conftest import IN_CI, require_data
from gpulse.sources.recorded import smi_fast
from readalike import read_alike

if not smi_fast.available():
    if IN_CI:
        pytest.fail("pyarrow (the report extra) is not installed: .ci/run installs .[test]", pytrace=False)
    pytest.skip("pyarrow not installed", allow_module_level=True)


@pytest.mark.parametrize("name", ["ckpt1.csv", "ckpt10.csv", "ckpt50.csv", "ckpt100.csv", "ckpt500.csv",
                                  "ckpt1000.csv"])
def test_real_traces_read_alike(name, monkeypatch):
    monkeypatch.setattr(smi_fast, "BATCH", 1000)     # every trace spans many batches, and ends in a short one
    run = read_alike(str(require_data(f"traces/h100-8gpu/{name}")), monkeypatch, 0.9)
    assert len(run[2]) > 10_000
