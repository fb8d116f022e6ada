"""Slurm attribution: the prolog-written job map and the job of GPU processes."""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

import pytest

from testing.config import test_config
from gpulse.attribution import make_attributor
from gpulse.attribution.slurm import job_of_pid, jobs_from_processes, read_job_map
from gpulse.model import DeviceInfo

WHOLE = [DeviceInfo(gpu=str(i), uuid=f"GPU-{i:08x}-0000-0000-0000-0000000000{i:02x}") for i in range(8)]


@contextlib.contextmanager
def child_with_env(**extra):
    """A Python child with `extra` in its environment, yielded once it says it runs.

    Right after fork, /proc/PID/environ is the parent's (or empty) until the exec has
    happened; a line on stdout from the child proves it has."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                         env=dict(os.environ, **extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield p
    finally:
        p.stdin.close()
        p.wait()
        p.stdout.close()


def write_map(d, entries):
    for name, text in entries.items():
        (d / name).write_text(text)


def slurm_attributor(job_dir, **kw):
    att = make_attributor(test_config(slurm__job_map_dir=str(job_dir)), **kw)
    assert att is not None
    return att


def test_job_map_one_file_per_gpu_index(tmp_path):
    write_map(tmp_path, {**{str(i): "1001\n" for i in range(4)}, **{str(i): "1002\n" for i in range(4, 8)}})
    att = slurm_attributor(tmp_path)
    att.refresh_once()
    got = [att.lookup(d) for d in WHOLE]
    assert got[0] == {"namespace": "", "pod": "", "container": "", "workload": "1001"}
    assert [g["workload"] for g in got] == ["1001"] * 4 + ["1002"] * 4
    assert att.health() == (True, {"job_map_unreadable": 0}, 0)


def test_job_ending_removes_attribution(tmp_path):
    write_map(tmp_path, {"0": "7\n", "1": "8\n"})
    att = slurm_attributor(tmp_path)
    att.refresh_once()
    assert att.lookup(WHOLE[1])["workload"] == "8"
    (tmp_path / "1").unlink()  # the epilog removes the job's files
    att.refresh_once()
    assert att.lookup(WHOLE[1]) is None
    assert att.lookup(WHOLE[0])["workload"] == "7"


def test_job_map_formats(tmp_path):
    mig = DeviceInfo(gpu="2/1", uuid="MIG-265a219d-a49f-578a-825d-222c72699c16", gpu_instance="1",
                     mig_profile="1g.10gb", parent_uuid=WHOLE[2].uuid)
    write_map(tmp_path, {
        "0": "45916256 262563\n",           # "<jobid> <uid>", as some prologs write it
        "1": "501\n500\n\n500\n",           # a GPU shared by two jobs
        mig.uuid: "9001\n",                 # MIG instances named by their UUID
        "README": "not a gpu\n",            # ignored: not a GPU name
        "3": "",                            # being written by the prolog right now
        "4": "$(rm -rf /)\n",               # not a job id
    })
    att = slurm_attributor(tmp_path)
    att.refresh_once()
    assert att.lookup(WHOLE[0])["workload"] == "45916256"
    assert att.lookup(WHOLE[1])["workload"] == "500,501"
    assert att.lookup(mig)["workload"] == "9001"
    assert att.lookup(WHOLE[2]) is None  # the index file of the parent is not the instance's
    assert att.lookup(WHOLE[3]) is None and att.lookup(WHOLE[4]) is None


def test_missing_directory(tmp_path, caplog):
    att = slurm_attributor(tmp_path / "absent")
    with caplog.at_level(logging.WARNING, logger="gpulse.attribution"):
        att.refresh_once()
        att.refresh_once()
    assert att.health() == (False, {"job_map_unreadable": 2}, 0)
    recs = [r for r in caplog.records if r.name == "gpulse.attribution"]
    assert len(recs) == 1 and "absent" in recs[0].getMessage() and recs[0].exc_info is None
    assert att.lookup(WHOLE[0]) is None


def test_read_job_map_direct(tmp_path):
    write_map(tmp_path, {"nvidia3": "12\n"})
    assert read_job_map(str(tmp_path)) == {"index:3": "12"}


def test_job_of_a_real_process_from_its_environment():
    with child_with_env(SLURM_JOB_ID="4242") as p:
        assert job_of_pid(p.pid) == "4242"
        assert job_of_pid(os.getpid()) in (None, os.environ.get("SLURM_JOB_ID"))
    assert job_of_pid(p.pid) is None  # gone


@pytest.mark.parametrize("cgroup, job", [
    ("0::/system.slice/slurmstepd.scope/job_31337/step_0/user/task_0\n", "31337"),      # cgroup v2
    ("12:memory:/slurm/uid_1000/job_77/step_batch\n4:cpu:/slurm/uid_1000/job_77\n", "77"),  # v1
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
])
def test_job_from_cgroup(tmp_path, cgroup, job):
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "cgroup").write_text(cgroup)
    (tmp_path / "10" / "environ").write_bytes(b"PATH=/bin\0HOME=/root\0")
    assert job_of_pid(10, proc=str(tmp_path)) == job


def test_jobs_from_gpu_processes(tmp_path):
    for pid, cg in ((10, "job_5"), (11, "job_6"), (12, "job_5"), (13, None)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/slurm/{cg}/step_0\n" if cg else "0::/\n")
        (tmp_path / str(pid) / "environ").write_bytes(b"")
    got = jobs_from_processes({"0": [10, 12], "1": [11, 10], "2": [13], WHOLE[3].uuid: [11]}, proc=str(tmp_path))
    assert got == {"index:0": "5", "index:1": "5,6", f"uuid:{WHOLE[3].uuid.lower()}": "6"}


def test_process_discovery_with_job_map_precedence(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    write_map(jobs, {"1": "900\n"})
    with child_with_env(SLURM_JOB_ID="777") as p:
        att = slurm_attributor(jobs, gpu_processes=lambda: {"0": [p.pid], "1": [p.pid]})
        att.refresh_once()
        assert att.lookup(WHOLE[0])["workload"] == "777"
        assert att.lookup(WHOLE[1])["workload"] == "900"  # what the scheduler allocated wins


def test_kubernetes_wins_over_slurm(tmp_path):
    pytest.importorskip("grpc")
    from testing.fakekube import FakeCluster, FakeKubelet, FakePod

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    write_map(jobs, {"0": "1\n", "1": "1\n"})
    cluster = FakeCluster([FakePod("p", node="n", devices={"c": {"nvidia.com/gpu": [WHOLE[0].uuid]}})])
    kubelet = FakeKubelet(cluster, str(tmp_path / "k.sock"), node="n")
    try:
        att = make_attributor(test_config(kube__enabled=True, kube__api=False, slurm__job_map_dir=str(jobs),
                                          kube__pod_resources_socket=kubelet.socket_path))
        att.refresh_once()
        assert att.lookup(WHOLE[0])["workload"] == "p"
        assert att.lookup(WHOLE[1])["workload"] == "1"
        assert att.health()[0] is True
    finally:
        kubelet.stop()
