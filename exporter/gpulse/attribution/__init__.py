"""GPU -> namespace / pod / container / workload attribution.

Sources of truth, in order of precedence:
  1. Kubernetes: the kubelet PodResources API (which container holds which device)
     plus pod labels and owners from the API server (which job the pod belongs to);
  2. Slurm: the job-map directory written by the prolog (and, where the PIDs on
     each GPU are known, the Slurm job of those processes).

The engine asks `lookup(device)` on every analysis tick; it reads a cached map and
never waits for the kubelet or the API server. See attributor.py.

`kube.enabled` is "auto" unless set: attribution turns itself on where the kubelet's
PodResources socket exists (a Kubernetes node, or a pod that mounts it), so a
default install labels GPUs with their pods, and stays off with one log line
elsewhere (a laptop, a Slurm node). Set true to insist (a missing socket is then an
attribution error, `reason="socket_missing"`), false to never look.
"""
from __future__ import annotations

import logging
import os
import stat
from typing import Any

from ..config import ConfigError
from ..model import ATTRIBUTION_LABELS
from .attributor import Attributor
from .errors import REASONS, AttributionFailure
from .slurm import GpuProcesses, SlurmMapper
from .workload import copy_label_names

__all__ = ["Attributor", "AttributionFailure", "make_attributor", "REASONS"]

_KUBE_REASONS = tuple(r for r in REASONS if r.startswith("socket") or r.startswith("podresources"))
_API_REASONS = tuple(r for r in REASONS if r.startswith("api_"))
_SLURM_REASONS = ("job_map_unreadable",)

log = logging.getLogger("gpulse.attribution")


def _kube_wanted(cfg: Any) -> bool:
    """kube.enabled as set; "auto": on when the PodResources socket exists and the
    gRPC client can be loaded, else off with one line saying why and how to force it."""
    if cfg.kube.enabled != "auto":
        return bool(cfg.kube.enabled)
    path = cfg.kube.pod_resources_socket
    try:
        found = stat.S_ISSOCK(os.stat(path).st_mode)
        why = "not a socket"
    except OSError as e:
        found, why = False, (e.strerror or str(e)).lower()
    if not found:
        # One line where a kubelet was to be expected (in a pod, or its folder is
        # there); on a workstation there is nothing to fall back from, so only debug.
        on_node = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or os.path.isdir(os.path.dirname(path) or ".")
        log.log(logging.INFO if on_node else logging.DEBUG,
                "attribution off: no kubelet PodResources socket at %s (%s); --kube.enabled insists", path, why)
        return False
    try:
        import grpc  # noqa: F401

        from . import podresources_pb2_grpc  # noqa: F401
    except (ImportError, RuntimeError) as e:
        log.warning("attribution off: the kubelet socket %s exists but the gRPC client does not load "
                    "(pip install 'gpulse[kube]'): %s", path, e)
        return False
    return True


def make_attributor(cfg: Any, *, api_host: str | None = None, api_port: str | None = None,
                    token_path: str | None = None, ca_path: str | None = None,
                    gpu_processes: GpuProcesses | None = None) -> Attributor | None:
    """The Attributor the config asks for, not yet started; None when attribution is
    off. Raises ConfigError (one line) for settings that cannot work. The keyword
    arguments override the in-cluster API address and credentials (tests, running
    outside a pod) and feed Slurm process discovery."""
    kube_on = _kube_wanted(cfg)
    slurm_on = bool(cfg.slurm.job_map_dir) or gpu_processes is not None
    if not kube_on and not slurm_on:
        return None
    try:
        copies = copy_label_names(tuple(cfg.kube.copy_labels)) if kube_on else ()
    except ValueError as e:
        raise ConfigError(f"kube.copy_labels: {e}") from None
    mappers: list = []
    reasons: tuple[str, ...] = ()
    if kube_on:
        try:
            import grpc  # noqa: F401

            from . import podresources_pb2_grpc  # noqa: F401
        except (ImportError, RuntimeError) as e:
            # RuntimeError: the generated stubs refuse an older grpcio/protobuf.
            raise ConfigError(f"kube.enabled: needs grpcio and protobuf (pip install 'gpulse[kube]'): {e}") from None
        from .apiserver import ApiClient
        from .kubemap import KubeMapper
        from .podresources import PodResourcesClient

        interval = float(cfg.kube.refresh_interval)
        api = None
        if cfg.kube.api:
            api = ApiClient(cfg.node_name, host=api_host, port=api_port, token_path=token_path,
                            ca_path=ca_path, timeout=min(10.0, interval))
            reasons += _API_REASONS
        mappers.append(KubeMapper(PodResourcesClient(cfg.kube.pod_resources_socket, timeout=min(5.0, interval)),
                                  api, tuple(cfg.kube.workload_label_keys), copies))
        reasons = _KUBE_REASONS + reasons
    if slurm_on:
        mappers.append(SlurmMapper(cfg.slurm.job_map_dir, gpu_processes=gpu_processes))
        if cfg.slurm.job_map_dir:
            reasons += _SLURM_REASONS
    return Attributor(mappers, float(cfg.kube.refresh_interval),
                      label_names=ATTRIBUTION_LABELS + tuple(name for _, name in copies),
                      reasons=reasons)
