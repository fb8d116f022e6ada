"""The Pod Security Standards as Kubernetes documents them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, policy
version "latest" as of Kubernetes 1.33), as a checker of rendered pod specs: what the
Pod Security admission controller of a namespace labelled
pod-security.kubernetes.io/enforce=<level> would refuse. Each control is one
function of the pod spec; a violation is (control, where)."""
from __future__ import annotations

from typing import Iterator

LEVELS = ("privileged", "baseline", "restricted")

# baseline: capabilities that may be added
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# restricted: the only volume types
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}

Violation = tuple[str, str]


def _containers(spec: dict) -> Iterator[tuple[str, dict]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            yield f"{kind}[{c.get('name')}]", c


def _sc(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def baseline(spec: dict, annotations: dict | None = None) -> list[Violation]:
    out: list[Violation] = []
    psc = _sc(spec)
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append(("HostProcess", "spec.securityContext"))
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(("Host Namespaces", f"spec.{key}"))
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(("HostPath Volumes", f"volumes[{v.get('name')}]"))
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and \
                value != "runtime/default" and not value.startswith("localhost/"):
            out.append(("AppArmor", key))
    for where, sc in [("spec", psc)] + [(w, _sc(c)) for w, c in _containers(spec)]:
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(("AppArmor", where))
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(("SELinux", where))
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(("Seccomp", where))
    for where, c in _containers(spec):
        sc = _sc(c)
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(("HostProcess", where))
        if sc.get("privileged"):
            out.append(("Privileged Containers", where))
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(("Capabilities", f"{where}: {sorted(added - BASELINE_CAPABILITIES)}"))
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(("Host Ports", where))
        if sc.get("procMount", "Default") != "Default":
            out.append(("/proc Mount Type", where))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(("Sysctls", s.get("name")))
    return out


def restricted(spec: dict, annotations: dict | None = None) -> list[Violation]:
    out = baseline(spec, annotations)
    psc = _sc(spec)
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(("Volume Types", f"volumes[{v.get('name')}]: {sorted(kinds)}"))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for where, c in _containers(spec):
        sc = _sc(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(("Privilege Escalation", where))
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(("Running as Non-root", where))
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(("Running as Non-root user", where))
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(("Seccomp", where))
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(("Capabilities", f"{where}: does not drop ALL"))
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(("Capabilities", f"{where}: adds {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}"))
    if psc.get("runAsUser") == 0:
        out.append(("Running as Non-root user", "spec.securityContext"))
    return out


def pod_specs(manifests: list[dict]) -> list[tuple[str, dict, dict]]:
    """(kind/name, pod spec, pod annotations) of every pod a set of manifests makes."""
    out = []
    for d in manifests:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind == "Pod":
            out.append((f"Pod/{name}", d["spec"], d["metadata"].get("annotations") or {}))
        elif kind in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
            t = d["spec"]["template"]
            out.append((f"{kind}/{name}", t["spec"], (t.get("metadata") or {}).get("annotations") or {}))
    return out


def strictest_level(manifests: list[dict]) -> str:
    """The strictest level whose namespace admits every pod of the manifests."""
    pods = pod_specs(manifests)
    if all(not restricted(s, a) for _, s, a in pods):
        return "restricted"
    if all(not baseline(s, a) for _, s, a in pods):
        return "baseline"
    return "privileged"
