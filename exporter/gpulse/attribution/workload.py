"""What a pod's GPUs are called: the `workload` label and copied pod labels.

The workload is what peer groups are built from, so it must name the whole
training job, not one of its pods: every rank of a PyTorchJob, JobSet or
LeaderWorkerSet carries the job's name in a well-known label. Without one the top
controller owner is used (a Deployment rather than its ReplicaSet), and the pod
name as a last resort, which makes a single-pod job its own group.
"""
from __future__ import annotations

import re

# Each copied label adds one label to every per-GPU series; Mimir rejects series
# with more than 30 labels by default and gpulse already uses up to 8 of its own.
MAX_COPY_LABELS = 10

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def copy_label_name(key: str) -> str:
    """Prometheus label name for a copied pod label, as kube-state-metrics names
    them: app.kubernetes.io/name -> label_app_kubernetes_io_name."""
    return "label_" + _INVALID.sub("_", key)


def copy_label_names(keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """((pod label key, metric label name), ...). Raises ValueError for too many keys
    or two keys that would become the same label name."""
    if len(keys) > MAX_COPY_LABELS:
        raise ValueError(f"at most {MAX_COPY_LABELS} labels may be copied "
                         f"(each adds a label to every per-GPU series), got {len(keys)}")
    seen: dict[str, str] = {}
    for k in keys:
        name = copy_label_name(k)
        if name in seen:
            raise ValueError(f"{seen[name]!r} and {k!r} both become the label {name}")
        seen[name] = k
    return tuple((k, name) for name, k in seen.items())


def top_owner(owners: tuple[dict, ...], labels: dict[str, str]) -> str:
    """Name of the controller that owns the pod, one level up where the chain is
    known from the pod alone (ReplicaSet -> Deployment); '' when there is none."""
    ctrl = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if not ctrl:
        return ""
    name = str(ctrl.get("name", ""))
    if ctrl.get("kind") == "ReplicaSet":
        # A Deployment names its ReplicaSets <deployment>-<pod-template-hash> and puts
        # the hash on the pod, so the Deployment is known without another API call.
        h = labels.get("pod-template-hash", "")
        if h and name.endswith("-" + h):
            name = name[: -len(h) - 1]
    return name


def workload_name(pod: str, labels: dict[str, str], owners: tuple[dict, ...],
                  label_keys: tuple[str, ...]) -> str:
    for k in label_keys:
        v = labels.get(k)
        if v:
            return v
    return top_owner(owners, labels) or pod
