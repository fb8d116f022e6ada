"""The Kubernetes part of the attribution map: kubelet assignments + pod metadata.

The kubelet says which container holds which device; the API adds the labels and
owners that name the workload. When the API cannot be read, the last pod metadata
that was read is kept (labels of a running pod do not change the workload), and
pods never seen by the API are named by their pod name. With the API off
(kube.api=false) every workload is the pod name.
"""
from __future__ import annotations

from .apiserver import ApiClient, PodMeta
from .devices import device_id_keys
from .errors import AttributionFailure
from .podresources import PodResourcesClient
from .workload import workload_name

# Pods in these phases have released their devices even if the kubelet still
# reports an assignment for them until the pod object is deleted.
_FINISHED = ("Succeeded", "Failed")


class KubeMapper:
    name = "kube"

    def __init__(self, podresources: PodResourcesClient, api: ApiClient | None,
                 label_keys: tuple[str, ...], copy_labels: tuple[tuple[str, str], ...]):
        self.podresources = podresources
        self.api = api
        self.label_keys = label_keys
        self.copy_labels = copy_labels
        self._meta: dict[tuple[str, str], PodMeta] = {}
        # Failures of the API part that did not stop the kubelet part from producing
        # a map: reported after the map is built, so the map is still used.
        self.partial_failure: AttributionFailure | None = None

    def refresh(self) -> dict[str, dict[str, str]]:
        """{device key: attribution}. Raises AttributionFailure when the kubelet
        cannot be read; an API failure leaves `partial_failure` set instead."""
        assignments = self.podresources.list()
        self.partial_failure = None
        api_fresh = False
        if self.api is not None:
            try:
                self._meta = self.api.pods()
                api_fresh = True
            except AttributionFailure as e:
                self.partial_failure = e
        out: dict[str, dict[str, str]] = {}
        for a in assignments:
            meta = self._meta.get((a.namespace, a.pod))
            if meta is None and api_fresh:
                # Deleted, or so new the API's cache has not seen it: attributing it
                # by pod name now would flip its workload label on the next refresh.
                continue
            if meta is not None and meta.phase in _FINISHED:
                continue
            labels = meta.labels if meta else {}
            attr = {
                "namespace": a.namespace,
                "pod": a.pod,
                "container": a.container,
                "workload": workload_name(a.pod, labels, meta.owners if meta else (), self.label_keys),
            }
            for key, name in self.copy_labels:
                attr[name] = labels.get(key, "")
            for k in device_id_keys(a.device_id):
                out[k] = attr
        return out

    def close(self) -> None:
        self.podresources.close()
        if self.api is not None:
            self.api.close()
