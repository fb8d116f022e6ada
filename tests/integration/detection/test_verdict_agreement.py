"""One real recording, three views, one verdict.

A real 8xH100 log (../shared/data/traces/h100-8gpu) goes through
- the live gauges: the exporter's engine over the replay source (`run_offline`, what
  `gpulse serve --source replay` runs), its stall counters and peer deviations;
- the post-mortem report: `gpulse report --input` (a subprocess), findings.json;
- the pager: the exporter's series scraped every 15 s, rendered by the real
  collector, evaluated by the real promtool with the shipped rules.

The verdicts compared (the corpus families of bench/detection.py):
- recurring sync stalls costing >= stall_page_ratio: yes / no;
- which GPUs are stragglers;
- imbalance: the report and the live gauges only (GpulseWorkloadImbalance holds
  15 minutes, longer than these 11-minute runs, so its silence would prove nothing).

ckpt50: rank 0 checkpoints off the GPU while GPUs 1-7 spin-wait, ~15 s at a time,
recurring: stalls, GPU 0 the straggler, no imbalance. ckpt1000: two ~17 s stalls in
the whole run, ~250 s apart: no recurring stalls, no imbalance; rank 0 costs its peers
over 5 % of every 5 minutes in runs that recur, a straggler for the live gauge and the
report (analysis.verdict), and for the rules by the same recurrence
(GpulseStragglerGPURecurring; GpulseStragglerGPU asks for 2 minutes of cost in a row),
which page it 23 s after the live gauge names it.
"""
from __future__ import annotations


import pytest
import yaml

from conftest import require_binary, require_data
from bench import detection  # noqa: E402
from bench import detection_corpus  # noqa: E402

EXPECTED = {  # recording -> (recurring stalls, stragglers, imbalance)
    "ckpt50": (True, {"0"}, False),
    "ckpt1000": (False, {"0"}, False),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_live_report_and_alerts_agree_on_a_real_recording(name, tmp_path):
    require_binary("promtool")          # detection.first_firing runs it from PATH
    path = require_data(f"traces/h100-8gpu/{name}.csv")
    stall, stragglers, imbalance = EXPECTED[name]

    live = detection_corpus.observe(str(path), "n1")
    report = detection_corpus.report_verdict(str(path))

    base = tmp_path / "baseline.rules.yml"
    base.write_text(yaml.safe_dump(detection.baseline_rules(), sort_keys=False), encoding="utf-8")
    test_file = tmp_path / "agree.test.yml"
    detection.write_test_file([live], base, test_file)
    alerts = detection.alert_verdicts(detection.first_firing(test_file), "n1", baseline=False)

    views = {"live": live.live, "report": report, "alerts": alerts}
    for view, v in views.items():
        assert v.stall is stall, f"{view}: recurring stalls {v.stall}, expected {stall}"
        assert set(v.stragglers) == stragglers, f"{view}: stragglers {sorted(v.stragglers)}, expected {sorted(stragglers)}"
    for view in ("live", "report"):
        assert views[view].imbalance is imbalance, f"{view}: imbalance {views[view].imbalance}"
    # the pager pages within 5 minutes of what the live gauges saw
    if stall:
        assert alerts.stall_at - live.live.stall_at <= 300, (alerts.stall_at, live.live.stall_at)
    for gpu in stragglers:
        assert alerts.stragglers[gpu] - live.live.stragglers[gpu] <= 300, (gpu, alerts.stragglers, live.live.stragglers)
