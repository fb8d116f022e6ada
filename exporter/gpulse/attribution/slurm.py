"""Slurm job attribution: which job holds each GPU on an HPC node.

The job map is the convention dcgm-exporter reads: a directory written by the
Slurm prolog (and cleaned by the epilog) with one file per GPU, named by its index
(or by a GPU / MIG UUID), holding the job id(s), one per line. Lines may carry more
fields after the job id ("<jobid> <uid>" as some prologs write it); only the first
is used.

A GPU shared by several jobs gets all of their ids, sorted and joined by commas,
as its workload: it is then its own peer group and never skews either job's
imbalance.

Optionally the job id can be read from the processes running on each GPU (their
Slurm cgroup, else SLURM_JOB_ID in their environment); that needs the PIDs per GPU,
which only a source that asks the driver knows, so it is given as a callable.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterable, Mapping

from .devices import device_id_keys
from .errors import AttributionFailure

# cgroup v1: /slurm/uid_1000/job_1234/step_0/task_0
# cgroup v2: /system.slice/slurmstepd.scope/job_1234/step_0/user/task_0
_CGROUP_JOB_RE = re.compile(r"/job_(\d+)(?:/|$)")
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")

GpuProcesses = Callable[[], Mapping[str, Iterable[int]]]


def read_job_map(directory: str) -> dict[str, str]:
    """{device key: workload} from a job-map directory. Raises AttributionFailure
    when the directory cannot be listed; unreadable single files are skipped
    (the prolog may be writing them right now)."""
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise AttributionFailure("job_map_unreadable",
                                 f"Slurm job map {directory}: {e.strerror}") from None
    out: dict[str, str] = {}
    for name in names:
        keys = device_id_keys(name)
        if not keys:
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as fh:
                text = fh.read(4096)
        except OSError:
            continue
        jobs = sorted({line.split()[0] for line in text.splitlines()
                       if line.strip() and _JOB_ID_RE.match(line.split()[0])})
        if jobs:
            for k in keys:
                out[k] = ",".join(jobs)
    return out


def job_of_pid(pid: int, proc: str = "/proc") -> str | None:
    """Slurm job id of one process: from its cgroup (set by slurmd, cannot be
    changed by the job), else from SLURM_JOB_ID in its environment. None when the
    process is gone or not part of a job."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = _CGROUP_JOB_RE.search(line)
                if m:
                    return m.group(1)
    except OSError:
        return None
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            env = fh.read(1 << 20)
    except OSError:
        return None
    for entry in env.split(b"\0"):
        if entry.startswith(b"SLURM_JOB_ID="):
            job = entry.split(b"=", 1)[1].decode("ascii", "replace")
            return job if _JOB_ID_RE.match(job) else None
    return None


def jobs_from_processes(gpu_processes: Mapping[str, Iterable[int]], proc: str = "/proc") -> dict[str, str]:
    """{device key: workload} for GPUs whose processes belong to Slurm jobs.
    gpu_processes maps a GPU index or UUID to the PIDs running on it."""
    out: dict[str, str] = {}
    for dev, pids in gpu_processes.items():
        jobs = sorted({j for j in (job_of_pid(p, proc) for p in pids) if j})
        if not jobs:
            continue
        for k in device_id_keys(str(dev)):
            out[k] = ",".join(jobs)
    return out


class SlurmMapper:
    """Builds the Slurm part of the attribution map (called from the refresh thread)."""

    name = "slurm"

    def __init__(self, job_map_dir: str, gpu_processes: GpuProcesses | None = None, proc: str = "/proc"):
        self.job_map_dir = job_map_dir
        self.gpu_processes = gpu_processes
        self.proc = proc

    def refresh(self) -> dict[str, dict[str, str]]:
        """{device key: attribution}. The job map wins over process discovery: it is
        what the scheduler allocated, processes only show who is running now."""
        jobs: dict[str, str] = {}
        if self.gpu_processes is not None:
            jobs.update(jobs_from_processes(self.gpu_processes(), self.proc))
        if self.job_map_dir:
            jobs.update(read_job_map(self.job_map_dir))
        return {k: {"namespace": "", "pod": "", "container": "", "workload": job} for k, job in jobs.items()}

    def close(self) -> None:
        pass
