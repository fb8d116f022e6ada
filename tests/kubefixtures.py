"""The Kubernetes attribution tests' cluster: GPU and MIG identities, pods, and the fake
kubelet (PodResources on a unix socket) and API server of testing/fakekube.py as
fixtures; `sim_uuid`, the UUIDs `gpulse serve --source sim --sim.seed 1` reports.
Needs the [kube] extra: a test module skips before importing it where that is missing."""
from __future__ import annotations

import pytest

from gpulse.attribution import make_attributor
from gpulse.model import DeviceInfo
from gpulse.sources.sim import SimSource
from testing.config import test_config
from testing.fakekube import FakeApiServer, FakeCluster, FakeKubelet, FakePod


NODE = "node-a"


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-4444{i:08x}"


def mig_uuid(gpu: int, gi: int) -> str:
    return f"MIG-{gpu:04x}{gi:04x}-aaaa-bbbb-cccc-dddd{gpu:04x}{gi:04x}"


WHOLE = [DeviceInfo(gpu=str(i), uuid=gpu_uuid(i), model="NVIDIA H100 80GB HBM3") for i in range(8)]


def mig_device(gpu: int, gi: int, profile: str = "1g.10gb") -> DeviceInfo:
    return DeviceInfo(gpu=f"{gpu}/{gi}", uuid=mig_uuid(gpu, gi), mig_profile=profile,
                      gpu_instance=str(gi), parent_uuid=gpu_uuid(gpu))


def gpu_pod(name, gpus, *, container="worker", labels=None, owners=None, namespace="ml", node=NODE,
            resource="nvidia.com/gpu", ids=None, phase="Running"):
    return FakePod(name=name, namespace=namespace, node=node, phase=phase,
                   devices={container: {resource: ids if ids is not None else [gpu_uuid(i) for i in gpus]}},
                   labels=labels or {}, owners=owners or [])


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def kubelet(cluster, tmp_path):
    k = FakeKubelet(cluster, str(tmp_path / "kubelet.sock"), node=NODE)
    yield k
    k.stop()


@pytest.fixture
def api(cluster, tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    a = FakeApiServer(cluster, str(sa))
    yield a
    a.stop()


def attributor_for(kubelet, api=None, **overrides):
    cfg = test_config(kube__enabled=True, kube__pod_resources_socket=kubelet.socket_path,
                      kube__api=api is not None, node_name=NODE, kube__refresh_interval="1s", **overrides)
    kw = {}
    if api is not None:
        kw = dict(api_host=api.host, api_port=api.port, token_path=api.token_path, ca_path=api.ca_path)
    a = make_attributor(cfg, **kw)
    assert a is not None
    return a


def hide_grpc(monkeypatch) -> None:
    """Imports of grpc fail from here on, as without the [kube] extra."""
    import builtins

    real_import = builtins.__import__

    def no_grpc(name, *a, **kw):
        if name == "grpc" or name.startswith("grpc."):
            raise ImportError("No module named 'grpc'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_grpc)


SEED = 1


# The UUIDs the simulated source of `gpulse serve --sim.seed SEED` will report.
SIM_UUIDS = [d.uuid for d in SimSource(test_config(sim__gpus=8, sim__seed=SEED)).open()]


def sim_uuid(i: int) -> str:
    return SIM_UUIDS[i]
