"""Pod labels and owners from the Kubernetes API, for the pods on this node only.

Uses the in-cluster service account: the API address from KUBERNETES_SERVICE_HOST /
KUBERNETES_SERVICE_PORT, the token and CA from the service-account mount. The list
asks for `spec.nodeName=<node>` with `resourceVersion=0`, so the API server answers
from its watch cache instead of etcd: one DaemonSet pod per node listing every few
seconds stays cheap for the control plane.

The token file is re-read on every request because projected service-account
tokens are rotated by the kubelet (about hourly).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import requests

from .. import safetext
from .errors import AttributionFailure

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Lets a test or an out-of-cluster run point at another token/CA pair; the API
# address already has its standard variables.
SERVICEACCOUNT_DIR_ENV = "KUBERNETES_SERVICEACCOUNT_DIR"


@dataclass(frozen=True, slots=True)
class PodMeta:
    labels: dict[str, str] = field(default_factory=dict)
    owners: tuple[dict, ...] = ()
    phase: str = ""


class ApiClient:
    """Lists the pods of one node. `pods()` runs in the attribution thread only."""

    def __init__(self, node_name: str, host: str | None = None, port: str | None = None,
                 token_path: str | None = None, ca_path: str | None = None, timeout: float = 10.0):
        sa_dir = os.environ.get(SERVICEACCOUNT_DIR_ENV, SERVICEACCOUNT_DIR)
        self.node_name = node_name
        self.host = host if host is not None else os.environ.get("KUBERNETES_SERVICE_HOST", "")
        self.port = port if port is not None else os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.token_path = token_path or os.path.join(sa_dir, "token")
        self.ca_path = ca_path or os.path.join(sa_dir, "ca.crt")
        self.timeout = timeout
        self._session = requests.Session()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}/api/v1/pods"

    def _token(self) -> str:
        if not self.host:
            raise AttributionFailure(
                "api_config", "Kubernetes API: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)")
        try:
            with open(self.token_path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as e:
            raise AttributionFailure(
                "api_config", f"Kubernetes API: cannot read service-account token {self.token_path}: "
                f"{e.strerror} (automountServiceAccountToken off?)") from None

    def pods(self) -> dict[tuple[str, str], PodMeta]:
        """{(namespace, pod): PodMeta} for every pod scheduled on this node.
        Raises AttributionFailure."""
        token = self._token()
        if not os.path.exists(self.ca_path):
            raise AttributionFailure("api_config", f"Kubernetes API: CA bundle {self.ca_path} not found")
        params = {"fieldSelector": f"spec.nodeName={self.node_name}", "resourceVersion": "0"}
        try:
            r = self._session.get(self.url, params=params, timeout=(3.0, self.timeout),
                                  verify=self.ca_path, headers={"Authorization": f"Bearer {token}",
                                                                "Accept": "application/json"})
        except requests.Timeout:
            raise AttributionFailure("api_timeout",
                                     f"Kubernetes API {self.url}: no answer within {self.timeout:g}s") from None
        except requests.RequestException as e:
            raise AttributionFailure("api_unreachable",
                                     f"Kubernetes API {self.url}: {_short(e)}") from None
        if r.status_code == 401:
            raise AttributionFailure("api_unauthorized",
                                     f"Kubernetes API {self.url}: 401 Unauthorized (service-account token rejected)")
        if r.status_code == 403:
            raise AttributionFailure(
                "api_forbidden",
                f"Kubernetes API {self.url}: 403 Forbidden (the service account needs RBAC "
                f"'list' on 'pods'): {_status_message(r)}")
        if r.status_code != 200:
            raise AttributionFailure("api_error",
                                     f"Kubernetes API {self.url}: HTTP {r.status_code}: {_status_message(r)}")
        try:
            # lone surrogates (a non-conformant server's \ud800) replaced here, where names enter gpulse
            doc = safetext.loads(r.content)
            return parse_pod_list(doc)
        except (ValueError, TypeError, AttributeError, KeyError):
            raise AttributionFailure("api_error", f"Kubernetes API {self.url}: answer is not a PodList") from None

    def close(self) -> None:
        self._session.close()


def parse_pod_list(doc: dict) -> dict[tuple[str, str], PodMeta]:
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ValueError("not a PodList")
    out: dict[tuple[str, str], PodMeta] = {}
    for item in doc["items"]:
        meta = item.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        owners = tuple(o for o in (meta.get("ownerReferences") or []) if isinstance(o, dict))
        phase = str((item.get("status") or {}).get("phase") or "")
        out[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = PodMeta(labels, owners, phase)
    return out


def _status_message(r: requests.Response) -> str:
    # The API server answers errors with a Status object whose `message` is the useful part.
    try:
        msg = r.json().get("message")
    except (ValueError, AttributeError):
        msg = None
    text = str(msg or r.text or r.reason or "").strip()
    return text.splitlines()[0][:200] if text else ""


def _short(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
