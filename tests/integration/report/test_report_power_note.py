"""The power-averaging note says only what the input shows.

The report's `input_limit` note (power lags utilisation, so short spin-waits read as
work) is about an averaged power column. nvidia-smi says which one it wrote:
`power.draw.average` is the 1 s average, `power.draw.instant` an instant, and
`power.draw` the average on recent drivers and the instant on older ones (then the
data decide, Engine.power_averaged). The same rows, power lagging utilisation by
about a second (tests/realtrace.py: rank 0 leaves the GPU for 0.4 s every 2.5 s
while its peers spin-wait), get the note under `.average` and `power.draw`, and
none under `.instant`: a lag there is utilisation's own averaging window (1/6 s to
1 s by product), not the power's.
"""
from __future__ import annotations

import pytest

from realtrace import real_levels, stall_schedule, training, write_smi_log

from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log

STARTUP = 20.0


@pytest.fixture(scope="module")
def lagging(tmp_path_factory):
    real_levels()   # skips the module without ../shared/data
    tmp = tmp_path_factory.mktemp("power-note")
    work_end = STARTUP + 300.0
    stalls = stall_schedule(2.5, 0.4, STARTUP + 10.0, work_end)
    base = training(stalls, STARTUP, work_end)

    def state(g, t):
        s = base(g, t)
        return "spin" if s == "idle" and g > 0 and STARTUP + 10.0 <= t < work_end else s
    return write_smi_log(tmp / "lagging.csv", 8, work_end + 15.0, state), tmp


@pytest.mark.parametrize("column, note", [("power.draw", True), ("power.draw.average", True),
                                          ("power.draw.instant", False)])
def test_note_only_for_an_averaged_power_column(lagging, column, note):
    path, tmp = lagging
    text = path.read_text()
    out = tmp / f"{column}.csv"
    out.write_text(text.replace("power.draw [W]", f"{column} [W]", 1))
    doc = analyse(from_log(str(out))).as_json()
    limits = [f for f in doc["findings"] if f["kind"] == "input_limit"]
    assert bool(limits) == note, (column, limits)
    if note:
        assert "1 s" in limits[0]["text"]
