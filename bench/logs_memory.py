"""Memory and time of `gpulse report` against the size of a recorded nvidia-smi log.

Builds 20, 100 and 200 MB logs by laying a real 8×H100 trace (../shared/data) end to
end, each copy's timestamps moved on by the trace's length, so the rhythm (8 rows per
poll written milliseconds apart, 100 ms polls, checkpoint stalls, start-up and exit) is
the real one. Each report runs in its own process; peak RSS is that process's
ru_maxrss, CPU its user + system time. Prints RSS, time and CPU per size and their
ratios to the smallest. The logs live in a temporary directory, deleted at the end.

With --against REV the tree at git revision REV reports on the same logs, one after
the other, and each size's CPU and RSS are printed against it: CPU is the fair
figure on a shared machine, where wall time follows whatever else runs.

With --gzip each log is also reported on gzipped (level 6, as `gzip` writes it), as
users keep long logs: its time, CPU and RSS against the plain log's, and whether its
findings are the plain log's.

    .venv/bin/python bench/logs_memory.py [--sizes 20,100,200] [--against REV] [--gzip]
"""
from __future__ import annotations

import argparse
import calendar
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import tree_at  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu" / "ckpt1000.csv"
MB = 10 ** 6


def _rows(path: Path) -> tuple[str, list[tuple[int, str]]]:
    """The header and (epoch milliseconds, rest of the line) per data row."""
    lines = path.read_text().splitlines()
    rows = []
    for ln in lines[1:]:
        stamp, _, rest = ln.partition(",")
        head, _, frac = stamp.strip().partition(".")
        sec = calendar.timegm(time.strptime(head, "%Y/%m/%d %H:%M:%S"))
        rows.append((sec * 1000 + int(frac or 0), rest))
    return lines[0], rows


def build_log(path: Path, size: int, header: str, rows: list[tuple[int, str]]) -> tuple[int, int]:
    """Copies of the trace, end to end, until the file holds `size` bytes: (bytes, rows)."""
    span = rows[-1][0] - rows[0][0] + 100          # one poll after the last row
    stamps: dict[int, str] = {}
    written = n = copy = 0
    with path.open("w") as fh:
        fh.write(header + "\n")
        while written < size:
            shift = copy * span
            for ms, rest in rows:
                sec, milli = divmod(ms + shift, 1000)
                s = stamps.get(sec)
                if s is None:
                    if len(stamps) > 100_000:
                        stamps.clear()
                    s = stamps[sec] = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(sec))
                line = f"{s}.{milli:03d},{rest}\n"
                fh.write(line)
                written += len(line)
                n += 1
                if written >= size:
                    break
            copy += 1
    return path.stat().st_size, n


def run_report(log: Path, out: Path, root: Path = ROOT) -> tuple[float, int, int, float]:
    """(seconds, peak RSS bytes, exit status, CPU seconds) of one `gpulse report` process
    of the tree at `root`."""
    env = dict(os.environ, PYTHONPATH=str(root / "exporter"))
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(out),
                          "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        print(f"report on {log.name} failed ({p.returncode}): {err.strip()[-300:]}", file=sys.stderr)
    return took, usage.ru_maxrss * 1024, p.returncode, usage.ru_utime + usage.ru_stime


def _findings(out: Path) -> dict:
    doc = json.loads((out / "findings.json").read_text())
    doc.pop("source")           # names the file read
    return doc


def compressed(log: Path, tmp: Path, mb: int, plain: tuple[float, int, float]) -> None:
    """The report on `log` gzipped, printed against the plain log's (seconds, RSS, CPU)."""
    packed = tmp / f"{log.name}.gz"
    with log.open("rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    took, rss, rc, cpu = run_report(packed, tmp / f"gz-{mb}")
    same = rc == 0 and _findings(tmp / f"gz-{mb}") == _findings(tmp / f"out-{mb}")
    print(f"{'':12}gzipped ({packed.stat().st_size / MB:.1f} MB, {log.stat().st_size / packed.stat().st_size:.1f}x): "
          f"{took:6.1f} s, CPU {cpu:6.1f} s, peak RSS {rss / 2 ** 20:7.1f} MiB; time ratio {took / plain[0]:.3f}, "
          f"CPU ratio {cpu / plain[2]:.3f}; findings {'the same' if same else 'DIFFER'}", flush=True)
    packed.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20,100,200", help="log sizes in MB (default: 20,100,200)")
    ap.add_argument("--against", metavar="REV", help="also report with the tree at git revision REV")
    ap.add_argument("--gzip", action="store_true", help="also report on each log gzipped")
    ns = ap.parse_args()
    if ns.against:
        with tree_at(ns.against) as old:
            return measure(ns, old)
    return measure(ns, None)


def measure(ns: argparse.Namespace, old: Path | None) -> int:
    sizes = [int(x) for x in ns.sizes.split(",")]
    if not TRACE.exists():
        raise SystemExit(f"{TRACE}: missing (the shared data folder)")
    header, rows = _rows(TRACE)
    results = []
    with tempfile.TemporaryDirectory(prefix="gpulse-logs-") as tmp:
        for mb in sizes:
            log = Path(tmp) / f"run-{mb}mb.csv"
            real, n = build_log(log, mb * MB, header, rows)
            took, rss, rc, cpu = run_report(log, Path(tmp) / f"out-{mb}")
            base = run_report(log, Path(tmp) / f"base-{mb}", old) if old is not None else None
            results.append((n, real, took, rss, rc, cpu, base))
            print(f"{real / MB:7.1f} MB log: report {took:6.1f} s, CPU {cpu:6.1f} s, peak RSS {rss / 2 ** 20:7.1f} MiB"
                  f"{'' if rc == 0 else f'  (exit {rc})'}", flush=True)
            if base is not None:
                print(f"{'':12}{ns.against[:8]}: {base[0]:6.1f} s, CPU {base[3]:6.1f} s, peak RSS "
                      f"{base[1] / 2 ** 20:7.1f} MiB; CPU ratio {cpu / base[3]:.3f}, RSS ratio {rss / base[1]:.2f}",
                      flush=True)
            if ns.gzip:
                compressed(log, Path(tmp), mb, (took, rss, cpu))
            log.unlink()
    _, size0, _, rss0, _, cpu0, _ = results[0]
    print()
    print("| log MB | rows | report s | CPU s | peak RSS MiB | RSS ÷ log size | × size | × CPU | × RSS |"
          + (f" {ns.against[:8]} CPU s | CPU ratio |" if old is not None else ""))
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if old is not None else ""))
    for n, real, took, rss, _, cpu, base in results:
        print(f"| {real / MB:.0f} | {n:,} | {took:.1f} | {cpu:.1f} | {rss / 2 ** 20:.0f} | {rss / real:.2f} | "
              f"{real / size0:.1f} | {cpu / cpu0:.2f} | {rss / rss0:.2f} |"
              + (f" {base[3]:.1f} | {cpu / base[3]:.3f} |" if base is not None else ""))
    return 0 if all(r[4] == 0 and (r[6] is None or r[6][2] == 0) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
