"""The DCGM source: a live dcgm-exporter endpoint serving its real expositions."""
from __future__ import annotations

import subprocess

import pytest

from conftest import free_port
from testing.config import test_config
from gpulse.sources.base import SourceError
from gpulse.sources.dcgm import DcgmSource
from testing.fakedcgm import H100, L4, MIG_TEXT, DcgmExporter, capture, l4_with, map_text

# ---------------------------------------------------------------- the live endpoint


@pytest.fixture
def exporter():
    started = []

    def make(body):
        e = DcgmExporter(body)
        started.append(e)
        return e

    yield make
    for e in started:
        try:
            e.stop()
        except Exception:
            pass


def _source(url, **kw):
    cfg = test_config(source="dcgm", dcgm__url=url, **{"dcgm__" + k: v for k, v in kw.items()})
    return DcgmSource(cfg)


def _polled(exporter, body, **kw):
    """A stand-in endpoint serving `body` and a source that has opened it and polled once at 0."""
    ex = exporter(body)
    src = _source(ex.url, **kw)
    src.open()
    src.poll(0.0)
    return ex, src


def test_live_endpoint_serves_capture(exporter):
    ex = exporter(capture(H100))
    src = _source(ex.url, interval=1.0)
    devices = src.open()
    assert [d.gpu for d in devices] == [str(i) for i in range(8)]
    first = src.poll(100.0)
    assert len(first.readings) == 8 and all(r.up for r in first.readings)
    r6 = next(r for r in first.readings if r.gpu == "6")
    assert r6.attribution["pod"] == "vllm-agg-0-vllmdecodeworker-5fljt"
    assert len(r6.samples) == 1 and r6.samples[0].t == 100.0 and r6.samples[0].power_w == 115.22
    # between fetches: no request, no new samples, same state
    between = src.poll(100.5)
    assert ex.requests == 1
    assert all(r.up and r.samples == [] and r.gauges for r in between.readings)
    later = src.poll(101.0)
    assert ex.requests == 2
    assert all(len(r.samples) == 1 and r.samples[0].t == 101.0 for r in later.readings)
    src.poll(102.0)
    src.poll(103.0)
    assert ex.requests == 4 and ex.connections == 1          # one keep-alive connection
    src.close()
    src.close()


def test_live_sm_active_sets_flag(exporter):
    ex = exporter(MIG_TEXT)
    src = _source(ex.url)
    assert [d.gpu for d in src.open()] == ["0/2", "0/9"]
    assert src.has_sm_active is True
    src.close()


def test_live_garbage_counted(exporter):
    ex = exporter(l4_with(DEV_GPU_UTIL="218322032"))
    src = _source(ex.url)
    src.open()
    res = src.poll(0.0)
    (r,) = res.readings
    assert res.call_errors == {"dcgm_invalid_value": 1}
    assert r.up and r.samples[0].util is None and r.samples[0].power_w == 16.365
    src.close()


def test_live_endpoint_down_then_back(exporter):
    ex, src = _polled(exporter, capture(L4), timeout=0.5)
    ex.stop()
    res = src.poll(1.0)
    (r,) = res.readings
    assert res.call_errors == {"dcgm_scrape": 1}
    assert not r.up and r.samples == [] and r.gauges == {}
    assert r.error.startswith(f"dcgm-exporter {ex.url}: cannot connect (")
    assert "\n" not in r.error
    ex.start()
    res = src.poll(2.0)
    assert res.readings[0].up and res.call_errors == {}
    src.close()


def test_live_slow_endpoint_marks_gpus_down(exporter):
    ex = exporter(capture(L4))
    src = _source(ex.url, timeout=0.2)
    src.open()
    src.poll(0.0)
    ex.delay = 1.0
    res = src.poll(1.0)
    assert res.readings[0].error == f"dcgm-exporter {ex.url}: no answer within 0.2s"
    assert not res.readings[0].up
    ex.delay = 0.0
    src.close()


def test_live_trickling_endpoint_hits_deadline(exporter):
    ex = exporter(capture(L4) * 4)
    src = _source(ex.url, timeout=0.3)
    src.open()
    src.poll(0.0)
    ex.trickle = 0.1      # 512 bytes every 0.1 s: each read is quick, the whole answer is not
    res = src.poll(1.0)
    assert res.readings[0].error == f"dcgm-exporter {ex.url}: answer not complete within 0.3s"
    src.close()


@pytest.mark.parametrize("head", [False, True], ids=["body", "head-and-body"])
def test_live_byte_trickle_with_content_length_ends_at_the_deadline(exporter, caplog, head):
    # 1 byte every 50 ms of a ~4 KB answer would take minutes; every socket read is quick
    ex = exporter(capture(L4))
    src = _source(ex.url, timeout=2.0, interval=1.0)
    src.open()
    assert src.poll(0.0).readings[0].up
    ex.trickle, ex.trickle_bytes, ex.trickle_head = 0.05, 1, head
    with caplog.at_level("WARNING", logger="gpulse.dcgm"):
        res = src.poll(1.0)
    # the poll is back while the server is still trickling (a blocked read would have waited for all of it)
    assert ex.sent < len(ex.body), (ex.sent, len(ex.body))
    got = "answer not complete" if not head else "no answer"
    assert res.readings[0].error == f"dcgm-exporter {ex.url}: {got} within 2s"
    assert not res.readings[0].up and res.call_errors == {"dcgm_scrape": 1}
    assert any(f"{got} within 2s; its GPUs are marked down" in r.getMessage() for r in caplog.records)
    # a well-behaved answer afterwards is read on a fresh connection
    ex.trickle, ex.trickle_head = 0.0, False
    res = src.poll(2.0)
    assert res.readings[0].up and res.call_errors == {}
    src.close()


def test_live_byte_trickle_of_an_answer_ended_by_closing_ends_at_the_deadline(exporter):
    # without Content-Length http.client hands the socket to the response and forgets it;
    # the deadline must still reach it (sources/bounded.Deadline)
    ex = exporter(capture(L4))
    src = _source(ex.url, timeout=2.0, interval=1.0)
    src.open()
    assert src.poll(0.0).readings[0].up
    ex.close_delimited = True
    ex.trickle, ex.trickle_bytes = 0.05, 1
    res = src.poll(1.0)
    assert ex.sent < len(ex.body), (ex.sent, len(ex.body))
    assert res.readings[0].error == f"dcgm-exporter {ex.url}: answer not complete within 2s"
    ex.trickle, ex.close_delimited = 0.0, False
    assert src.poll(2.0).readings[0].up
    src.close()


def test_live_answer_over_the_size_cap_is_dropped(exporter, monkeypatch):
    ex, src = _polled(exporter, capture(L4))
    monkeypatch.setattr(DcgmSource, "MAX_BODY", 2 ** 20)
    ex.body = capture(L4) * (2 ** 20 // len(capture(L4)) + 1)
    res = src.poll(1.0)
    assert res.readings[0].error == f"dcgm-exporter {ex.url}: answer larger than 1 MiB"
    assert not res.readings[0].up and res.call_errors == {"dcgm_scrape": 1}
    src.close()


def test_live_http_error(exporter):
    ex = exporter(capture(L4))
    ex.status = 503
    src = _source(ex.url)
    assert src.open() == []                   # not fatal: the GPUs appear once it answers
    assert src.poll(0.0).readings == []
    ex.status = 200
    res = src.poll(1.0)
    assert [d.gpu for d in res.devices] == ["0"] and res.readings[0].up
    src.close()


def test_live_gpu_missing_from_output(exporter):
    ex = exporter(capture(H100))
    src = _source(ex.url)
    src.open()
    src.poll(0.0)
    ex.body = "\n".join(ln for ln in ex.body.splitlines() if 'gpu="3"' not in ln) + "\n"
    by = {r.gpu: r for r in src.poll(1.0).readings}
    assert not by["3"].up and by["3"].error == "not in dcgm-exporter output"
    assert by["2"].up
    src.close()


def test_live_broken_line_counted(exporter):
    ex = exporter(capture(L4).replace("DCGM_FI_DEV_GPU_TEMP{gpu", "DCGM_FI_DEV_GPU_TEMP{gpu=", 1))
    src = _source(ex.url)
    src.open()
    res = src.poll(0.0)
    assert res.call_errors == {"dcgm_parse": 1}
    assert res.readings[0].up and "temperature_celsius" not in res.readings[0].gauges
    src.close()


def test_bad_url_is_one_clear_line():
    with pytest.raises(SourceError) as e:
        _source("localhost:9400/metrics").open()
    assert str(e.value) == "dcgm.url: 'localhost:9400/metrics' is not an http(s) URL of dcgm-exporter's /metrics"


def test_unreachable_at_start_is_not_fatal():
    src = _source(f"http://127.0.0.1:{free_port()}/metrics", timeout=0.2)
    assert src.open() == []
    res = src.poll(0.0)
    assert res.readings == [] and res.call_errors == {"dcgm_scrape": 1}
    src.close()


# ---------------------------------------------------------------- gpulse serve --source dcgm
def test_serve_dcgm_endpoint(exporter, gpulse_proc):
    ex = exporter(capture(H100))
    g = gpulse_proc("--source", "dcgm", "--dcgm.url", ex.url, "--dcgm.interval", "200ms", "--dcgm.timeout", "300ms")
    text = g.wait_metrics(lambda t: 'gpulse_gpu_power_watts{container="main",gpu="6"' in t)
    assert ('gpulse_gpu_power_watts{container="main",gpu="6",namespace="dynamo-workload",node=' in text
            and 'pod="vllm-agg-0-vllmdecodeworker-5fljt"} 115.22' in text)
    assert 'model="NVIDIA H100 80GB HBM3"' in text
    # garbage from the endpoint is counted, not served
    ex.body = "\n".join(ln.rsplit(" ", 1)[0] + " 218322032" if ln.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="2"') else ln
                        for ln in ex.body.splitlines()) + "\n"
    g.wait_metrics(lambda t: 'gpulse_source_errors_total{call="dcgm_invalid_value"' in t)
    # the endpoint dies: its GPUs go down, scrapes keep answering
    ex.stop()
    text = g.wait_metrics(lambda t: 'gpulse_gpu_up{gpu="0",node=' in t and
                         any(ln.startswith('gpulse_gpu_up{gpu="0"') and ln.endswith(" 0.0") for ln in t.splitlines()))
    assert 'gpulse_source_errors_total{call="dcgm_scrape"' in text


# ---------------------------------------------------------------- an endpoint that lies

def _series_line(text: str, name: str, gpu: str = "0") -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(f"DCGM_FI_{name}{{") and f'gpu="{gpu}"' in ln)


def _counters(src, now):
    res = src.poll(now)
    return res, {r.gpu: r for r in res.readings}


def test_counters_never_decrease_across_dcgm_resets(exporter):
    ex = exporter(l4_with(DEV_TOTAL_ENERGY_CONSUMPTION="7400000"))
    src = _source(ex.url, interval=1.0)
    src.open()
    seen = []
    events = {}
    # 7400 J, then dcgm-exporter restarts and reports 0.01 J, and counts on from there
    for k, mj in enumerate(("7400000", "7400500", "10", "2010", "2010")):
        ex.body = l4_with(DEV_TOTAL_ENERGY_CONSUMPTION=mj)
        res, by = _counters(src, float(k))
        seen.append(by["0"].counters["energy_joules_total"])
        for key, n in res.events.items():
            events[key] = events.get(key, 0) + n
    assert seen == pytest.approx([7400.0, 7400.5, 7400.51, 7402.51, 7402.51])
    assert all(a <= b for a, b in zip(seen, seen[1:]))
    assert events == {("resets_total", "energy_joules_total"): 1}
    src.close()


@pytest.mark.parametrize("field, family, label", [
    ("DEV_ECC_SBE_VOL_TOTAL", "ecc_errors_total", ("corrected",)),
    ("DEV_PCIE_REPLAY_COUNTER", "pcie_replays_total", None),
])
def test_negative_zero_resets_nothing_gpulse_counts(exporter, field, family, label):
    text = capture(L4)
    if field not in text:                       # the L4 capture has no ECC field: add one
        text += _series_line(text, "DEV_PCIE_REPLAY_COUNTER").replace("DEV_PCIE_REPLAY_COUNTER", field) + "\n"
    ex = exporter(text.replace(_series_line(text, field), _series_line(text, field).rsplit(" ", 1)[0] + " 42"))
    src = _source(ex.url, interval=1.0)
    src.open()
    _, by = _counters(src, 0.0)
    get = (lambda r: r.counters[family][label]) if label else (lambda r: r.counters[family])
    assert get(by["0"]) == 42
    for k, value in enumerate(("-0", "-0.0", "3")):
        # -0 is zero: DCGM's counter went back to 0, so it restarted; gpulse's keeps its 42
        ex.body = ex.body.replace(_series_line(ex.body, field), _series_line(ex.body, field).rsplit(" ", 1)[0] + " " + value)
        res, by = _counters(src, 1.0 + k)
        assert get(by["0"]) == (45 if value == "3" else 42)
        assert res.call_errors == {}
        assert res.events == ({("resets_total", family): 1} if k == 0 else {})
    src.close()


def test_duplicate_series_in_one_answer_dropped_the_same_way_every_scrape(exporter):
    text = l4_with(DEV_TOTAL_ENERGY_CONSUMPTION="3350000")
    line = _series_line(text, "DEV_TOTAL_ENERGY_CONSUMPTION")
    small = line.rsplit(" ", 1)[0] + " 5"
    ex = exporter(text.replace(line, line + "\n" + small))
    src = _source(ex.url, interval=1.0)
    src.open()
    got = []
    dropped = 0
    for k in range(4):
        # the order of the two copies flips between scrapes
        ex.body = text.replace(line, (line + "\n" + small) if k % 2 else (small + "\n" + line))
        res, by = _counters(src, float(k))
        got.append(by["0"].counters["energy_joules_total"])
        dropped += res.events.get(("dropped_series_total", "duplicate"), 0)
        assert res.events.get(("resets_total", "energy_joules_total"), 0) == 0
    assert got == [3350.0] * 4 and dropped == 4
    src.close()


def test_renamed_host_keeps_its_gpus(exporter):
    ex, src = _polled(exporter, capture(H100), interval=1.0)
    assert len(src.devices()) == 8
    ex.body = capture(H100).replace('Hostname="ip-100-64-171-120.ec2.internal"', 'Hostname="dcgm-exporter-x7k2p"')
    res = src.poll(1.0)
    assert res.devices is None                          # no new entities
    assert sorted(r.gpu for r in res.readings) == sorted(str(i) for i in range(8))
    assert all(r.up for r in res.readings)
    src.close()


def test_gone_entities_expire_after_the_documented_delay(exporter):
    ex, src = _polled(exporter, capture(H100), interval=1.0)
    ex.body = "\n".join(ln for ln in capture(H100).splitlines() if 'gpu="3"' not in ln) + "\n"
    res, by = _counters(src, 1.0)
    assert not by["3"].up and by["3"].error == "not in dcgm-exporter output"
    # last in an answer at 0: down, still there, until EXPIRE_S later
    for t in (60.0, 120.0, 240.0, DcgmSource.EXPIRE_S - 1):
        res, by = _counters(src, t)
        assert not by["3"].up and res.events == {} and res.devices is None
    res, by = _counters(src, DcgmSource.EXPIRE_S)
    assert "3" not in by and [d.gpu for d in res.devices] == ["0", "1", "2", "4", "5", "6", "7"]
    assert res.events == {("expired_entities_total", ""): 1}
    # the endpoint down is no reason to forget anything
    ex.stop()
    res, by = _counters(src, 10 * DcgmSource.EXPIRE_S)
    assert len(by) == 7 and res.devices is None
    src.close()


def test_entities_per_answer_are_capped_and_counted(exporter):
    line = _series_line(capture(L4), "DEV_GPU_UTIL")
    body = "".join(line.replace('gpu="0"', f'gpu="{i}"') + "\n" for i in range(2000))
    ex = exporter(body)
    src = _source(ex.url, interval=1.0)
    assert len(src.open()) == DcgmSource.MAX_ENTITIES
    res = src.poll(0.0)
    assert len(res.readings) == DcgmSource.MAX_ENTITIES
    assert sorted(int(r.gpu) for r in res.readings) == list(range(DcgmSource.MAX_ENTITIES))
    assert res.events == {("dropped_series_total", "entity_limit"): 2000 - DcgmSource.MAX_ENTITIES}
    src.close()


@pytest.mark.parametrize("index", ["٣", "１", "3\u200b", "²"])
def test_only_ascii_digits_are_gpu_indices(index):
    line = _series_line(capture(L4), "DEV_GPU_UTIL")
    m = map_text(line + "\n" + line.replace('gpu="0"', f'gpu="{index}"') + "\n")
    assert list(m.devices) == ["0"]


def test_serve_exposes_the_source_counters_documented_and_promtool_clean(exporter, gpulse_proc, tmp_path):
    from conftest import ROOT, require_binary
    promtool = require_binary("promtool")
    text = l4_with(DEV_TOTAL_ENERGY_CONSUMPTION="7400000")
    line = _series_line(text, "DEV_TOTAL_ENERGY_CONSUMPTION")
    ex = exporter(text.replace(line, line + "\n" + line))           # a duplicate in every answer
    g = gpulse_proc("--source", "dcgm", "--dcgm.url", ex.url, "--dcgm.interval", "200ms", "--dcgm.timeout", "1s")
    g.wait_metrics(lambda t: "gpulse_source_dropped_series_total" in t)
    ex.body = l4_with(DEV_TOTAL_ENERGY_CONSUMPTION="10")           # DCGM restarted
    out = g.wait_metrics(lambda t: "gpulse_source_resets_total" in t)
    energy = [float(ln.rsplit(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("gpulse_gpu_energy_joules_total{")]
    assert energy and energy[0] >= 7400.0
    assert 'gpulse_source_resets_total{counter="energy_joules_total",node=' in out
    assert 'gpulse_source_dropped_series_total{node=' in out and 'reason="duplicate"} ' in out
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for name in ("gpulse_source_resets_total", "gpulse_source_dropped_series_total",
                 "gpulse_source_expired_entities_total"):
        assert f"| `{name}` | counter |" in doc
    p = subprocess.run([promtool, "check", "metrics"], input=out, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
