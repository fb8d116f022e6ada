"""Client for the kubelet PodResources v1 API: which container holds which device.

One `List` call over the kubelet's unix socket returns every pod on the node with
the device IDs assigned to each container. Only GPU resources are kept:
`nvidia.com/gpu`, the MIG resources `nvidia.com/mig-<profile>` (mixed strategy)
and devices allocated through DRA by the NVIDIA driver (`gpu.nvidia.com`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import AttributionFailure

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
GPU_DRA_DRIVERS = ("gpu.nvidia.com",)

# A node with a few hundred pods and their CPU/memory assignments stays far below
# this; grpc's default 4 MiB has been hit on large nodes.
_MAX_MESSAGE = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Assignment:
    """One device assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


def assignments_from_response(resp) -> list[Assignment]:
    """Flatten a ListPodResourcesResponse into the GPU assignments it holds."""
    out: list[Assignment] = []
    for pod in resp.pod_resources:
        for ctr in pod.containers:
            for dev in ctr.devices:
                if not is_gpu_resource(dev.resource_name):
                    continue
                for did in dev.device_ids:
                    out.append(Assignment(pod.namespace, pod.name, ctr.name, dev.resource_name, did))
            for dyn in ctr.dynamic_resources:
                for claim in dyn.claim_resources:
                    if claim.driver_name in GPU_DRA_DRIVERS and claim.device_name:
                        out.append(Assignment(pod.namespace, pod.name, ctr.name,
                                              claim.driver_name, claim.device_name))
    return out


class PodResourcesClient:
    """Keeps one channel to the kubelet socket; `list()` is called from the
    attribution thread only, never from a scrape."""

    def __init__(self, socket_path: str, timeout: float = 5.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = None
        self._stub = None

    def _connect(self):
        import grpc  # imported here: only nodes with attribution on need grpcio

        from . import podresources_pb2_grpc

        self._channel = grpc.insecure_channel(
            "unix://" + os.path.abspath(self.socket_path),
            options=[("grpc.max_receive_message_length", _MAX_MESSAGE)],
        )
        self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)

    def list(self) -> list[Assignment]:
        """GPU assignments of every pod on the node. Raises AttributionFailure."""
        import grpc

        from . import podresources_pb2

        if not os.path.exists(self.socket_path):
            raise AttributionFailure(
                "socket_missing",
                f"kubelet PodResources socket {self.socket_path} not found "
                "(mount the host's /var/lib/kubelet/pod-resources into the container)")
        if self._stub is None:
            self._connect()
        try:
            resp = self._stub.List(podresources_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            detail = (e.details() if hasattr(e, "details") else "") or str(code)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                reason = "podresources_timeout"
            elif code == grpc.StatusCode.UNAVAILABLE:
                reason = "podresources_unavailable"
            else:
                reason = "podresources_error"
            raise AttributionFailure(
                reason, f"kubelet PodResources List on {self.socket_path} failed: {detail}") from None
        return assignments_from_response(resp)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None
