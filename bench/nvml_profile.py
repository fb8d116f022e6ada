"""Where the NVML path's CPU goes, on the fake libnvidia-ml.

    .venv/bin/python bench/nvml_profile.py [--gpus 8,64] [--seconds 20]

Everything runs in this process, on the fake library (tests/fakenvml) under the
unmodified pynvml, driven the way `gpulse serve` drives it: one source read a second
(the NVML source's poll_interval), one analysis per analysis interval, one /metrics
render per 15 s scrape. Two tables:

    per call kind   µs per call, best of 5 × 300 calls on GPU 0: through pynvml's
                    wrapper, through the path the source uses, and the bare C call
                    into a buffer made beforehand (the floor: the fake driver's work
                    plus ctypes' foreign call)
    per layer       thread CPU µs per GPU per second over --seconds, by layer: NVML
                    source, engine ingest, analysis, exposition; then, from a second
                    --seconds run under cProfile, the source's share split into
                    pynvml's Python wrappers, gpulse's sampling code and builtins
                    (ctypes marshalling, list building). cProfile cannot see into a
                    foreign call: the C time lands in the layer that makes the call.

XIDs are drained inside the source's poll (one nvmlEventSetWait_v2 with a zero
timeout per read), so they count in the NVML source layer.
Runs in a few seconds more than 2 × --seconds per GPU count.
"""
from __future__ import annotations

import argparse
import cProfile
import ctypes
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "exporter"), str(ROOT / "tests"), str(ROOT)]

import fakenvml  # noqa: E402  (the test double lives with the tests)

SCRAPE_EVERY = 15.0
REPEATS, CALLS = 5, 300
SCENARIO = """\
gpus {gpus}
util * square period=2 duty=0.85 high=0.95 low=0 phase=1.65
power * follow idle=90 max=604
memory * const 66571993088
"""


def per_call(fn, *args) -> float:
    """µs per call, best of REPEATS runs of CALLS calls."""
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best / CALLS * 1e6


def call_kinds(src) -> list[tuple[str, float, float | None, float]]:
    """(kind, pynvml µs, gpulse µs or None when it calls pynvml, bare C µs) on GPU 0."""
    import pynvml
    from gpulse.sources.nvml import source as mod
    st = src.states[0]
    h = st.entity.handle
    since = int((time.time() - 1.0) * 1e6)      # ~6 samples per read, as every second
    direct = getattr(src, "direct", None)
    lib = pynvml._nvmlGetFunctionPointer
    vt, cnt, u64 = ctypes.c_int(), ctypes.c_uint(), ctypes.c_ulonglong()
    sbuf = (pynvml.c_nvmlSample_t * 64)()
    mem = pynvml.c_nvmlMemory_t()
    fbuf = (pynvml.c_nvmlFieldValue_t * len(mod.FIELD_SCOPES))()
    for v, (f, s) in zip(fbuf, mod.FIELD_SCOPES):
        v.fieldId, v.scopeId = f, s

    def bare_samples(kind):
        cnt.value = 64
        lib("nvmlDeviceGetSamples")(h, kind, ctypes.c_ulonglong(since), ctypes.byref(vt), ctypes.byref(cnt), sbuf)

    raw_get = ctypes.Structure.__getattribute__   # past pynvml's str conversion, as the source read them

    def wrapped_samples(kind):
        vtype, raw = pynvml.nvmlDeviceGetSamples(h, kind, since)
        return [(raw_get(s, "timeStamp"), raw_get(s, "sampleValue").uiVal) for s in raw]

    rows = []
    for kind, name in ((pynvml.NVML_GPU_UTILIZATION_SAMPLES, "util"), (pynvml.NVML_TOTAL_POWER_SAMPLES, "power")):
        rows.append((f"nvmlDeviceGetSamples[{name}] + reading it", per_call(wrapped_samples, kind),
                     per_call(direct.samples, h, kind, since) if direct else None, per_call(bare_samples, kind)))
    rows.append(("nvmlDeviceGetMemoryInfo", per_call(pynvml.nvmlDeviceGetMemoryInfo, h),
                 per_call(direct.memory, h) if direct else None,
                 per_call(lambda: lib("nvmlDeviceGetMemoryInfo")(h, ctypes.byref(mem)))))
    rows.append(("nvmlDeviceGetCurrentClocksEventReasons", per_call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h),
                 per_call(direct.u64, "nvmlDeviceGetCurrentClocksEventReasons", h) if direct else None,
                 per_call(lambda: lib("nvmlDeviceGetCurrentClocksEventReasons")(h, ctypes.byref(u64)))))
    own = getattr(direct, "field_values", None)
    rows.append((f"nvmlDeviceGetFieldValues[{len(fbuf)}] + reading it",
                 per_call(lambda: [(raw_get(v, "fieldId"), raw_get(v, "nvmlReturn"), raw_get(v, "valueType"),
                                    raw_get(v, "value").ullVal)
                                   for v in pynvml.nvmlDeviceGetFieldValues(h, mod.FIELD_SCOPES)]),
                 per_call(own, h, fbuf) if own else None,
                 per_call(lambda: lib("nvmlDeviceGetFieldValues")(h, ctypes.c_int32(len(fbuf)), fbuf))))
    rows.append(("nvmlDeviceGetTemperature", per_call(pynvml.nvmlDeviceGetTemperature, h, 0), None,
                 per_call(lambda: lib("nvmlDeviceGetTemperature")(h, 0, ctypes.byref(cnt)))))
    return rows


def layer_of(filename: str, func: str) -> str:
    if filename.endswith("pynvml.py"):
        return "pynvml wrappers"
    if "/gpulse/sources/" in filename:
        return "gpulse sampling code"
    if filename == "~":
        return "builtins (ctypes, lists)"
    return "other"


class Pipeline:
    """Source, engine and exposition wired as runtime.py wires them, in this thread."""

    def __init__(self, gpus: int, workdir: Path):
        from gpulse.collector import Exposition
        from testing.config import test_config
        from gpulse.engine import Engine
        from gpulse.sources.nvml import NvmlSource
        scen = workdir / f"scenario-{gpus}.txt"
        scen.write_text(SCENARIO.format(gpus=gpus))
        os.environ["FAKENVML_SCENARIO"] = str(scen)
        self.cfg = test_config(source="nvml")
        self.src = NvmlSource(self.cfg)
        devices = self.src.open()
        if len(devices) != gpus:
            raise SystemExit(f"the fake library reported {len(devices)} GPUs, not {gpus}")
        self.engine = Engine(self.cfg, devices, "nvml")
        self.snap = None
        self.expo = Exposition(self.cfg.node_name, lambda: self.snap,
                               lambda: {"stale": False, "seconds_since_success": 0.0, "alive": True})
        self.gpus = gpus

    def run(self, seconds: float, profile: cProfile.Profile | None = None) -> dict[str, float]:
        """Thread CPU µs per GPU per second, per layer, over `seconds` of wall time
        (the profile, if given, runs around the source's polls only)."""
        cpu = {"NVML source": 0.0, "engine ingest": 0.0, "analysis": 0.0, "exposition": 0.0}
        interval = max(self.cfg.sample_interval, self.src.poll_interval or 0.0)
        start = time.monotonic()
        next_poll, next_analysis, next_scrape = start, start + self.cfg.analysis_interval, start
        while time.monotonic() - start < seconds:
            if profile:
                profile.enable()
            t0 = time.thread_time()
            result = self.src.poll(time.monotonic())
            t1 = time.thread_time()
            if profile:
                profile.disable()
            self.engine.ingest(result, wall=time.time())
            t2 = time.thread_time()
            cpu["NVML source"] += t1 - t0
            cpu["engine ingest"] += t2 - t1
            now = time.monotonic()
            if now >= next_analysis:
                self.snap = self.engine.analyze(wall=time.time())
                next_analysis = max(next_analysis + self.cfg.analysis_interval, now)
                cpu["analysis"] += time.thread_time() - t2
            if now >= next_scrape:
                t3 = time.thread_time()
                self.expo.render(False)
                cpu["exposition"] += time.thread_time() - t3
                next_scrape += SCRAPE_EVERY
            next_poll += interval
            time.sleep(max(0.0, next_poll - time.monotonic()))
        return {k: v / seconds / self.gpus * 1e6 for k, v in cpu.items()}

    def close(self) -> None:
        self.src.close()


def source_split(profile: cProfile.Profile, seconds: float, gpus: int) -> dict[str, float]:
    """cProfile's own time per layer inside NvmlSource.poll, µs per GPU per second."""
    out: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, tt, _ct, _callers) in pstats.Stats(profile).stats.items():
        layer = layer_of(filename, func)
        out[layer] = out.get(layer, 0.0) + tt
    return {k: v / seconds / gpus * 1e6 for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="8,64")
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    fakenvml.preload()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FAKENVML_EPOCH_US"] = str(int(time.time() * 1e6))
        for n in (int(x) for x in a.gpus.split(",")):
            pipe = Pipeline(n, Path(tmp))
            try:
                time.sleep(1.0)            # one second of driver samples to read
                if n == int(a.gpus.split(",")[0]):
                    print(f"per NVML call, µs (best of {REPEATS} x {CALLS} calls on GPU 0)")
                    print(f"{'call':<50} {'pynvml':>7} {'gpulse':>7} {'bare C':>7}")
                    for kind, p, g, c in call_kinds(pipe.src):
                        gs = f"{g:>7.1f}" if g is not None else f"{'(pynvml)':>7}"
                        print(f"{kind:<50} {p:>7.1f} {gs} {c:>7.1f}")
                layers = pipe.run(a.seconds)
                prof = cProfile.Profile(time.thread_time)   # CPU, not time lost to other load
                pipe.run(a.seconds, prof)
                split = source_split(prof, a.seconds, n)
            finally:
                pipe.close()
            total = sum(layers.values())
            print(f"\n{n} GPUs: thread CPU µs per GPU per second over {a.seconds:g} s "
                  f"(= {total * n / 1e4:.3f} % of a core)")
            for k, v in layers.items():
                print(f"  {k:<28} {v:>8.1f}")
            print(f"  {'total':<28} {total:>8.1f}")
            print("  NVML source under cProfile (own time, µs per GPU per second; profiler overhead included):")
            for k, v in sorted(split.items(), key=lambda x: -x[1]):
                print(f"    {k:<26} {v:>8.1f}")


if __name__ == "__main__":
    main()
