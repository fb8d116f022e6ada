"""Load: many concurrent scrapers plus idle (slowloris) connections against one exporter.

    .venv/bin/python bench/load.py [--scrapers 200] [--idle 200] [--duration 60] [--gpus 8] [--against REV]

Two phases against one `gpulse serve --source sim` process, in the same command:

  baseline  one scraper alone for --baseline seconds;
  load      --scrapers scrapers, each a kept-alive connection asking /metrics again
            the moment the last answer arrived (far harder than Prometheus, which asks
            every 15 s), plus --idle connections that trickle one header byte a
            second and never finish a request; the server cuts them at the head
            deadline (--web.timeout) and they reconnect at once, as an attacker would.

It prints how many scrapes were answered and with what, latency percentiles and
their ratio to the baseline, how often the idle connections were cut, and the
exporter's CPU, RSS and thread count. Clients run in their own processes so the
measuring side does not share the exporter's interpreter.

--against REV first runs the same two phases against the gpulse of git revision REV
(extracted to a temporary directory) and prints the ratios this ÷ REV.

--web.max-requests is set to at least the number of scrapers (the sizing rule:
one slot per concurrent scraper); with fewer slots the surplus gets 503 at once.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import multiprocessing as mp
import selectors
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import cpu_seconds, percentile, rss_bytes, start_gpulse, threads, tree_at  # noqa: E402

CLIENT_PROCS = 4


def _scraper_proc(port: int, n: int, duration: float, start_at: float, interval: float, first: int,
                  total: int, out: Any) -> None:
    lat: list[float] = []
    codes: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def run(phase: float) -> None:
        my_lat, my_codes, my_err = [], collections.Counter(), collections.Counter()
        conn, used = None, 0
        end = start_at + duration
        # paced scrapers start spread over one interval, as independent Prometheus servers do
        while time.time() < start_at + phase:
            time.sleep(0.01)
        next_at = time.time()
        while time.time() < end:
            if interval:
                next_at += interval
            t0 = time.perf_counter()
            for attempt in (1, 2):
                try:
                    if conn is None:
                        conn, used = http.client.HTTPConnection("127.0.0.1", port, timeout=30), 0
                    conn.request("GET", "/metrics")
                    r = conn.getresponse()
                    r.read()
                    used += 1
                    my_codes[r.status] += 1
                    my_lat.append((time.perf_counter() - t0) * 1000)
                    if r.will_close:
                        conn.close()
                        conn = None
                    break
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    conn = None
                    # the server closed a kept-alive connection as this request went out:
                    # retried once on a new connection, as HTTP clients (and Prometheus) do
                    if attempt == 1 and used and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError,
                                                                BrokenPipeError)):
                        my_err["retried after keep-alive close"] += 1
                        continue
                    my_err[type(e).__name__] += 1
                    break
            if interval:
                time.sleep(max(0.0, next_at - time.time()))
        if conn is not None:
            conn.close()
        with lock:
            lat.extend(my_lat)
            codes.update(my_codes)
            errors.update(my_err)

    ts = [threading.Thread(target=run, args=(interval * (first + i) / total,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put({"lat": lat, "codes": dict(codes), "errors": dict(errors)})


def _slowloris_proc(port: int, n: int, duration: float, start_at: float, out: Any) -> None:
    """n connections that each send a request head one byte a second, forever."""
    sel = selectors.DefaultSelector()
    socks: dict[socket.socket, int] = {}
    cut = refused = 0
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "

    def connect() -> None:
        nonlocal refused
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            refused += 1
            return
        s.setblocking(False)
        socks[s] = 0
        sel.register(s, selectors.EVENT_READ)

    def drop(s: socket.socket) -> None:
        sel.unregister(s)
        socks.pop(s, None)
        s.close()

    while time.time() < start_at:
        time.sleep(0.01)
    for _ in range(n):
        connect()
    end = start_at + duration
    next_tick = time.monotonic()
    while time.time() < end:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:                 # the server cut us: come back at once
                cut += 1
                drop(s)
                connect()
        if time.monotonic() >= next_tick:
            next_tick += 1.0
            for s, i in list(socks.items()):
                try:
                    s.send(head[i:i + 1] if i < len(head) else b"a")
                    socks[s] = i + 1
                except OSError:
                    cut += 1
                    drop(s)
                    connect()
        while len(socks) < n and time.time() < end:
            connect()
    held = len(socks)
    for s in list(socks):
        drop(s)
    out.put({"cut": cut, "refused": refused, "held_at_end": held})


def run_load(port: int, scrapers: int, idle: int, duration: float, pid: int | None = None,
             interval: float = 0.0) -> dict[str, Any]:
    """Run one phase; returns merged results (used by tests/integration/http/test_load.py too)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 1.0
    procs = []
    per = [scrapers // CLIENT_PROCS + (1 if i < scrapers % CLIENT_PROCS else 0) for i in range(CLIENT_PROCS)]
    for i, n in enumerate(per):
        if n:
            procs.append(ctx.Process(target=_scraper_proc, args=(port, n, duration, start_at, interval,
                                                                 sum(per[:i]), scrapers, q)))
    if idle:
        procs.append(ctx.Process(target=_slowloris_proc, args=(port, idle, duration, start_at, q)))
    for p in procs:
        p.start()
    peak_threads = 0
    cpu0 = cpu_seconds(pid) if pid else 0.0
    t0 = time.monotonic()
    results = []
    while len(results) < len(procs):
        if pid:
            peak_threads = max(peak_threads, threads(pid))
        try:
            results.append(q.get(timeout=0.5))
        except Exception:   # queue.Empty: keep sampling the server while clients run
            pass
    for p in procs:
        p.join()
    wall = time.monotonic() - t0 - 1.0
    merged: dict[str, Any] = {"lat": [], "codes": collections.Counter(), "errors": collections.Counter(),
                              "cut": 0, "refused": 0, "held_at_end": 0}
    for r in results:
        if "lat" in r:
            merged["lat"].extend(r["lat"])
            merged["codes"].update(r["codes"])
            merged["errors"].update(r["errors"])
        else:
            for k in ("cut", "refused", "held_at_end"):
                merged[k] += r[k]
    merged["duration"] = duration
    if pid:
        merged["server_cpu"] = (cpu_seconds(pid) - cpu0) / max(wall, 1e-9)
        merged["server_rss"] = rss_bytes(pid)
        merged["server_threads_peak"] = peak_threads
    return merged


def describe(name: str, r: dict[str, Any], base_p99: float | None = None) -> list[str]:
    lat = r["lat"]
    n = sum(r["codes"].values())
    lines = [f"{name}: {n} scrapes in {r['duration']:.0f}s ({n / r['duration']:.0f}/s), "
             f"answers {dict(sorted(r['codes'].items()))}, client side {dict(r['errors']) or 'no errors'}"]
    if lat:
        p99 = percentile(lat, 99)
        ratio = f", p99 ratio to baseline {p99 / base_p99:.1f}" if base_p99 else ""
        lines.append(f"  latency ms: p50 {percentile(lat, 50):.1f}  p90 {percentile(lat, 90):.1f}  "
                     f"p99 {p99:.1f}  max {max(lat):.1f}{ratio}")
    if r.get("cut") or r.get("held_at_end"):
        lines.append(f"  idle connections: {r['cut']} cut by the head deadline and reopened, "
                     f"{r['refused']} refused, {r['held_at_end']} open at the end")
    if "server_cpu" in r:
        lines.append(f"  exporter: CPU {100 * r['server_cpu']:.0f}% of one core, RSS {r['server_rss'] / 2**20:.1f} MB, "
                     f"peak threads {r['server_threads_peak']}")
    return lines


def run_server(a: argparse.Namespace, slots: int, root: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both phases against one gpulse (this checkout, or the tree at `root`)."""
    kw = {"root": root} if root is not None else {}
    p, url = start_gpulse("--source", "sim", "--sim.gpus", str(a.gpus), "--sim.scenario", "sync-stall",
                          "--web.max-requests", str(slots), "--web.timeout", a.timeout, **kw)
    port = int(url.rsplit(":", 1)[1])
    try:
        time.sleep(2)
        base = run_load(port, 1, 0, a.baseline, p.pid)
        load = run_load(port, a.scrapers, a.idle, a.duration, p.pid, a.interval)
    finally:
        p.terminate()
        p.wait()
    return base, load


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapers", type=int, default=200)
    ap.add_argument("--idle", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--baseline", type=float, default=10.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.0,
                    help="seconds between one scraper's requests; 0 = ask again at once")
    ap.add_argument("--max-requests", type=int, default=0, help="default: max(256, scrapers)")
    ap.add_argument("--timeout", default="10s", help="--web.timeout of the exporter")
    ap.add_argument("--against", metavar="REV", help="first run the same load against gpulse at this git revision")
    a = ap.parse_args()
    slots = a.max_requests or max(256, a.scrapers)
    print(f"gpulse --sim.gpus {a.gpus} --web.max-requests {slots} --web.timeout {a.timeout}", flush=True)
    pace = f"every {a.interval:g}s" if a.interval else "back to back"
    runs = {}
    with contextlib.ExitStack() as stack:
        servers = [("this", None)]
        if a.against:
            servers.insert(0, (a.against[:8], stack.enter_context(tree_at(a.against))))
        for name, root in servers:
            base, load = runs[name] = run_server(a, slots, root)
            for line in describe(f"[{name}] baseline (1 scraper)", base):
                print(line, flush=True)
            for line in describe(f"[{name}] load ({a.scrapers} scrapers {pace} + {a.idle} idle connections)", load,
                                 percentile(base["lat"], 99)):
                print(line, flush=True)
    if len(runs) == 2:
        (_, old), (_, new) = runs.values()
        print(f"this ÷ {a.against[:8]} under load: p99 {percentile(new['lat'], 99) / percentile(old['lat'], 99):.2f}, "
              f"scrapes answered {sum(new['codes'].values()) / max(1, sum(old['codes'].values())):.2f}, "
              f"CPU {new['server_cpu'] / old['server_cpu']:.2f}")
    load = runs["this"][1]
    answered = sum(load["codes"].values())
    failed = {k: v for k, v in load["errors"].items() if k != "retried after keep-alive close"}
    ok = load["codes"].get(200, 0) == answered and not failed
    print("verdict: " + ("every scrape answered 200" if ok else "NOT every scrape answered 200"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
