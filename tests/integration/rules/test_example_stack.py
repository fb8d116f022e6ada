"""prometheus/examples/: the files point at one another as written, and the first
alert comes when stack.py says it will.

The times are measured in virtual time: each scenario runs through the engine,
scraped every 15 s, and the shipped rules are evaluated over those scrapes by the
real promtool at every 15 s; the first firing plus Alertmanager's group wait of the
alert's route (alertmanager.yml) is the time stack.py and the docs announce, to the
minute. (tests/e2e/test_example_stack_e2e.py runs the stack itself.)"""
from __future__ import annotations

import importlib.util
import math

import pytest
import yaml

from conftest import ROOT
from testing.promutil import promtool_firing, scrape_sim

EXAMPLES = ROOT / "prometheus" / "examples"
spec = importlib.util.spec_from_file_location("stack", EXAMPLES / "stack.py")
stack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stack)


def test_the_examples_point_at_one_another_with_the_default_ports(tmp_path):
    prom = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text())
    am = yaml.safe_load((EXAMPLES / "alertmanager.yml").read_text())
    ports = stack.DEFAULT_PORTS
    [job] = [j for j in prom["scrape_configs"] if j["job_name"] == "gpulse"]
    assert job["static_configs"][0]["targets"] == [f"localhost:{ports['gpulse']}"]
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [f"localhost:{ports['alertmanager']}"]
    hooks = [h["url"] for r in am["receivers"] for h in r.get("webhook_configs", [])]
    assert hooks and all(u.startswith(f"http://127.0.0.1:{ports['receiver']}/") for u in hooks)
    # with the defaults the stack runs the files themselves, else copies with the ports in
    assert stack.configs(dict(ports), tmp_path, "15s", stack.RULES) == (EXAMPLES / "prometheus.yml",
                                                                      EXAMPLES / "alertmanager.yml")
    moved = {k: v + 1 for k, v in ports.items()}
    p, a = stack.configs(moved, tmp_path, "15s", stack.RULES)
    assert f"localhost:{moved['gpulse']}" in p.read_text() and f"127.0.0.1:{moved['receiver']}/chat" in a.read_text()


def test_group_wait_is_set_on_every_route_and_nothing_else_changes(tmp_path):
    """--group-wait (the end-to-end test's 1 s) replaces the wait of the top route and
    of every sub-route that sets its own; the routing, inhibition and receivers stay."""
    shipped = yaml.safe_load((EXAMPLES / "alertmanager.yml").read_text())
    _, a = stack.configs(dict(stack.DEFAULT_PORTS), tmp_path, "15s", stack.RULES, group_wait="1s")
    made = yaml.safe_load(a.read_text())
    routes = [made["route"], *made["route"]["routes"]]
    assert [r["group_wait"] for r in routes] == ["1s"] * len(routes)
    for r in (shipped["route"], *shipped["route"]["routes"], made["route"], *made["route"]["routes"]):
        r.pop("group_wait", None)
    assert made == shipped


def group_wait(route_severity: str) -> float:
    am = yaml.safe_load((EXAMPLES / "alertmanager.yml").read_text())
    route = am["route"]
    for sub in route["routes"]:
        if f'severity="{route_severity}"' in sub["matchers"]:
            return float(str(sub.get("group_wait", route["group_wait"])).rstrip("s"))
    return float(str(route["group_wait"]).rstrip("s"))


@pytest.mark.parametrize("scenario", sorted(stack.FIRST_ALERT))
def test_the_first_alert_comes_when_announced(scenario, tmp_path):
    alert, minutes = stack.FIRST_ALERT[scenario]
    seconds = minutes * 60 + 120
    _, _, _, _, _, series = scrape_sim(scenario, seconds)
    n = len(next(iter(series.values())))
    checks = [(k * 15.0, alert) for k in range(1, n)]
    fired = promtool_firing(tmp_path, series, checks)
    first = min((at for (at, name), alerts in fired.items() if name == alert and alerts), default=None)
    assert first is not None, f"{alert} never fired in {seconds:g} s of {scenario}"
    severity = next(a for (at, name), alerts in fired.items() if alerts for a in alerts)["severity"]
    # a scrape lands up to one interval after the run starts: the announced minute
    # is the first firing plus the route's group wait, rounded up
    arrives = first + group_wait(severity)
    assert math.ceil(arrives / 60) == minutes, (scenario, first, arrives)


@pytest.mark.parametrize("argv, says", [
    (["--replay", "no/such/run.csv"], "--replay: no such file: no/such/run.csv"),
    (["--replay-speed", "0"], "--replay-speed must be above 0, not 0"),
])
def test_a_bad_replay_is_one_line_before_anything_starts(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        stack.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(says), err
