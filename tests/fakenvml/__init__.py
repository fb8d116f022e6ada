"""Build and drive the fake libnvidia-ml.so.1 (fakenvml.c; scenario format in README.md).

Two ways to put it under pynvml:
- a child process: pass `env(scenario)` so the dynamic loader finds the fake through
  LD_LIBRARY_PATH, exactly as it would find the driver's library;
- this process: `preload()` dlopens the fake by path; its soname is
  libnvidia-ml.so.1, so pynvml's own CDLL("libnvidia-ml.so.1") gets the same
  library back. (LD_LIBRARY_PATH is read once at process start, so setting it
  later would not do.)
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "fakenvml.c"
BUILD = HERE / "build"
LIB = BUILD / "libnvidia-ml.so.1"

CFLAGS = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
          "-fvisibility=hidden", "-Wl,-soname,libnvidia-ml.so.1"]


class BuildError(RuntimeError):
    pass


def build() -> Path:
    """Compile the fake library unless an up-to-date build exists. Safe when several
    processes (pytest-xdist workers, a bench) ask at once."""
    BUILD.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BuildError("no C compiler (gcc) on PATH to build the fake libnvidia-ml")
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if LIB.exists() and LIB.stat().st_mtime >= SRC.stat().st_mtime:
            return LIB
        tmp = BUILD / f".libnvidia-ml.{os.getpid()}.so"
        proc = subprocess.run([cc, *CFLAGS, "-o", str(tmp), str(SRC), "-lm"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"building the fake libnvidia-ml failed:\n{proc.stderr}")
        os.replace(tmp, LIB)
    return LIB


def env(scenario: Path | str | None = None, stats: Path | str | None = None,
        clock: Path | str | None = None) -> dict[str, str]:
    """Environment for a child process that should load the fake library; `clock`: the
    file a virtual clock writes its time to (testing/virtualclock.py), for the fake to follow."""
    build()
    e = {"LD_LIBRARY_PATH": str(BUILD) + (os.pathsep + os.environ["LD_LIBRARY_PATH"]
                                          if os.environ.get("LD_LIBRARY_PATH") else "")}
    if scenario is not None:
        e["FAKENVML_SCENARIO"] = str(scenario)
    if stats is not None:
        e["FAKENVML_STATS"] = str(stats)
    if clock is not None:
        e["FAKENVML_CLOCK"] = str(clock)
    return e


_preloaded: ctypes.CDLL | None = None


def preload() -> ctypes.CDLL:
    """Load the fake into this process so pynvml binds to it."""
    global _preloaded
    if _preloaded is None:
        _preloaded = ctypes.CDLL(str(build()), mode=ctypes.RTLD_GLOBAL)
    return _preloaded


def calls(name: str | None = None) -> int:
    """In this process (after preload): calls of one NVML symbol so far, or of all
    device-level symbols when name is None."""
    fn = preload().fakenvml_calls
    fn.restype = ctypes.c_ulonglong
    fn.argtypes = [ctypes.c_char_p]
    return int(fn(name.encode() if name else None))


def read_stats(path: Path | str) -> dict:
    """Parse the call counts the fake writes to $FAKENVML_STATS."""
    out: dict = {"calls": {}}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if parts[0] == "call":
            out["calls"][parts[1]] = int(parts[2])
        elif parts[0] == "elapsed":
            out["elapsed"] = float(parts[1])
        else:
            out[parts[0]] = int(parts[1])
    return out
