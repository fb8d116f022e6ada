"""The one exception the attribution parts raise to the refresh loop."""
from __future__ import annotations

# Every reason gpulse_attribution_errors_total can carry. A closed set keeps the
# counter's cardinality fixed and lets dashboards list them.
REASONS = (
    "socket_missing",            # kubelet PodResources socket not mounted / kubelet down
    "podresources_unavailable",  # socket there but the kubelet did not answer
    "podresources_timeout",
    "podresources_error",
    "api_config",                # not in a cluster: no service host, token or CA
    "api_unauthorized",          # 401: token rejected
    "api_forbidden",             # 403: RBAC does not allow listing pods
    "api_timeout",
    "api_unreachable",
    "api_error",                 # other HTTP status or an unreadable answer
    "job_map_unreadable",        # Slurm job-map directory missing or unreadable
)


class AttributionFailure(Exception):
    """One refresh of one attribution part failed. `reason` is one of REASONS,
    str() is the one log line."""

    def __init__(self, reason: str, message: str):
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason
