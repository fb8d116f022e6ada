"""A log whose clock jumps ahead: one poll stamped a month later, or a first poll
stamped 1970 (a node whose clock was not set at boot). The report and the export
analyse every tick of the recorded span, so a jump taken as a gap would make their
work follow the span (a month of empty ticks), not the data. A jump beyond what the
log has recorded is a clock step, said in one line; a pause within it stays a gap.
Work is counted in analysis ticks and exported scrapes, never in seconds."""
from __future__ import annotations

from hostilelogs import smi_csv
from testing.daemons import gpulse_export

from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log

POLLS, INTERVAL = 2000, 0.5          # 1,000 s of data, 4 GPUs, at 2 polls a second
MONTH = 30 * 86400


def _jump_notes(rec) -> list[str]:
    return [n for n in rec.notes if "the clock jumps ahead" in n]


def _check(path, jump_words: str) -> None:
    rec = from_log(str(path))
    # ticks are the engine's analysis steps: the data's 1,000 s, not the span it claims
    assert 995 <= rec.ticks <= 1005, rec.ticks
    [note] = _jump_notes(rec)
    assert f"(by up to {jump_words})" in note and "stepped forward" in note
    doc = analyse(rec).as_json()
    assert note in doc["notes"]
    assert [f["kind"] for f in doc["findings"]][:1] == ["imbalance"]
    # the export replays the same log at speed 1 in virtual time: one scrape per 15 s of data
    p = gpulse_export("--input", str(path), "--scrape-interval", "15s", "--node", "n1")
    text = p.stdout.decode()
    assert text.endswith("# EOF\n")
    stamps = {line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith("gpulse_gpu_up{")}
    assert 60 <= len(stamps) <= 72, len(stamps)


def test_one_poll_stamped_a_month_ahead_is_a_clock_step(tmp_path):
    path = tmp_path / "month.csv"
    path.write_text(smi_csv(POLLS, interval=INTERVAL, stamp=lambda k, t: t + MONTH if k == 900 else t))
    _check(path, "30 days")


def test_a_first_poll_stamped_1970_is_a_clock_step(tmp_path):
    path = tmp_path / "epoch.csv"
    path.write_text(smi_csv(POLLS, interval=INTERVAL, stamp=lambda k, t: 3.0 if k == 0 else t))
    _check(path, "57 years")


def test_a_pause_within_the_recorded_time_stays_a_gap(tmp_path):
    path = tmp_path / "pause.csv"
    pause = 1200.0                  # 20 min without rows: a restarted logger
    path.write_text(smi_csv(POLLS, interval=INTERVAL, stamp=lambda k, t: t + pause if k >= 1000 else t))
    rec = from_log(str(path))
    assert _jump_notes(rec) == []
    assert 2195 <= rec.ticks <= 2205, rec.ticks
