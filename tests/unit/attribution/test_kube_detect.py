"""Attribution on by default where the kubelet PodResources socket exists
(kube.enabled unset = auto), off with one log line where it does not, in the test
process: the detected path against the real gRPC fake kubelet on a unix socket, the
fallback paths against a missing path, a plain file and a missing gRPC client
(tests/integration/attribution/test_kube_auto.py: the same as `gpulse serve` sees it)."""
from __future__ import annotations

import logging
import os

import pytest

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("grpc")

from gpulse.attribution import make_attributor  # noqa: E402
from gpulse.config import FIELD_BY_KEY  # noqa: E402
from testing.config import test_config  # noqa: E402
from testing.fakekube import FakeCluster  # noqa: E402
from kubefixtures import NODE, WHOLE, gpu_pod, hide_grpc, kubelet  # noqa: E402,F401 (kubelet: a fixture)

GPU0 = WHOLE[0]


@pytest.mark.parametrize("in_pod", [False, True])
def test_off_a_kubernetes_node_the_fallback_is_quiet(tmp_path, caplog, monkeypatch, in_pod):
    """No kubelet folder and not in a pod (a workstation): nothing to fall back from,
    so the line is debug only; in a pod the same miss is worth the line."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if in_pod:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    path = str(tmp_path / "no-kubelet" / "kubelet.sock")
    with caplog.at_level(logging.INFO, logger="gpulse.attribution"):
        assert make_attributor(auto_config(path)) is None
    assert len(fallback_lines(caplog)) == (1 if in_pod else 0)


def test_auto_without_the_grpc_client_falls_back(kubelet, caplog, monkeypatch):
    hide_grpc(monkeypatch)
    with caplog.at_level(logging.INFO, logger="gpulse.attribution"):
        assert make_attributor(auto_config(kubelet.socket_path)) is None
    (line,) = fallback_lines(caplog)
    assert kubelet.socket_path in line and "gpulse[kube]" in line


def test_explicit_settings_win_over_detection(kubelet, tmp_path):
    assert make_attributor(auto_config(kubelet.socket_path, kube__enabled=False)) is None
    # insisting on a missing socket keeps attribution on and reports it as an error
    att = make_attributor(auto_config(str(tmp_path / "absent.sock"), kube__enabled=True))
    assert att is not None
    att.refresh_once()
    up, errors, _ = att.health()
    assert up is False and errors["socket_missing"] == 1


@pytest.fixture
def cluster():
    """The cluster the `kubelet` fixture serves: one trainer on GPU 0."""
    return FakeCluster([gpu_pod("trainer-0", [0])])


def auto_config(socket_path: str, **kw):
    return test_config(kube__pod_resources_socket=socket_path, kube__api=False, node_name=NODE, **kw)


def fallback_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gpulse.attribution" and "attribution off" in r.getMessage()]


def test_auto_is_the_default():
    assert FIELD_BY_KEY["kube.enabled"].default == "auto"
    assert test_config().kube.enabled == "auto"


def test_auto_turns_on_where_the_socket_exists(kubelet, caplog):
    with caplog.at_level(logging.INFO, logger="gpulse.attribution"):
        att = make_attributor(auto_config(kubelet.socket_path))
    assert att is not None and fallback_lines(caplog) == []
    att.refresh_once()
    assert att.health()[0] is True
    got = att.lookup(GPU0)
    assert (got["namespace"], got["pod"], got["container"]) == ("ml", "trainer-0", "worker")


def _plain_file(d):
    (d / "plain.sock").write_text("")
    return d / "plain.sock"


@pytest.mark.parametrize("make_path, why", [
    (lambda d: d / "absent.sock", "no such file or directory"),
    (_plain_file, "not a socket"),
])
def test_auto_falls_back_with_one_line(tmp_path, caplog, make_path, why):
    path = str(make_path(tmp_path))
    with caplog.at_level(logging.INFO, logger="gpulse.attribution"):
        assert make_attributor(auto_config(path)) is None
    (line,) = fallback_lines(caplog)
    assert path in line and why in line and "--kube.enabled" in line
