"""The NVML source on the fake libnvidia-ml (fakenvml/): `nvml(scenario, **config)`
opens a NvmlSource on a scenario and `Opened.drive` polls it as the sampler does."""
from __future__ import annotations

import textwrap
import time

import pytest

import fakenvml
from conftest import require_binary
from gpulse.sources.nvml.source import NvmlSource
from testing.config import test_config


@pytest.fixture(scope="module")
def fake():
    require_binary("gcc")
    return fakenvml.preload()


class Opened:
    def __init__(self, src: NvmlSource, devices, epoch: float):
        self.src, self.devices, self.epoch = src, devices, epoch
        self.began: list[float] = []    # per result drive() returned: the wall time its poll began

    def drive(self, seconds: float, step: float = 0.1):
        """Poll like the sampler does for `seconds`; the results that carried readings."""
        out = []
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            began = time.time()
            r = self.src.poll(now)
            if r.readings or r.devices is not None:
                out.append(r)
                self.began.append(began)
            time.sleep(step)
        return out


@pytest.fixture
def nvml(fake, tmp_path, monkeypatch):
    """nvml(scenario, **config) -> Opened: a NvmlSource opened on that scenario."""
    made: list[NvmlSource] = []

    def make(scenario: str, **cfg) -> Opened:
        path = tmp_path / f"scenario{len(made)}.txt"
        path.write_text(textwrap.dedent(scenario))
        epoch_us = int(time.time() * 1e6)
        monkeypatch.setenv("FAKENVML_SCENARIO", str(path))
        monkeypatch.setenv("FAKENVML_EPOCH_US", str(epoch_us))
        src = NvmlSource(test_config(source="nvml", **cfg))
        made.append(src)
        return Opened(src, src.open(), epoch_us / 1e6)

    yield make
    for s in made:
        s.close()


def samples(results, gpu):
    return [s for r in results for x in r.readings if x.gpu == gpu for s in x.samples]


def readings(results, gpu):
    return [x for r in results for x in r.readings if x.gpu == gpu]
