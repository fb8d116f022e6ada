"""XID and ECC alerts on VictoriaMetrics across exporter restarts: a count that was
already there must not page again; a new XID or ECC error must.

MetricsQL's `increase()` counts a series' first sample from zero, so every counter
series that appears with a value (an exporter restart on a new pod IP, a new
workload label, a `--source dcgm` exporter re-counting dcgm-exporter's last XID)
would read as fresh errors. The shipped rules measure growth as the last value less
the lowest in the window instead. Real binaries from the Debian packages
`victoria-metrics` (victoria-metrics, vmagent, vmalert 1.79) and
`prometheus-alertmanager`; the rules are the committed vmalert variant, as shipped.

- history: series with known pasts imported into victoria-metrics with their
  timestamps, queried with the shipped expressions at one instant (and, for
  contrast, with `increase() > 0`, which is what fired before);
- live: a `--source dcgm` gpulse on a fake dcgm-exporter reporting a last XID is
  restarted on another port (a new `instance`, as a new pod gets) while vmagent
  scrapes and vmalert evaluates; vmalert must raise nothing until the GPU reports
  a real XID, and then must raise exactly that one.
"""
from __future__ import annotations

import re
import shutil
import time

import pytest
import requests
import yaml

from conftest import ROOT, Gpulse, free_port, require_data
from testing.dashstack import DCGM_NODE
from testing.fakedcgm import NodeCapture, node_exporter
from testing.promutil import Receiver
from testing.vmstack import VictoriaMetrics, alertmanager

RULE_FILE = ROOT / "prometheus" / "rules-vmalert" / "gpulse-gpu-health.rules.yml"
WAIT_S = 180          # for data to be queryable and for vmalert to act, on a loaded 2-core machine
QUIET_EVALUATIONS = 10     # evaluations of the XID rules (no `for:`: each one a chance to page falsely)
STEP_S = 15


def shipped_expr(alert: str, severity: str) -> str:
    for group in yaml.safe_load(RULE_FILE.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert and rule["labels"]["severity"] == severity:
                return rule["expr"]
    raise AssertionError(f"no {alert} ({severity}) in {RULE_FILE}")


class XidCapture(NodeCapture):
    """The real capture, with the last XID dcgm-exporter reports set by the test."""

    def __init__(self, capture: str, xid: int):
        self.xid = xid
        super().__init__(capture)

    def __call__(self, n: int) -> str:
        return re.sub(r"^(DCGM_FI_DEV_XID_ERRORS\{[^}]*\}) \S+$", lambda m: f"{m.group(1)} {self.xid}",
                      super().__call__(n), flags=re.M)


def gpulse_on(port: int, *args: str) -> Gpulse:
    """A gpulse on a port chosen beforehand (the scrape config lists it)."""
    return Gpulse(*args, "--web.listen-address", f"127.0.0.1:{port}")


def query(vm: VictoriaMetrics, expr: str, at: float | None = None) -> list[dict]:
    # nocache: imported history lands behind the rollup cache's back
    params = {"query": expr, "nocache": "1"}
    if at is not None:
        params["time"] = f"{at:.3f}"
    return vm.api("query", **params)


def wait_query(vm: VictoriaMetrics, expr: str, what: str) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while not (got := query(vm, expr)):
        assert time.monotonic() < deadline, f"{what}: {expr} returned {got} after {WAIT_S} s\n{vm.logs()}"
        time.sleep(0.5)
    return got


class Live:
    """The live part's first exporter: `--source dcgm` on port `ports[0]` over a fake
    dcgm-exporter reporting a last XID 13, scraped from the stack's start (a new
    series takes ~10 s to become queryable in victoria-metrics; it runs while the
    history test does). `ports[1]` is where the test restarts it."""

    def __init__(self):
        self.xid = XidCapture(require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text(), xid=13)
        self.dcgm = node_exporter(self.xid)
        self.args = ("--source", "dcgm", "--dcgm.url", self.dcgm.url, "--node-name", DCGM_NODE)
        self.ports = [free_port(), free_port()]
        self.gpulse: Gpulse | None = None

    def start(self, port: int) -> None:
        if self.gpulse is not None:
            self.gpulse.stop()
        self.gpulse = gpulse_on(port, *self.args)

    def stop(self) -> None:
        if self.gpulse is not None:
            self.gpulse.stop()
        self.dcgm.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vm-xid-restart")
    rules = tmp / "rules"
    rules.mkdir()
    shutil.copy(RULE_FILE, rules / RULE_FILE.name)
    receiver = Receiver()
    am, am_url = alertmanager(tmp, "am", receiver)
    live = vm = None
    try:
        live = Live()
        vm = VictoriaMetrics(tmp, [f"127.0.0.1:{p}" for p in live.ports], rules, am_url)
        live.start(live.ports[0])
        yield vm, live
    finally:
        if vm is not None:
            vm.stop()
        if live is not None:
            live.stop()
        am.stop()
        receiver.close()


# ---------------------------------------------------------------- history

def import_history(vm: VictoriaMetrics, now: float, series: dict[str, list[tuple[float, float]]]) -> None:
    """Series (text selector -> [(seconds before now, value)]) into victoria-metrics."""
    lines = [f"{sel} {v:g} {int((now - ago) * 1000)}" for sel, points in series.items() for ago, v in points]
    r = requests.post(vm.url + "/api/v1/import/prometheus", data="\n".join(lines) + "\n", timeout=30)
    assert r.status_code == 204, r.text


def every(start_ago: float, end_ago: float, value: float) -> list[tuple[float, float]]:
    """One point per STEP_S from start_ago down to end_ago seconds before now."""
    n = int((start_ago - end_ago) // STEP_S)
    return [(start_ago - i * STEP_S, value) for i in range(n + 1)]


def test_history_restarts_stay_quiet_and_new_errors_page(stack):
    vm, _ = stack
    now = time.time() - 5           # past -search.latencyOffset
    m = 60
    X, E, UP = "gpulse_gpu_xid_errors_total", "gpulse_gpu_ecc_errors_total", "gpulse_gpu_up"
    history = {
        # h-restart: exporter restarted 2 min ago on a new pod IP, with its counts
        f'{UP}{{node="h-restart",gpu="0",instance="a"}}': every(20 * m, 3 * m, 1),
        f'{UP}{{node="h-restart",gpu="0",instance="b"}}': every(2 * m, 0, 1),
        f'{X}{{node="h-restart",gpu="0",xid="79",instance="a"}}': every(20 * m, 3 * m, 1),
        f'{X}{{node="h-restart",gpu="0",xid="79",instance="b"}}': every(2 * m, 0, 1),
        f'{E}{{node="h-restart",gpu="0",type="uncorrected",instance="b"}}': every(2 * m, 0, 4),
        # h-first: an exporter started 2 min ago on a GPU with an old XID and old ECC errors
        f'{UP}{{node="h-first",gpu="0"}}': every(2 * m, 0, 1),
        f'{X}{{node="h-first",gpu="0",xid="13"}}': every(2 * m, 0, 1),
        f'{E}{{node="h-first",gpu="0",type="uncorrected"}}': every(2 * m, 0, 3),
        # h-real: watched for 20 min; XID 79 again a minute ago, a first XID 94, 2 ECC errors
        f'{UP}{{node="h-real",gpu="0"}}': every(20 * m, 0, 1),
        f'{X}{{node="h-real",gpu="0",xid="79"}}': every(20 * m, 1 * m + STEP_S, 1) + every(1 * m, 0, 2),
        f'{X}{{node="h-real",gpu="0",xid="94"}}': every(1 * m, 0, 1),
        f'{E}{{node="h-real",gpu="0",type="uncorrected"}}': every(20 * m, 1 * m + STEP_S, 0) + every(1 * m, 0, 2),
    }
    import_history(vm, now, history)
    # every imported sample, not only each series' latest: the alerts read 10 minutes
    # back (a series whose recent samples were queryable before its older ones, on a
    # loaded machine, read as no alert at all). vmalert may add ALERTS series for
    # these nodes, so the imported metrics are named.
    points = sum(len(v) for v in history.values())
    sel = f'{{__name__=~"{UP}|{X}|{E}",node=~"h-.*"}}'
    deadline = time.monotonic() + WAIT_S
    while float(next(iter(query(vm, f"sum(count_over_time({sel}[25m]))", now)),
                     {"value": (0, 0)})["value"][1]) < points:
        assert time.monotonic() < deadline, f"not every imported sample became queryable\n{vm.logs()}"
        time.sleep(0.5)

    def fired(expr: str) -> dict[tuple, float]:
        return {(s["metric"]["node"], s["metric"].get("xid", s["metric"].get("type"))): float(s["value"][1])
                for s in query(vm, expr, now) if s["metric"].get("node", "").startswith("h-")}

    xid = {**fired(shipped_expr("GpulseXidErrors", "critical")), **fired(shipped_expr("GpulseXidErrors", "warning"))}
    assert xid == {("h-real", "79"): 1.0, ("h-real", "94"): 1.0}, xid
    ecc = fired(shipped_expr("GpulseECCUncorrectable", "critical"))
    assert ecc == {("h-real", "uncorrected"): 2.0}, ecc
    # what the alerts read before: MetricsQL's increase() pages for every count that
    # appears, on the restarted and the freshly started exporter alike
    old = fired(f"increase({X}[10m]) > 0")
    assert {("h-restart", "79"), ("h-first", "13")} <= old.keys(), old
    old_ecc = fired(f'increase({E}{{type="uncorrected"}}[10m]) > 0')
    assert {("h-restart", "uncorrected"), ("h-first", "uncorrected")} <= old_ecc.keys(), old_ecc


# ---------------------------------------------------------------- live

def xid_alerts(vm: VictoriaMetrics) -> list[dict]:
    return [a for a in vm.alerts() if a["labels"].get("alertname") == "GpulseXidErrors"
            and a["labels"].get("node") == DCGM_NODE]


def test_live_restart_stays_quiet_until_a_real_xid(stack):
    vm, live = stack
    p1, p2 = live.ports
    seen: set[tuple[str, str, str]] = set()     # (instance, xid, state) of any XID alert
    series = f'gpulse_gpu_xid_errors_total{{node="{DCGM_NODE}",xid="13",instance="127.0.0.1:%d"}}'
    wait_query(vm, series % p1, "the first exporter's XID count in victoria-metrics")
    live.start(p2)        # the restart: its own count of the same last XID
    wait_query(vm, series % p2, "the restarted exporter's XID count in victoria-metrics")
    # the count that appeared is what increase() would page for
    assert query(vm, f"increase({series % p2}[10m]) > 0"), "the false-page condition is not in the data"
    # evaluations that began after the count was queryable, counted, not timed: on a
    # loaded machine vmalert may fall behind its 1 s interval
    before, evaluations = vm.evaluated("GpulseXidErrors"), set()
    deadline = time.monotonic() + WAIT_S
    while len(evaluations) < QUIET_EVALUATIONS:
        assert time.monotonic() < deadline, f"vmalert evaluated the XID rules {len(evaluations)} times\n{vm.logs()}"
        time.sleep(0.25)
        seen |= {(a["labels"]["instance"], a["labels"]["xid"], a["state"]) for a in xid_alerts(vm)}
        evaluations |= vm.evaluated("GpulseXidErrors") - before
    assert not seen, f"vmalert paged for XIDs that were already counted: {seen}"

    # a real XID: dcgm-exporter reports 31, then 13 again. 13's count grows
    # (1 -> 2) and pages; 31 is a first XID on a GPU watched for under 10
    # minutes, which does not (see the runbook), in either engine
    g = live.gpulse
    live.xid.xid = 31
    g.wait_metrics(lambda t: 'xid="31"' in t, "XID 31 counted")
    live.xid.xid = 13
    g.wait_metrics(lambda t: re.search(r'gpulse_gpu_xid_errors_total\{[^}]*xid="13"[^}]*\} 2\.0', t),
                   "XID 13 counted twice")
    deadline = time.monotonic() + WAIT_S
    while True:
        active = xid_alerts(vm)
        if any(a["labels"]["xid"] == "13" for a in active):
            break
        assert time.monotonic() < deadline, f"no GpulseXidErrors for the real XID 13:\n{vm.logs()}"
        time.sleep(0.5)
    assert {(a["labels"]["xid"], a["labels"]["instance"], a["labels"]["severity"]) for a in active} == \
        {("13", f"127.0.0.1:{p2}", "warning")}, active
    assert float(active[0]["value"]) == 1.0, active
