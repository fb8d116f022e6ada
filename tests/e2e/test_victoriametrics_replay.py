"""`testing/vmstack.VictoriaMetrics.replay`, on which every VictoriaMetrics dashboard
check rests: records that read records, and alerts that read alerts, replayed with
the Debian `vmalert -replay` (1.79) into `victoria-metrics`, hold every instant of
every level. vmalert writes a replay's results asynchronously, so a record read by
another in the same replay can be missing in part; the straggler panels of the
dashboards (four levels of records deep) came back empty that way under load."""
from __future__ import annotations

import time

import requests
import yaml

from testing.vmstack import VictoriaMetrics, rule_levels

STEP = 15          # the input's scrape interval, seconds
MINUTES = 20

RULES = {"groups": [
    {"name": "one", "interval": "15s", "rules": [
        {"record": "job:x:doubled", "expr": "x * 2"},
        # reads a record written by a rule after it in the same group
        {"record": "job:x:doubled_plus_one", "expr": "job:x:sum + 1"},
        {"record": "job:x:sum", "expr": "sum without (gpu) (job:x:doubled)"},
        {"alert": "XHigh", "expr": "job:x:doubled_plus_one > 10"},
    ]},
    {"name": "two", "interval": "1m", "rules": [
        {"alert": "XStillHigh", "expr": 'ALERTS{alertname="XHigh", alertstate="firing"}'},
        {"record": "job:x:peak", "expr": "max_over_time(job:x:doubled_plus_one[1m])"},
    ]},
]}


def test_levels_follow_what_each_rule_reads():
    assert rule_levels([RULES]) == {
        "job:x:doubled": 1, "job:x:sum": 2, "job:x:doubled_plus_one": 3, 'ALERTS{alertname="XHigh"}': 4,
        "job:x:peak": 4, 'ALERTS{alertname="XStillHigh"}': 5}


def test_records_of_records_hold_every_instant(tmp_path):
    end = (int(time.time()) // 60 - 2) * 60
    start = end - MINUTES * 60
    vm = VictoriaMetrics(tmp_path, None, None)
    try:
        lines = [f'x{{gpu="{g}"}} {g + 1} {t * 1000}' for t in range(start - 300, end + 1, STEP) for g in range(4)]
        r = requests.post(vm.url + "/api/v1/import/prometheus", data="\n".join(lines) + "\n", timeout=60)
        assert r.status_code == 204, r.text
        vm.flush()
        (tmp_path / "rules.yml").write_text(yaml.safe_dump(RULES))
        vm.replay([tmp_path / "rules.yml"], start, end)

        def values(name: str) -> list[float]:
            got = vm.api("query_range", query=name, start=start, end=end, step=STEP)
            assert len(got) == 1, f"{name}: {got}"
            return [float(v) for _, v in got[0]["values"]]

        instants = MINUTES * 60 // STEP + 1
        assert values("job:x:sum") == [20.0] * instants
        assert values("job:x:doubled_plus_one") == [21.0] * instants
        assert values('ALERTS{alertname="XHigh"}') == [1.0] * instants
        assert values('ALERTS{alertname="XStillHigh"}') and values("job:x:peak")
        assert set(values('ALERTS{alertname="XStillHigh"}')) == {1.0}
        assert set(values("job:x:peak")) == {21.0}
    finally:
        vm.stop()
