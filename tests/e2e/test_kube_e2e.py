"""`gpulse serve` with attribution on, against a fake node: a real gRPC kubelet
socket and a real HTTPS API server, found through the in-cluster environment
variables exactly as in a pod."""
from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
from prometheus_client.parser import text_string_to_metric_families

# The [kube] extra (grpcio, protobuf) and cryptography: skipped on a laptop without
# them, an error in CI, where .ci/run installs them.
if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")

import fakenvml  # noqa: E402
from conftest import require_binary  # noqa: E402
from testing.fakekube import FakeApiServer, FakeCluster, FakeKubelet, FakePod  # noqa: E402
from kubefixtures import SEED, sim_uuid

NODE = "gpu-node-1"


def job_pod(name: str, gpus, label_key: str, job: str) -> FakePod:
    return FakePod(name=name, namespace="research", node=NODE,
                   devices={"trainer": {"nvidia.com/gpu": [sim_uuid(i) for i in gpus]}},
                   labels={label_key: job, "team": "llm"})


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(x.labels), x.value) for fam in text_string_to_metric_families(text)
            for x in fam.samples if x.name == name]

@pytest.fixture
def node(tmp_path):
    cluster = FakeCluster([
        job_pod("pretrain-0", range(4), "training.kubeflow.org/job-name", "pretrain"),
        job_pod("finetune-0", range(4, 8), "jobset.sigs.k8s.io/jobset-name", "finetune"),
    ])
    sa = tmp_path / "sa"
    sa.mkdir()
    kubelet = FakeKubelet(cluster, str(tmp_path / "kubelet.sock"), node=NODE)
    api = FakeApiServer(cluster, str(sa))
    env = {"KUBERNETES_SERVICE_HOST": api.host, "KUBERNETES_SERVICE_PORT": api.port,
           "KUBERNETES_SERVICEACCOUNT_DIR": str(sa)}
    args = ("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "8", "--sim.seed", str(SEED),
            "--node-name", NODE, "--kube.enabled", "--kube.pod-resources-socket", kubelet.socket_path,
            "--kube.refresh-interval", "1s", "--kube.copy-labels", "team",
            "--analysis-window", "3s")
    yield cluster, kubelet, api, env, args
    api.stop()
    kubelet.stop()


def imbalance_by_workload(text: str) -> dict[str, float]:
    return {lab.get("workload", ""): v for lab, v in series(text, "gpulse_group_imbalance_ratio")}


def test_imbalance_is_computed_per_workload(gpulse_proc, node):
    cluster, kubelet, api, env, args = node
    # The same node without attribution: GPUs 0-3 at 99 %, 4-7 at 10 % is one
    # badly imbalanced group.
    plain = gpulse_proc("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "8",
                        "--sim.seed", str(SEED), "--node-name", NODE, "--analysis-window", "3s")
    text = plain.wait_metrics(lambda t: imbalance_by_workload(t), "node imbalance")
    node_imbalance = imbalance_by_workload(text)
    assert set(node_imbalance) == {""}
    g = gpulse_proc(*args, env=env)
    text = g.wait_metrics(lambda t: {"pretrain", "finetune"} <= set(imbalance_by_workload(t)),
                    "one group per workload")
    per_job = imbalance_by_workload(text)
    assert "" not in per_job   # every GPU belongs to a job: no node-wide group
    # Each job is balanced within itself; only across jobs is the load uneven.
    assert node_imbalance[""] > 0.5
    assert per_job["pretrain"] < 0.2 * node_imbalance[""]
    assert per_job["finetune"] < 0.2 * node_imbalance[""]

    busy = series(text, "gpulse_gpu_busy_seconds_total")
    assert len(busy) == 8
    by_gpu = {lab["gpu"]: lab for lab, _ in busy}
    assert by_gpu["0"]["workload"] == "pretrain" and by_gpu["7"]["workload"] == "finetune"
    assert by_gpu["5"]["namespace"] == "research" and by_gpu["5"]["pod"] == "finetune-0"
    assert by_gpu["5"]["container"] == "trainer" and by_gpu["5"]["label_team"] == "llm"
    # Cardinality: far below Mimir's default limit of 30 labels per series.
    widest = max(len(lab) + 1 for lab, _ in busy)   # +1 for __name__
    assert widest <= 12, widest
    assert series(text, "gpulse_attribution_up") and series(text, "gpulse_attribution_up")[0][1] == 1
    lint = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # The finetune job ends: its GPUs lose their attribution and its group goes.
    cluster.set_pods([p for p in cluster.pods() if p.name != "finetune-0"])
    text = g.wait_metrics(lambda t: "finetune" not in imbalance_by_workload(t)
                    and 'workload="finetune"' not in t, "the finished job's series to disappear")
    by_gpu = {lab["gpu"]: lab for lab, _ in series(text, "gpulse_gpu_busy_seconds_total")}
    assert "pod" not in by_gpu["5"] and by_gpu["0"]["pod"] == "pretrain-0"
    # GPUs with no workload form the idle group, which never reports imbalance.
    assert "" not in imbalance_by_workload(text)


def test_api_forbidden_and_missing_socket_keep_metrics_flowing(gpulse_proc, node, tmp_path):
    cluster, kubelet, api, env, args = node
    api.status = 403
    g = gpulse_proc(*args, env=env)
    text = g.wait_metrics(lambda t: any(lab.get("reason") == "api_forbidden" and v > 0 for lab, v in
                                     series(t, "gpulse_attribution_errors_total"))
                    and 'pod="finetune-0"' in t, "api_forbidden counted and pods attributed")
    assert series(text, "gpulse_attribution_up")[0][1] == 0
    busy = series(text, "gpulse_gpu_busy_seconds_total")
    assert len(busy) == 8
    # The kubelet part still names pod and container; the workload falls back to the pod.
    assert {lab.get("workload") for lab, _ in busy} == {"pretrain-0", "finetune-0"}
    out = g.output()
    # one line for the refusal, however often the API refuses ("403" alone also
    # matched the listening line once, on port 52403)
    warnings = [line for line in out.splitlines() if "403 Forbidden" in line]
    assert len(warnings) == 1 and "Traceback" not in out

    missing = [a if a != kubelet.socket_path else str(tmp_path / "absent.sock") for a in args]
    g2 = gpulse_proc(*missing, env=env)
    text = g2.wait_metrics(lambda t: any(lab.get("reason") == "socket_missing" and v > 0 for lab, v in
                                      series(t, "gpulse_attribution_errors_total")), "socket_missing counted")
    busy = series(text, "gpulse_gpu_busy_seconds_total")
    assert len(busy) == 8 and all("pod" not in lab for lab, _ in busy)
    assert series(text, "gpulse_attribution_up")[0][1] == 0


# ---------------------------------------------------------------- MIG through NVML

MIG_NODE = "mig-node"


def test_mig_instances_are_attributed_one_by_one(gpulse_proc, tmp_path):
    require_binary("gcc")
    scen = tmp_path / "mig.txt"
    scen.write_text(textwrap.dedent("""
        gpus 2
        mig * 1g.10gb:7 1g.10gb:8 1g.10gb:9 3g.40gb:2
        util * const 0.9
        sm * const 0.6
    """))
    cluster = FakeCluster()
    sa = tmp_path / "sa"
    sa.mkdir()
    kubelet = FakeKubelet(cluster, str(tmp_path / "kubelet.sock"), node=MIG_NODE)
    api = FakeApiServer(cluster, str(sa))
    try:
        env = {**fakenvml.env(scen), "KUBERNETES_SERVICE_HOST": api.host, "KUBERNETES_SERVICE_PORT": api.port,
               "KUBERNETES_SERVICEACCOUNT_DIR": str(sa)}
        g = gpulse_proc("--source", "nvml", "--node-name", MIG_NODE, "--kube.enabled",
                        "--kube.pod-resources-socket", kubelet.socket_path, "--kube.refresh-interval", "1s",
                        env=env)
        text = g.wait_metrics(lambda t: len(series(t, "gpulse_gpu_info")) == 10, "2 GPUs + 8 MIG instances")
        uuid = {s["gpu"]: s["uuid"] for s in [lab for lab, _ in series(text, "gpulse_gpu_info")]}
        assert uuid["0/7"].startswith("MIG-") and uuid["0"].startswith("GPU-")

        # The device plugin hands out MIG UUIDs under per-profile resource names.
        cluster.set_pods([
            FakePod("chat-0", namespace="serve", node=MIG_NODE,
                    devices={"model": {"nvidia.com/mig-1g.10gb": [uuid["0/7"], uuid["1/8"]]}},
                    labels={"app.kubernetes.io/instance": "chat"}),
            FakePod("embed-0", namespace="serve", node=MIG_NODE,
                    devices={"model": {"nvidia.com/mig-3g.40gb": [uuid["0/2"]]}},
                    labels={"app.kubernetes.io/instance": "embed"}),
        ])
        text = g.wait_metrics(lambda t: sum(1 for lab, _ in series(t, "gpulse_gpu_up") if lab.get("workload")) == 3,
                        "three attributed MIG instances")
        up = {lab["gpu"]: lab for lab, _ in series(text, "gpulse_gpu_up")}
        assert {gpu for gpu, s in up.items() if s.get("workload") == "chat"} == {"0/7", "1/8"}
        assert up["0/2"]["workload"] == "embed" and up["0/2"]["pod"] == "embed-0"
        assert up["0/2"]["container"] == "model" and up["0/2"]["namespace"] == "serve"
        # Neither the parents nor the other instances of the same GPUs inherit a pod.
        for gpu in ("0", "1", "0/8", "0/9", "1/7", "1/9", "1/2"):
            assert "pod" not in up[gpu], gpu
        assert [v for _, v in series(text, "gpulse_attribution_up")] == [1.0]
    finally:
        api.stop()
        kubelet.stop()


def test_unusable_attribution_settings_are_one_line(gpulse_proc):
    too_many = ",".join(f"example.com/k{i}" for i in range(11))
    g = gpulse_proc("--source", "sim", "--kube.enabled", "--kube.copy-labels", too_many, ready=False)
    assert g.proc.wait(timeout=30) != 0
    out = g.output().strip()
    assert out.splitlines() == ["gpulse: kube.copy_labels: at most 10 labels may be copied "
                                "(each adds a label to every per-GPU series), got 11"], out


def test_slurm_job_map_end_to_end(gpulse_proc, tmp_path):
    jobs = tmp_path / "job-map"
    jobs.mkdir()
    for i in range(8):
        (jobs / str(i)).write_text("101\n" if i < 4 else "102\n")
    g = gpulse_proc("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "8", "--node-name", NODE,
                    "--slurm.job-map-dir", str(jobs), "--kube.refresh-interval", "1s", "--analysis-window", "3s")
    text = g.wait_metrics(lambda t: {"101", "102"} <= set(imbalance_by_workload(t)), "one group per Slurm job")
    assert max(imbalance_by_workload(text).values()) < 0.2
    by_gpu = {lab["gpu"]: lab for lab, _ in series(text, "gpulse_gpu_busy_seconds_total")}
    assert by_gpu["2"]["workload"] == "101" and by_gpu["6"]["workload"] == "102"
    assert "pod" not in by_gpu["2"]   # Slurm knows no pods
    for i in range(4, 8):             # the epilog removes job 102's files
        (jobs / str(i)).unlink()
    text = g.wait_metrics(lambda t: "102" not in imbalance_by_workload(t) and 'workload="102"' not in t,
                    "job 102's series to disappear")
    assert [v for _, v in series(text, "gpulse_attribution_up")] == [1.0]
