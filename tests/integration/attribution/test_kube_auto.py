"""Attribution detected, or not, as `gpulse serve` and `gpulse check-config` see it
(kube.enabled unset = auto); the detection itself, in the test process:
tests/unit/attribution/test_kube_detect.py."""
from __future__ import annotations

import os

import pytest

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("grpc")

from testing.fakekube import FakePod  # noqa: E402
from kubefixtures import NODE, cluster, kubelet, sim_uuid  # noqa: E402,F401 (cluster, kubelet: fixtures)


def test_serve_detects_the_socket(kubelet, gpulse_proc):
    kubelet.cluster.set_pods([FakePod(name="trainer-0", namespace="ml", node=NODE,
                                      devices={"worker": {"nvidia.com/gpu": [sim_uuid(0)]}})])
    g = gpulse_proc("--source", "sim", "--sim.gpus", "8", "--sim.seed", "1", "--node-name", NODE,
                    "--kube.pod-resources-socket", kubelet.socket_path, "--no-kube.api",
                    "--kube.refresh-interval", "1s")
    g.wait_metrics(lambda t: 'pod="trainer-0"' in t and f'gpulse_attribution_up{{node="{NODE}"}} 1.0' in t,
                   "attribution detected without --kube.enabled")


def test_serve_without_the_socket_logs_one_line(tmp_path, gpulse_proc):
    absent = str(tmp_path / "absent.sock")
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--kube.pod-resources-socket", absent)
    text = g.wait_metrics(lambda t: "gpulse_gpu_up{" in t, "GPU series")
    assert "gpulse_attribution_up" not in text
    out = g.output()
    assert out.count("attribution off") == 1 and absent in out, out


def test_auto_can_be_spelled_in_yaml_and_environment(tmp_path):
    """`auto` is the default, and also a value a file or GPULSE_KUBE_ENABLED may set
    explicitly (to undo an inherited true/false); anything else is one line."""
    import subprocess
    import sys
    cfg = tmp_path / "gpulse.yml"
    cfg.write_text("source: sim\nkube:\n  enabled: auto\n")
    gpulse = [sys.executable, "-m", "gpulse", "check-config"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULSE_")}
    assert subprocess.run(gpulse + [str(cfg)], env=env, capture_output=True).returncode == 0
    ok = subprocess.run(gpulse, env={**env, "GPULSE_KUBE_ENABLED": "auto"}, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(gpulse, env={**env, "GPULSE_KUBE_ENABLED": "maybe"}, capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "true, false or auto" in bad.stderr
